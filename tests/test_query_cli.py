"""`python -m graphs.query` and awkward product names, against a knowledge base of this module's own.

Two small manuals go into a separate DATA_DIR so the shared sample store is never touched: a
kettle whose product name holds quotes, a backslash and an apostrophe, and an oven on the same
topics (so a filter that fails to narrow the search shows).
"""
from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from graphs.importing.runner import run_import
from graphs.query.__main__ import main
from graphs.query.runner import run_query
from milvus_lite.server_manager import server_manager_instance
from services.settings import get_settings, reload_settings
from services.vector_store import get_vector_store

ROOT = Path(__file__).resolve().parent.parent
PNG = bytes.fromhex("89504e470d0a1a0a0000000d4948445200000001000000010802000000907753de0000000c49444154789c63f8cf"
                    "c0000003010100c9fe92ef0000000049454e44ae426082")
KETTLE = 'ACME "Q\\7" O\'Neil 电水壶'
KETTLE_TYPED = 'ACME "Q\\7"\nO\'Neil  电水壶'  # as a caller may send it: a newline, doubled spaces
KETTLE_MD = """# ACME 电水壶使用说明

## 加热与保温

将水壶放在底座上，按下加热键开始加热，水开后自动断电并进入保温状态。

## 清除水垢

壶内出现水垢时，加入白醋和清水各半，加热至沸腾后静置一小时，再用清水冲洗三遍即可清除水垢。

![除垢步骤示意](img/descale.png)

## 安全提示

请勿空壶加热，请勿将底座浸入水中。
"""
OVEN_MD = """# BETA 烤箱使用说明

## 加热模式

烤箱有上下火加热、热风加热两种模式，预热约十分钟。

## 清除油垢

烤箱内壁出现油垢与水垢时，用温水加少量洗洁精擦拭，再用干布擦干，清除水垢后通风晾干。
"""
OFF = {"web_search": False, "hyde": False}


@pytest.fixture(scope="module")
def own_kb(tmp_path_factory):
    root = tmp_path_factory.mktemp("query-kb")
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("DATA_DIR", str(root / "data"))
        reload_settings()
        (root / "img").mkdir()
        (root / "img" / "descale.png").write_bytes(PNG)
        (root / "kettle.md").write_text(KETTLE_MD, encoding="utf-8")
        (root / "oven.md").write_text(OVEN_MD, encoding="utf-8")
        kettle = run_import(root / "kettle.md", product=KETTLE_TYPED)
        oven = run_import(root / "oven.md", product="BETA 烤箱")
        assert (kettle.status, oven.status) == ("completed", "completed"), (kettle.error, oven.error)
        assert kettle.product == KETTLE and kettle.images_uploaded == 1
        yield root
    reload_settings()


@pytest.mark.parametrize("pinned", [KETTLE, KETTLE_TYPED])
def test_pinned_name_with_quotes_backslash_and_newline_filters_its_chunks(own_kb, pinned):
    result = run_query("怎么清除水垢？", product=pinned, options=OFF)
    assert (result["branch"], result["products"], result["decision"]["method"]) == ("confirmed", [KETTLE], "pinned")
    assert result["sources"] and {s["product"] for s in result["sources"]} == {KETTLE}
    assert "白醋" in result["answer"]
    assert result["image_urls"] and result["image_urls"][0].endswith("descale.png")


def test_unfiltered_question_sees_both_products(own_kb):
    result = run_query("怎么清除水垢？", options=OFF)
    assert result["branch"] == "ask" and set(result["candidates"]) == {KETTLE, "BETA 烤箱"}


def cli(*args: str) -> subprocess.CompletedProcess:
    # Milvus Lite lets one process at a time hold its file: hand it over (reopened lazily here after)
    get_vector_store().close()
    server_manager_instance.release_server(get_settings().milvus_uri)
    return subprocess.run([sys.executable, "-m", "graphs.query", *args], cwd=ROOT, env=dict(os.environ),
                          capture_output=True, text=True, timeout=180)


def test_cli_json_prints_the_final_state_summary(own_kb):
    run = cli("怎么清除水垢？", "--product", KETTLE, "--no-web", "--json")
    assert run.returncode == 0, run.stderr
    out = json.loads(run.stdout)
    assert (out["status"], out["branch"], out["products"], out["candidates"]) == ("completed", "confirmed", [KETTLE], [])
    assert out["rrf"] and all(isinstance(r["score"], float) and r["chunk_id"] for r in out["rrf"])
    assert [r["score"] for r in out["rrf"]] == sorted((r["score"] for r in out["rrf"]), reverse=True)
    assert out["rerank"] and out["cutoff"] == len(out["rerank"]) <= len(out["rerank_scores"]) == len(out["rrf"])
    assert [r["score"] for r in out["rerank"]] == out["rerank_scores"][:out["cutoff"]]
    assert out["rerank_scorer"] == "offline:lexical"
    assert {r["product"] for r in out["rerank"]} == {KETTLE}
    assert out["image_urls"] and out["image_urls"][0].endswith("descale.png")
    assert set(out["node_seconds"]) == {"node_load_history", "node_save_history", "node_product_confirm", "node_plan", "node_search_embedding",
                                        "node_search_embedding_hyde", "node_web_search_mcp", "node_rrf", "node_rerank",
                                        "node_grade", "node_answer_output"}
    assert (out["grade"]["route"], out["sub_questions"], out["rewrite"]) == ("answer", [], None)
    assert out["sources"] == out["rerank"]
    # switched off, but the reason given is the one that holds either way: no backend is configured
    assert out["node_status"]["node_web_search_mcp"] == {"status": "skipped", "summary": "未配置联网搜索"}
    assert all(isinstance(s, float) for s in out["node_seconds"].values()) and out["seconds"] > 0
    assert "白醋" in out["answer"]


def test_cli_prints_the_answer_then_sources_then_images(own_kb, capsys):
    assert main(["怎么清除水垢？", "--product", KETTLE]) == 0
    text = capsys.readouterr().out
    answer_at, sources_at, images_at = text.find("白醋"), text.find("\n来源：\n"), text.find("\n图片：\n")
    assert text.startswith("（未配置大语言模型") and 0 < answer_at < sources_at < images_at
    assert re.search(rf"\n\[1\] ACME 电水壶使用说明（{re.escape(KETTLE)} · kettle）相关度 0\.\d{{4}}\n", text)
    assert text[images_at:].splitlines()[2].endswith("descale.png")


def test_cli_asks_between_candidates(own_kb, capsys):
    assert main(["怎么清除水垢？", "--no-web"]) == 0
    out = capsys.readouterr().out
    assert out.startswith("您问的是哪一款产品呢？") and "可选产品：" in out
    assert KETTLE in out.split("可选产品：")[1] and "BETA 烤箱" in out.split("可选产品：")[1]


def test_cli_error_exit_code(own_kb, capsys):
    assert main(["   "]) == 1
    assert "问题不能为空" in capsys.readouterr().err
    assert main(["   ", "--json"]) == 1
    out = json.loads(capsys.readouterr().out)
    assert (out["status"], out["error"], out["node"]) == ("failed", "问题不能为空。", "node_load_history")
