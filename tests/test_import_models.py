"""The production backends of the import graph, for real: FlagEmbedding BGE-M3 and FlagReranker
with tiny random-weight checkpoints, vision captions and product names from an OpenAI-compatible
server, MinerU's API and an S3 server (Ceph radosgw), all on 127.0.0.1."""
from __future__ import annotations

import base64
import json
import math
import re
import shutil
import threading
import time
import uuid
from pathlib import Path

import httpx
import numpy as np
import pytest
from starlette.applications import Starlette

from api.images import images_mount
from conftest import CORPUS, auth_header
from fakes._http import UvicornThread
from fakes.mineru_server import FAILED_MSG, FakeMinerU
from fakes.openai_server import ScriptedOpenAI
from fakes.s3_server import INSTALL_HINT, S3ServerError, missing_binaries, start_radosgw
from graphs.importing.runner import run_import
from import_fixtures import (  # noqa: F401 - fresh_data is a fixture
    TINY_HIDDEN, assert_consistent, doc_chunks, fresh_data, name_rows, store, write_md, write_tiny_models,
)
from manual_files import PANEL_PNG, WORD_PRODUCT, word_manual
from services.embeddings import BgeM3Embedder, get_embedder
from services.errors import ConfigurationError
from services.object_store import get_object_store
from services.reranker import FlagRerankerScorer, get_reranker
from services.settings import get_settings
from services.vision_model import SlidingWindowLimiter, get_limiter

SIPEED_IMAGES = CORPUS / "sipeed-mf" / "assets" / "mf_module"
BTT_V2 = CORPUS / "btt-skr-mini-e3" / "BTT SKR MINI E3 V2.0使用手册.pdf"
NAME_PROMPT = "请识别这份文档介绍的商品名称"
CAPTION_PROMPT = "用于 Markdown 图片标题"
# `\1`, `\g<0>` and `$1` would be mangled by a regex replacement string.
CAPTION = r"MF0 正面：C:\dock\$PATH 与 $1 \1 \g<0> 价格$5"
PRODUCT_MD = "".join(
    [f"# 苏伯尓 C21 电磁炉\n\n苏伯尓 C21 电磁炉第{i}部分的说明文字。" + "功率 2100W，插座不低于 10A。" * 60 + "\n\n"
     for i in range(1, 6)])


@pytest.fixture(scope="module")
def tiny_models(tmp_path_factory):
    return write_tiny_models(tmp_path_factory.mktemp("models"))


@pytest.fixture
def llm(env):
    """A scripted OpenAI-compatible server, configured as chat and vision model."""
    with ScriptedOpenAI() as server:
        env(OPENAI_API_KEY="test-key", OPENAI_API_BASE=server.base_url, VL_MODEL="qwen3-vl-flash",
            VL_MAX_REQUESTS=1000, VL_WINDOW_S=60)
        yield server


def requests_with(server: ScriptedOpenAI, phrase: str) -> list[dict]:
    return [r for r in server.requests if phrase in json.dumps(r, ensure_ascii=False)]


def user_text(request: dict) -> str:
    content = [m for m in request["messages"] if m["role"] == "user"][-1]["content"]
    return content if isinstance(content, str) else "\n".join(p.get("text", "") for p in content)


def manual_with_images(folder: Path) -> Path:
    """A small manual with two local images; the second one is referenced twice."""
    for name in ("mf0_front.png", "mf0_buttom.png"):
        shutil.copyfile(SIPEED_IMAGES / name, folder / name)
    return write_md(folder / "MF0 快速上手.md", (
        "# Sipeed MF0 模块\n\nMF0 是一款人脸识别模块，正面如下图所示：\n\n![](mf0_front.png)\n\n"
        "## 背面\n\n背面有烧录接口。\n\n<img src=\"mf0_buttom.png\" width=\"300\"/>\n\n"
        "烧录时按住 boot 按键。\n\n![背面](mf0_buttom.png)\n\n文末说明。\n"))


# --- BGE-M3 through FlagEmbedding ------------------------------------------------------------

def test_bge_m3_encodes_on_cpu(tiny_models):
    m3, _ = tiny_models
    embedder = BgeM3Embedder(str(m3), device="cpu")
    assert (embedder.name, embedder.dim, embedder.sparse_mode) == ("bge-m3", TINY_HIDDEN, "model")
    vecs = embedder.embed(["Milk-V Duo 使用 USB 供电", "清洁前请断电"])
    assert len(vecs) == 2
    for v in vecs:
        assert len(v["dense"]) == TINY_HIDDEN and all(type(x) is float for x in v["dense"])
        assert math.isclose(float(np.linalg.norm(v["dense"])), 1.0, rel_tol=1e-5)
        assert v["sparse"] and all(type(k) is int and type(w) is float and w > 0 for k, w in v["sparse"].items())
    assert vecs[0]["dense"] != vecs[1]["dense"] and vecs[0]["sparse"] != vecs[1]["sparse"]
    assert embedder.embed_query("清洁前请断电")["dense"] == pytest.approx(vecs[1]["dense"], abs=1e-5)


@pytest.mark.parametrize("make, phrase", [
    (lambda root: root / "不存在", "模型目录不存在"),
    (lambda root: root, "缺少 config.json"),
])
def test_bge_m3_path_must_be_a_model_folder(tmp_path, make, phrase):
    with pytest.raises(ConfigurationError, match=phrase):
        BgeM3Embedder(str(make(tmp_path)))


def test_bad_bge_m3_path_fails_the_import_before_any_work(env, fresh_data, tmp_path):
    env(BGE_M3_PATH=str(tmp_path / "bge-m3-missing"))
    result = run_import(write_md(tmp_path / "a.md", PRODUCT_MD))
    assert result.status == "failed" and result.failed_node == "node_entry"
    assert "BGE-M3 模型目录不存在" in result.error
    assert not (get_settings().data_dir / "work").exists()


def test_import_with_bge_m3_and_reopen_with_another_embedder(env, fresh_data, tiny_models, tmp_path):
    m3, _ = tiny_models
    env(BGE_M3_PATH=str(m3))
    result = run_import(write_md(tmp_path / "c21.md", PRODUCT_MD))
    assert result.status == "completed", result.error
    s = store()
    assert s.embedder.name == "bge-m3"
    described = json.loads(s.client.describe_collection(s.chunks)["description"])
    assert described == {"embedder": "bge-m3", "dim": TINY_HIDDEN}
    stored = s.query(s.chunks, f'doc_id == "{result.doc_id}"', ["sparse", "product"])
    assert len(stored) == result.chunks and all(r["sparse"] for r in stored)
    vec = get_embedder().embed_query("电磁炉 插座")
    hits = s.hybrid_search(s.chunks, vec, "电磁炉 插座", limit=3)
    assert hits and {h["doc_id"] for h in hits} == {result.doc_id}
    assert [r["product"] for r in name_rows()] == [result.product]
    assert_consistent()

    env(BGE_M3_PATH="")  # the same data dir, now with the offline embedder
    with pytest.raises(ConfigurationError, match="由另一个向量模型创建"):
        store().open()
    again = run_import(tmp_path / "c21.md")
    assert again.status == "failed" and again.failed_node == "node_entry"
    assert "另一个向量模型" in again.error


def test_text_without_lexical_weights_still_imports(env, fresh_data, tiny_models, tmp_path):
    """Milvus refuses an all-zero sparse vector, which BGE-M3 can produce for some texts."""
    import torch

    mute = tmp_path / "bge-m3-mute"
    shutil.copytree(tiny_models[0], mute)
    torch.save({"weight": torch.zeros(1, TINY_HIDDEN), "bias": torch.full((1,), -1.0)}, mute / "sparse_linear.pt")
    env(BGE_M3_PATH=str(mute))
    assert get_embedder().embed(["任何文字"])[0]["sparse"] == {0: 1e-6}  # CLS: in no query's weights
    result = run_import(write_md(tmp_path / "c21.md", PRODUCT_MD))
    assert result.status == "completed", result.error
    assert len(doc_chunks(result.doc_id)) == result.chunks


# --- FlagReranker -----------------------------------------------------------------------------

def test_flag_reranker_scores_query_first(env, tiny_models):
    _, reranker_dir = tiny_models
    import torch
    from transformers import AutoModelForSequenceClassification, AutoTokenizer

    env(BGE_RERANKER_LARGE=str(reranker_dir))
    scorer = get_reranker()
    assert isinstance(scorer, FlagRerankerScorer)
    query = "电磁炉显示 E2 怎么办"
    docs = [{"content": "E2 表示炉面过热，请断电冷却。"}, {"content": "Milk-V Duo 使用 USB 供电。"},
            {"content": "清洁前请断电。"}]
    scores = scorer.score(query, docs)
    assert len(scores) == 3 and all(0.0 <= s <= 1.0 for s in scores) and len(set(scores)) > 1
    tokenizer = AutoTokenizer.from_pretrained(reranker_dir)
    model = AutoModelForSequenceClassification.from_pretrained(reranker_dir).eval()
    with torch.no_grad():
        def direct(a, b):
            logits = model(**tokenizer(a, b, return_tensors="pt", truncation=True)).logits
            return 1 / (1 + math.exp(-float(logits[0, 0])))
        assert scores == pytest.approx([direct(query, d["content"]) for d in docs], abs=1e-3)
        assert scores != pytest.approx([direct(d["content"], query) for d in docs], abs=1e-3)
    assert scorer.score(query, []) == []


def test_flag_reranker_path_is_checked(tmp_path):
    with pytest.raises(ConfigurationError, match="bge-reranker 模型目录不存在"):
        FlagRerankerScorer(str(tmp_path / "missing"), False, "cpu")


# --- vision captions ----------------------------------------------------------------------------

def test_captions_come_from_the_vision_model(fresh_data, llm, tmp_path):
    llm.add_rule(CAPTION_PROMPT, CAPTION)
    llm.add_rule(NAME_PROMPT, "Sipeed MF0 模块")
    md = manual_with_images(tmp_path)
    original = md.read_bytes()
    events = []
    result = run_import(md, on_event=events.append)
    assert result.status == "completed", result.error
    assert result.images_uploaded == 3 and result.images_missing == 0

    vision = requests_with(llm, CAPTION_PROMPT)
    assert len(vision) == 3 and {r["model"] for r in vision} == {"qwen3-vl-flash"}
    first = vision[0]["messages"][-1]["content"]
    image = next(p for p in first if p["type"] == "image_url")["image_url"]["url"]
    assert image.startswith("data:image/png;base64,")
    assert base64.b64decode(image.split(",", 1)[1]) == (tmp_path / "mf0_front.png").read_bytes()
    prompt = user_text(vision[0])
    assert "“MF0 快速上手”" in prompt and "50字以内" in prompt
    assert "正面如下图所示" in prompt.split("下文")[0]  # the text before the image, as 上文
    assert "## 背面" in prompt.split("下文")[1]  # and the text after it, as 下文

    new_md = get_settings().data_dir / "work" / result.doc_key / f"{result.doc_id}_new.md"  # named by id
    written = new_md.read_text(encoding="utf-8")
    assert written.count(f"![{CAPTION}](") == 3  # backslashes and dollars verbatim
    assert md.read_bytes() == original  # the user's file is untouched
    assert any(CAPTION in c["content"] for c in doc_chunks(result.doc_id))
    summary = next(e for e in events if e["type"] == "node_end" and e["node"] == "node_md_img")["summary"]
    assert "未配置视觉模型" not in summary


def test_word_pictures_are_captioned_like_markdown_ones(fresh_data, llm, tmp_path):
    llm.add_rule(CAPTION_PROMPT, "电磁炉控制面板特写")
    llm.add_rule(NAME_PROMPT, WORD_PRODUCT)
    result = run_import(word_manual(tmp_path / "c21.docx"))
    assert result.status == "completed", result.error
    vision = requests_with(llm, CAPTION_PROMPT)
    assert len(vision) == result.images_uploaded == 2
    image = next(p for p in vision[0]["messages"][-1]["content"] if p["type"] == "image_url")["image_url"]["url"]
    assert base64.b64decode(image.split(",", 1)[1]) == PANEL_PNG.read_bytes()
    prompt = user_text(vision[0])
    before, after = prompt.split("下文")
    assert "“c21”" in prompt and "避免烫伤和触电" in before and "图 1 控制面板" in after
    content = "\n".join(c["content"] for c in doc_chunks(result.doc_id))
    assert content.count("![电磁炉控制面板特写](/kb-files/upload-images/") == 2


def test_a_failing_caption_falls_back_and_the_import_goes_on(fresh_data, llm, tmp_path):
    llm.add_rule(CAPTION_PROMPT, "", status=500)
    llm.add_rule(NAME_PROMPT, "Sipeed MF0 模块")
    result = run_import(manual_with_images(tmp_path))
    assert result.status == "completed" and result.images_uploaded == 3
    content = "\n".join(c["content"] for c in doc_chunks(result.doc_id))
    assert "![背面](" in content  # the author's alt text
    assert "![插图：Sipeed MF0 模块 - MF0 是一款人脸识别模块，正面如下图所示：](" in content


def test_limiter_with_a_fake_clock():
    now, waits = [100.0], []

    def sleep(seconds):
        waits.append(seconds)
        now[0] += seconds

    limiter = SlidingWindowLimiter(3, 10.0, clock=lambda: now[0], sleep=sleep)
    for offset in (0, 1, 2):
        now[0] = 100.0 + offset
        assert limiter.acquire() == 0
    now[0] = 105.0
    assert limiter.acquire() == pytest.approx(5.0)  # waits until the first start leaves the window
    assert now[0] == pytest.approx(110.0) and waits == [pytest.approx(5.0)]
    now[0] = 111.5  # 100 and 101 have left the window: one slot is free
    assert limiter.acquire() == 0
    assert limiter.reserve() == pytest.approx(112.0 - 111.5)  # the next slot frees when 102 leaves
    assert limiter.reserve() == pytest.approx(120.0 - 111.5)  # then when the 110 start leaves


def test_a_limiter_wait_does_not_block_another_import(env, fresh_data, llm, monkeypatch, tmp_path):
    llm.set_default(CAPTION)
    llm.add_rule(NAME_PROMPT, "Sipeed MF0 模块")
    settings = env(VL_MAX_REQUESTS=1, VL_WINDOW_S=7.25)  # a limiter of its own
    limiter = get_limiter(settings.vl_max_requests, settings.vl_window_s)
    waiting, other_done, waited = threading.Event(), threading.Event(), []

    def sleep(seconds):
        waited.append(seconds)
        waiting.set()
        assert other_done.wait(60), "the other import was blocked by this wait"

    monkeypatch.setattr(limiter, "_sleep", sleep)
    images_md = manual_with_images(tmp_path)
    plain_md = write_md(tmp_path / "c21.md", PRODUCT_MD)
    results = {}
    slow = threading.Thread(target=lambda: results.setdefault("images", run_import(images_md)))
    slow.start()
    assert waiting.wait(60), "the limiter never made the import wait"
    started = time.perf_counter()
    results["plain"] = run_import(plain_md)  # another session's import, while the first one waits
    other_done.set()
    slow.join(60)
    assert results["plain"].status == "completed" and time.perf_counter() - started < 30
    assert results["images"].status == "completed" and results["images"].images_uploaded == 3
    assert waited[0] == pytest.approx(7.25, abs=1.0)  # one request per window: the second one waited


# --- product name from the chat model -------------------------------------------------------------

def test_product_name_prompt_holds_the_first_three_chunks(fresh_data, llm, tmp_path):
    llm.add_rule(NAME_PROMPT, "  苏伯尓 C21\n电磁炉 ")
    result = run_import(write_md(tmp_path / "c21.md", PRODUCT_MD))
    assert result.status == "completed" and result.chunks >= 4
    assert result.product == "苏伯尓C21电磁炉"  # a Chinese name loses its blanks (one token for filters and matching)
    (request,) = requests_with(llm, NAME_PROMPT)
    text = user_text(request)
    assert "“c21”" in text
    assert "【片段1】" in text and "【片段3】" in text and "【片段4】" not in text
    context = text.split("开头的几个片段：\n\n", 1)[1].split("\n\n请识别", 1)[0]
    assert len(context) == 2500  # three ~1,100-character chunks, cut at the limit
    assert {c["product"] for c in doc_chunks(result.doc_id)} == {"苏伯尓C21电磁炉"}
    assert [r["product"] for r in name_rows()] == ["苏伯尓C21电磁炉"]


def test_latin_product_name_stays_on_one_line(fresh_data, llm, tmp_path):
    llm.add_rule(NAME_PROMPT, "Milk-V\nDuo\t S")
    result = run_import(write_md(tmp_path / "duo.md", "# Duo S\n\nMilk-V Duo S, a tiny RISC-V board.\n"))
    assert result.product == "Milk-V Duo S"
    assert_consistent()


@pytest.mark.parametrize("behaviour", [{"reply": ""}, {"reply": "空字符串"}, {"reply": "x", "status": 500}])
def test_empty_or_failed_reply_falls_back_to_the_offline_name(env, fresh_data, tmp_path, behaviour):
    md = write_md(tmp_path / "c21.md", PRODUCT_MD)
    offline = run_import(md).product
    assert offline and "电磁炉" in offline
    with ScriptedOpenAI() as server:
        env(OPENAI_API_KEY="test-key", OPENAI_API_BASE=server.base_url)
        server.add_rule(NAME_PROMPT, behaviour["reply"], status=behaviour.get("status"))
        result = run_import(md)
        assert requests_with(server, NAME_PROMPT)
    assert result.status == "completed" and result.product == offline


def test_user_product_overrides_the_model(fresh_data, llm, tmp_path):
    llm.add_rule(NAME_PROMPT, "模型给的名字")
    result = run_import(write_md(tmp_path / "c21.md", PRODUCT_MD), product=" 我的\n电磁炉 ")
    assert result.product == "我的 电磁炉"
    assert requests_with(llm, NAME_PROMPT) == []


# --- MinerU -------------------------------------------------------------------------------------------

def test_pdf_through_mineru(env, fresh_data):
    with FakeMinerU(token="mineru-token") as mineru:
        env(MINERU_API_TOKEN="mineru-token", MINERU_BASE_URL=mineru.base_url, MINERU_POLL_INTERVAL_S=0.05)
        events = []
        assert run_import(BTT_V2).status == "completed"
        first = len(mineru.requests)
        result = run_import(BTT_V2, on_event=events.append)  # again: converted afresh
        assert result.status == "completed", result.error
        methods = [m for m, _ in mineru.requests[first:]]
        assert methods[:2] == ["POST", "PUT"] and methods.count("GET") >= 3  # polls, then the zip
        batch = list(mineru.batches.values())[-1]
        assert batch["request"] == {"files": [{"name": BTT_V2.name}], "model_version": "vlm"}
        assert batch["files"][0]["bytes"] == BTT_V2.read_bytes()
    assert result.pages == 8 and result.images_uploaded == 1 and result.chunks > 0
    text = "\n".join(c["content"] for c in doc_chunks(result.doc_id))
    assert "SKR" in text and "/kb-files/upload-images/" in text
    images = get_settings().data_dir / "work" / result.doc_key / "pdf" / "images"
    assert len(list(images.iterdir())) == 1  # the first conversion's image did not pile up
    assert any(e["type"] == "node_progress" and e["node"] == "node_pdf_to_md" and "MinerU" in e["text"]
               for e in events)
    end = next(e for e in events if e["type"] == "node_end" and e["node"] == "node_pdf_to_md")
    assert end["summary"].startswith("MinerU")


def test_mineru_failure_fails_the_import_cleanly(env, fresh_data):
    with FakeMinerU(token="mineru-token", mode="failed") as mineru:
        env(MINERU_API_TOKEN="mineru-token", MINERU_BASE_URL=mineru.base_url, MINERU_POLL_INTERVAL_S=0.05)
        result = run_import(BTT_V2)
    assert result.status == "failed" and result.failed_node == "node_pdf_to_md" and FAILED_MSG in result.error
    s = store()
    assert s.count(s.chunks) == 0 and name_rows() == []


# --- S3 (Ceph radosgw) ----------------------------------------------------------------------------

@pytest.fixture(scope="module")
def s3_server(tmp_path_factory):
    if missing_binaries():
        pytest.skip(f"radosgw not installed; run: {INSTALL_HINT}")
    try:
        endpoint, access_key, secret_key, stop = start_radosgw(tmp_path_factory.mktemp("ceph"))
    except S3ServerError as exc:
        pytest.fail(f"radosgw did not start: {exc}")
    yield endpoint, access_key, secret_key
    stop()


@pytest.mark.s3
def test_images_go_to_s3_and_reimport_cleans_the_prefix(env, fresh_data, s3_server, tmp_path):
    endpoint, access_key, secret_key = s3_server
    bucket = f"kb-{uuid.uuid4().hex[:12]}"
    settings = env(MINIO_ENDPOINT=endpoint, MINIO_ACCESS_KEY=access_key, MINIO_SECRET_KEY=secret_key,
                   MINIO_BUCKET_NAME=bucket)
    md = manual_with_images(tmp_path)
    result = run_import(md)
    assert result.status == "completed" and result.images_uploaded == 3
    content = "\n".join(c["content"] for c in doc_chunks(result.doc_id))
    urls = sorted(set(re.findall(r"\]\((/kb-files/upload-images/[^)]+)\)", content)))
    assert len(urls) == 2  # two distinct image files
    server = UvicornThread(Starlette(routes=[images_mount(settings)]), "images")  # the app's pictures route
    app = f"http://127.0.0.1:{server.start()}"
    try:
        for url in urls:
            response = httpx.get(app + url, headers=auth_header(), timeout=10)  # a signed-in user
            assert response.status_code == 200
            assert response.content == (tmp_path / Path(url).name).read_bytes()
            assert httpx.get(app + url, timeout=10).status_code == 401
            # the bucket itself lets nobody in without credentials
            assert httpx.get(f"http://{endpoint}/{bucket}/{url.removeprefix('/kb-files/')}", timeout=10).status_code == 403

        objects = get_object_store(settings)
        stale = objects.upload_image(result.doc_key, SIPEED_IMAGES / "mf0_pin_map.png")
        assert httpx.get(app + stale, headers=auth_header(), timeout=10).status_code == 200
        again = run_import(md)
        assert again.status == "completed" and again.doc_key == result.doc_key
        assert httpx.get(app + stale, headers=auth_header(), timeout=10).status_code == 404  # cleaned before re-upload
        assert all(httpx.get(app + url, headers=auth_header(), timeout=10).status_code == 200 for url in urls)
    finally:
        server.stop()
    assert not (get_settings().data_dir / "objects").exists()  # nothing went to the local store


def test_a_chunk_collection_without_page_fields_is_refused(fresh_data):
    """Milvus Lite cannot add a field to a collection: an old one is named, never written half-way."""
    from pymilvus import DataType, MilvusClient

    from services.vector_store import VectorStore

    settings = get_settings()
    settings.data_dir.mkdir(parents=True, exist_ok=True)
    old = MilvusClient(uri=settings.milvus_uri)
    schema = old.create_schema(auto_id=True)
    schema.add_field("chunk_id", DataType.INT64, is_primary=True)
    schema.add_field("content", DataType.VARCHAR, max_length=100)
    schema.add_field("dense", DataType.FLOAT_VECTOR, dim=get_embedder(settings).dim)
    old.create_collection(settings.chunks_collection, schema=schema)
    old.close()
    store = VectorStore(settings, get_embedder(settings))
    with pytest.raises(ConfigurationError, match="由旧版本创建，缺少字段 .*page_end、page_start"):
        store.open()
    store.close()
