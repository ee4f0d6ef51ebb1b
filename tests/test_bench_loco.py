"""bench.loco (leave one corpus out) runs for real on two tiny corpora written here, each with its own
qa.jsonl: one knowledge base per corpus, cached between runs, thresholds chosen on the other corpus."""
from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from bench.loco import MARGINS, chosen_margin, evidence_outcome
from conftest import ROOT

TIMEOUT_S = 400
KETTLES = {
    "qk3.md": "# Quenta QK-3 电水壶 说明书\n\n## 除垢\n\nQuenta QK-3 电水壶内壁出现水垢时，倒入柠檬酸溶液煮沸，静置二十分钟后冲洗。\n\n"
              "## 保温\n\n长按保温键两秒，指示灯转为绿色，水温保持在七十摄氏度。\n",
    "qk5.md": "# Quenta QK-5 电水壶 说明书\n\n## 除垢\n\nQuenta QK-5 电水壶使用专用除垢片，放入半壶水中加热至沸腾即可。\n\n"
              "## 定时\n\n旋转定时旋钮可预约最长十二小时后自动烧水。\n",
}
LAMPS = {
    "bl20.txt": "Brilla BL-20 台灯 使用手册\n\n调光：轻触灯杆上的触摸条，亮度在五档之间循环切换。\n\n"
                "充电：Brilla BL-20 台灯用 USB-C 充电，充满约需三小时，指示灯熄灭表示充满。\n",
    "bl30.txt": "Brilla BL-30 台灯 使用手册\n\n色温：Brilla BL-30 台灯双击开关切换暖光与冷光，色温 2700K 至 6500K。\n\n"
                "定时关灯：长按开关三秒，四十五分钟后自动熄灭。\n",
}
QA = {
    "kettles": [
        {"question": "Quenta QK-3 电水壶怎么除垢？", "evidence": ["柠檬酸溶液"], "expect": "confirm", "docs": ["qk3"]},
        {"question": "QK-3 保温时水温多少度？", "evidence": ["七十摄氏度"], "expect": "confirm", "docs": ["qk3"]},
        {"question": "Quenta QK-5 最长能预约多久？", "evidence": ["十二小时"], "expect": "confirm", "docs": ["qk5"]},
        {"question": "Quenta 电水壶怎么除垢？", "evidence": [], "expect": "ask", "docs": ["qk3", "qk5"]},
        {"question": "飞利浦空气炸锅怎么清洗炸篮？", "evidence": [], "expect": "refuse", "docs": []},
    ],
    "lamps": [
        {"question": "Brilla BL-20 台灯充满电要多久？", "evidence": ["三小时"], "expect": "confirm", "docs": ["bl20"]},
        {"question": "Brilla BL-30 的色温范围是多少？", "evidence": ["2700K 至 6500K"], "expect": "confirm", "docs": ["bl30"]},
        {"question": "Brilla BL-30 台灯怎么定时关灯？", "evidence": ["四十五分钟"], "expect": "confirm", "docs": ["bl30"]},
        {"question": "Brilla 台灯怎么调亮度？", "evidence": [], "expect": "ask", "docs": ["bl20", "bl30"]},
        {"question": "小米电饭煲怎么预约煮饭？", "evidence": [], "expect": "refuse", "docs": []},
    ],
}


def loco(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "bench.retrieval", "--loco", *args], cwd=ROOT, capture_output=True,
                          text=True, timeout=TIMEOUT_S, env=dict(os.environ))


@pytest.fixture(scope="module")
def corpus_root(tmp_path_factory):
    root = tmp_path_factory.mktemp("corpora")
    for name, files in (("kettles", KETTLES), ("lamps", LAMPS)):
        folder = root / name
        folder.mkdir()
        for file, text in files.items():
            (folder / file).write_text(text, encoding="utf-8")
        (folder / "MANIFEST.md").write_text("# 说明\n\n这是语料的说明，不是手册。\n", encoding="utf-8")
        (folder / "qa.jsonl").write_text("".join(json.dumps(q, ensure_ascii=False) + "\n" for q in QA[name]),
                                         encoding="utf-8")
    return root


def test_leave_one_corpus_out_reports_every_corpus_and_reuses_its_imports(corpus_root, tmp_path):
    out = tmp_path / "out"
    first = loco(str(corpus_root), "--out", str(out))
    assert first.returncode == 0, first.stderr[-3000:]
    report = json.loads((out / "loco.json").read_text(encoding="utf-8"))
    assert sorted(report["corpora"]) == ["kettles", "lamps"]
    for name, entry in report["corpora"].items():
        s = entry["summary"]["loco"]
        assert s["questions"] == 5 and s["answerable"] == 3 and s["one_product"] == 3, (name, s)
        assert s["hit@5"]["given"] == 1.0, (name, s)
        assert not any("说明" == p for p in entry["products"])  # MANIFEST.md is no manual
        chosen = entry["thresholds"]["loco"]
        assert 0 < chosen["refuse_threshold"] <= chosen["answer_threshold"] and chosen["rows"] > 0
        assert 0 <= chosen["evidence_margin"] <= max(MARGINS)
        assert f"### 留出 {name}" in first.stdout
    records = [json.loads(l) for l in (out / "loco_per_question.jsonl").read_text(encoding="utf-8").splitlines()]
    assert {r["variant"] for r in records} == {"loco", "floor", "code"} and len(records) == 3 * 10
    # the second run imports nothing: both knowledge bases come from the cache
    second = loco(str(corpus_root), "--out", str(out))
    assert second.returncode == 0, second.stderr[-3000:]
    assert second.stdout.count("沿用缓存的导入") == 2 and "导入 2 份文档" not in second.stdout


def test_a_bad_question_line_stops_before_any_import(corpus_root, tmp_path):
    bad = tmp_path / "corpora"
    bad.mkdir()
    for name in ("kettles", "lamps"):
        (bad / name).mkdir()
        for file in (corpus_root / name).iterdir():
            (bad / name / file.name).write_bytes(file.read_bytes())
    (bad / "lamps" / "qa.jsonl").write_text('{"question": "BL-20 怎么充电？", "expect": "maybe"}\n', encoding="utf-8")
    proc = loco(str(bad), "--out", str(tmp_path / "out"))
    assert proc.returncode == 2 and "qa.jsonl 第 1 行" in proc.stderr and "expect" in proc.stderr
    assert not list((tmp_path / "out" / "kb").iterdir())


def ranking(*pairs: tuple[str, float]) -> list[dict]:
    return [{"product": p, "score": s} for p, s in pairs]


def test_the_evidence_margin_is_chosen_on_the_other_corpora_only():
    rows = [  # a clear winner, twins that tie, and a question whose best chunk is too weak
        {"corpus": "a", "expect": "confirm", "evidence": ranking(("A1", 0.8), ("A2", 0.5))},
        {"corpus": "a", "expect": "ask", "evidence": ranking(("A1", 0.7), ("A2", 0.69))},
        {"corpus": "a", "expect": "refuse", "evidence": ranking(("A1", 0.3), ("A2", 0.29))},
        # the left-out corpus would want a margin of 0.35 or more
        {"corpus": "b", "expect": "ask", "evidence": ranking(("B1", 0.9), ("B2", 0.55))},
    ]
    assert evidence_outcome(rows[0]["evidence"], 0.5, 0.1) == "confirm"
    assert evidence_outcome(rows[1]["evidence"], 0.5, 0.1) == "ask"
    assert evidence_outcome(rows[2]["evidence"], 0.5, 0.1) == "refuse"
    chosen = chosen_margin(rows, "b", threshold=0.5, in_code=0.08)
    assert 0.01 <= chosen < 0.3  # every margin that tells a's twins from its winner; b's row not read
    assert evidence_outcome(rows[3]["evidence"], 0.5, chosen) == "confirm"  # reported as it is: wrong
    assert chosen_margin(rows, "a", threshold=0.5, in_code=0.08) >= 0.35
    assert chosen_margin(rows[:3], "a", threshold=0.5, in_code=0.08) == 0.08  # nothing else to choose on
