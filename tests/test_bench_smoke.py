"""The benchmark harnesses run for real on a small slice of the sample corpus.

`bench.retrieval` and `bench.speed` run as subprocesses (their command lines, their own fresh data
dirs); the helpers and failure paths are checked in-process.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from conftest import CORPUS, ROOT

from bench.common import (
    BenchError, StackSampler, first_relevant_rank, isolated_data_dir, percentiles, rank_metrics,
)
from bench.retrieval import SYSTEMS, VARIANTS, fail_lines, load_qa, main as retrieval_main, naive_chunks, part_summary, run as retrieval_run
from bench.pdf_speed import build_picture_pdf, corpus_pictures, main as pdf_speed_main
from bench.speed import build_long_pdf, main as speed_main, synthetic_name
from graphs.query.product_match import rank_products
from services.settings import get_settings

QA_FILE = ROOT / "bench" / "data" / "qa_corpus.jsonl"
MILKV = CORPUS / "milkv-duo"
# Ten questions about the three Milk-V boards: twin-specific confirms, one unnamed, one to ask back,
# one about a product that is not there; plus one about a manual that is not imported (skipped).
SMOKE_IDS = ["q01", "q03", "q06", "q08", "q11", "q13", "q15", "q48", "q53", "q62"]
# Names no product; over the speed corpus (duo + the SKR V3 manual) its chunks alone decide the product.
EVIDENCE_ID = "q47"
NOT_IMPORTED_ID = "q32"
SMOKE_TIMEOUT_S = 240


def run_module(module: str, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", module, *args], cwd=ROOT, capture_output=True, text=True,
                          timeout=SMOKE_TIMEOUT_S, env=dict(os.environ))


@pytest.fixture(scope="module")
def smoke_qa(tmp_path_factory) -> Path:
    lines = {json.loads(line)["id"]: line for line in QA_FILE.read_text(encoding="utf-8").splitlines() if line.strip()}
    assert set(SMOKE_IDS) | {NOT_IMPORTED_ID} <= set(lines)
    path = tmp_path_factory.mktemp("qa") / "smoke.jsonl"
    path.write_text("\n".join(lines[i] for i in [*SMOKE_IDS, NOT_IMPORTED_ID]) + "\n", encoding="utf-8")
    return path


@pytest.fixture(scope="module")
def speed_qa(smoke_qa) -> Path:
    line = next(l for l in QA_FILE.read_text(encoding="utf-8").splitlines() if json.loads(l)["id"] == EVIDENCE_ID)
    path = smoke_qa.with_name("speed.jsonl")
    path.write_text(smoke_qa.read_text(encoding="utf-8") + line + "\n", encoding="utf-8")
    return path


@pytest.fixture(scope="module")
def retrieval_smoke(smoke_qa, tmp_path_factory):
    out = tmp_path_factory.mktemp("retrieval-out")
    started = time.perf_counter()
    proc = run_module("bench.retrieval", "--docs", str(MILKV), "--qa", str(smoke_qa), "--out", str(out))
    return proc, out, time.perf_counter() - started


def test_retrieval_smoke_writes_reports_and_beats_naive_baseline(retrieval_smoke):
    proc, out, seconds = retrieval_smoke
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "检索评测 smoke" in proc.stdout and "基线1" in proc.stdout  # the headline table is printed
    for name in ("report.md", "report.json", "per_question.jsonl"):
        assert (out / name).stat().st_size > 0, name
    assert (out / "retrieval-smoke.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    full = json.loads((out / "report.json").read_text(encoding="utf-8"))
    report = full["sets"]["smoke"]
    records = [json.loads(line) for line in (out / "per_question.jsonl").read_text(encoding="utf-8").splitlines()]
    assert [r["id"] for r in records] == SMOKE_IDS and report["skipped"] == [NOT_IMPORTED_ID]
    assert {Path(d["file"]).stem for d in full["docs"]} == {"duo", "duo256m", "duos"}
    systems = report["summary"]["retrieval"]["systems"]
    assert report["summary"]["retrieval"]["questions"] == 8  # the confirm questions carry evidence
    # Held and calibration halves: 4 + 4 questions with evidence, and the invariant line for the held one.
    parts = report["summary"]["parts"]
    assert parts["held"]["questions"] == parts["calibration"]["questions"] == 4
    assert {r["part"] for r in records} == {"held", "calibration"}
    held = parts["held"]
    verdict = "FAIL smoke（留出集）" if held["fails"] else "OK smoke（留出集）"
    assert verdict in proc.stdout and 0.0 <= held["answer_at_evidence"] <= 1.0
    assert held["best_single"]["hit@5"] == max(held["systems"][k]["hit@5"] for k in ("dense", "bm25", "hybrid", "recall"))
    pipe, naive = systems["pipeline"], systems["naive_dense"]
    assert pipe["mrr@10"] >= naive["mrr@10"] and pipe["hit@5"] >= naive["hit@5"], (pipe, naive)
    # The recomputed full rerank order agrees with what node_rerank kept.
    assert report["summary"]["retrieval"]["pipeline_cutoff"]["rerank_order_consistent"] == 1.0
    assert report["summary"]["splitting"]["smart_matches_import"] is True
    assert report["summary"]["disambiguation"]["questions"] == 10
    assert "node_product_confirm" in report["summary"]["latency"]["nodes"]
    confirmed = [r for r in records if r["branch"] == "confirmed"]
    assert confirmed and all(r["kept"] >= 1 and "node_rerank" in r["nodes"] for r in confirmed)
    assert "## 产品确认" in (out / "report.md").read_text(encoding="utf-8")
    print(f"retrieval smoke: {seconds:.1f}s")


def test_speed_smoke_imports_builds_pdf_and_grows_collection(speed_qa, tmp_path):
    pdf = CORPUS / "btt-skr-mini-e3" / "BTT SKR MINI E3 V3.0使用手册.pdf"
    out = tmp_path / "speed-out"
    started = time.perf_counter()
    proc = run_module("bench.speed", "--out", str(out), "--docs", str(MILKV / "duo.md"), str(pdf),
                      "--qa", str(speed_qa), "--sizes", "150", "--pdf-pages", "5", "--pool", "20",
                      "--per-product", "40", "--no-profile")
    assert proc.returncode == 0, proc.stderr[-3000:]
    report = json.loads((out / "speed.json").read_text(encoding="utf-8"))
    assert (out / "speed.png").read_bytes()[:4] == b"\x89PNG" and (out / "speed.md").stat().st_size > 0
    corpus, long_pdf = report["corpus_import"], report["long_pdf_import"]
    assert corpus["files"] == 2 and corpus["pages"] == 9 and corpus["chunks"] > 0 and corpus["peak_rss_mb"] > 0
    assert long_pdf["built_pages"] == 9 and long_pdf["pages"] == 9  # whole PDFs are appended
    assert long_pdf["pages_per_s"] > 0 and "node_pdf_to_md" in long_pdf["node_seconds"]
    levels = report["scale"]["levels"]
    assert [lv["rows"] for lv in levels] == [corpus["chunks"], 150]
    growth = report["scale"]["growth"][0]
    assert growth["rows"] == 150 - corpus["chunks"] and growth["products"] == -(-growth["rows"] // 40)
    assert all(lv["retrieval_path"]["n"] == len(SMOKE_IDS) + 2 for lv in levels)
    for lv in levels:  # every question's confirmation, split by how it was decided
        by_method = lv["confirm_by_method"]
        assert sum(v["n"] for v in by_method.values()) == len(SMOKE_IDS) + 2 and "lexical" in by_method
    assert "evidence p50/p95" in (out / "speed.md").read_text(encoding="utf-8")
    assert {t["name"] for t in report["targets"]} >= {"样例语料导入（含模型加载，秒）"}
    print(f"speed smoke: {time.perf_counter() - started:.1f}s")


# -- helpers --------------------------------------------------------------------------------------

def test_relevance_ignores_case_and_whitespace_and_needs_every_evidence():
    contents = ["无关内容", "板载 LED 对应\nxgpioc[24]", "XGPIOC[24] 以及 ADC2( 1.8V )"]
    assert first_relevant_rank(contents, ["XGPIOC[24]"]) == 2
    assert first_relevant_rank(contents, ["XGPIOC[24]", "ADC2(1.8V)"]) == 3
    assert first_relevant_rank(contents, ["XGPIOC[24]", "ADC2(1.8V)"], k=2) is None
    assert first_relevant_rank(contents, []) is None


def record(pipeline, bm25, answer, ungraded=None, ungraded_answer=False):
    ranks = {k: None for k in {**SYSTEMS, **VARIANTS}} | {"pipeline": pipeline, "bm25": bm25,
                                                         "pipeline_ungraded": ungraded}
    answers = {k: False for k in VARIANTS} | {"pipeline": answer, "pipeline_ungraded": ungraded_answer}
    return {"ranks": ranks, "answers": answers, "answer_has_evidence": answer, "decision_ok": True}


def test_a_held_half_below_its_best_single_retriever_prints_fail():

    held = part_summary([record(2, 1, True), record(1, 1, False), record(None, 3, True)])
    assert held["best_single"] == {"hit@5": 1.0, "mrr@10": round((1 + 1 + 1 / 3) / 3, 4)}
    assert held["fails"] == ["hit@5", "mrr@10"] and held["answer_at_evidence"] == round(2 / 3, 4)
    lines = fail_lines("集甲", {"parts": {"held": held}})
    assert lines[0].startswith("FAIL 集甲（留出集）：完整流程 hit@5 0.667 低于最好的单一检索 1.000")
    even = part_summary([record(1, 1, True), record(1, 2, True)])
    assert even["fails"] == [] and fail_lines("集甲", {"parts": {"held": even}}) == []


def test_grading_that_loses_a_found_answer_prints_fail():
    # the second question's evidence was found (rank 4) and answered until grading refused it
    held = part_summary([record(1, 1, True, 1, True), record(None, 2, False, 4, True)])
    assert held["fails"] == ["hit@5", "mrr@10"] and held["stage_fails"] == ["hit@5", "mrr@10", "answer_at_evidence"]
    assert held["variants"]["pipeline_ungraded"]["hit@5"] == 1.0 and held["variants"]["pipeline"]["hit@5"] == 0.5
    lines = fail_lines("集甲", {"parts": {"held": held}})
    assert "FAIL 集甲（留出集）：完整流程 hit@5 0.500 低于不做证据评估与改写时的 1.000" in lines


def test_halves_are_fixed_by_the_seed_and_disjoint():
    from bench.common import calibration_half

    ids = [f"q{i:02d}" for i in range(1, 21)]
    half = calibration_half(ids)
    assert len(half) == 10 and half == calibration_half(list(reversed(ids))) and half < set(ids)
    assert calibration_half(ids, seed=11) != half


def test_rank_metrics_and_percentiles():
    m = rank_metrics([1, 3, None, 7])
    assert (m["hit@1"], m["hit@3"], m["hit@5"], m["hit@10"]) == (0.25, 0.5, 0.5, 0.75)
    assert m["mrr@10"] == round((1 + 1 / 3 + 1 / 7) / 4, 4) and m["n"] == 4
    assert rank_metrics([])["hit@1"] is None
    p = percentiles([0.010, 0.020, 0.030])
    assert p["p50_ms"] == 20.0 and p["n"] == 3 and percentiles([])["p50_ms"] is None


def test_naive_chunks_are_fixed_windows():
    text = "甲" * 1200
    assert [len(c) for c in naive_chunks(text)] == [500, 500, 200]
    assert naive_chunks("   \n") == []


def test_synthetic_names_are_distinct_and_never_match_sample_questions():
    names = [synthetic_name(p) for p in range(2000)]
    assert len(set(names)) == len(names)
    sample = names[:240:8]  # every brand, series and kind
    for q in load_qa(QA_FILE):
        assert not [m for m in rank_products(q.question, sample) if m.score > 0], q.question


def test_build_long_pdf_concatenates_until_enough_pages(tmp_path):
    import pymupdf

    pdf = CORPUS / "btt-skr-mini-e3" / "BTT SKR MINI E3 V2.0使用手册.pdf"
    pages = build_long_pdf([pdf], 20, tmp_path / "long.pdf")
    with pymupdf.open(tmp_path / "long.pdf") as doc:
        assert pages == doc.page_count >= 20
        assert doc[pages - 1].get_text().strip()  # text pages, not blanks
    with pytest.raises(BenchError, match="没有 PDF"):
        build_long_pdf([], 20, tmp_path / "none.pdf")


def test_picture_pdf_is_built_from_the_largest_corpus_pictures(tmp_path):
    import pymupdf

    pictures = corpus_pictures(CORPUS / "sipeed-mf")
    sizes = [pymupdf.Pixmap(str(p)).width * pymupdf.Pixmap(str(p)).height for p in pictures[:3]]
    assert len(pictures) > 10 and sizes == sorted(sizes, reverse=True)
    assert build_picture_pdf(pictures, 3, tmp_path / "pictures.pdf") == 2 + 3 + 4
    with pymupdf.open(tmp_path / "pictures.pdf") as doc:
        assert [len(page.get_image_info()) for page in doc] == [2, 3, 4]
        assert "第2步" in doc[1].get_text()
    with pytest.raises(BenchError, match="没有可用的图片"):
        build_picture_pdf([], 3, tmp_path / "none.pdf")


def test_pdf_speed_refuses_nonpositive_counts(capsys):
    with pytest.raises(SystemExit):
        pdf_speed_main(["--pages", "0"])
    assert "正整数" in capsys.readouterr().err


def test_stack_sampler_sees_worker_threads():
    def busy_worker():
        end = time.perf_counter() + 0.3
        while time.perf_counter() < end:
            sum(range(1000))

    with StackSampler(interval=0.001) as sampler:
        worker = threading.Thread(target=busy_worker)
        worker.start()
        worker.join()
    top = {r["function"]: r for r in sampler.top()}
    key = next(k for k in top if k.endswith(":busy_worker"))
    assert top[key]["wall_share"] > 0.5 and top[key]["ms_per_unit"] > 150


# -- failure paths --------------------------------------------------------------------------------

@pytest.mark.parametrize("line, message", [
    ("{not json", "第 1 行不是合法的 JSON"),
    ('["a"]', "应是一个 JSON 对象"),
    ('{"question": "", "expect": "refuse"}', "缺少 question"),
    ('{"question": "问", "expect": "maybe"}', "expect 必须是"),
    ('{"question": "问", "expect": "confirm", "docs": ["duo"], "evidence": []}', "evidence 不能为空"),
    ('{"question": "问", "expect": "ask", "docs": []}', "docs 不能为空"),
    ('{"question": "问", "expect": "refuse", "docs": "duo"}', "docs 必须是"),
    ('{"question": "问", "expect": "confirm", "docs": ["duo"], "evidence": [""]}', "evidence 必须是"),
])
def test_bad_qa_lines_are_reported_with_their_line(tmp_path, line, message):
    path = tmp_path / "qa.jsonl"
    path.write_text(line + "\n", encoding="utf-8")
    with pytest.raises(BenchError, match=message):
        load_qa(path)


def test_missing_or_empty_qa_file(tmp_path):
    with pytest.raises(BenchError, match="找不到问答集文件"):
        load_qa(tmp_path / "none.jsonl")
    (tmp_path / "empty.jsonl").write_text("\n\n", encoding="utf-8")
    with pytest.raises(BenchError, match="没有任何问题"):
        load_qa(tmp_path / "empty.jsonl")


def test_cli_reports_missing_docs_without_importing(tmp_path, capsys):
    args = ["--docs", str(tmp_path / "nope.md"), "--qa", str(QA_FILE), "--out", str(tmp_path / "o")]
    assert retrieval_main(args) == 2
    assert "找不到要导入的文档" in capsys.readouterr().err
    assert speed_main(["--out", str(tmp_path / "s"), "--docs", str(MILKV / "duo.md")]) == 2
    assert "没有 PDF" in capsys.readouterr().err
    assert not (tmp_path / "o").exists() and not (tmp_path / "s").exists()


def test_failed_import_stops_the_run_and_restores_the_data_dir(tmp_path):
    before = get_settings().data_dir
    empty = tmp_path / "empty.md"
    empty.write_text("", encoding="utf-8")
    with pytest.raises(BenchError, match="有文档导入失败.*empty.md"):
        retrieval_run([empty], [QA_FILE], tmp_path / "out", data_dir=tmp_path / "data")
    assert get_settings().data_dir == before and os.environ["DATA_DIR"] == str(before)


def test_run_fails_when_no_question_is_about_the_imported_docs(tmp_path):
    qa = tmp_path / "qa.jsonl"
    qa.write_text(json.dumps({"question": "Duo 的 CPU？", "evidence": ["CV1800B"], "expect": "confirm",
                              "docs": ["duo"]}, ensure_ascii=False) + "\n", encoding="utf-8")
    doc = CORPUS / "sipeed-mf" / "zh_CN" / "m01_mf1_v1_get_started.md"
    with pytest.raises(BenchError, match="没有一道题的文档"):
        retrieval_run([doc], [qa], tmp_path / "out", data_dir=tmp_path / "data")


def test_data_dir_must_be_empty(tmp_path):
    (tmp_path / "old.txt").write_text("x", encoding="utf-8")
    with pytest.raises(BenchError, match="必须是空的"):
        with isolated_data_dir(tmp_path):
            pass
