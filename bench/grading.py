"""Evidence grading with its one rewrite, and parent sections, measured on the held half of a QA set.

    python -m bench.grading --docs PATH... [--qa FILE.jsonl] --out DIR

Questions are split with a fixed seed into a calibration half, where the offline answer threshold is
chosen, and a report half, whose figures are reported. Every answerable question is also asked of a
product of another family (pinned): that manual cannot hold the answer, so the grader should not
answer it. Figures: hit rate (answerable questions answered with the evidence among the sources),
answer@evidence (answers that carry the evidence, out of all answers given) and false answers (the
foreign questions answered anyway), each without grading (every retrieval answered) and with it.

Parent sections (kept only if they win): when two or more kept passages share a parent heading, the
whole section under it replaces them, if it fits; measured as the share of answerable questions whose
evidence lies in one source of the context the answer node would build (12,000 characters).
"""
from __future__ import annotations

import sys
import time
from pathlib import Path

from bench.common import (
    RETRIEVAL_OPTIONS, SPLIT_SEED, calibration_half, docs_qa_args, expand_docs, first_relevant_rank, import_docs,
    isolated_data_dir, md_table, run_cli, write_json,
)
from bench.retrieval import DocIndex, load_qa
from bench.sections import with_sections
from graphs.query.calibration import calibration as configured_calibration
from graphs.query.evidence import strip_products
from graphs.query.graph import build_query_graph
from graphs.query.product_match import tokens
from graphs.query.runner import initial_state
from services.settings import get_settings


def split_questions(questions: list, seed: int = SPLIT_SEED) -> tuple[list, list]:
    """(calibration, report): the halves every benchmark uses (`calibration_half`, fixed seed)."""
    calibration = calibration_half([q.id for q in questions], seed)
    return [q for q in questions if q.id in calibration], [q for q in questions if q.id not in calibration]


def model_words(name: str) -> set[str]:
    """Name words without a leading brand word ("Milk-V Mars" -> {"mars"})."""
    words = tokens(name)
    return set(words[1:] if len(words) > 1 and not any(c.isdigit() for c in words[0]) else words)


def foreign_product(expected: set[str], products: list[str]) -> str | None:
    """A product sharing no model word with the expected ones: another family's manual."""
    words = {t for name in expected for t in model_words(name)}
    return next((p for p in sorted(products) if not words & model_words(p)), None)


def contents(docs: list[dict]) -> list[str]:
    return [d.get("content", "") for d in docs]


def trace(question: str, product: str | None = None, config: dict | None = None) -> dict:
    """The graph run to its end (with `config` as its LangGraph configuration): the first retrieval's
    kept docs, the final route and evidence, the products it confirmed."""
    first: list[dict] | None = None
    first_top: float | None = None  # the first grade's score: what the threshold is compared with
    parts: list[dict] = []  # a split question: every sub-question's kept docs, graded or not
    sub_tops: list[float] = []
    last: dict = {}
    state = initial_state(question, product=product, options=RETRIEVAL_OPTIONS, is_stream=False)
    for mode, payload in build_query_graph().stream(state, config, stream_mode=["updates", "values"]):
        if mode == "values":
            last = payload
        elif first is None and "node_rerank" in payload:
            first = payload["node_rerank"]["reranked_docs"]
        elif first_top is None and "node_grade" in payload:
            first_top = payload["node_grade"]["grade"]["top_score"]
        elif "node_sub_question" in payload:
            subs = payload["node_sub_question"]["sub_results"]
            parts += [d for sub in subs for d in sub["docs"]]
            sub_tops += [sub["grade"]["top_score"] for sub in subs]
    grade = last.get("grade") or {}
    if first_top is None:
        first_top = max(sub_tops, default=0.0)
    return {"branch": last.get("branch"), "first": first or parts, "first_top": first_top, "final": last.get("reranked_docs") or [],
            "route": grade.get("route", ""), "rewrote": bool(last.get("rewrite")),
            "evidence_used": grade.get("evidence", ""), "scorer": (last.get("rerank_info") or {}).get("scorer", ""),
            "products": last.get("products") or [], "query": last.get("rewritten_query") or question,
            "decision": last.get("decision") or {}}


def record(q, kind: str, product: str | None = None, expected: set[str] | None = None) -> dict:
    # a foreign question loses its own product's name; grading then names the pinned one
    run = trace(strip_products(q.question, sorted(expected)) if product else q.question, product)
    first_hit = first_relevant_rank(contents(run["first"]), q.evidence) is not None
    final_hit = first_relevant_rank(contents(run["final"]), q.evidence) is not None
    budget = get_settings().max_context_chars
    sections = {}
    if kind == "answerable":
        expanded = with_sections(run["first"], budget // 2)
        sections = {"plain": in_context(run["first"], q.evidence, budget),
                    "sections": in_context(expanded, q.evidence, budget),
                    "merged": len(run["first"]) - len(expanded),
                    "chars_plain": sum(len(d["content"]) for d in run["first"]),
                    "chars_sections": sum(len(d["content"]) for d in expanded)}
    return {"id": q.id, "kind": kind, "product": product, "branch": run["branch"], "route": run["route"],
            "rewrote": run["rewrote"], "evidence_used": run["evidence_used"], "scorer": run["scorer"],
            "first_top": run["first_top"],
            "first_hit": kind == "answerable" and first_hit, "final_hit": kind == "answerable" and final_hit,
            "sections": sections}


def in_context(docs: list[dict], evidence: list[str], budget: int) -> bool:
    """Evidence in one source of the context the answer node builds (whole sources within budget)."""
    shown, used = [], 0
    for d in docs:
        if used + len(d["content"]) > budget:
            break
        shown.append(d["content"])
        used += len(d["content"])
    return first_relevant_rank(shown, evidence) is not None


def calibrate(rows: list[dict]) -> dict:
    """The threshold on the first retrieval's best score that best separates answerable questions
    whose evidence was found from foreign ones: the best Youden's J, placed halfway between the
    lowest score it answers and the highest score below it (the widest margin on both sides)."""
    pos = [r["first_top"] for r in rows if r["kind"] == "answerable" and r["first_hit"]]
    neg = [r["first_top"] for r in rows if r["kind"] == "foreign" and r["branch"] == "confirmed"]
    best = (-2.0, 0.0)
    for t in sorted(set(pos + neg)):
        j = sum(p >= t for p in pos) / max(1, len(pos)) - sum(n >= t for n in neg) / max(1, len(neg))
        if j > best[0]:
            best = (j, t)
    below = [x for x in pos + neg if x < best[1]]
    threshold = (best[1] + max(below)) / 2 if below else best[1]
    return {"threshold": round(threshold, 4), "youden_j": round(best[0], 4), "positives": len(pos), "negatives": len(neg)}


def calibrate_floor(rows: list[dict]) -> dict:
    """The score under which the first retrieval is no answer even after the rewrite: the highest
    that keeps every answerable question whose evidence was found, halfway between the lowest of
    them and the highest foreign score below it."""
    pos = [r["first_top"] for r in rows if r["kind"] == "answerable" and r["first_hit"]]
    neg = [r["first_top"] for r in rows if r["kind"] == "foreign" and r["branch"] == "confirmed"]
    lowest = min(pos, default=0.0)
    below = [n for n in neg if n < lowest]
    floor = (lowest + max(below)) / 2 if below else lowest
    return {"floor": round(floor, 4), "lowest_answerable": round(lowest, 4),
            "foreign_below": round(max(below, default=0.0), 4),
            "foreign_kept_out": round(len(below) / max(1, len(neg)), 4)}


def figures(rows: list[dict], graded: bool) -> dict:
    """Hit rate, answer@evidence and false-answer rate with or without the grader's decision."""
    asked = [r for r in rows if r["branch"] == "confirmed"]
    answerable = [r for r in asked if r["kind"] == "answerable"]
    foreign = [r for r in asked if r["kind"] == "foreign"]
    answered = (lambda r: r["route"] == "answer") if graded else (lambda r: True)
    hit = (lambda r: r["final_hit"]) if graded else (lambda r: r["first_hit"])
    given = [r for r in asked if answered(r)]
    good = [r for r in answerable if answered(r) and hit(r)]
    return {"hit_rate": round(len(good) / max(1, len(answerable)), 4),
            "answer_at_evidence": round(len(good) / max(1, len(given)), 4),
            "false_answers": round(sum(answered(r) for r in foreign) / max(1, len(foreign)), 4),
            "rewrites": sum(r["rewrote"] for r in asked) if graded else 0,
            "answerable": len(answerable), "foreign": len(foreign)}


def section_figures(rows: list[dict]) -> dict:
    measured = [r["sections"] for r in rows if r["sections"]]
    n = max(1, len(measured))
    return {"questions": len(measured), "merged_questions": sum(m["merged"] > 0 for m in measured),
            "evidence_in_context_plain": round(sum(m["plain"] for m in measured) / n, 4),
            "evidence_in_context_sections": round(sum(m["sections"] for m in measured) / n, 4),
            "mean_chars_plain": round(sum(m["chars_plain"] for m in measured) / n),
            "mean_chars_sections": round(sum(m["chars_sections"] for m in measured) / n)}


def report_markdown(report: dict) -> str:
    rows = [[name, f["hit_rate"], f["answer_at_evidence"], f["false_answers"], f["rewrites"]]
            for name, f in (("不评估（每次检索都作答）", report["without_grading"]),
                            ("证据评估＋一次改写", report["with_grading"]))]
    cal, sec, floor = report["calibration"], report["parent_sections"], report["floor"]
    return "\n".join([
        "# 证据评估与改写评测", "",
        f"问答集 {report['qa_file']}，固定种子 {SPLIT_SEED} 对半拆分：校准 {report['calibration_questions']} 题，"
        f"报告 {report['report_questions']} 题（下表只用报告部分）。", "",
        f"校准部分选出的阈值 {cal['threshold']:.4f}（J={cal['youden_j']}，正例 {cal['positives']}、反例 "
        f"{cal['negatives']}）；图中使用的阈值 {report['threshold_in_use']:.4f}。", "",
        f"改写后仍低于作答阈值时，不低于拒答下限才作答（注明资料相关度较低）。校准部分选出的下限 "
        f"{floor['floor']:.4f}（找到证据的可答题最低 {floor['lowest_answerable']:.4f}，其下最高的别家产品题 "
        f"{floor['foreign_below']:.4f}，别家产品题中 {floor['foreign_kept_out']:.0%} 低于它）；图中使用的下限 "
        f"{report['floor_in_use']:.4f}。", "",
        md_table(["系统", "命中率", "answer@evidence", "误答率（换成别家产品）", "改写次数"], rows), "",
        "## 父级章节", "",
        md_table(["", "证据在上下文中", "平均上下文字数"],
                 [["只用命中的切片", sec["evidence_in_context_plain"], sec["mean_chars_plain"]],
                  ["命中 2 个以上同一章节时用整节", sec["evidence_in_context_sections"], sec["mean_chars_sections"]]]),
        "", f"报告部分 {sec['questions']} 题中 {sec['merged_questions']} 题发生了章节合并。", "",
    ])


def run(docs: list[str | Path], qa: str | Path, out: str | Path, data_dir: str | Path | None = None,
        keep_data: bool = False, log=print) -> dict:
    questions = [q for q in load_qa(qa) if q.expect == "confirm" and q.evidence]
    files = expand_docs(docs)
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    with isolated_data_dir(data_dir, keep=keep_data):
        results = import_docs(files, log, roots=docs)  # a folder's files recognised together, as bench.retrieval does
        products = sorted({r.product for r in results})
        index = DocIndex(results)
        questions = [q for q in questions if index.products(q.docs)]
        calibration, held = split_questions(questions)
        started = time.perf_counter()
        rows = {}
        for part, qs in (("calibration", calibration), ("report", held)):
            rows[part] = []
            for q in qs:
                rows[part].append(record(q, "answerable"))
                expected = index.products(q.docs)
                other = foreign_product(expected, products)
                if other:
                    rows[part].append(record(q, "foreign", other, expected))
        scorer = next((r["scorer"] for r in rows["report"] if r["scorer"]), "")
    report = {"qa_file": str(qa), "seed": SPLIT_SEED, "calibration_questions": len(calibration),
              "report_questions": len(held), "calibration": calibrate(rows["calibration"]),
              "floor": calibrate_floor(rows["calibration"]),
              "floor_in_use": configured_calibration(scorer=scorer).refuse_threshold,
              "threshold_in_use": configured_calibration(scorer=scorer).answer_threshold, "scorer": scorer,
              "without_grading": figures(rows["report"], graded=False),
              "with_grading": figures(rows["report"], graded=True),
              "parent_sections": section_figures(rows["report"]),
              "seconds": round(time.perf_counter() - started, 1), "rows": rows}
    write_json(out / "grading.json", report)
    (out / "grading.md").write_text(report_markdown(report), encoding="utf-8")
    log(report_markdown(report))
    return report


def main(argv: list[str] | None = None) -> int:
    args = docs_qa_args("python -m bench.grading", "证据评估、一次改写与父级章节的评测", argv)
    return run_cli(lambda: run(args.docs, args.qa, args.out, args.data_dir, args.keep_data), "评测")


if __name__ == "__main__":
    sys.exit(main())
