"""Leave one corpus out: every decision threshold chosen on the other corpora, reported on the left-out one.

    python -m bench.loco [--corpus-root DIR] [--qa FILE.jsonl ...] --out DIR
    python -m bench.retrieval --loco [DIR] --out DIR          (the same run)

Every folder of the corpus root is one corpus, imported into a knowledge base of its own (its own
data folder, kept under `OUT/kb/` keyed by a hash of the corpus's files and of the import code, so a
second run imports nothing). Its questions are its own `qa.jsonl` when the folder has one, and the
questions of the shared QA files whose `docs` name its documents (a question naming no document
goes to every corpus its file has questions about).

The stages are measured as configured (the refusal floor off offline), with the floor switched on
(`OFFLINE_REFUSAL`), and with the thresholds and settings in the code. The thresholds the offline
decision stages use (`TUNED`) are chosen for each left-out corpus on the other corpora only:
grading's answer threshold and refusal floor as `bench.grading` chooses them, on their answerable
questions against questions of other corpora pinned to one of their products (a manual that cannot
hold the answer); the product confirmation's evidence margin (products whose best chunks are this
close tie, and are asked between) as the margin that decides most of their questions naming no
product right, judged on the chunk matches each was decided on. The left-out corpus is then asked with
those values and reported: decisions (confirm / ask / refuse against `expect`), hit@5 of the full
pipeline's sources against retrieval with the product given and against BM25 alone (questions
naming one product), answer@evidence, and how many answerable questions were refused or ended in
"not known". FAIL where the full pipeline's hit@5 is more than `HIT_GAP` below the product given,
or decisions are below `DECISION_FLOOR`.
"""
from __future__ import annotations

import argparse
import hashlib
import json
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from types import SimpleNamespace

from bench.common import (
    QA_FILE, ROOT, TOP_K, BenchError, first_relevant_rank, import_docs, isolated_data_dir, md_table, run_cli,
    write_json,
)
from bench.grading import calibrate, calibrate_floor, contents, record, trace
from bench.retrieval import BRANCH_TO_EXPECT, FIELDS, DocIndex, Question, has_evidence, load_qa, rerank
from bench.shared import CORPUS
from graphs.importing import iter_import_files
from graphs.query.calibration import calibration
from graphs.query.configuration import QueryConfiguration
from graphs.query.product_match import evidence_products
from graphs.query.retrieval import search_chunks
from services.embeddings import get_embedder
from services.settings import get_settings
from services.vector_store import get_vector_store

OWN_QA = "qa.jsonl"
SHARED_QA = [QA_FILE, QA_FILE.with_name("qa_milkv_docs.jsonl")]
# What an import's result depends on besides the files: the import graph's code and the product-name
# rules it shares with the query graph (facets, the aliases a document writes).
IMPORT_CODE = [ROOT / "graphs" / "importing", ROOT / "graphs" / "products.py", ROOT / "graphs" / "vocabulary.py",
               ROOT / "graphs" / "data", ROOT / "services" / "embeddings.py", ROOT / "services" / "vector_store.py"]
IMPORTED = "imported.json"
TUNED = ("answer_threshold", "refuse_threshold", "evidence_margin")
# Margins tried for products whose best chunks tie (a question naming no product).
MARGINS = [round(0.01 * i, 2) for i in range(41)]
HIT_GAP = 0.03
DECISION_FLOOR = 0.95
# A corpus folder's own description, not one of its manuals.
METADATA = {"manifest.md", "readme.md"}
NEGATIVES_PER_SOURCE = 12  # foreign questions per other corpus asked of each corpus (calibration rows)


@dataclass
class Corpus:
    name: str
    folder: Path
    key: str = ""
    products: list[str] = field(default_factory=list)
    index: DocIndex | None = None
    questions: list[tuple[Question, set[str]]] = field(default_factory=list)
    skipped: list[str] = field(default_factory=list)


def files_hash(paths: list[Path]) -> str:
    digest = hashlib.sha256()
    for base in paths:
        files = sorted(p for p in base.rglob("*") if p.is_file()) if base.is_dir() else [base]
        for p in files:
            if "__pycache__" in p.parts:
                continue
            digest.update(str(p.relative_to(base.parent)).encode())
            digest.update(p.read_bytes())
    return digest.hexdigest()[:16]


def corpus_files(folder: Path) -> list[Path]:
    """The corpus's manuals: its importable files bar the folder's own MANIFEST / README."""
    return [f for f in iter_import_files([folder]) if not (f.parent == folder and f.name.lower() in METADATA)]


def discover(root: Path) -> list[Corpus]:
    """Every folder of `root` with importable documents is a corpus."""
    if not root.is_dir():
        raise BenchError(f"找不到语料目录：{root}")
    found = [Corpus(p.name, p) for p in sorted(root.iterdir()) if p.is_dir() and corpus_files(p)]
    if len(found) < 2:
        raise BenchError(f"留一语料评测至少要两个语料目录，{root} 下只有 {len(found)} 个。")
    return found


def open_kb(corpus: Corpus, cache: Path):
    """The corpus's own knowledge base (a context manager), imported on first use and reused while
    the corpus and the import code are unchanged."""
    corpus.key = corpus.key or f"{corpus.name}-{files_hash([corpus.folder, *IMPORT_CODE])}"
    folder = cache / corpus.key
    if folder.exists() and not (folder / IMPORTED).is_file():
        raise BenchError(f"缓存目录 {folder} 不完整（上次导入中断），请删除后重跑。")
    return isolated_data_dir(folder, reuse=True), folder


def load_kb(corpus: Corpus, cache: Path, log) -> None:
    """Import the corpus (or find its cached import); its products and document index."""
    manager, folder = open_kb(corpus, cache)
    marker = folder / IMPORTED
    cached = marker.is_file()
    with manager:
        if cached:
            results = [SimpleNamespace(**r) for r in json.loads(marker.read_text(encoding="utf-8"))]
            log(f"{corpus.name}：沿用缓存的导入 {folder.name}（{len(results)} 份文档）")
        else:
            started = time.perf_counter()
            results = import_docs(corpus_files(corpus.folder), log, roots=[corpus.folder])
            marker.write_text(json.dumps([r.to_dict() for r in results], ensure_ascii=False), encoding="utf-8")
            log(f"{corpus.name}：导入 {len(results)} 份文档，{time.perf_counter() - started:.1f} 秒")
        corpus.products = get_vector_store().product_names()
    corpus.index = DocIndex(results)


def assign(corpora: list[Corpus], shared_qa: list[Path]) -> None:
    """Every question to the corpus whose documents it names (see the module docstring)."""
    for c in corpora:
        own = c.folder / OWN_QA
        if own.is_file():
            for q in load_qa(own):
                q.id = f"{c.name}:{q.id}"
                products = c.index.products(q.docs)
                (c.skipped.append(q.id) if products is None else c.questions.append((q, products)))
    for path in shared_qa:
        questions = load_qa(path)
        for q in questions:
            q.id = f"{path.stem}:{q.id}"
        covered = []
        for q in (q for q in questions if q.docs):
            hit = next((c for c in corpora if c.index.products(q.docs) is not None), None)
            if hit is None:
                continue
            hit.questions.append((q, hit.index.products(q.docs)))
            covered += [hit] if hit not in covered else []
        for q in (q for q in questions if not q.docs):
            for c in covered:
                c.questions.append((q, set()))


def answerable(corpus: Corpus) -> list[tuple[Question, set[str]]]:
    return [(q, p) for q, p in corpus.questions if q.expect == "confirm" and q.evidence]


def calibration_rows(corpus: Corpus, others: list[Corpus], cache: Path, log) -> list[dict]:
    """The corpus's answerable questions as asked, and other corpora's answerable questions pinned to
    one of its products (without their own product names), each row tagged with the corpus the
    question came from and the one it was asked of."""
    manager, _ = open_kb(corpus, cache)
    rows = []
    with manager:
        for q, expected in answerable(corpus):
            rows.append({**record(q, "answerable"), "source": corpus.name, "asked": corpus.name})
        for other in others:
            for i, (q, expected) in enumerate(answerable(other)[:NEGATIVES_PER_SOURCE]):
                pinned = corpus.products[i % len(corpus.products)]
                rows.append({**record(q, "foreign", pinned, expected), "source": other.name, "asked": corpus.name})
    log(f"{corpus.name}：校准数据 {len(rows)} 行")
    return rows


def chosen_thresholds(rows: list[dict], left_out: str) -> dict:
    """TUNED chosen as bench.grading chooses them, on rows that neither come from nor were asked of
    the left-out corpus."""
    kept = [r for r in rows if left_out not in (r["source"], r["asked"])]
    return {"answer_threshold": calibrate(kept)["threshold"], "refuse_threshold": calibrate_floor(kept)["floor"],
            "rows": len(kept)}


def evidence_outcome(ranking: list[dict], threshold: float, margin: float) -> str:
    """What the product confirmation decides from a question's chunk matches (as `expect` says it)."""
    found = evidence_products(ranking, threshold, margin)
    return "refuse" if not found else "confirm" if len(found) == 1 else "ask"


def chosen_margin(rows: list[dict], left_out: str, threshold: float, in_code: float) -> float:
    """The evidence margin that decides most questions of the other corpora right (the questions the
    confirmation judged on their chunk matches); among equally good ones, the middle one; the code's
    when the other corpora have no such question."""
    kept = [r for r in rows if r["corpus"] != left_out]
    if not kept:
        return in_code
    right = {m: sum(evidence_outcome(r["evidence"], threshold, m) == r["expect"] for r in kept) for m in MARGINS}
    best = [m for m in MARGINS if right[m] == max(right.values())]
    return best[len(best) // 2]


def ask(q: Question, expected: set[str], config: dict) -> dict:
    """One question through the whole graph with the chosen thresholds, and the comparisons."""
    run = trace(q.question, config=config)
    decision = BRANCH_TO_EXPECT.get(run["branch"], run["branch"])
    rec = {"id": q.id, "question": q.question, "expect": q.expect, "decision": decision,
           "decision_ok": decision == q.expect, "products": run["products"], "expected": sorted(expected),
           "route": run["route"], "first_top": run["first_top"], "evidence_used": run["evidence_used"],
           "evidence": run["decision"].get("evidence", [])}
    if q.expect != "confirm" or not q.evidence:
        return rec
    answered = decision == "confirm" and run["route"] == "answer"
    sources = run["final"] if answered else []
    store, names = get_vector_store(), sorted(expected)
    given = rerank(q.question, search_chunks(QueryConfiguration(), q.question, names), names)
    vec = get_embedder().embed_query(q.question)
    bm25 = store.sparse_search(store.chunks, vec, q.question, limit=TOP_K, fields=FIELDS)
    rec.update(
        answerable=True, one_product=len(expected) == 1,
        ranks={"pipeline": first_relevant_rank(contents(sources), q.evidence),
               "given": first_relevant_rank(contents(given), q.evidence),
               "bm25": first_relevant_rank(contents(bm25), q.evidence)},
        answer_ok=answered and has_evidence(run["query"], sources, q.evidence),
        refused=decision == "refuse", not_known=decision == "confirm" and run["route"] == "no_knowledge")
    return rec


def share(values: list[bool]) -> float | None:
    return round(sum(values) / len(values), 4) if values else None


def summary(records: list[dict]) -> dict:
    scored = [r for r in records if r.get("answerable")]
    single = [r for r in scored if r["one_product"]]
    hits = {k: share([bool(r["ranks"][k] and r["ranks"][k] <= 5) for r in single]) for k in ("pipeline", "given", "bm25")}
    # the stages after product confirmation alone: questions whose product was confirmed right
    right = [r for r in single if r["decision"] == "confirm" and sorted(r["products"]) == r["expected"]]
    hits.update({f"{k}_confirmed_right": share([bool(r["ranks"][k] and r["ranks"][k] <= 5) for r in right])
                 for k in ("pipeline", "given")})
    return {"questions": len(records), "decisions": share([r["decision_ok"] for r in records]),
            "answerable": len(scored), "one_product": len(single), "hit@5": hits,
            "answer_at_evidence": share([r["answer_ok"] for r in scored]),
            "refused": sum(r["refused"] for r in scored), "not_known": sum(r["not_known"] for r in scored)}


def fails(name: str, s: dict) -> list[str]:
    out = []
    hit = s["hit@5"]
    if hit["given"] is not None and (hit["pipeline"] or 0) < hit["given"] - HIT_GAP:
        out.append(f"FAIL {name}：完整流程 hit@5 {hit['pipeline']} 比产品已知时的 {hit['given']} 低 {HIT_GAP} 以上")
    if s["decisions"] is not None and s["decisions"] < DECISION_FLOOR:
        out.append(f"FAIL {name}：产品判定正确率 {s['decisions']} 低于 {DECISION_FLOOR}")
    return out


VARIANTS = {"loco": "阈值在其余语料上选出", "floor": "同上，低于拒答下限答“不知道”（OFFLINE_REFUSAL）",
            "code": "代码里的阈值与设置"}


def table(name: str, sums: dict[str, dict], thresholds: dict[str, dict], skipped: list[str]) -> str:
    def row(label, value):
        return [label, *[value(sums[v]) for v in VARIANTS]]

    rows = [
        row("产品判定正确率（确认/反问/拒答）", lambda s: f"{s['decisions']}（{s['questions']} 题）"),
        row("hit@5 完整流程（回答所用资料）", lambda s: f"{s['hit@5']['pipeline']}（{s['one_product']} 道单一产品题）"),
        row("hit@5 产品已知（召回融合＋精排）", lambda s: s["hit@5"]["given"]),
        row("hit@5 仅 BM25（全库）", lambda s: s["hit@5"]["bm25"]),
        row("hit@5 产品确认正确的题：完整流程 / 产品已知",
            lambda s: f"{s['hit@5']['pipeline_confirmed_right']} / {s['hit@5']['given_confirmed_right']}"),
        row("answer@evidence（离线回答含证据）", lambda s: f"{s['answer_at_evidence']}（{s['answerable']} 道可答题）"),
        row("可答题被拒答", lambda s: s["refused"]),
        row("可答题答“不知道”", lambda s: s["not_known"]),
        ["作答阈值 / 拒答下限 / 证据并列差", *[f"{thresholds[v]['answer_threshold']} / {thresholds[v]['refuse_threshold']}"
                                         f" / {thresholds[v]['evidence_margin']}" for v in VARIANTS]],
    ]
    lines = [f"### 留出 {name}", "", md_table(["指标", *VARIANTS.values()], rows), ""]
    if skipped:
        lines += [f"跳过（所指文档不在该语料中）：{'、'.join(skipped)}", ""]
    return "\n".join(lines + (fails(name, sums["loco"]) or [f"OK {name}"]) + [""])


def run(corpus_root: str | Path, out: str | Path, qa: list[str | Path] | None = None, log=print) -> dict:
    out = Path(out)
    cache = out / "kb"
    cache.mkdir(parents=True, exist_ok=True)
    shared_qa = [Path(p) for p in (SHARED_QA if qa is None else qa)]
    for p in shared_qa:
        load_qa(p)  # a bad QA file fails before any import
    corpora = discover(Path(corpus_root))
    for c in corpora:
        if (c.folder / OWN_QA).is_file():
            load_qa(c.folder / OWN_QA)
    started = time.perf_counter()
    for c in corpora:
        load_kb(c, cache, log)
    assign(corpora, shared_qa)
    corpora = [c for c in corpora if c.questions]
    if len(corpora) < 2:
        raise BenchError("有问题的语料不足两个，无法留一评测。")
    rows = []
    for c in corpora:
        rows += calibration_rows(c, [o for o in corpora if o is not c], cache, log)
    report = {"generated_at": time.strftime("%Y-%m-%d %H:%M:%S"), "in_use": {k: getattr(calibration(), k) for k in TUNED},
              "corpora": {}}
    markdown = ["# 留一语料评测", "",
                f"每个语料单独建库；阈值只在其余语料上选（`{'`、`'.join(TUNED)}`），在留出的语料上报告。"
                f"代码里的当前值：{report['in_use']}。", ""]
    def asked(c: Corpus, variant: str, chosen: dict) -> list[dict]:
        manager, _ = open_kb(c, cache)
        with manager:  # the settings are the corpus's own (its data folder) only inside
            config = {"configurable": {"calibration_overrides": {k: chosen[k] for k in TUNED}}}
            if variant == "floor":
                config["configurable"]["settings"] = get_settings().replace(offline_refusal=True)
            return [{"corpus": c.name, "variant": variant, **ask(q, p, config)} for q, p in c.questions]

    # The code's values first: the chunk matches each question naming no product was judged on are the
    # rows the evidence margin is chosen on (the matches do not depend on the thresholds).
    in_code = {c.name: asked(c, "code", report["in_use"]) for c in corpora}
    evidence_rows = [r for records in in_code.values() for r in records if r["evidence"]]
    threshold, margin = calibration().evidence_threshold, calibration().evidence_margin
    records_all = []
    for c in corpora:
        chosen = {**chosen_thresholds(rows, c.name), "evidence_margin": chosen_margin(evidence_rows, c.name, threshold, margin)}
        thresholds = {"loco": chosen, "floor": chosen, "code": report["in_use"]}
        sums = {}
        for variant in VARIANTS:
            records = in_code[c.name] if variant == "code" else asked(c, variant, chosen)
            sums[variant] = summary(records)
            records_all += records
        report["corpora"][c.name] = {"thresholds": thresholds, "summary": sums, "skipped": c.skipped,
                                     "fails": fails(c.name, sums["loco"]), "products": c.products}
        text = table(c.name, sums, thresholds, c.skipped)
        log(text)
        markdown.append(text)
    report["seconds"] = round(time.perf_counter() - started, 1)
    write_json(out / "loco.json", report)
    (out / "loco.md").write_text("\n".join(markdown), encoding="utf-8")
    with (out / "loco_per_question.jsonl").open("w", encoding="utf-8") as fh:
        fh.writelines(json.dumps(r, ensure_ascii=False) + "\n" for r in records_all)
    log(f"报告已写入 {out}（{report['seconds']} 秒）")
    return report


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--qa", nargs="+", help="共享问答集（默认 bench/data/qa_corpus.jsonl 与 qa_milkv_docs.jsonl）；"
                                                "语料目录里的 qa.jsonl 总会用上")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.loco", description="留一语料评测：阈值在其余语料上选，在留出的语料上报告")
    parser.add_argument("--corpus-root", default=str(CORPUS), help="语料根目录（每个子目录一个语料）")
    parser.add_argument("--out", required=True, help="报告与导入缓存的输出目录")
    add_arguments(parser)
    args = parser.parse_args(argv)
    return run_cli(lambda: run(args.corpus_root, args.out, args.qa), "评测")


if __name__ == "__main__":
    sys.exit(main())
