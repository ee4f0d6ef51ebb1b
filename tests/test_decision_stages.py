"""The decision stages after retrieval do no harm: sub-questions keep product names whole, a
comparison of two versions is split per product (never asked back), grading adds caution instead of
dropping what retrieval found, and a rewrite keeps the first retrieval's passages.

Made-up products in a knowledge base of their own (another data folder through the graph's
configuration), shaped unlike the sample corpus: two versions of one CAN toolhead board."""
from __future__ import annotations

import pytest

from graphs.importing import run_import
from graphs.query.evidence import keep_found, offline_grade, resolve_route
from graphs.query.planning import compared_versions, plan_question
from graphs.query.runner import run_query
from services.settings import get_settings

OFF = {"web_search": False, "hyde": False}
V1, V11 = "Zorvex KX-9 CAN V1.0", "Zorvex KX-9 CAN V1.1"
V2 = "Zorvex KX-9 CAN V2.0"
MANUALS = {
    V1: ("zorvex-v10.md", "RK2206", "180 MHz"),
    V11: ("zorvex-v11.md", "GD32F303", "120 MHz"),
}


def manual(product: str, chip: str, clock: str) -> str:
    return f"""# {product} 工具头板用户指南

## 规格参数

{product} 的主控为 {chip}，主频 {clock}，板载 CAN 收发器，支持 24V 供电。

## 热端风扇

热端风扇接 FAN1 口，默认常开；模型风扇接 FAN0 口，由固件 PWM 调速。

## 固件烧录

按住 BOOT 键上电进入 DFU 模式，用 dfu-util 写入固件后重新上电。
"""


@pytest.fixture(scope="module")
def zorvex(tmp_path_factory):
    root = tmp_path_factory.mktemp("zorvex")
    settings = get_settings().replace(data_dir=root / "data")
    for product, (name, chip, clock) in MANUALS.items():
        (root / name).write_text(manual(product, chip, clock), encoding="utf-8")
        result = run_import(root / name, product=product, config={"configurable": {"settings": settings}})
        assert result.status == "completed", result.error
    return {"configurable": {"settings": settings}}


def test_sentence_split_keeps_the_version_of_the_product():
    known = [V1, V11, V2]
    for question, mention in ((f"{V2} 用的是哪颗主控？主频多少？", V2),
                              ("zorvex kx-9 can v2.0 用的是哪颗主控？主频多少？", "zorvex kx-9 can v2.0")):
        subs = plan_question(question, [V2], known)["sub_questions"]
        assert [s["question"] for s in subs] == [f"{mention} 用的是哪颗主控？", f"{mention} 主频多少？"]
        assert all(s["products"] == [V2] for s in subs)


def test_a_comparison_of_written_versions_names_both_products():
    question = "Zorvex KX-9 V1.0 和 V1.1 的主控有什么区别？"
    assert compared_versions(question, [V1, V11]) == [V1, V11]
    assert compared_versions("Zorvex KX-9 V1.0 怎么刷固件？", [V1, V11]) == []           # no comparison
    assert compared_versions(question, [V1, V11, "Zorvex KX-9 Lite V1.1"]) == []         # V1.1 is two products
    assert compared_versions("Zorvex KX-9 V1.0 和 V3.0 有什么区别？", [V1, V11]) == []   # V3.0 is none
    subs = plan_question(question, [V1, V11], [V1, V11])["sub_questions"]
    assert [(s["question"], s["products"]) for s in subs] == [
        (f"{V1} 的主控是什么？", [V1]), (f"{V11} 的主控是什么？", [V11])]


def test_comparison_of_two_held_versions_is_split_not_asked_back(zorvex):
    result = run_query("Zorvex KX-9 V1.0 和 V1.1 的主控有什么区别？", options=OFF, config=zorvex)
    assert result["branch"] == "confirmed", result.get("answer")
    assert sorted(result["products"]) == [V1, V11]
    assert [s["products"] for s in result["sub_questions"]] == [[V1], [V11]]
    for product, (_, chip, _) in MANUALS.items():
        assert any(s["product"] == product and chip in s["content"] for s in result["sources"]), product
    assert "RK2206" in result["answer"] and "GD32F303" in result["answer"]


def test_one_version_alone_is_still_asked_back(zorvex):
    result = run_query("Zorvex KX-9 的主控是什么？", options=OFF, config=zorvex)
    assert result["branch"] == "ask" and sorted(result["candidates"]) == [V1, V11]


def test_without_a_floor_weak_evidence_is_a_cautious_answer_never_not_known():
    weak = offline_grade(0.05, 0.5, None)
    assert (weak.route, weak.weak) == ("rewrite", True) and "拒答下限" not in weak.reason
    assert resolve_route(weak, True, sub_question=False, rewrites_left=0) == "answer"
    floored = offline_grade(0.05, 0.5, 0.3)
    assert resolve_route(floored, True, sub_question=False, rewrites_left=0) == "no_knowledge"


def test_weak_evidence_is_answered_with_a_caution_by_default_and_not_known_with_the_floor(zorvex):
    question = "Zorvex KX-9 CAN V1.1 的热端风扇接哪个口？"
    # thresholds no passage reaches, so the evidence is weak whatever the scorer gives
    strict = {"answer_threshold": 0.999, "refuse_threshold": 0.998}
    settings = zorvex["configurable"]["settings"]
    by_default = run_query(question, options=OFF, config={"configurable": {"settings": settings,
                                                                           "calibration_overrides": strict}})
    grade = by_default["grade"]
    assert (grade["route"], grade["weak"], grade["corrected_from"]) == ("answer", True, "rewrite"), grade
    assert by_default["done_list"].count("node_rewrite_query") == 1
    assert any("FAN1" in s["content"] for s in by_default["sources"])  # what retrieval found is kept
    assert any("对照来源核实" in w for w in by_default["warnings"])
    floored = {"configurable": {"settings": settings.replace(offline_refusal=True), "calibration_overrides": strict}}
    with_floor = run_query(question, options=OFF, config=floored)
    assert with_floor["grade"]["route"] == "no_knowledge" and with_floor["sources"] == []
    assert with_floor["answer"].startswith("抱歉")


def test_a_rewrite_keeps_the_first_retrievals_passages():
    first = [{"chunk_id": "a", "score": 0.4, "content": "A"}, {"chunk_id": "b", "score": 0.3, "content": "B"}]
    rewritten = [{"chunk_id": "c", "score": 0.9, "content": "C"}, {"chunk_id": "a", "score": 0.6, "content": "A"}]
    merged = keep_found(rewritten, first)
    assert [d["chunk_id"] for d in merged] == ["c", "a", "b"]
    assert merged[1]["score"] == 0.6  # the higher score of a passage found twice
