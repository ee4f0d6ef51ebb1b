"""bench.engine runs for real (the project's Milvus Lite) on small sizes, and stops when its time is spent."""
from __future__ import annotations

import json
import os
import subprocess
import sys

from conftest import ROOT


def engine(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "bench.engine", *args], cwd=ROOT, capture_output=True, text=True,
                          timeout=240, env=dict(os.environ))


def test_engine_bench_measures_each_size_and_checks_the_features(tmp_path):
    done = engine("--out", str(tmp_path), "--rows", "100", "300", "--budget-s", "120")
    assert done.returncode == 0, done.stderr[-2000:]
    report = json.loads((tmp_path / "engine.json").read_text(encoding="utf-8"))
    assert report["engine"].startswith("milvus-lite 2.5.") and report["cores"] == os.cpu_count()
    assert report["features"] == {"bm25_jieba": True, "hybrid_weighted": True, "hybrid_rrf": True,
                                  "filter_escaped": True}
    assert [(lv["target"], lv["rows"], lv["complete"]) for lv in report["levels"]] == [(100, 100, True), (300, 300, True)]
    for lv in report["levels"]:
        assert lv["visible_rows"] == lv["rows"]
        assert set(lv["search"]) == {"weighted_filtered", "weighted_all", "rrf_filtered", "rrf_all"}
        assert all(s["n"] == 60 and 0 < s["p50_ms"] <= s["p95_ms"] for s in lv["search"].values())
        assert lv["rows_per_s"] > 0 and lv["peak_rss_mb"] >= lv["rss_mb"] * 0.5 > 0
    table = (tmp_path / "engine.md").read_text(encoding="utf-8")
    assert "| 300（可见 300） |" in table and "bm25_jieba: 通过" in table


def test_engine_bench_stops_growing_when_the_budget_is_spent(tmp_path):
    done = engine("--out", str(tmp_path), "--rows", "100", "2100", "--budget-s", "0.001")
    assert done.returncode == 0, done.stderr[-2000:]
    levels = json.loads((tmp_path / "engine.json").read_text(encoding="utf-8"))["levels"]
    assert [(lv["target"], lv["rows"], lv["complete"]) for lv in levels] == [(100, 100, True), (2100, 100, False)]
    assert "写入时间预算 0.001 秒用完" in done.stdout


def test_engine_bench_refuses_sizes_below_one_product(tmp_path):
    done = engine("--out", str(tmp_path), "--rows", "50")
    assert done.returncode == 2 and "规模至少 100 行" in done.stderr
