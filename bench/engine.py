"""The embedded vector engine on its own: whichever Milvus Lite the running Python has installed.

    python -m bench.engine --out DIR [--rows 10000 100000 300000] [--budget-s 900]
    /tmp/lite3/bin/python -m bench.engine --out DIR    # a venv holding another milvus-lite

Needs only pymilvus, milvus-lite, numpy and psutil (none of the project's services), so the same file
measures the pinned Milvus Lite 2.5 (the server's C++ core, run as a child process) in the project venv
and another version (Lite 3, pure Python) in a bare venv. One collection shaped like kb_chunks (jieba-analysed content
with a BM25 function, a 512-d dense vector, product / doc_id scalars) is grown to each size; at
each size it reports insert speed, hybrid search p50/p95 filtered on one product (the question
path) and unfiltered (the evidence path) with WeightedRanker and RRFRanker, and memory of the
process tree. A feature check runs first: BM25 with jieba finds a Chinese term, an escaped filter
on product works, both rankers run. Growth stops when `--budget-s` of inserting is spent.
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import re
import shutil
import sys
import tempfile
import threading
import time
from importlib import metadata
from pathlib import Path

import numpy as np
import psutil
from pymilvus import AnnSearchRequest, DataType, Function, FunctionType, MilvusClient, RRFRanker, WeightedRanker

from bench.shared import CORPUS
from bench.tables import md_table, percentiles, write_json

ROOT = Path(__file__).resolve().parent.parent
QA_FILE = ROOT / "bench" / "data" / "qa_corpus.jsonl"
DIM = 512  # the offline embedder's dimension
PER_PRODUCT = 100  # chunks per product, as in bench.speed: 1,000 products at 100k
POOL = 2000  # distinct base vectors; every row is one of them plus noise
NOISE_NORM = 0.3
BATCH = 2000
QUERIES = 60
WINDOW = (300, 1500)
NAME = "bench_engine_chunks"


def engine_name() -> str:
    return f"milvus-lite {metadata.version('milvus-lite')} / pymilvus {metadata.version('pymilvus')}"


def corpus_texts() -> list[str]:
    texts = [p.read_text(encoding="utf-8", errors="ignore") for p in sorted(CORPUS.rglob("*.md"))
             if p.name != "MANIFEST.md"]
    texts = [re.sub(r"!\[[^\]]*\]\([^)]*\)|<[^>]+>", " ", t) for t in texts]
    if not texts:
        raise SystemExit(f"找不到样例语料：{CORPUS}")
    return texts


def questions() -> list[str]:
    return [json.loads(line)["question"] for line in QA_FILE.read_text(encoding="utf-8").splitlines() if line.strip()]


class Rows:
    """Deterministic synthetic chunks: windows of the real manuals, product i // PER_PRODUCT."""

    def __init__(self, seed: int = 20240611):
        self.rng = np.random.default_rng(seed)
        self.texts = corpus_texts()
        base = self.rng.normal(size=(POOL, DIM)).astype(np.float32)
        self.base = base / np.linalg.norm(base, axis=1, keepdims=True)

    def product(self, p: int) -> str:
        return f"合成产品 \"P{p:05d}\" 型"  # quotes: the filter must be escaped

    def batch(self, first: int, count: int) -> list[dict]:
        idx = np.arange(first, first + count)
        vecs = self.base[idx % POOL] + self.rng.normal(0, NOISE_NORM / np.sqrt(DIM), (count, DIM)).astype(np.float32)
        vecs /= np.linalg.norm(vecs, axis=1, keepdims=True)
        rows = []
        for k, vec in zip(idx, vecs):
            src = self.texts[int(k) % len(self.texts)]
            length = int(self.rng.integers(*WINDOW))
            start = int(self.rng.integers(0, max(1, len(src) - length)))
            rows.append({"content": src[start:start + length], "product": self.product(int(k) // PER_PRODUCT),
                         "doc_id": f"doc-{int(k) // PER_PRODUCT:05d}", "dense": vec.tolist()})
        return rows

    def query_vector(self) -> list[float]:
        v = self.base[int(self.rng.integers(POOL))] + self.rng.normal(0, NOISE_NORM / np.sqrt(DIM), DIM)
        return (v / np.linalg.norm(v)).astype(np.float32).tolist()


class MemorySampler:
    """Peak RSS of this process and its children (Lite 2.5 serves from a child process)."""

    def __init__(self, every_s: float = 0.25):
        self.every_s, self.peak, self._stop = every_s, 0, threading.Event()

    def now(self) -> int:
        me = psutil.Process()
        total = me.memory_info().rss
        for child in me.children(recursive=True):
            try:
                total += child.memory_info().rss
            except psutil.Error:
                pass
        return total

    def _run(self) -> None:
        while not self._stop.wait(self.every_s):
            self.peak = max(self.peak, self.now())

    def __enter__(self):
        self.peak = self.now()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        self._thread.join()


def create(client: MilvusClient) -> None:
    schema = client.create_schema(auto_id=True)
    schema.add_field("chunk_id", DataType.INT64, is_primary=True)
    schema.add_field("content", DataType.VARCHAR, max_length=65535, enable_analyzer=True,
                     analyzer_params={"tokenizer": "jieba"})
    schema.add_field("product", DataType.VARCHAR, max_length=1024)
    schema.add_field("doc_id", DataType.VARCHAR, max_length=256)
    schema.add_field("dense", DataType.FLOAT_VECTOR, dim=DIM)
    schema.add_field("sparse", DataType.SPARSE_FLOAT_VECTOR)
    schema.add_function(Function(name="content_bm25", function_type=FunctionType.BM25,
                                 input_field_names=["content"], output_field_names=["sparse"]))
    index = client.prepare_index_params()
    index.add_index("dense", index_type="AUTOINDEX", metric_type="COSINE")
    index.add_index("sparse", index_type="SPARSE_INVERTED_INDEX", metric_type="BM25")
    client.create_collection(NAME, schema=schema, index_params=index)
    client.load_collection(NAME)


def escaped(value: str) -> str:
    return '"' + value.replace("\\", "\\\\").replace('"', '\\"') + '"'


def hybrid(client: MilvusClient, vec: list[float], text: str, expr: str, ranker) -> list[dict]:
    reqs = [AnnSearchRequest(data=[vec], anns_field="dense", param={"metric_type": "COSINE"}, limit=10,
                             expr=expr or None),
            AnnSearchRequest(data=[text], anns_field="sparse", param={"metric_type": "BM25"}, limit=10,
                             expr=expr or None)]
    res = client.hybrid_search(NAME, reqs=reqs, ranker=ranker, limit=10, output_fields=["product"])
    return list(res[0]) if res else []


def entity(hit) -> dict:
    return dict(hit.get("entity") or {})  # a dict in pymilvus 3, a Hit (which has .get) in 2.5


def features(client: MilvusClient, rows: Rows) -> dict:
    """What the project relies on, checked on the data just inserted."""
    out = {}
    term = "固件"  # in many manual windows
    try:
        res = client.search(NAME, data=[term], anns_field="sparse", search_params={"metric_type": "BM25"},
                            limit=5, output_fields=["content"])
        out["bm25_jieba"] = bool(res and res[0]) and all(term in entity(h)["content"] for h in res[0])
    except Exception as exc:
        out["bm25_jieba"] = f"失败：{exc}"
    name = rows.product(0)
    for label, ranker in (("hybrid_weighted", WeightedRanker(0.8, 0.2, norm_score=True)), ("hybrid_rrf", RRFRanker(60))):
        try:
            hits = hybrid(client, rows.query_vector(), "怎么烧录固件", f"product == {escaped(name)}", ranker)
            out[label] = bool(hits) and all(entity(h)["product"] == name for h in hits)
        except Exception as exc:
            out[label] = f"失败：{exc}"
    try:
        got = client.query(NAME, filter=f"product in [{escaped(name)}]", output_fields=["count(*)"])
        out["filter_escaped"] = int(got[0]["count(*)"]) == PER_PRODUCT
    except Exception as exc:
        out["filter_escaped"] = f"失败：{exc}"
    return out


def latency(client: MilvusClient, rows: Rows, n_rows: int, qs: list[str]) -> dict:
    products = max(1, n_rows // PER_PRODUCT)
    out = {}
    for label, make in (("weighted", lambda: WeightedRanker(0.8, 0.2, norm_score=True)), ("rrf", lambda: RRFRanker(60))):
        for scope in ("filtered", "all"):
            times = []
            for i in range(QUERIES):
                expr = f"product == {escaped(rows.product(i * 7919 % products))}" if scope == "filtered" else ""
                vec, text = rows.query_vector(), qs[i % len(qs)]
                t = time.perf_counter()
                hybrid(client, vec, text, expr, make())
                times.append(time.perf_counter() - t)
            out[f"{label}_{scope}"] = percentiles(times)
    return out


def run(out: Path, sizes: list[int], budget_s: float, log=print) -> dict:
    out.mkdir(parents=True, exist_ok=True)
    rows, qs = Rows(), questions()
    folder = Path(tempfile.mkdtemp(prefix="zgzk-engine-"))
    report = {"engine": engine_name(), "cores": os.cpu_count(), "python": platform.python_version(),
              "load_avg_start": [round(x, 2) for x in os.getloadavg()], "budget_s": budget_s, "levels": []}
    log(f"{report['engine']}，{report['cores']} 核，数据目录 {folder}")
    with MemorySampler() as mem:
        baseline = mem.now()
        t = time.perf_counter()
        client = MilvusClient(str(folder / "engine.db"))
        create(client)
        report["open_s"] = round(time.perf_counter() - t, 2)
        inserted, insert_s, features_done = 0, 0.0, False
        for size in sorted(sizes):
            before, step_s = inserted, 0.0  # only the insert calls are timed, not making the rows
            while inserted < size and insert_s + step_s < budget_s:
                batch = rows.batch(inserted, min(BATCH, size - inserted))
                t = time.perf_counter()
                client.insert(NAME, batch)
                step_s += time.perf_counter() - t
                inserted += len(batch)
            insert_s += step_s
            f = time.perf_counter()
            client.flush(NAME)
            flush_s = time.perf_counter() - f
            if not features_done:
                report["features"] = features(client, rows)
                features_done = True
            f = time.perf_counter()
            hybrid(client, rows.query_vector(), qs[0], "", RRFRanker(60))  # first query loads new segments
            first_s = time.perf_counter() - f
            search = latency(client, rows, inserted, qs)
            # every inserted row is visible to queries: fast figures of a half-loaded engine would be no figures
            counted = client.query(NAME, filter="", output_fields=["count(*)"], consistency_level="Strong")
            visible = int(counted[0]["count(*)"])
            rss = mem.now()
            level = {"target": size, "rows": inserted, "visible_rows": visible, "insert_s": round(step_s, 2),
                     "flush_s": round(flush_s, 2),
                     "rows_per_s": round((inserted - before) / step_s, 1) if step_s else None,
                     "first_query_s": round(first_s, 2), "search": search, "rss_mb": round(rss / 2**20, 1),
                     "rss_over_start_mb": round((rss - baseline) / 2**20, 1),
                     "peak_rss_mb": round(mem.peak / 2**20, 1), "complete": inserted >= size}
            report["levels"].append(level)
            s = level["search"]
            log(f"  {inserted} 行（目标 {size}）：写入 {level['rows_per_s']} 行/秒，按产品过滤的混合检索 p50 "
                f"{s['weighted_filtered']['p50_ms']} / p95 {s['weighted_filtered']['p95_ms']} 毫秒，"
                f"不过滤 p50 {s['weighted_all']['p50_ms']} 毫秒，内存 {level['rss_mb']} MB")
            if not level["complete"]:
                log(f"  写入时间预算 {budget_s} 秒用完，停止扩充")
                break
        client.close()
    shutil.rmtree(folder, ignore_errors=True)
    report["load_avg_end"] = [round(x, 2) for x in os.getloadavg()]
    write_json(out / "engine.json", report)
    (out / "engine.md").write_text(markdown(report), encoding="utf-8")
    log(markdown(report))
    return report


def markdown(report: dict) -> str:
    rows = []
    for lv in report["levels"]:
        s = lv["search"]
        rows.append([f"{lv['rows']}（可见 {lv['visible_rows']}）", lv["rows_per_s"], lv["flush_s"], lv["first_query_s"],
                     f"{s['weighted_filtered']['p50_ms']} / {s['weighted_filtered']['p95_ms']}",
                     f"{s['rrf_filtered']['p50_ms']} / {s['rrf_filtered']['p95_ms']}",
                     f"{s['weighted_all']['p50_ms']} / {s['weighted_all']['p95_ms']}",
                     f"{s['rrf_all']['p50_ms']} / {s['rrf_all']['p95_ms']}", lv["rss_mb"], lv["peak_rss_mb"]])
    feats = "，".join(f"{k}: {'通过' if v is True else v}" for k, v in report.get("features", {}).items())
    return "\n".join([
        f"# 向量引擎：{report['engine']}", "",
        f"{report['cores']} 核，开始负载 {report['load_avg_start']}，结束负载 {report['load_avg_end']}；"
        f"打开与建集合 {report['open_s']} 秒；功能检查：{feats}", "",
        md_table(["行数", "写入（行/秒）", "flush（秒）", "首次查询（秒）", "加权·按产品 p50/p95（毫秒）",
                  "RRF·按产品 p50/p95", "加权·不过滤 p50/p95", "RRF·不过滤 p50/p95", "内存（MB）", "峰值内存（MB）"],
                 rows), ""])


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.engine", description="内嵌向量引擎的写入、检索与内存基准")
    parser.add_argument("--out", required=True, help="报告输出目录")
    parser.add_argument("--rows", nargs="+", type=int, default=[10000, 100000, 300000], help="集合规模（行数）")
    parser.add_argument("--budget-s", type=float, default=900.0, help="写入的总时间预算（秒），用完即停止扩充")
    args = parser.parse_args(argv)
    if any(r < PER_PRODUCT for r in args.rows) or args.budget_s <= 0:
        parser.error(f"规模至少 {PER_PRODUCT} 行，时间预算必须为正数")
    run(Path(args.out), args.rows, args.budget_s)
    return 0


if __name__ == "__main__":
    sys.exit(main())
