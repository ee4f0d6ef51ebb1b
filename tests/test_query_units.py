"""The query graph's arithmetic and text handling, node by node, without the corpus."""
from __future__ import annotations

import re
from datetime import datetime

import pytest
from pymilvus.client.search_result import Hit

from graphs.query.nodes.answer_output import (
    build_context, format_source, image_urls, settled_part, shown_text,
)
from graphs.query.nodes.product_confirm import format_history
from graphs.query.nodes.rrf import node_rrf
from graphs.query.retrieval import cliff_cutoff, merge_sources, rrf_fuse
from services.chat_model import parse_json_reply
from services.errors import LLMError
from services.vector_store import hit_to_dict


# --- RRF ---------------------------------------------------------------------------------------
def flat(*ids: str) -> list[dict]:
    return [{"chunk_id": i, "content": f"内容{i}", "title": f"标题{i}"} for i in ids]


def test_rrf_arithmetic_weights_one_k_60_duplicates_add_up():
    out = node_rrf({"embedding_chunks": flat("a", "b", "c"), "hyde_embedding_chunks": flat("c", "a", "d")})
    fused = out["rrf_chunks"]
    assert [d["chunk_id"] for d in fused] == ["a", "c", "b", "d"]
    expected = {"a": 1 / 61 + 1 / 62, "c": 1 / 63 + 1 / 61, "b": 1 / 62, "d": 1 / 63}
    assert {d["chunk_id"]: d["rrf_score"] for d in fused} == {k: round(v, 6) for k, v in expected.items()}
    assert fused[0]["content"] == "内容a" and fused[0]["title"] == "标题a"
    assert out["node_log"][0]["summary"] == "融合后 4 个切片"


def test_rrf_weights_and_k_are_applied():
    fused = rrf_fuse([(flat("a", "b"), 2.0), (flat("b"), 0.5)], k=10)
    assert [(d["chunk_id"], d["rrf_score"]) for d in fused] == [
        ("b", round(2 / 12 + 0.5 / 11, 6)), ("a", round(2 / 11, 6))]


def test_rrf_keeps_top_10():
    first = flat(*[f"x{i}" for i in range(12)])
    second = flat(*[f"y{i}" for i in range(12)])
    fused = rrf_fuse([(first, 1.0), (second, 1.0)])
    assert len(fused) == 10
    # equal ranks tie; the first list's chunk is met first and stays first
    assert [d["chunk_id"] for d in fused] == [c for i in range(5) for c in (f"x{i}", f"y{i}")]
    assert fused[-1]["rrf_score"] == round(1 / 65, 6)


def test_rrf_with_one_empty_list_keeps_the_other_order():
    fused = rrf_fuse([(flat("a", "b", "c"), 1.0), ([], 1.0)])
    assert [d["chunk_id"] for d in fused] == ["a", "b", "c"]


class HitLike:
    """An ORM-style hit: attributes, not keys."""

    def __init__(self, id, entity):
        self.id, self.entity = id, entity


def test_the_store_gives_every_client_hit_shape_one_chunk_id():
    assert hit_to_dict(Hit({"chunk_id": 7, "distance": 0.9, "entity": {"content": "x"}}, pk_name="chunk_id"))["chunk_id"] == "7"
    assert hit_to_dict(Hit({"id": 8, "distance": 0.9, "entity": {"content": "x"}}, pk_name="id"))["chunk_id"] == "8"
    assert hit_to_dict(HitLike(9, {"content": "x"}))["chunk_id"] == "9"
    assert hit_to_dict(HitLike(None, {"chunk_id": 10}))["chunk_id"] == "10"
    assert hit_to_dict({"entity": {"chunk_id": 11, "content": "x"}, "distance": 0.5})["chunk_id"] == "11"
    assert hit_to_dict({"pk": 13})["chunk_id"] == "13"
    assert hit_to_dict({"id": 0})["chunk_id"] == "0"  # a zero id is an id
    assert "chunk_id" not in hit_to_dict({"content": "没有 id"})


def test_rrf_merges_one_chunk_met_in_two_client_shapes():
    dense = [hit_to_dict(Hit({"chunk_id": 5, "distance": 0.8, "entity": {"content": "嵌套", "title": "T5"}},
                             pk_name="chunk_id")), hit_to_dict(HitLike(6, {"content": "对象"}))]
    hyde = [hit_to_dict({"entity": {"chunk_id": 5, "content": "嵌套"}, "distance": 0.3})]
    fused = rrf_fuse([(dense, 1.0), (hyde, 1.0)])
    assert [d["chunk_id"] for d in fused] == ["5", "6"]
    assert fused[0]["rrf_score"] == round(2 / 61, 6) and fused[0]["title"] == "T5"


def test_a_list_of_weight_zero_only_appends_its_new_chunks():
    fused = rrf_fuse([(flat("a", "b"), 1.0), (flat("c", "b", "d"), 0.0)])
    assert [d["chunk_id"] for d in fused] == ["a", "b", "c", "d"]
    assert [d["rrf_score"] for d in fused][2:] == [0.0, 0.0]


# --- rerank cut-off -------------------------------------------------------------------------------
@pytest.mark.parametrize("scores, keep", [
    ([0.95, 0.92, 0.88, 0.12, 0.08], 3),                  # a clear cliff after the third
    ([0.9, 0.1, 0.09, 0.08, 0.07], 5),                   # a drop before position 3 does not count
    ([0.9, 0.1, 0.09, 0.0], 3),                          # at least 3
    ([0.9, 0.8], 2),                                     # fewer than 3 available
    ([], 0),
    ([0.40, 0.38, 0.36, 0.26, 0.25], 3),                 # relative gap 0.278
    ([0.40, 0.38, 0.36, 0.28, 0.27], 5),                 # relative gap 0.222: no cut
    ([1.0, 1.0, 1.0, 0.75, 0.7], 3),                     # relative gap exactly 0.25 cuts
    ([1.0, 1.0, 1.0, 0.76, 0.7], 5),
    ([2.0, 1.9, 1.8, 1.7, 1.1, 1.0], 4),                 # gap 0.6 after position 4
    ([0.0] * 12, 10),                                     # the RRF fallback: all zeros
    ([-1.0, -1.1, -1.2, -1.6], 3),                       # logits: 0.4 / |-1.2| >= 0.25
    ([1 - i * 0.01 for i in range(15)], 10),             # at most 10
    ([1 - i * 0.01 for i in range(9)] + [0.1, 0.09, 0.08], 9),   # cut after position 9 (i = 8)
    ([1 - i * 0.01 for i in range(10)] + [0.1, 0.09], 10),       # a drop after position 10 is not looked at
])
def test_cliff_cutoff(scores, keep):
    assert cliff_cutoff(scores) == keep


def test_cliff_cutoff_absolute_gap_alone():
    # relative gap 0.5 / 9.0 = 0.056 is far below 0.25: only the absolute rule applies
    assert cliff_cutoff([9.5, 9.4, 9.0, 8.5, 8.4]) == 3
    assert cliff_cutoff([9.5, 9.4, 9.0, 8.6, 8.4]) == 5


def test_merge_sources_marks_web_results_and_drops_empty_snippets():
    docs = merge_sources([{"chunk_id": "1", "content": "本地"}],
                         [{"title": "网页", "url": "https://e.example/a", "snippet": "摘要"},
                          {"title": "空", "url": "https://e.example/b", "snippet": ""}])
    assert docs == [{"chunk_id": "1", "content": "本地", "source": "local"},
                    {"source": "web", "url": "https://e.example/a", "title": "网页", "content": "摘要"}]


# --- context budget ---------------------------------------------------------------------------------
def source(i: int, size: int) -> dict:
    return {"chunk_id": str(i), "title": f"第{i}节", "content": f"<{i}>" + "文" * size + f"</{i}>", "score": 0.5}


def turn(i: int, size: int) -> dict:
    return {"role": "user" if i % 2 == 0 else "assistant", "text": f"«{i}»" + "史" * size + f"«/{i}»"}


def test_format_source():
    doc = {"source": "web", "chunk_id": "", "url": "https://e.example/x", "title": "网页", "score": 0.12345,
           "content": "正文"}
    assert format_source(2, doc) == "[2][source=web][chunk_id=][url=https://e.example/x][title=网页][score=0.1235] 正文"


def test_budget_sources_first_then_history_newest_turns():
    docs = [source(i, 1000) for i in range(1, 4)]
    history = [turn(i, 2000) for i in range(8)]
    context, hist, n = build_context(docs, history, 12000)
    assert n == 3 and all(f"<{i}>" in context and f"</{i}>" in context for i in range(1, 4))
    kept = [i for i in range(8) if f"«{i}»" in hist]
    assert kept == list(range(8 - len(kept), 8)) and 0 < len(kept) < 8  # newest turns, oldest dropped
    assert all(f"«/{i}»" in hist for i in kept)  # never a turn cut in half
    assert len(context) + len(hist) <= 12000
    assert hist.splitlines()[-1].startswith("助手：«7»")


def test_budget_big_sources_leave_no_room_for_history_and_are_never_cut():
    docs = [source(i, 2500) for i in range(1, 11)]
    context, hist, n = build_context(docs, [turn(0, 2000)], 12000)
    assert n == 4  # 4 blocks of ~2560 fit in 12000, the 5th would not
    assert all(f"</{i}>" in context for i in range(1, 5)) and "<5>" not in context
    assert hist == "（无）"
    assert len(context) <= 12000


def test_budget_a_source_larger_than_the_budget_is_left_out_whole():
    context, hist, n = build_context([source(1, 13000), source(2, 10)], [turn(0, 10)], 12000)
    assert (context, n) == ("", 0)
    assert "«0»" in hist


def test_budget_history_truncated_before_any_source():
    docs = [source(i, 1500) for i in range(1, 8)]  # ~10.6k of sources
    context, hist, n = build_context(docs, [turn(i, 1500) for i in range(4)], 12000)
    assert n == 7
    assert [i for i in range(4) if f"«{i}»" in hist] == []  # 1.4k left: no 1.5k turn fits
    context, hist, n = build_context(docs, [turn(0, 1500), turn(1, 300)], 12000)
    assert n == 7 and "«1»" in hist and "«0»" not in hist


# --- images and what the user is shown -----------------------------------------------------------
def test_image_urls_come_from_local_sources_only():
    docs = [{"source": "local", "url": "/kb-files/a/pin.PNG?x=1", "content": "见 ![引脚](/kb-files/a/b.webp) 与 "
             "![图]( <https://cdn.example/c.jpg> )"},
            {"source": "local", "url": "", "content": "![重复](/kb-files/a/b.webp)"},
            {"source": "web", "url": "https://web.example/photo.png", "content": "![网页](https://web.example/d.png)"}]
    assert image_urls(docs) == ["/kb-files/a/pin.PNG?x=1", "/kb-files/a/b.webp", "https://cdn.example/c.jpg"]


ALLOWED = {"https://cdn.example/pin.png"}


@pytest.mark.parametrize("text, shown", [
    ("答案 [1]。\n\n【图片】\nhttps://evil.example/x.png\n", "答案 [1]。"),
    ("见图 ![示意](https://evil.example/x.png) 即可。", "见图  即可。"),
    ("见图 ![示意](https://cdn.example/pin.png)。", "见图 。"),  # pictures are shown from image_urls, not inline
    ("参考 https://evil.example/x.jpeg。", "参考 。"),
    ("参考 https://cdn.example/pin.png。", "参考 https://cdn.example/pin.png。"),
    ("手册 https://docs.example/manual 有说明", "手册 https://docs.example/manual 有说明"),
    ("图在 https://evil.example/a.png图中", "图在 图中"),
])
def test_shown_text(text, shown):
    assert shown_text(text, ALLOWED) == shown


@pytest.mark.parametrize("text, settled", [
    ("答案【图", "答案"),
    ("答案\n\n【图片】\nhttp", "答案\n\n"),
    ("见图 ![示", "见图 "),
    ("见图 ![示意](https://e", "见图 "),
    ("见图 ![示意](x.png) 完", "见图 ![示意](x.png) 完"),
    ("注意!", "注意"),
    ("参考 https://evil.exa", "参考 "),
    ("参考 ht", "参考 "),
    ("参考 https://evil.example/b.jpg\n", "参考 https://evil.example/b.jpg\n"),  # a newline ends the URL
    ("版本 V3.0 的", "版本 V3.0 的"),
])
def test_settled_part_holds_back_what_may_become_an_image(text, settled):
    assert settled_part(text) == settled


def test_every_prefix_shows_a_prefix_of_the_final_answer():
    text = ("主控是 STM32 [1]。见 ![图](https://evil.example/a.png)，另见 https://cdn.example/pin.png 与 "
            "https://evil.example/b.jpg\n\n【图片】\nhttps://evil.example/c.png")
    final = shown_text(text, ALLOWED)
    assert final == "主控是 STM32 [1]。见 ，另见 https://cdn.example/pin.png 与"
    for k in range(len(text) + 1):
        assert final.startswith(shown_text(settled_part(text[:k]), ALLOWED)), text[:k]


# --- model replies and prompts ----------------------------------------------------------------------
def test_parse_json_reply_layers():
    assert parse_json_reply('{"products": ["A"], "rewritten_query": "q"}') == {"products": ["A"], "rewritten_query": "q"}
    assert parse_json_reply('```json\n{"products": []}\n```') == {"products": []}
    assert parse_json_reply('好的：{"rewritten_query": "q"} 以上') == {"rewritten_query": "q"}
    for bad in ("不是 JSON", "[1, 2]", "{坏的}", ""):
        with pytest.raises(LLMError):
            parse_json_reply(bad)


def test_history_timestamps_are_readable_dates():
    ts = 1767225600.123456
    text = format_history([{"role": "user", "text": "Duo S 支持 PoE 吗？", "ts": ts, "products": ["Milk-V Duo S"]},
                           {"role": "assistant", "text": "支持。", "ts": ts + 60, "products": []}])
    when = datetime.fromtimestamp(ts).strftime("%Y-%m-%d %H:%M")
    assert text.splitlines()[0] == f"[{when}] 用户：Duo S 支持 PoE 吗？（关联商品：Milk-V Duo S）"
    assert text.splitlines()[1].endswith("助手：支持。（关联商品：无）")
    assert not re.search(r"\d{9,}\.\d", text)
    assert format_history([]) == "（无）"
