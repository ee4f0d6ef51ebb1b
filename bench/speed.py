"""Speed and scale: import throughput, and retrieval latency as the collection grows.

    python -m bench.speed --out DIR

1. The sample corpus is imported into a fresh data dir (model load included), then a >=100-page text
   PDF built by concatenating the corpus PDFs into another fresh data dir.
2. The real query graph's retrieval path (up to the answer node) is timed per node on the corpus,
   then on kb_chunks grown with synthetic chunks to 1k / 10k / 100k rows (see `synthetic_pool`).
"""
from __future__ import annotations

import argparse
import os
import sys
import time
from importlib import metadata
from pathlib import Path

import numpy as np
import psutil

from bench.common import (
    QA_FILE, BenchError, StackSampler, add_data_dir_options, corpus_docs, expand_docs, import_docs,
    isolated_data_dir, machine_info, machine_line, md_table, node_latency, node_seconds, peak_rss_mb, percentiles,
    pyplot, retrieval_path, run_cli, targets_table, write_json,
)
from bench.retrieval import load_qa
from graphs.importing import run_import
from services.embeddings import get_embedder
from services.reranker import get_reranker
from services.settings import get_settings
from services.vector_store import as_stored, get_vector_store

DEFAULT_SIZES = (1000, 10000, 100000)
PAGES_TARGET = 3.0
CORPUS_SECONDS_TARGET = 60.0
# retrieval path (p50, p95) in ms per level; None: no bound
PATH_TARGETS = {"corpus": (150.0, None), 100000: (60.0, 150.0)}
# Synthetic chunks: windows of the real chunk texts, embedded once as a pool; every row reuses a
# pool vector plus Gaussian noise of this norm (cosine to the original ~0.96) under its own product.
NOISE_NORM = 0.3
WINDOW_CHARS = (300, 1500)
BRANDS = ["星河", "北辰", "Acme", "Nova", "千帆", "Zeta", "天工", "Orion"]
SERIES = ["QX", "RT", "KZ", "HL", "PW", "GN"]
KINDS = ["开发板", "主板", "模块", "控制器", "传感器"]
PROFILE_QUERIES = 20
CONFIRM_NODE = "node_product_confirm"


def synthetic_name(p: int) -> str:
    """Distinct, realistic product names that share no model code with the sample products."""
    return f"{BRANDS[p % len(BRANDS)]} {SERIES[(p // len(BRANDS)) % len(SERIES)]}{p + 10} {KINDS[p % len(KINDS)]}"


def build_long_pdf(sources: list[Path], min_pages: int, dest: Path) -> int:
    """Concatenate the source PDFs (round robin) until the result has at least `min_pages` pages."""
    import pymupdf

    if not sources:
        raise BenchError("文档里没有 PDF，无法拼接长 PDF。")
    out = pymupdf.open()
    try:
        while out.page_count < min_pages:
            for src in sources:
                with pymupdf.open(src) as doc:
                    out.insert_pdf(doc)
                if out.page_count >= min_pages:
                    break
        out.save(dest)
        return out.page_count
    finally:
        out.close()


def import_stats(results, seconds: float) -> dict:
    pages, chunks = sum(r.pages for r in results), sum(r.chunks for r in results)
    nodes: dict[str, float] = {}
    for r in results:
        for node, s in r.node_seconds.items():
            nodes[node] = round(nodes.get(node, 0.0) + s, 3)
    return {"files": len(results), "seconds": round(seconds, 2), "pages": pages, "chunks": chunks,
            "pages_per_s": round(pages / seconds, 2) if seconds else None,
            "chunks_per_s": round(chunks / seconds, 2) if seconds else None,
            "node_seconds": nodes, "peak_rss_mb": peak_rss_mb(),
            "docs": [{"file": Path(r.file).name, "product": r.product, "pages": r.pages, "chunks": r.chunks,
                      "seconds": r.seconds} for r in results]}


def corpus_phase(files: list[Path], log) -> dict:
    started = time.perf_counter()
    t = time.perf_counter()
    get_embedder().embed_query("模型预热")  # the offline model loads its weights on first use
    model_s = time.perf_counter() - t
    t = time.perf_counter()
    get_reranker()
    reranker_s = time.perf_counter() - t
    t = time.perf_counter()
    get_vector_store().client  # Milvus Lite start and collection creation
    store_s = time.perf_counter() - t
    results = import_docs(files, log)
    stats = import_stats(results, time.perf_counter() - started)
    stats.update(model_load_s=round(model_s, 2), reranker_load_s=round(reranker_s, 2),
                 store_open_s=round(store_s, 2))
    return stats


def long_pdf_phase(pdfs: list[Path], min_pages: int, folder: Path, profile: bool, log) -> dict:
    path = folder / f"合订本-{min_pages}页.pdf"
    pages = build_long_pdf(pdfs, min_pages, path)
    log(f"  已拼接 {pages} 页的 PDF：{path.name}")
    get_vector_store().client  # a fresh Milvus file opens outside the timing, as in a running app
    started = time.perf_counter()
    results = import_docs([path], log)
    stats = import_stats(results, time.perf_counter() - started)
    stats["built_pages"] = pages
    if profile and (stats["pages_per_s"] or 0) < PAGES_TARGET:
        with StackSampler() as sampler:
            run_import(path)  # same file: replaces its own chunks
        stats["profile"] = {"seconds": round(sampler.seconds, 2), "top": sampler.top()}
    return stats


# -- synthetic growth --------------------------------------------------------------------------

def synthetic_pool(real: list[dict], size: int, rng: np.random.Generator, log) -> dict:
    """`size` distinct texts (random windows of the real chunks, with their title) embedded once."""
    texts = []
    for j in range(size):
        src = real[j % len(real)]["content"]
        length = int(rng.integers(*WINDOW_CHARS))
        start = int(rng.integers(0, max(1, len(src) - length)))
        texts.append(src[start:start + length])
    embedder = get_embedder()
    batch = max(1, get_settings().embed_batch_size)
    started = time.perf_counter()
    vectors = []
    for i in range(0, size, batch):
        vectors.extend(embedder.embed([f"{synthetic_name(k)}\n{t}" for k, t in
                                       enumerate(texts[i:i + batch], i)]))
    seconds = time.perf_counter() - started
    log(f"  合成素材：{size} 段文本向量化用时 {seconds:.1f} 秒（{size / seconds:.1f} 段/秒）")
    return {"texts": texts, "dense": np.asarray([v["dense"] for v in vectors], dtype=np.float32),
            "sparse": [v["sparse"] for v in vectors], "embed_s": round(seconds, 2),
            "passages_per_s": round(size / seconds, 2)}


def grow(pool: dict, first: int, count: int, per_product: int, rng: np.random.Generator) -> dict:
    """Insert synthetic rows first..first+count-1 into kb_chunks (row i belongs to product
    i // per_product) and every new product into kb_item_names; flush once at the end."""
    store = get_vector_store()
    embedder = store.embedder
    model_sparse = embedder.sparse_mode == "model"
    n_pool, dim = pool["dense"].shape
    started = time.perf_counter()
    # A product is new when its first row is in this batch (a product may span two growth steps).
    new_products = list(range(-(-first // per_product), (first + count - 1) // per_product + 1))
    for i in range(first, first + count, 2000):
        idx = np.arange(i, min(i + 2000, first + count))
        noise = rng.normal(0.0, NOISE_NORM / np.sqrt(dim), size=(len(idx), dim)).astype(np.float32)
        vecs = pool["dense"][idx % n_pool] + noise
        vecs /= np.linalg.norm(vecs, axis=1, keepdims=True)
        rows = []
        for k, vec in zip(idx, vecs):
            p = int(k) // per_product
            name = synthetic_name(p)
            row = {"content": f"{name}\n{pool['texts'][k % n_pool]}", "title": f"{name} 第 {k % per_product + 1} 节",
                   "parent_title": name, "file_title": f"合成手册-{p:05d}", "doc_id": f"synthetic-{p:05d}",
                   "product": name, "part": 1, "page_start": 0, "page_end": 0, "dense": vec.tolist()}
            if model_sparse:
                row["sparse"] = pool["sparse"][k % n_pool]
            rows.append(row)
        store.client.insert(store.chunks, [as_stored(r) for r in rows])
    names = [synthetic_name(p) for p in new_products]
    items = []
    for p, name, vec in zip(new_products, names, embedder.embed(names) if names else []):
        item = {"file_title": f"合成手册-{p:05d}", "doc_id": f"synthetic-{p:05d}", "product": name,
                "dense": vec["dense"]}
        if model_sparse:
            item["sparse"] = vec["sparse"]
        items.append(item)
    if items:
        store.client.insert(store.items, [as_stored(i) for i in items])
    insert_s = time.perf_counter() - started
    t = time.perf_counter()
    store.client.flush(store.chunks)  # as every import does: timed searches see sealed segments
    store.client.flush(store.items)
    return {"rows": count, "products": len(items), "insert_s": round(insert_s, 2),
            "flush_s": round(time.perf_counter() - t, 2)}


def measure(questions: list[str], label, rows: int, profile_target: tuple[float, float | None] | None,
            log) -> dict:
    """Retrieval-path latency per node over the questions, after one untimed first query."""
    _, first = retrieval_path(questions[0])
    runs, totals, by_method = [], [], {}
    for q in questions:
        state, seconds = retrieval_path(q)
        totals.append(seconds)
        runs.append(node_seconds(state))
        # lexical decisions cost the name matching only; "evidence" ones also search every product's chunks
        method = (state.get("decision") or {}).get("method", "—")
        by_method.setdefault(method, []).append(runs[-1].get(CONFIRM_NODE, 0.0))
    embedder = get_embedder()
    embeds = []
    for q in questions:
        t = time.perf_counter()
        embedder.embed_query(q)
        embeds.append(time.perf_counter() - t)
    out = {"label": label, "rows": rows, "first_query_s": round(first, 3), "retrieval_path": percentiles(totals),
           "nodes": node_latency(runs), "query_embedding": percentiles(embeds), "peak_rss_mb": peak_rss_mb(),
           "confirm_by_method": {m: percentiles(v) for m, v in sorted(by_method.items())}}
    p50 = out["retrieval_path"]["p50_ms"]
    log(f"  {rows} 个切片：检索路径 p50 {p50} 毫秒，p95 {out['retrieval_path']['p95_ms']} 毫秒，"
        f"首次查询 {first:.2f} 秒")
    if profile_target is not None:
        out["target_p50_ms"], out["target_p95_ms"] = profile_target
        out["met"] = p50 <= profile_target[0] and (
            profile_target[1] is None or out["retrieval_path"]["p95_ms"] <= profile_target[1])
        if not out["met"]:
            sample = questions[:PROFILE_QUERIES]
            with StackSampler() as sampler:
                for q in sample:
                    retrieval_path(q)
            out["profile"] = {"queries": len(sample), "seconds": round(sampler.seconds, 2),
                              "top": sampler.top(per=len(sample))}
    return out


def scale_phase(questions: list[str], sizes: list[int], pool_size: int, per_product: int, profile: bool,
                log) -> dict:
    store = get_vector_store()
    fields = ["content"] + (["sparse"] if store.embedder.sparse_mode == "model" else [])
    real = store.query(store.chunks, "chunk_id >= 0", fields)
    n_real = len(real)
    levels = [measure(questions, "corpus", n_real, PATH_TARGETS["corpus"] if profile else None, log)]
    targets = sorted(s for s in sizes if s > n_real)
    if not targets:
        return {"levels": levels, "real_chunks": n_real}
    rng = np.random.default_rng(20240611)
    pool = synthetic_pool(real, min(pool_size, max(targets)), rng, log)
    grown, current = [], n_real
    for size in targets:
        step = grow(pool, current - n_real, size - current, per_product, rng)
        step["size"] = size
        grown.append(step)
        log(f"  扩充到 {size} 个切片：写入 {step['insert_s']} 秒，flush {step['flush_s']} 秒")
        current = size
        levels.append(measure(questions, size, store.count(), PATH_TARGETS.get(size) if profile else None, log))
    return {"levels": levels, "real_chunks": n_real, "growth": grown,
            "pool": {k: v for k, v in pool.items() if k not in ("texts", "dense", "sparse")},
            "synthetic": {"pool_size": len(pool["texts"]), "per_product": per_product, "noise_norm": NOISE_NORM,
                          "window_chars": list(WINDOW_CHARS)}}


# -- report -----------------------------------------------------------------------------------

def targets(report: dict) -> list[dict]:
    corpus, pdf, levels = report["corpus_import"], report["long_pdf_import"], report["scale"]["levels"]
    rows = [("样例语料导入（含模型加载，秒）", "< 60", corpus["seconds"], corpus["seconds"] < CORPUS_SECONDS_TARGET),
            (f"{pdf['built_pages']} 页 PDF 导入（页/秒）", "≥ 3", pdf["pages_per_s"],
             (pdf["pages_per_s"] or 0) >= PAGES_TARGET)]
    for lv in levels:
        for q in ("p50", "p95"):
            bound = lv.get(f"target_{q}_ms")
            if bound is not None:
                value = lv["retrieval_path"][f"{q}_ms"]
                rows.append((f"检索路径 {q}（{lv['rows']} 个切片，毫秒）", f"≤ {bound:.0f}", value, value <= bound))
    return [{"name": n, "target": t, "value": v, "met": m} for n, t, v, m in rows]


def import_table(report: dict) -> str:
    rows = []
    for label, s in (("样例语料", report["corpus_import"]), ("长 PDF", report["long_pdf_import"])):
        rows.append([label, s["files"], s["pages"], s["chunks"], s["seconds"], s["pages_per_s"], s["chunks_per_s"],
                     s["peak_rss_mb"]])
    return md_table(["导入", "文件", "PDF 页", "切片", "秒", "页/秒", "切片/秒", "峰值 RSS（MB）"], rows)


def node_table(report: dict) -> str:
    a, b = report["corpus_import"]["node_seconds"], report["long_pdf_import"]["node_seconds"]
    nodes = list(dict.fromkeys([*a, *b]))
    return md_table(["导入节点", "样例语料（秒）", "长 PDF（秒）"], [[n, a.get(n), b.get(n)] for n in nodes])


def latency_table(report: dict) -> str:
    levels = report["scale"]["levels"]
    nodes = list(dict.fromkeys(n for lv in levels for n in lv["nodes"]))
    headers = ["切片数", "检索路径 p50", "p95", *[f"{n} p50/p95" for n in nodes], "问题向量化 p50/p95", "首次查询（秒）"]
    rows = []
    for lv in levels:
        cells = [lv["rows"], lv["retrieval_path"]["p50_ms"], lv["retrieval_path"]["p95_ms"]]
        for n in nodes:
            v = lv["nodes"].get(n)
            cells.append(f"{v['p50_ms']:.1f} / {v['p95_ms']:.1f}" if v else "—")
        e = lv["query_embedding"]
        cells += [f"{e['p50_ms']:.1f} / {e['p95_ms']:.1f}", lv["first_query_s"]]
        rows.append(cells)
    return md_table(headers, rows)


def confirm_table(report: dict) -> str:
    levels = report["scale"]["levels"]
    methods = list(dict.fromkeys(m for lv in levels for m in lv["confirm_by_method"]))
    rows = [[lv["rows"], *[f"{v['p50_ms']:.1f} / {v['p95_ms']:.1f}（{v['n']} 题）" if (v := lv["confirm_by_method"].get(m))
                           else "—" for m in methods]] for lv in levels]
    return md_table(["切片数", *[f"{m} p50/p95" for m in methods]], rows)


def profile_sections(report: dict) -> list[str]:
    found = [(f"{report['long_pdf_import']['built_pages']} 页 PDF 导入", report["long_pdf_import"].get("profile"), "整次导入")]
    found += [(f"{lv['rows']} 个切片的检索路径", lv.get("profile"), "每个问题") for lv in report["scale"]["levels"]]
    lines = []
    for title, prof, unit in found:
        if not prof:
            continue
        lines += [f"### {title}（采样 {prof['seconds']} 秒）", "",
                  md_table(["函数", "占墙钟时间", "自身占比", f"毫秒/{unit}"],
                           [[r["function"], r["wall_share"], r["self_share"], r["ms_per_unit"]] for r in prof["top"]]),
                  ""]
    return lines


def report_markdown(report: dict) -> str:
    c = report["corpus_import"]
    s = report["scale"]
    lines = [
        "# 速度与规模基准报告", "",
        f"- 生成时间：{report['generated_at']}；机器：{machine_line(report['machine'], report['load_avg_end'])}",
        f"- 向量库：{report['vector_store']}",
        f"- 进程启动到开始计时（解释器与模块导入）：{report['startup_s']} 秒；向量模型加载 {c['model_load_s']} 秒，"
        f"精排器加载 {c['reranker_load_s']} 秒，向量库启动 {c['store_open_s']} 秒（都计入样例语料导入用时）",
        "", "## 导入", "", import_table(report), "", node_table(report), "",
        "## 检索路径耗时（毫秒）与集合大小", "",
        f"每个规模跑问答集的全部 {report['questions']} 题（关闭联网与 HyDE，到回答节点前为止），"
        "先跑一次不计时的首次查询。", "",
        latency_table(report), "",
        "产品确认节点按判定方式（lexical：问题里写了产品名，只做名称匹配；evidence：没写产品名，还要在全部产品的切片里检索证据）：", "",
        confirm_table(report), "",
    ]
    if s.get("growth"):
        syn = s["synthetic"]
        lines += [
            f"合成切片的做法：从导入的 {s['real_chunks']} 个真实切片中随机截取 {syn['window_chars'][0]}–"
            f"{syn['window_chars'][1]} 字的片段，共 {syn['pool_size']} 段，各带一个合成产品名一次性向量化"
            f"（{s['pool']['embed_s']} 秒，{s['pool']['passages_per_s']} 段/秒）；第 i 个合成切片复用第 i mod "
            f"{syn['pool_size']} 段的文本，内容前加所属产品名，向量加范数 {syn['noise_norm']} 的高斯噪声后归一化"
            f"（与原向量余弦约 0.96）；每 {syn['per_product']} 个切片属于一个合成产品（名字如“{synthetic_name(0)}”，"
            "与样例产品没有共同型号），合成产品也写入 kb_item_names。真实产品的问题仍按其产品过滤检索。", "",
            md_table(["扩充到", "新增切片", "新增产品", "写入（秒）", "flush（秒）"],
                     [[g["size"], g["rows"], g["products"], g["insert_s"], g["flush_s"]] for g in s["growth"]]), "",
        ]
    lines += ["## 目标", "", targets_table(report["targets"]), ""]
    prof = profile_sections(report)
    if prof:
        lines += ["## 未达标处的剖析（全线程采样）", "",
                  "“占墙钟时间”= 采样时刻有线程正在该函数（含其调用的函数）里的比例；多个线程同时忙时可超过 1。", "",
                  *prof]
    return "\n".join(lines) + "\n"


def chart(report: dict, path: Path) -> None:
    plt = pyplot()
    levels = report["scale"]["levels"]
    xs = [lv["rows"] for lv in levels]
    fig, ax = plt.subplots(figsize=(9, 5.5))
    ax.plot(xs, [lv["retrieval_path"]["p50_ms"] for lv in levels], "o-", linewidth=2.5, label="检索路径合计 p50")
    ax.plot(xs, [lv["retrieval_path"]["p95_ms"] for lv in levels], "o--", linewidth=2, label="检索路径合计 p95")
    nodes = list(dict.fromkeys(n for lv in levels for n in lv["nodes"]))
    for n in nodes:
        ys = [lv["nodes"].get(n, {}).get("p50_ms") for lv in levels]
        ax.plot(xs, [y if y is not None else float("nan") for y in ys], ".-", alpha=0.8, label=f"{n} p50")
    ax.plot(xs, [lv["query_embedding"]["p50_ms"] for lv in levels], "x:", label="问题向量化 p50")
    for target in {t for pair in PATH_TARGETS.values() for t in pair if t is not None}:
        ax.axhline(target, color="grey", linewidth=0.8, linestyle=":")
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("kb_chunks 中的切片数")
    ax.set_ylabel("毫秒")
    ax.set_title(f"检索耗时与集合大小（{report['machine']['cores']} 核，开始时 1 分钟负载 {report['machine']['load_avg_1_5_15'][0]}）")
    ax.grid(alpha=0.3, which="both")
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def run(out: str | Path, docs: list[str | Path] | None = None, qa: str | Path = QA_FILE,
        sizes: list[int] = DEFAULT_SIZES, pdf_pages: int = 100, pool: int = 2000, per_product: int = 100,
        profile: bool = True, data_dir: str | Path | None = None, keep_data: bool = False, milvus_url: str = "",
        log=print) -> dict:
    startup = time.time() - psutil.Process().create_time()
    files = expand_docs(docs) if docs else corpus_docs()
    questions = [q.question for q in load_qa(qa)]
    pdfs = [f for f in files if f.suffix.lower() == ".pdf"]
    if not pdfs:
        raise BenchError("文档里没有 PDF，无法拼接长 PDF。")
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    load_start = [round(x, 2) for x in os.getloadavg()]
    with isolated_data_dir(data_dir, keep=keep_data, milvus_url=milvus_url) as folder:
        log(f"数据目录：{folder}")
        log("导入样例语料……")
        corpus = corpus_phase(files, log)
        log(f"  共 {corpus['seconds']} 秒（含模型加载 {corpus['model_load_s']} 秒）")
        log("导入长 PDF……")
        with isolated_data_dir(keep=keep_data, milvus_url=milvus_url) as pdf_folder:
            long_pdf = long_pdf_phase(pdfs, pdf_pages, pdf_folder, profile, log)
        log(f"  {long_pdf['pages']} 页，{long_pdf['seconds']} 秒，{long_pdf['pages_per_s']} 页/秒")
        log("检索耗时与集合大小……")
        scale = scale_phase(questions, list(sizes), pool, per_product, profile, log)
        machine = machine_info()
    machine["load_avg_1_5_15"] = load_start
    report = {"generated_at": time.strftime("%Y-%m-%d %H:%M:%S"), "machine": machine,
              "load_avg_end": [round(x, 2) for x in os.getloadavg()], "startup_s": round(startup, 2),
              "questions": len(questions), "corpus_import": corpus, "long_pdf_import": long_pdf, "scale": scale,
              "vector_store": f"Milvus 服务器 {milvus_url}" if milvus_url else f"Milvus Lite {metadata.version('milvus-lite')}（内嵌）"}
    report["targets"] = targets(report)
    write_json(out / "speed.json", report)
    (out / "speed.md").write_text(report_markdown(report), encoding="utf-8")
    chart(report, out / "speed.png")
    log(import_table(report))
    log(latency_table(report))
    log(confirm_table(report))
    log(targets_table(report["targets"]))
    log(f"报告已写入 {out}")
    return report


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.speed", description="导入速度与检索耗时随规模变化的基准")
    parser.add_argument("--out", required=True, help="报告输出目录")
    parser.add_argument("--docs", nargs="+", help="要导入的文档或文件夹（默认 ../shared/corpus 中的 9 份样例）")
    parser.add_argument("--qa", default=str(QA_FILE), help="计时用的问题（问答集 JSONL）")
    parser.add_argument("--sizes", nargs="+", type=int, default=list(DEFAULT_SIZES), help="集合规模（切片数）")
    parser.add_argument("--pdf-pages", type=int, default=100, help="拼接 PDF 的最少页数")
    parser.add_argument("--pool", type=int, default=2000, help="合成切片素材的文本段数（各向量化一次）")
    parser.add_argument("--per-product", type=int, default=100, help="每个合成产品的切片数")
    parser.add_argument("--no-profile", action="store_true", help="未达标时不做剖析")
    parser.add_argument("--milvus-url", default="",
                        help="改测一个 Milvus 服务器（只用于基准的临时服务器；本次的集合用单独的名字，结束后删除）")
    add_data_dir_options(parser)
    args = parser.parse_args(argv)
    if args.pdf_pages < 1 or args.pool < 1 or args.per_product < 1 or any(s < 1 for s in args.sizes):
        parser.error("页数、素材段数、每产品切片数和规模都必须是正整数")
    return run_cli(lambda: run(args.out, args.docs, args.qa, args.sizes, args.pdf_pages, args.pool,
                               args.per_product, not args.no_profile, args.data_dir, args.keep_data,
                               args.milvus_url), "基准")


if __name__ == "__main__":
    sys.exit(main())
