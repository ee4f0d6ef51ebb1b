"""What both benchmarks share: an isolated data dir, imports, the query graph's retrieval path,
relevance, metrics, extra Milvus collections, tables and charts."""
from __future__ import annotations

import argparse

import collections
import contextlib
import os
import platform
import random
import re
import resource
import shutil
import sys
import tempfile
import threading
import time
from pathlib import Path

from bench.shared import CORPUS
from bench.tables import fmt, md_table, percentiles, write_json  # noqa: F401  (re-exported to the benches)
from graphs.importing import ImportResult, doc_identity, import_set, iter_import_files, run_import
from graphs.query.graph import build_query_graph
from graphs.query.runner import initial_state
from services.embeddings import get_embedder
from services.reranker import get_reranker
from services.settings import get_settings, reload_settings
from services.vector_store import ANALYZER, VectorStore, as_stored, get_vector_store, stored

ROOT = Path(__file__).resolve().parent.parent
QA_FILE = ROOT / "bench" / "data" / "qa_corpus.jsonl"
K_VALUES = (1, 3, 5, 10)
# Every QA set is split with this seed into a calibration half (constants are chosen on it) and a
# held half (what is reported).
SPLIT_SEED = 10
TOP_K = max(K_VALUES)
# Retrieval only: no web search, no HyDE, and the graph stops before the answer node.
RETRIEVAL_OPTIONS = {"web_search": False, "hyde": False}
ANSWER_NODE = "node_answer_output"
# Storage servers are left out so a benchmark never writes into a real knowledge base.
STORAGE_SERVER_VARS = ("MILVUS_URL", "MONGO_URL", "MINIO_ENDPOINT")
COLLECTION_VARS = ("CHUNKS_COLLECTION", "PRODUCT_COLLECTION")
EXTRA_FIELDS = ["chunk_id", "content", "title", "file_title", "product"]
INSERT_BATCH = 2000
CJK_FONTS = ["Noto Sans CJK SC", "Noto Sans CJK JP", "WenQuanYi Micro Hei", "SimHei", "Microsoft YaHei",
             "PingFang SC", "DejaVu Sans"]


class BenchError(Exception):
    """A problem with the benchmark's input or set-up, said in Chinese for the command line."""


@contextlib.contextmanager
def isolated_data_dir(path: str | Path | None = None, keep: bool = False, milvus_url: str = "",
                      reuse: bool = False):
    """Point DATA_DIR at a fresh folder (embedded stores only) for the duration, then restore.
    With `reuse`, `path` may already hold a knowledge base a benchmark built there (opened again);
    its store stays open on exit for the next use in this process, since pymilvus cannot reconnect
    to a Milvus Lite file it closed.

    The vector store is cached per Milvus file, so the new folder gets its own; it is closed on exit.
    A temporary folder is removed afterwards unless `keep`. `milvus_url`: a throwaway Milvus server
    named on the command line instead of Milvus Lite; this run's collections get names of their
    own there and are dropped on exit.
    """
    folder = Path(path) if path else Path(tempfile.mkdtemp(prefix="zgzk-bench-"))
    if not reuse and folder.exists() and any(folder.iterdir()):
        raise BenchError(f"数据目录必须是空的或不存在：{folder}")
    folder.mkdir(parents=True, exist_ok=True)
    saved = {k: os.environ.get(k) for k in ("DATA_DIR", *STORAGE_SERVER_VARS, *COLLECTION_VARS)}
    os.environ["DATA_DIR"] = str(folder.resolve())
    for var in STORAGE_SERVER_VARS:
        os.environ[var] = ""
    if milvus_url:
        tag = re.sub(r"\W", "_", folder.name)
        os.environ.update(MILVUS_URL=milvus_url, CHUNKS_COLLECTION=f"bench_{tag}_chunks",
                          PRODUCT_COLLECTION=f"bench_{tag}_items")
    reload_settings()
    try:
        yield folder
    finally:
        store = get_vector_store()
        if milvus_url:
            for name in (store.chunks, store.items):
                store.client.drop_collection(name)
        if not reuse:
            store.close()
        for key, value in saved.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value
        reload_settings()
        if not keep and not path:
            shutil.rmtree(folder, ignore_errors=True)


def add_data_dir_options(parser) -> None:
    parser.add_argument("--data-dir", help="数据目录（须为空；默认用临时目录，结束后删除）")
    parser.add_argument("--keep-data", action="store_true", help="保留临时数据目录")


def docs_qa_args(prog: str, description: str, argv: list[str] | None = None):
    """The options of a benchmark over imported documents and a QA set: --docs, --qa, --out, data dir."""
    parser = argparse.ArgumentParser(prog=prog, description=description)
    parser.add_argument("--docs", nargs="+", required=True, help="要导入的文档或文件夹")
    parser.add_argument("--qa", default=str(QA_FILE), help="问答集 JSONL（默认 bench/data/qa_corpus.jsonl）")
    parser.add_argument("--out", required=True, help="报告输出目录")
    add_data_dir_options(parser)
    return parser.parse_args(argv)


def run_cli(call, what: str) -> int:
    """Exit status of a benchmark command: 2 with a Chinese message on a BenchError."""
    try:
        call()
    except BenchError as exc:
        print(f"{what}失败：{exc}", file=sys.stderr)
        return 2
    return 0


def corpus_docs() -> list[Path]:
    """The sample manuals: every PDF/Markdown file in the corpus's sub-folders (not MANIFEST.md)."""
    if not CORPUS.is_dir():
        raise BenchError(f"找不到样例语料目录：{CORPUS}")
    return iter_import_files([p for p in sorted(CORPUS.iterdir()) if p.is_dir()])


def expand_docs(paths: list[str | Path]) -> list[Path]:
    missing = [str(p) for p in paths if not Path(p).exists()]
    if missing:
        raise BenchError(f"找不到要导入的文档：{'、'.join(missing)}")
    files = iter_import_files(paths)
    if not files:
        raise BenchError("给出的路径里没有可导入的 PDF 或 Markdown 文件。")
    return files


def import_docs(files: list[Path], log=print, roots: list[str | Path] | None = None) -> list[ImportResult]:
    """Import through the real import graph; any failure stops the benchmark with the reasons.
    With `roots`, the files under each root folder arrive together, as a folder import does (their
    products recognised across the set); otherwise each file alone."""
    groups: list[tuple[Path | None, list[Path]]] = [(None, [f]) for f in files]
    if roots:
        folders = [Path(r).resolve() for r in roots]
        under = {f: next((r for r in folders if r.is_dir() and r in f.resolve().parents), None) for f in files}
        groups = [(r, [f for f in files if under[f] == r]) for r in folders if r.is_dir()]
        groups += [(None, [f]) for f in files if under[f] is None]
    results = []
    for root, group in groups:
        for result in (import_set(group, root=root) if root else [run_import(group[0])]):
            log(f"  导入 {Path(result.file).name}：{result.status}，产品“{result.product}”，{result.chunks} 个切片，"
                f"{result.seconds:.2f} 秒")
            results.append(result)
    failed = [f"{Path(r.file).name}（{r.failed_node or '未知节点'}：{r.error}）" for r in results
              if r.status != "completed"]
    if failed:
        raise BenchError("有文档导入失败，评测无法继续：" + "；".join(failed))
    return results


def work_markdown(result: ImportResult) -> Path:
    """The Markdown the import graph split (`{doc_id}_new.md` in the document's work folder)."""
    _, doc_key = doc_identity(Path(result.file))
    found = sorted((get_settings().data_dir / "work" / doc_key).glob("*_new.md"))
    if not found:
        raise BenchError(f"导入后找不到转换出的 Markdown：{result.file}")
    return found[0]


def retrieval_path(question: str) -> tuple[dict, float]:
    """Run the real query graph up to (not including) the answer node: (last state, seconds)."""
    state = initial_state(question, options=RETRIEVAL_OPTIONS)
    started = time.perf_counter()
    last = state
    for last in build_query_graph().stream(state, stream_mode="values", interrupt_before=[ANSWER_NODE]):
        pass
    return last, time.perf_counter() - started


def node_seconds(state: dict) -> dict[str, float]:
    """Seconds of every node that really ran (skipped recall branches are left out)."""
    return {e["node"]: e["seconds"] for e in state.get("node_log") or [] if e.get("status") == "ok"}


# -- relevance and metrics ------------------------------------------------------------------

def squash(text: str) -> str:
    return re.sub(r"\s+", "", text).lower()


def first_relevant_rank(contents: list[str], evidence: list[str], k: int = TOP_K) -> int | None:
    """1-based rank of the first content holding every evidence string (case/whitespace-insensitive)."""
    needles = [squash(e) for e in evidence]
    if not needles:
        return None
    for rank, content in enumerate(contents[:k], 1):
        text = squash(content)
        if all(n in text for n in needles):
            return rank
    return None


def calibration_half(ids: list[str], seed: int = SPLIT_SEED) -> set[str]:
    """The ids constants may be chosen on: the first half of the sorted ids shuffled with `seed`."""
    shuffled = sorted(ids)
    random.Random(seed).shuffle(shuffled)
    return set(shuffled[:len(shuffled) // 2])


def rank_metrics(ranks: list[int | None]) -> dict:
    """hit@k and MRR@10 over questions (None = no relevant chunk in the top 10)."""
    n = len(ranks)
    out = {f"hit@{k}": round(sum(1 for r in ranks if r and r <= k) / n, 4) if n else None for k in K_VALUES}
    out[f"mrr@{TOP_K}"] = round(sum(1 / r for r in ranks if r and r <= TOP_K) / n, 4) if n else None
    out["n"] = n
    return out


def node_latency(runs: list[dict[str, float]]) -> dict[str, dict]:
    """{node: p50/p95} over the runs in which the node ran, in graph order of first appearance."""
    nodes = list(dict.fromkeys(n for run in runs for n in run))
    return {n: percentiles([run[n] for run in runs if n in run]) for n in nodes}


# -- extra collections for baselines and synthetic data -------------------------------------

def create_chunk_collection(store: VectorStore, name: str) -> None:
    """A fresh collection searchable by `store.dense_search` / `sparse_search` / `hybrid_search`
    (dense + sparse named as in kb_chunks; BM25 computed by Milvus when the embedder has no sparse)."""
    from pymilvus import DataType, Function, FunctionType

    client, embedder = store.client, store.embedder
    bm25 = embedder.sparse_mode == "bm25"
    if client.has_collection(name):
        client.drop_collection(name)
    schema = client.create_schema(auto_id=True)
    schema.add_field("chunk_id", DataType.INT64, is_primary=True)
    schema.add_field("content", DataType.VARCHAR, max_length=65535, enable_analyzer=bm25,
                     analyzer_params=ANALYZER if bm25 else None)
    schema.add_field("title", DataType.VARCHAR, max_length=2048)
    schema.add_field("file_title", DataType.VARCHAR, max_length=1024)
    schema.add_field(stored(["product"])[0], DataType.VARCHAR, max_length=1024)
    schema.add_field("dense", DataType.FLOAT_VECTOR, dim=embedder.dim)
    schema.add_field("sparse", DataType.SPARSE_FLOAT_VECTOR)
    if bm25:
        schema.add_function(Function(name=f"{name}_bm25", function_type=FunctionType.BM25,
                                     input_field_names=["content"], output_field_names=["sparse"]))
    index = client.prepare_index_params()
    index.add_index("dense", index_type="AUTOINDEX", metric_type="COSINE")
    index.add_index("sparse", index_type="SPARSE_INVERTED_INDEX", metric_type="BM25" if bm25 else "IP")
    client.create_collection(name, schema=schema, index_params=index)
    client.load_collection(name)


def fill_chunk_collection(store: VectorStore, name: str, rows: list[dict], embed_texts: list[str]) -> None:
    """Embed `embed_texts` (one per row) with the configured embedder and insert the rows."""
    batch = max(1, get_settings().embed_batch_size)
    vectors = []
    for i in range(0, len(embed_texts), batch):
        vectors.extend(store.embedder.embed(embed_texts[i:i + batch]))
    data = []
    for row, vec in zip(rows, vectors):
        item = {k: row[k] for k in ("content", "title", "file_title", "product")}
        item["dense"] = vec["dense"]
        if store.embedder.sparse_mode == "model":
            item["sparse"] = vec["sparse"]
        data.append(as_stored(item))
    for i in range(0, len(data), INSERT_BATCH):
        store.client.insert(name, data[i:i + INSERT_BATCH])
    store.client.flush(name)  # as every import does: searches see sealed segments


# -- profiling --------------------------------------------------------------------------------

class StackSampler:
    """A sampling profiler over every thread: unlike cProfile it also sees LangGraph's worker threads.
    Use as a context manager around the work, then `top()`.
    """

    # Leaf frames of a thread that waits (thread pools, the gRPC server's poll loop, sleeps).
    IDLE = {"wait", "select", "poll", "_wait_for_tstate_lock", "acquire", "sleep", "_serve", "_worker"}
    PLUMBING = ("threading.py", "concurrent/futures", "bench/", "runpy.py", "<frozen runpy>", "langgraph/",
                "graphs/base.py")

    def __init__(self, interval: float = 0.002):
        self.interval = interval
        self.sweeps = 0
        self.inclusive: collections.Counter = collections.Counter()
        self.own: collections.Counter = collections.Counter()
        self.seconds = 0.0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def __enter__(self):
        self._started = time.perf_counter()
        self._thread.start()
        return self

    def __exit__(self, *exc):
        self._stop.set()
        self._thread.join()
        self.seconds = time.perf_counter() - self._started

    @staticmethod
    def _key(frame) -> str:
        path = frame.f_code.co_filename
        path = path.split("site-packages/")[-1].replace(str(ROOT) + "/", "")
        return f"{path}:{frame.f_code.co_name}"

    def _run(self) -> None:
        me = threading.get_ident()
        while not self._stop.is_set():
            self.sweeps += 1
            for tid, frame in sys._current_frames().items():
                if tid == me or frame.f_code.co_name in self.IDLE:
                    continue
                self.own[self._key(frame)] += 1
                seen = set()
                while frame is not None:
                    key = self._key(frame)
                    if key not in seen:
                        seen.add(key)
                        self.inclusive[key] += 1
                    frame = frame.f_back
            time.sleep(self.interval)

    def top(self, per: int = 1, n: int = 12, leaves: int = 5) -> list[dict]:
        """The `n` functions with the largest share of wall time in which some thread ran them
        (inclusive), then the `leaves` largest by own time, with the estimated milliseconds per unit
        of work (`per` = how many queries/imports were sampled)."""
        sweeps = max(1, self.sweeps)
        keys = [k for k, _ in self.inclusive.most_common() if not any(p in k for p in self.PLUMBING)][:n]
        keys += [k for k, _ in self.own.most_common() if k not in keys][:leaves]
        return [{"function": k, "wall_share": round(self.inclusive[k] / sweeps, 3),
                 "self_share": round(self.own.get(k, 0) / sweeps, 3),
                 "ms_per_unit": round(self.inclusive[k] / sweeps * self.seconds * 1000 / max(1, per), 1)}
                for k in keys]


# -- reporting --------------------------------------------------------------------------------

def machine_info() -> dict:
    settings = get_settings()
    return {
        "cores": os.cpu_count(), "load_avg_1_5_15": [round(x, 2) for x in os.getloadavg()],
        "python": platform.python_version(), "platform": platform.platform(),
        "embedder": f"{get_embedder(settings).name}（{get_embedder(settings).dim} 维）",
        "reranker": get_reranker(settings).name,
        "llm": "已配置" if settings.llm_enabled else "未配置（离线）",
    }


def peak_rss_mb() -> float:
    """Peak resident set size of this process so far (ru_maxrss is in KiB on Linux)."""
    return round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1)


def machine_line(machine: dict, load_end: list[float]) -> str:
    return (f"{machine['cores']} 核，开始时负载 {machine['load_avg_1_5_15']}，结束时负载 {load_end}；"
            f"向量模型 {machine['embedder']}，精排 {machine['reranker']}，大模型 {machine['llm']}")


def targets_table(targets: list[dict]) -> str:
    return md_table(["指标", "目标", "实测", "达成"],
                    [[t["name"], t["target"], t["value"], "是" if t["met"] else "否"] for t in targets])


def pyplot():
    """matplotlib without a display, with a font that can draw Chinese labels where installed."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    plt.rcParams["font.sans-serif"] = CJK_FONTS
    plt.rcParams["axes.unicode_minus"] = False
    return plt

