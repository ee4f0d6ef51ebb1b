"""Retrieval and product-confirmation evaluation against baselines, in one process.

    python -m bench.retrieval --docs PATH... [--qa FILE.jsonl ...] --out DIR

The documents are imported into a fresh data dir through the real import graph; every question runs
through the real query graph up to the answer node (product confirmation -> planning -> dense + BM25
recall -> RRF -> rerank and cliff cut-off -> evidence grading with its one rewrite; a split question
through its sub-questions and the synthesis). Baselines search the same documents, unfiltered, as a
naive RAG would. The full pipeline is also measured without grading and the rewrite (its first
retrieval) and with parent sections. Each QA set is split into a calibration half and a held half;
the held half is what counts, and a full pipeline there below the best single retriever, or below
itself without grading, is printed as FAIL.
"""
from __future__ import annotations

import argparse
import json
import os
import re
import sys
import time
from dataclasses import dataclass
from pathlib import Path

from bench.common import (
    K_VALUES, QA_FILE, SPLIT_SEED, TOP_K, BenchError, add_data_dir_options, calibration_half, create_chunk_collection, expand_docs,
    fill_chunk_collection, first_relevant_rank, import_docs, isolated_data_dir, machine_info, machine_line,
    fmt, md_table, node_latency, node_seconds, percentiles, pyplot, rank_metrics, retrieval_path, run_cli, squash,
    targets_table, work_markdown, write_json,
)
from bench.sections import with_sections
from bench.shared import CORPUS
from graphs.importing.chunking import html_to_markdown, normalize_newlines, split_markdown
from graphs.importing.chunking import MAX_CONTENT_LENGTH, MIN_CONTENT_LENGTH, embed_text
from graphs.query.calibration import calibration
from graphs.query.configuration import QueryConfiguration
from graphs.query.evidence import merge_evidence
from graphs.query.extractive import extractive_answer
from graphs.query.retrieval import merge_sources, rerank_order, search_chunks
from services.embeddings import get_embedder
from services.settings import get_settings
from services.vector_store import in_filter, get_vector_store

EXPECTS = ("confirm", "ask", "refuse")
PARTS = ("calibration", "held")
QUOTE_MARK = re.compile(r"(?m)^> ?")
BRANCH_TO_EXPECT = {"confirmed": "confirm", "ask": "ask", "refuse": "refuse"}
NAIVE_CHARS = 500
NAIVE_COLLECTION = "bench_naive_chunks"
SPLIT_COLLECTIONS = {"plain": "bench_plain_chunks", "smart": "bench_smart_chunks"}
FIELDS = ["chunk_id", "content", "title", "file_title", "product"]
BASELINE_WEIGHTS = (0.8, 0.2)  # a plain weighted hybrid (dense 0.8, sparse 0.2), kept as a baseline
SYSTEMS = {
    "naive_dense": "基线1：固定500字切片＋纯向量",
    "dense": "基线2：本系统切片＋纯向量",
    "bm25": "基线3：本系统切片＋纯BM25",
    "hybrid": "基线4：本系统切片＋加权混合检索0.8/0.2（无精排）",
    "recall": "基线5：本系统切片＋校准后的召回融合（无精排）",
    "pipeline": "完整流程：产品确认＋召回融合＋精排＋证据评估与一次改写",
    "given_product": "参考：产品已知时的召回融合＋精排（不计产品判定）",
}
# The single retrievers the full pipeline must never fall behind.
SINGLES = ("dense", "bm25", "hybrid", "recall")
# The full pipeline with and without its later stages; the graded one (SYSTEMS["pipeline"]) must not
# fall behind the ungraded one either. Parent sections are measured, not part of the query graph.
VARIANTS = {
    "pipeline_ungraded": "完整流程，不做证据评估与改写（第一次检索的精排结果）",
    "pipeline": "完整流程，证据评估＋一次改写（回答所用的资料）",
    "ungraded_sections": "不做证据评估与改写＋父级章节",
    "pipeline_sections": "证据评估＋一次改写＋父级章节",
}
SPLIT_SYSTEMS = {
    "plain_hybrid": "基本规则切分＋混合检索", "plain_rerank": "基本规则切分＋混合检索＋精排",
    "smart_hybrid": "本系统切分＋混合检索", "smart_rerank": "本系统切分＋混合检索＋精排",
}
DECISION_NAMES = {"confirm": "直接确认", "ask": "反问", "refuse": "拒答"}


@dataclass
class Question:
    id: str
    question: str
    evidence: list[str]
    expect: str
    docs: list[str]


def load_qa(path: str | Path) -> list[Question]:
    """Read and check the QA JSONL; every problem names its line."""
    path = Path(path)
    if not path.is_file():
        raise BenchError(f"找不到问答集文件：{path}")
    questions: list[Question] = []
    for lineno, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
        if not line.strip():
            continue
        where = f"{path.name} 第 {lineno} 行"
        try:
            item = json.loads(line)
        except json.JSONDecodeError as exc:
            raise BenchError(f"{where}不是合法的 JSON：{exc}") from exc
        if not isinstance(item, dict):
            raise BenchError(f"{where}应是一个 JSON 对象。")
        question, expect = item.get("question"), item.get("expect")
        evidence, docs = item.get("evidence", []), item.get("docs", [])
        if not isinstance(question, str) or not question.strip():
            raise BenchError(f"{where}缺少 question（问题文本）。")
        if expect not in EXPECTS:
            raise BenchError(f"{where}的 expect 必须是 confirm、ask 或 refuse，实际为 {expect!r}。")
        for name, value in (("evidence", evidence), ("docs", docs)):
            if not isinstance(value, list) or not all(isinstance(v, str) and v.strip() for v in value):
                raise BenchError(f"{where}的 {name} 必须是非空字符串组成的列表。")
        if expect != "refuse" and not docs:
            raise BenchError(f"{where}是 {expect} 题，docs 不能为空。")
        if expect == "confirm" and not evidence:
            raise BenchError(f"{where}是 confirm 题，evidence 不能为空（无法判断检索是否命中）。")
        questions.append(Question(str(item.get("id") or f"L{lineno}"), question.strip(), evidence, expect, docs))
    if not questions:
        raise BenchError(f"问答集 {path} 里没有任何问题。")
    return questions


class DocIndex:
    """QA `docs` names (file stem, a folder the file lies in, or the file's path ending without its
    extension) -> recognised product names."""

    def __init__(self, results):
        self.by_stem: dict[str, set[str]] = {}
        self.by_folder: dict[str, set[str]] = {}
        self.by_path: dict[str, set[str]] = {}  # "a/b/page" for .../a/b/page.md (every suffix)
        for r in results:
            path = Path(r.file).resolve()
            parts = path.with_suffix("").parts
            for i in range(len(parts) - 1):
                self.by_path.setdefault("/".join(parts[i:]), set()).add(r.product)
            self.by_stem.setdefault(path.stem, set()).add(r.product)
            for parent in path.parents:
                self.by_folder.setdefault(parent.name, set()).add(r.product)

    def products(self, names: list[str]) -> set[str] | None:
        """The products, or None when some name is not among the imported documents."""
        found: set[str] = set()
        for name in names:
            hit = self.by_stem.get(name) or self.by_folder.get(name) or self.by_path.get(name.strip("/"))
            if not hit:
                return None
            found |= hit
        return found


# -- collections built by the benchmark ------------------------------------------------------

def naive_chunks(text: str) -> list[str]:
    """Fixed 500-character windows, no overlap, no title, no product name."""
    return [text[i:i + NAIVE_CHARS] for i in range(0, len(text), NAIVE_CHARS) if text[i:i + NAIVE_CHARS].strip()]


def same_as_import(result, chunks: list[dict]) -> bool:
    """Do the rebuilt chunks equal the import's (its chunks.json backup, else its chunk count)?"""
    backup = work_markdown(result).parent / "chunks.json"
    if backup.is_file():
        return [c["content"] for c in json.loads(backup.read_text(encoding="utf-8"))] == [c["content"] for c in chunks]
    return len(chunks) == result.chunks


def build_collections(results, log) -> dict:
    """Naive, plain-rule and smart-rule chunk collections from the Markdown the import produced.

    Every text gets the same cleanup the import applies (HTML -> Markdown), so baseline (1) differs
    from the pipeline in chunking, titles, product names, filtering and rerank only.
    """
    store = get_vector_store()
    rows: dict[str, list[dict]] = {"naive": [], "plain": [], "smart": []}
    smart_matches_import = True
    for r in results:
        text = html_to_markdown(normalize_newlines(work_markdown(r).read_text(encoding="utf-8")))
        stem = Path(r.file).stem
        rows["naive"] += [{"content": c, "title": "", "file_title": stem, "product": r.product}
                          for c in naive_chunks(text)]
        for mode in SPLIT_COLLECTIONS:
            chunks = [c for c in split_markdown(text, stem, MAX_CONTENT_LENGTH, MIN_CONTENT_LENGTH, mode=mode)
                      if c["content"].strip()]
            if mode == "smart":
                smart_matches_import &= same_as_import(r, chunks)
            rows[mode] += [{**c, "file_title": stem, "product": r.product} for c in chunks]
    started = time.perf_counter()
    create_chunk_collection(store, NAIVE_COLLECTION)
    fill_chunk_collection(store, NAIVE_COLLECTION, rows["naive"], [r["content"] for r in rows["naive"]])
    for mode, name in SPLIT_COLLECTIONS.items():
        create_chunk_collection(store, name)
        fill_chunk_collection(store, name, rows[mode], [embed_text(c) for c in rows[mode]])
    log(f"  基线集合：固定切片 {len(rows['naive'])} 个，基本规则 {len(rows['plain'])} 个，本系统规则 "
        f"{len(rows['smart'])} 个（{time.perf_counter() - started:.1f} 秒）")
    return {"rows": rows, "smart_matches_import": smart_matches_import}


def rerank(query: str, docs: list[dict], products: list[str] | None) -> list[dict]:
    """Docs in node_rerank's order (the same function)."""
    if not docs:
        return []
    cfg = QueryConfiguration()
    return [d for _, d in rerank_order(cfg.reranker, query, docs, products, cfg.calibration())[0]]


def contents(hits: list[dict]) -> list[str]:
    return [h.get("content", "") for h in hits]


# -- one question ------------------------------------------------------------------------------

def evidence_stages(state: dict, query: str) -> dict[str, list[dict]]:
    """The evidence before and after grading with its one rewrite: "first" / "final" in full order
    (node_rerank keeps only the prefix above the cliff, so the order is recomputed the same way),
    "first_kept" / "final_kept" as the graph kept them. "final" is empty when the grade says not to
    answer. A split question's branches are merged as node_synthesis merges them."""
    items = state.get("products")
    answered = (state.get("grade") or {}).get("route") == "answer"
    results = state.get("sub_results") or []
    if results:
        first = merge_evidence([r for r in results if r["docs"]])
        final = (state.get("reranked_docs") or []) if answered else []
        return {"first": first, "first_kept": first, "final": final, "final_kept": final}
    first = rerank(query, merge_sources(state.get("rrf_chunks") or [], state.get("web_search_docs") or []), items)
    first_kept = (state.get("first_evidence") or {}).get("docs") or state.get("reranked_docs") or []
    final = first
    if (state.get("grade") or {}).get("evidence") == "rewritten":
        final = rerank(query, search_chunks(QueryConfiguration(), state["rewrite"]["query"], items), items)
    return {"first": first, "first_kept": first_kept, "final": final if answered else [],
            "final_kept": (state.get("reranked_docs") or []) if answered else []}


def first_top(state: dict) -> float | None:
    """The first grade's best passage score (a split question: its best branch's), which the
    grading thresholds are compared with."""
    results = state.get("sub_results") or []
    grade = (state.get("first_evidence") or {}).get("grade") or state.get("grade") or {}
    tops = [r["grade"].get("top_score", 0.0) for r in results] if results else [grade.get("top_score")]
    return max((t for t in tops if t is not None), default=None)


def has_evidence(query: str, docs: list[dict], evidence: list[str]) -> bool:
    """Does the offline answer node_answer_output would give from these sources (the same function)
    carry every evidence string?"""
    answer = extractive_answer(query, docs)[0] if docs else ""
    shown = QUOTE_MARK.sub("", answer)  # the blockquote markers are layout, not text
    return all(squash(e) in squash(shown) for e in evidence)


def evaluate(q: Question, expected: set[str], part: str) -> dict:
    state, seconds = retrieval_path(q.question)
    branch = state.get("branch", "")
    got = BRANCH_TO_EXPECT.get(branch, branch)
    kept = state.get("reranked_docs") or []
    query = state.get("rewritten_query") or q.question
    stages = evidence_stages(state, query) if got == "confirm" else {}
    # the recomputed order of a simple question against the prefix node_rerank kept
    consistent = None
    if got == "confirm" and not state.get("sub_results"):
        consistent = [d.get("chunk_id") for d in stages["first"][:len(stages["first_kept"])]] == \
            [d.get("chunk_id") for d in stages["first_kept"]]
    rec = {
        "id": q.id, "part": part, "question": q.question, "expect": q.expect, "docs": q.docs,
        "expected_products": sorted(expected), "branch": branch, "decision": got,
        "decision_ok": got == q.expect, "method": (state.get("decision") or {}).get("method", ""),
        "products": state.get("products") or [], "candidates": state.get("candidates") or [],
        "kept": len(kept), "rerank_consistent": consistent, "seconds": round(seconds, 4),
        "nodes": node_seconds(state), "ranks": {},
        "complexity": (state.get("plan") or {}).get("complexity", ""),
        "sub_questions": [s["question"] for s in state.get("sub_questions") or []],
        "route": (state.get("grade") or {}).get("route", ""), "rewrote": bool(state.get("rewrite")),
        "evidence_used": (state.get("grade") or {}).get("evidence", ""),
        "first_top": first_top(state),
    }
    if q.expect == "confirm":
        rec["product_ok"] = got == "confirm" and set(rec["products"]) == expected
    if q.expect == "ask":
        rec["candidates_ok"] = got == "ask" and set(rec["candidates"]) == expected
        rec["candidates_subset_ok"] = got == "ask" and bool(rec["candidates"]) and set(rec["candidates"]) <= expected
    if not q.evidence:
        return rec
    store = get_vector_store()
    vec = get_embedder().embed_query(q.question)
    lists = {
        "naive_dense": store.dense_search(NAIVE_COLLECTION, vec, limit=TOP_K, fields=FIELDS),
        "dense": store.dense_search(store.chunks, vec, limit=TOP_K, fields=FIELDS),
        "bm25": store.sparse_search(store.chunks, vec, q.question, limit=TOP_K, fields=FIELDS),
        "hybrid": store.hybrid_search(store.chunks, vec, q.question, limit=TOP_K, weights=BASELINE_WEIGHTS,
                                      fields=FIELDS),
        "recall": search_chunks(QueryConfiguration(), q.question, None, limit=TOP_K),
        "given_product": rerank(q.question, search_chunks(QueryConfiguration(), q.question, sorted(expected)),
                                sorted(expected)),
    }
    # Seed vs smart splitting: the pipeline's retrieval once the right product is confirmed.
    expr = in_filter("product", sorted(expected))
    for mode, name in SPLIT_COLLECTIONS.items():
        hits = store.hybrid_search(name, vec, q.question, expr=expr, limit=TOP_K, weights=BASELINE_WEIGHTS, fields=FIELDS)
        lists[f"{mode}_hybrid"] = hits
        lists[f"{mode}_rerank"] = rerank(q.question, hits, sorted(expected))
    budget = get_settings().max_context_chars // 2  # one section may take half the context
    answers: dict[str, list[dict]] = {}
    for name, stage in (("pipeline_ungraded", "first"), ("pipeline", "final")):
        order, sources = stages.get(stage, []), stages.get(f"{stage}_kept", [])
        sectioned = "pipeline_sections" if stage == "final" else "ungraded_sections"
        lists[name], lists[sectioned] = order, with_sections(order[:TOP_K], budget)
        answers[name], answers[sectioned] = sources, with_sections(sources, budget)
    rec["ranks"] = {k: first_relevant_rank(contents(v), q.evidence) for k, v in lists.items()}
    rec["hit_after_cutoff"] = first_relevant_rank(contents(kept), q.evidence) is not None
    rec["answers"] = {k: has_evidence(query, docs, q.evidence) for k, docs in answers.items()}
    rec["answer_has_evidence"] = rec["answers"]["pipeline"]
    return rec


# -- summary -----------------------------------------------------------------------------------

def share(values: list[bool]) -> float | None:
    return round(sum(values) / len(values), 4) if values else None


def best_possible(rows: list[dict], questions: list[Question]) -> float | None:
    """Share of questions for which some chunk holds all of the evidence."""
    texts = [squash(r["content"]) for r in rows]
    ok = [any(all(squash(e) in t for e in q.evidence) for t in texts) for q in questions if q.evidence]
    return share(ok)


def below(value: float | None, floor: float | None) -> bool:
    return floor is not None and (value is None or value < floor)


def part_summary(records: list[dict]) -> dict:
    """One half of a QA set: every system's metrics, the best single retriever, answer@evidence, and
    the pipeline's variants (with and without grading, with and without parent sections)."""
    scored = [r for r in records if r["ranks"]]
    systems = {k: {"label": label, **rank_metrics([r["ranks"][k] for r in scored])} for k, label in SYSTEMS.items()}
    variants = {k: {"label": label, **rank_metrics([r["ranks"][k] for r in scored]),
                    "answer_at_evidence": share([r["answers"][k] for r in scored])} for k, label in VARIANTS.items()}
    pipe, ungraded = systems["pipeline"], variants["pipeline_ungraded"]
    measures = ("hit@5", f"mrr@{TOP_K}")
    best = {m: max((systems[k][m] for k in SINGLES if systems[k][m] is not None), default=None) for m in measures}
    return {"questions": len(scored), "systems": systems, "best_single": best,
            "fails": [m for m in measures if below(pipe[m], best[m])],
            "stage_fails": [m for m in (*measures, "answer_at_evidence") if below(variants["pipeline"][m], ungraded[m])],
            "variants": variants, "answer_at_evidence": share([r["answer_has_evidence"] for r in scored]),
            "decision_accuracy": share([r["decision_ok"] for r in records])}


def summarise(records: list[dict], questions: list[Question], built: dict) -> dict:
    scored = [r for r in records if r["ranks"]]

    def metrics(labels: dict) -> dict:
        return {k: {"label": label, **rank_metrics([r["ranks"][k] for r in scored])} for k, label in labels.items()}

    systems, splits = metrics(SYSTEMS), metrics(SPLIT_SYSTEMS)
    with_evidence = [q for q in questions if q.evidence]
    rows = built["rows"]
    split_info = {mode: {"chunks": len(rows[mode]),
                         "median_chars": sorted(len(c["content"]) for c in rows[mode])[len(rows[mode]) // 2]
                         if rows[mode] else 0,
                         "best_possible": best_possible(rows[mode], with_evidence)}
                  for mode in ("naive", "plain", "smart")}
    confusion = {e: {g: sum(1 for r in records if r["expect"] == e and r["decision"] == g) for g in EXPECTS}
                 for e in EXPECTS}
    confirmed_runs = [r for r in records if r["branch"] == "confirmed"]
    return {
        "parts": {part: part_summary([r for r in records if r["part"] == part]) for part in PARTS},
        "retrieval": {
            "questions": len(scored), "systems": systems,
            "pipeline_cutoff": {
                "hit_after_cutoff": share([r["hit_after_cutoff"] for r in scored]),
                "avg_kept": round(sum(r["kept"] for r in scored if r["decision"] == "confirm")
                                  / max(1, sum(1 for r in scored if r["decision"] == "confirm")), 2),
                "rerank_order_consistent": share([r["rerank_consistent"] for r in records
                                                  if r["rerank_consistent"] is not None]),
            },
        },
        "splitting": {"systems": splits, "chunks": split_info, "smart_matches_import": built["smart_matches_import"]},
        "disambiguation": {
            "questions": len(records),
            "by_expect": {e: sum(1 for r in records if r["expect"] == e) for e in EXPECTS},
            "decision_accuracy": share([r["decision_ok"] for r in records]),
            "product_accuracy": share([r["product_ok"] for r in records if "product_ok" in r]),
            "candidates_accuracy": share([r["candidates_ok"] for r in records if "candidates_ok" in r]),
            "candidates_subset_accuracy": share([r["candidates_subset_ok"] for r in records
                                                 if "candidates_subset_ok" in r]),
            "confusion": confusion,
        },
        "latency": {
            "retrieval_path_all": percentiles([r["seconds"] for r in records]),
            "retrieval_path_confirmed": percentiles([r["seconds"] for r in confirmed_runs]),
            "nodes": node_latency([r["nodes"] for r in records]),
        },
    }


def at_least(value, floor) -> bool:
    return value is not None and floor is not None and value >= floor


def targets(summary: dict) -> list[dict]:
    """Retrieval targets on the held half; decisions and latency over the whole set."""
    held = summary["parts"]["held"]
    pipe, best = held["systems"]["pipeline"], held["best_single"]
    mrr = f"mrr@{TOP_K}"
    gap = None if pipe[mrr] is None or best[mrr] is None else round(pipe[mrr] - best[mrr], 4)
    answers = held["answer_at_evidence"]
    decisions = summary["disambiguation"]["decision_accuracy"]
    p50 = summary["latency"]["retrieval_path_all"]["p50_ms"]
    rows = [
        ("留出集：完整流程 hit@5", "≥ 0.92", pipe["hit@5"], at_least(pipe["hit@5"], 0.92)),
        ("留出集：完整流程 hit@5 不低于最好的单一检索", f"≥ {fmt(best['hit@5'])}", pipe["hit@5"],
         at_least(pipe["hit@5"], best["hit@5"])),
        ("留出集：MRR@10 比最好的单一检索高", "≥ 0.03", gap, at_least(gap, 0.03)),
        ("留出集：离线回答含证据（answer@evidence）", "≥ 0.85", answers, at_least(answers, 0.85)),
        ("产品判定（确认/反问/拒答）正确率", "≥ 0.95", decisions, decisions is not None and decisions >= 0.95),
        ("检索路径 p50（毫秒）", "≤ 150", p50, p50 is not None and p50 <= 150),
    ]
    return [{"name": n, "target": t, "value": v, "met": m} for n, t, v, m in rows]


def metric_rows(systems: dict) -> list[list]:
    return [[s["label"], *[s[f"hit@{k}"] for k in K_VALUES], s[f"mrr@{TOP_K}"]] for s in systems.values()]


METRIC_HEADERS = ["系统", *[f"hit@{k}" for k in K_VALUES], f"MRR@{TOP_K}"]


def fail_lines(name: str, summary: dict) -> list[str]:
    """FAIL when the full pipeline is below the best single retriever on a held half, or below
    itself without grading and the rewrite."""
    held = summary["parts"]["held"]
    pipe = held["systems"]["pipeline"]
    lines = [f"FAIL {name}（留出集）：完整流程 {m} {fmt(pipe[m])} 低于最好的单一检索 {fmt(held['best_single'][m])}"
             for m in held["fails"]]
    graded, ungraded = (held["variants"][k] for k in ("pipeline", "pipeline_ungraded"))
    return lines + [f"FAIL {name}（留出集）：完整流程 {m} {fmt(graded[m])} 低于不做证据评估与改写时的 {fmt(ungraded[m])}"
                    for m in held.get("stage_fails", [])]


VARIANT_HEADERS = [*METRIC_HEADERS, "answer@evidence"]


def variant_rows(variants: dict) -> list[list]:
    return [[*row, v["answer_at_evidence"]] for row, v in zip(metric_rows(variants), variants.values())]


def headline(name: str, report: dict) -> str:
    s = report["summary"]
    cut = s["retrieval"]["pipeline_cutoff"]
    d = s["disambiguation"]
    lat = s["latency"]["retrieval_path_all"]
    held, calib = s["parts"]["held"], s["parts"]["calibration"]
    return "\n".join([
        f"检索评测 {name}：留出集（报告用，{held['questions']} 道有证据的题；校准用的另一半 {calib['questions']} 题不计）",
        md_table(METRIC_HEADERS, metric_rows(held["systems"])),
        f"留出集离线回答含证据（answer@evidence）{fmt(held['answer_at_evidence'])}；"
        f"最好的单一检索 hit@5 {fmt(held['best_single']['hit@5'])}，MRR@10 {fmt(held['best_single'][f'mrr@{TOP_K}'])}",
        *(fail_lines(name, s) or [f"OK {name}（留出集）：完整流程不低于任何单一检索，也不低于不做证据评估与改写时"]),
        "留出集：完整流程有无证据评估＋一次改写、有无父级章节（命中 2 个以上同一章节的切片时换成整节）",
        md_table(VARIANT_HEADERS, variant_rows(held["variants"])),
        f"全部 {s['retrieval']['questions']} 题：",
        md_table(METRIC_HEADERS, metric_rows(s["retrieval"]["systems"])),
        f"完整流程截断后命中率 {cut['hit_after_cutoff']}，平均保留 {cut['avg_kept']} 条",
        f"产品判定正确率 {d['decision_accuracy']}，确认产品正确率 {d['product_accuracy']}，"
        f"候选集合正确率 {d['candidates_accuracy']}（共 {d['questions']} 题）",
        f"检索路径耗时 p50 {lat['p50_ms']} 毫秒，p95 {lat['p95_ms']} 毫秒",
    ])


def report_markdown(report: dict) -> str:
    s = report["summary"]
    d = s["disambiguation"]
    lines = [
        f"# 检索与产品确认评测报告：{report['name']}", "",
        f"- 生成时间：{report['generated_at']}；问答集：`{report['qa_file']}`，评测 {d['questions']} 题，"
        f"跳过 {len(report['skipped'])} 题（所指文档未导入）",
        f"- 机器：{machine_line(report['machine'], report['load_avg_end'])}",
        f"- 文档：{len(report['docs'])} 份，共 {sum(x['chunks'] for x in report['docs'])} 个切片，导入用时 "
        f"{report['import_seconds']} 秒", "",
        "## 文档与识别出的产品名", "",
        md_table(["文件", "产品名", "切片", "页数", "秒"],
                 [[Path(x["file"]).name, x["product"], x["chunks"], x["pages"], x["seconds"]]
                  for x in report["docs"]]),
        "", "## 留出集：完整流程对单一检索（报告用）", "",
        f"问答集按固定种子（{SPLIT_SEED}）分成两半：常数只在校准的一半上选，这里报告另一半"
        f"（{s['parts']['held']['questions']} 道有证据的题）。单一检索 = 基线2–5。", "",
        md_table(METRIC_HEADERS, metric_rows(s["parts"]["held"]["systems"])), "",
        f"- 离线回答（不用大模型的摘录）包含全部证据串的比例（answer@evidence）：{fmt(s['parts']['held']['answer_at_evidence'])}"
        f"（校准的一半：{fmt(s['parts']['calibration']['answer_at_evidence'])}）",
        *[f"- {line}" for line in fail_lines(report["name"], s)], "",
        "### 留出集：证据评估＋一次改写、父级章节", "",
        "“证据评估＋一次改写”按回答实际使用的资料计：评估判为不作答（没有资料、反问）的题记为未命中；"
        "改写后的检索被采用时，按改写后的检索重算完整顺序。“父级章节”：前 10 条里有 2 个以上切片同属一个章节时，"
        "在其中最靠前的位置换成整节（不超过上下文预算的一半），只是测量，查询图里没有采用。", "",
        md_table(VARIANT_HEADERS, variant_rows(s["parts"]["held"]["variants"])),
        "", f"## 检索命中（全部 {s['retrieval']['questions']} 道有证据的题）", "",
        "相关 = 切片包含该题全部证据串（忽略大小写和空白）。基线不做产品过滤，在全部文档中检索；"
        "完整流程用它确认的产品过滤后再精排，判成反问/拒答的题记为未命中。"
        "完整流程的 hit@k 按精排后的全部候选（截断前）计算。", "",
        md_table(METRIC_HEADERS, metric_rows(s["retrieval"]["systems"])), "",
        f"- 完整流程在悬崖截断后的命中率：{s['retrieval']['pipeline_cutoff']['hit_after_cutoff']}，"
        f"平均保留 {s['retrieval']['pipeline_cutoff']['avg_kept']} 条",
        f"- 重算的精排顺序与精排节点保留的前缀一致的比例：{s['retrieval']['pipeline_cutoff']['rerank_order_consistent']}",
        "", "## 切分规则：种子规则 vs 本系统规则", "",
        "两种规则都从导入生成的 Markdown（同样的 HTML 清理）切分，嵌入文本同为“产品名＋切片”，"
        "检索时按正确产品过滤（即产品确认正确之后的检索）。", "",
        md_table(["切分", "切片数", "中位长度（字）", "理论最高命中率"],
                 [[{"naive": "固定500字", "plain": "基本规则", "smart": "本系统规则"}[k], v["chunks"],
                   v["median_chars"], v["best_possible"]] for k, v in s["splitting"]["chunks"].items()]), "",
        md_table(METRIC_HEADERS, metric_rows(s["splitting"]["systems"])), "",
        f"- 本系统规则重建的切片与导入时的切片（chunks.json）逐一相同：{'是' if s['splitting']['smart_matches_import'] else '否'}",
        "", "## 产品确认", "",
        f"- 判定正确率：{d['decision_accuracy']}（确认 {d['by_expect']['confirm']} / 反问 {d['by_expect']['ask']}"
        f" / 拒答 {d['by_expect']['refuse']} 题）",
        f"- 确认题中确认到正确产品的比例：{d['product_accuracy']}",
        f"- 反问题中候选集合完全正确的比例：{d['candidates_accuracy']}；候选都属于正确集合的比例："
        f"{d['candidates_subset_accuracy']}", "",
        md_table(["期望 \\ 实际", *DECISION_NAMES.values()],
                 [[DECISION_NAMES[e], *[d["confusion"][e][g] for g in EXPECTS]] for e in EXPECTS]), "",
        "## 检索路径耗时（毫秒，已预热）", "",
        md_table(["环节", "p50", "p95", "次数"],
                 [["检索路径合计（全部题）", *s["latency"]["retrieval_path_all"].values()],
                  ["检索路径合计（已确认产品的题）", *s["latency"]["retrieval_path_confirmed"].values()]]
                 + [[n, *v.values()] for n, v in s["latency"]["nodes"].items()]), "",
        "## 目标", "",
        targets_table(report["targets"]), "",
        "## 未命中的题（完整流程）", "",
    ]
    misses = [r for r in report["records"] if r["ranks"] and r["ranks"].get("pipeline") is None]
    lines += [f"- {r['id']} {r['question']}：判定 {DECISION_NAMES.get(r['decision'], r['decision'])}，"
              f"产品 {'、'.join(r['products']) or '无'}" for r in misses] or ["- 无"]
    lines += ["", "## 判定错误的题", ""]
    wrong = [r for r in report["records"] if not r["decision_ok"]
             or r.get("product_ok") is False or r.get("candidates_ok") is False]
    lines += [f"- {r['id']} {r['question']}：期望 {DECISION_NAMES[r['expect']]}"
              f"（{'、'.join(r['expected_products']) or '—'}），实际 {DECISION_NAMES.get(r['decision'], r['decision'])}"
              f"（{'、'.join(r['products'] or r['candidates'][:5]) or '—'}），方法 {r['method']}" for r in wrong] or ["- 无"]
    return "\n".join(lines) + "\n"


def chart(report: dict, path: Path) -> None:
    plt = pyplot()
    s = report["summary"]
    groups = [("检索方案对比（全库检索 vs 完整流程）", s["retrieval"]["systems"]),
              ("切分规则对比（按正确产品过滤）", s["splitting"]["systems"])]
    fig, axes = plt.subplots(1, 2, figsize=(15, 6.5))
    metrics = [f"hit@{k}" for k in K_VALUES] + [f"mrr@{TOP_K}"]
    for ax, (title, systems) in zip(axes, groups):
        width = 0.8 / len(systems)
        for i, sys_ in enumerate(systems.values()):
            xs = [j + i * width for j in range(len(metrics))]
            ax.bar(xs, [sys_[m] or 0 for m in metrics], width, label=sys_["label"])
        ax.set_xticks([j + 0.4 - width / 2 for j in range(len(metrics))], [m.upper() for m in metrics])
        ax.set_ylim(0, 1.05)
        ax.set_title(title)
        ax.legend(fontsize=8, loc="upper center", bbox_to_anchor=(0.5, -0.08), ncol=2)
        ax.grid(axis="y", alpha=0.3)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


# -- the run -----------------------------------------------------------------------------------

def evaluate_set(qa: str | Path, index: DocIndex, log) -> tuple[list[Question], list[dict], list[str]]:
    """(questions evaluated, their records, ids skipped) of one QA set."""
    questions = load_qa(qa)
    selected = [(q, index.products(q.docs)) for q in questions]
    skipped = [q.id for q, p in selected if p is None]
    selected = [(q, p) for q, p in selected if p is not None]
    if not selected:
        raise BenchError(f"问答集 {Path(qa).name} 中没有一道题的文档在这次导入的文档里。")
    log(f"评测 {Path(qa).name}：{len(selected)} 题（跳过 {len(skipped)} 题）……")
    with_evidence = calibration_half([q.id for q, _ in selected if q.evidence])
    without = calibration_half([q.id for q, _ in selected if not q.evidence])
    records = [evaluate(q, p, "calibration" if q.id in with_evidence | without else "held") for q, p in selected]
    return [q for q, _ in selected], records, skipped


def run(docs: list[str | Path], qa: list[str | Path], out: str | Path, data_dir: str | Path | None = None,
        keep_data: bool = False, log=print) -> dict:
    names = [Path(f).stem for f in qa]
    if len(set(names)) != len(names):
        raise BenchError("几个问答集的文件名相同，报告无法区分：" + "、".join(names))
    for f in qa:
        load_qa(f)  # a bad QA file fails before the import
    files = expand_docs(docs)
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    machine = machine_info()
    with isolated_data_dir(data_dir, keep=keep_data) as folder:
        log(f"数据目录：{folder}")
        started = time.perf_counter()
        results = import_docs(files, log, roots=docs)
        import_seconds = round(time.perf_counter() - started, 2)
        index = DocIndex(results)
        built = build_collections(results, log)
        for warm in ("怎么接线？", f"{results[0].product} 怎么使用？"):  # model and index warm-up
            retrieval_path(warm)
        evaluated = {name: evaluate_set(f, index, log) for name, f in zip(names, qa)}
    report = {
        "generated_at": time.strftime("%Y-%m-%d %H:%M:%S"), "machine": machine,
        "load_avg_end": [round(x, 2) for x in os.getloadavg()], "split_seed": SPLIT_SEED,
        "calibration": calibration().measured,
        "docs": [{k: r.to_dict()[k] for k in ("file", "product", "chunks", "pages", "seconds")} for r in results],
        "import_seconds": import_seconds, "sets": {},
    }
    markdown, all_records = [], []
    for (name, (questions, records, skipped)), f in zip(evaluated.items(), qa):
        summary = summarise(records, questions, built)
        entry = {"qa_file": str(f), "skipped": skipped, "summary": summary, "targets": targets(summary)}
        report["sets"][name] = entry
        view = {**report, **entry, "name": name, "records": records}
        markdown.append(report_markdown(view))
        chart(view, out / f"retrieval-{name}.png")
        all_records += [{"set": name, **r} for r in records]
        log(headline(name, view))
    write_json(out / "report.json", report)
    with (out / "per_question.jsonl").open("w", encoding="utf-8") as fh:
        for r in all_records:
            fh.write(json.dumps(r, ensure_ascii=False) + "\n")
    (out / "report.md").write_text("\n".join(markdown), encoding="utf-8")
    log(f"报告已写入 {out}")
    return report


def default_qa() -> list[str]:
    """The project's QA sets (every bench/data/qa_*.jsonl)."""
    return [str(p) for p in sorted(QA_FILE.parent.glob("qa_*.jsonl"))]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.retrieval", description="检索与产品确认评测（含基线对比）")
    parser.add_argument("--docs", nargs="+", help="要导入的文档或文件夹（--loco 时不用）")
    parser.add_argument("--qa", nargs="+", help="问答集 JSONL，可给多个（默认 bench/data/qa_*.jsonl 全部；"
                                                "--loco 时为共享问答集，见 bench.loco）")
    parser.add_argument("--loco", nargs="?", const=str(CORPUS), metavar="CORPUS_ROOT",
                        help="留一语料评测：每个子目录一个语料，阈值在其余语料上选（默认语料根目录 ../shared/corpus）")
    parser.add_argument("--out", required=True, help="报告输出目录")
    add_data_dir_options(parser)
    args = parser.parse_args(argv)
    if args.loco:
        from bench.loco import run as loco_run  # imports this module: loaded only when asked for

        return run_cli(lambda: loco_run(args.loco, args.out, args.qa), "评测")
    if not args.docs:
        parser.error("需要 --docs（或 --loco）")
    qa = args.qa or default_qa()
    return run_cli(lambda: run(args.docs, qa, args.out, args.data_dir, args.keep_data), "评测")


if __name__ == "__main__":
    sys.exit(main())
