"""Import throughput with 1 and 2 queue workers, and question latency while they are busy.

Each run is a fresh bench.cluster (Redis, a Milvus Lite server, one DATA_DIR, one API process, N
worker processes of one import each). The set is the sample PDFs repeated under new names until it
holds at least --pages pages (every copy is its own document). Throughput counts from the first
upload to the last import done, after one warm-up import per worker (the model loads once). Then,
on the 2-worker cluster, questions from the QA set about those manuals are asked one at a time,
first idle, then while the whole set is imported again at full worker capacity.

    python -m bench.workers [--pages 300] [--questions 20] [--out DIR]
"""
from __future__ import annotations

import argparse
import json
import os
import secrets
import shutil
import tempfile
import threading
import time
from pathlib import Path

import httpx

from bench.cluster import LocalCluster
from bench.common import BenchError, corpus_docs, percentiles, write_json
from bench.load import load_questions, upload, wait_tasks

BATCH = 10  # files per upload request (the API's limit)


def build_set(folder: Path, min_pages: int) -> tuple[list[Path], int]:
    import pymupdf

    pdfs = [p for p in corpus_docs() if p.suffix.lower() == ".pdf"]
    if not pdfs:
        raise BenchError("样例语料里没有 PDF")
    pages_of = {p: pymupdf.open(p).page_count for p in pdfs}
    folder.mkdir(parents=True, exist_ok=True)
    files, pages, copy = [], 0, 0
    while pages < min_pages:
        copy += 1
        for pdf in pdfs:
            target = folder / f"{pdf.stem}-副本{copy:02d}.pdf"
            shutil.copyfile(pdf, target)
            files.append(target)
            pages += pages_of[pdf]
    return files, pages


def import_all(client: httpx.Client, files: list[Path], timeout: float) -> tuple[float, list[dict]]:
    started = time.perf_counter()
    ids = [t for i in range(0, len(files), BATCH) for t in upload(client, files[i:i + BATCH])]
    done = wait_tasks(client, ids, time.monotonic() + timeout)
    return time.perf_counter() - started, done


def ask(client: httpx.Client, questions: list[str]) -> list[float]:
    seconds = []
    for q in questions:
        started = time.perf_counter()
        reply = client.post("/api/query", json={"query": q}, timeout=300)
        if reply.status_code != 200:
            raise BenchError(f"提问失败：HTTP {reply.status_code} {reply.text[:200]}")
        seconds.append(time.perf_counter() - started)
    return seconds


def run_cluster(workers: int, files: list[Path], pages: int, warmup: Path, root: Path, timeout: float,
                questions: list[str]) -> dict:
    """`warmup` is only read; every copy this makes lies under `root` or beside `files` (a temporary folder)."""
    root.mkdir(parents=True, exist_ok=True)
    key = secrets.token_hex(16)
    with LocalCluster(root, lease_s=30, extra_env={"API_KEYS": f"bench:{key}:editor"}) as cluster:
        for _ in range(workers):
            cluster.start_worker()
        base_url = cluster.start_app()
        with httpx.Client(base_url=base_url, timeout=120, headers={"Authorization": f"Bearer {key}"}) as client:
            warm = wait_tasks(client, upload(client, [warmup]), time.monotonic() + 300)
            for i in range(1, workers):  # one warm-up import per worker, one after the other
                copy = root / f"warm{i}{warmup.suffix}"
                shutil.copyfile(warmup, copy)
                warm += wait_tasks(client, upload(client, [copy]), time.monotonic() + 300)
            seconds, done = import_all(client, files, timeout)
            failed = [d for d in done + warm if d["status"] != "completed"]
            if failed:
                raise BenchError(f"{len(failed)} 个导入没有完成：{failed[:2]}")
            result = {"workers": workers, "files": len(files), "pages": pages, "seconds": round(seconds, 1),
                      "pages_per_s": round(pages / seconds, 2)}
            if questions:
                ask(client, questions[:1])  # the app loads its models on the first question
                result["idle"] = percentiles(ask(client, questions))
                busy: dict = {}
                again = [f.with_name(f"再次-{f.name}") for f in files]
                for src, dst in zip(files, again):
                    shutil.copyfile(src, dst)
                imports = threading.Thread(target=lambda: busy.update(done=import_all(client, again, timeout)[1]))
                imports.start()
                time.sleep(2.0)  # the workers have taken their first tasks
                result["busy"] = percentiles(ask(client, questions))
                result["busy"]["imports_ran_throughout"] = imports.is_alive()
                imports.join()
                if any(d["status"] != "completed" for d in busy.get("done", [])):
                    raise BenchError("满负荷期间的导入没有全部完成")
    return result


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--pages", type=int, default=300)
    parser.add_argument("--questions", type=int, default=20)
    parser.add_argument("--timeout", type=float, default=1800)
    parser.add_argument("--out", type=Path)
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="zgzk-workers-") as tmp:
        files, pages = build_set(Path(tmp) / "set", args.pages)
        stems = {p.stem for p in corpus_docs() if p.suffix.lower() == ".pdf"}
        questions = load_questions(stems)[:args.questions]
        warmup = next(p for p in corpus_docs() if p.suffix.lower() == ".md")
        one = run_cluster(1, files, pages, warmup, Path(tmp) / "one", args.timeout, [])
        print(json.dumps(one, ensure_ascii=False), flush=True)
        two = run_cluster(2, files, pages, warmup, Path(tmp) / "two", args.timeout, questions)
        print(json.dumps(two, ensure_ascii=False), flush=True)
    report = {"cores": os.cpu_count(), "one": one, "two": two,
              "ratio": round(two["pages_per_s"] / one["pages_per_s"], 2)}
    print(f"\n{os.cpu_count()} 核；{pages} 页（{len(files)} 个 PDF）")
    print(f"1 个 worker：{one['pages_per_s']} 页/秒（{one['seconds']} 秒）")
    print(f"2 个 worker：{two['pages_per_s']} 页/秒（{two['seconds']} 秒），比值 {report['ratio']}")
    for key, label in (("idle", "空闲时"), ("busy", "2 个 worker 满负荷导入时")):
        p = two[key]
        print(f"提问（{label}，{p['n']} 个）：p50 {p['p50_ms']} ms，p95 {p['p95_ms']} ms")
    if args.out:
        args.out.mkdir(parents=True, exist_ok=True)
        write_json(args.out / "workers.json", report)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
