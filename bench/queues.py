"""Task queue candidates for the imports, measured the same way on this machine: how long an enqueue
takes, how long a message waits before an idle worker (another process) starts it, and what a worker
killed -9 in the middle of a task leaves behind (is the task delivered again, and when).

    python -m bench.queues [--candidates huey-sqlite,huey-redis,celery-redis,celery-sqlite] [--n 100]

Huey is a dependency of the project; Celery is not: to measure it, install it beside the project
(`pip install --target DIR celery==5.7.0 sqlalchemy==2.1.9`) and run with PYTHONPATH=DIR. Redis is
started on a free loopback port (bench.cluster).
"""
from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from bench.cluster import ROOT, LocalCluster
from bench.common import percentiles

CANDIDATES = ("huey-sqlite", "huey-redis", "celery-redis", "celery-sqlite")
LONG_TASK_S = 30.0
VISIBILITY_S = 5  # Celery's redelivery timeout for unacknowledged messages (Redis transport)


def make_queue(candidate: str, url: str, folder: Path):
    """(send(kind, arg), consume()) for one candidate; tasks write their start to folder/runs.log."""
    log = folder / "runs.log"

    def record(kind: str, arg: float) -> None:
        with log.open("a") as out:
            out.write(json.dumps({"kind": kind, "arg": arg, "at": time.time(), "pid": os.getpid()}) + "\n")
        if kind == "long":
            time.sleep(LONG_TASK_S)

    if candidate.startswith("huey"):
        from huey import RedisHuey, SqliteHuey

        huey = (RedisHuey("bench", url=url, results=False) if candidate == "huey-redis"
                else SqliteHuey("bench", filename=str(folder / "huey.db"), results=False))
        task = huey.task(name="record")(record)

        def consume() -> None:
            huey.create_consumer(workers=1, worker_type="thread", initial_delay=0.05, max_delay=0.5).run()

        return lambda kind, arg: task(kind, arg), consume

    from celery import Celery

    broker = url if candidate == "celery-redis" else f"sqla+sqlite:///{folder / 'celery.db'}"
    app = Celery("bench", broker=broker)
    app.conf.update(task_acks_late=True, task_reject_on_worker_lost=True, worker_prefetch_multiplier=1,
                    broker_connection_retry_on_startup=True)
    if candidate == "celery-redis":  # the SQLAlchemy transport hands its options to create_engine
        app.conf.broker_transport_options = {"visibility_timeout": VISIBILITY_S, "polling_interval": 0.1}
    task = app.task(name="record")(record)

    def consume() -> None:
        app.worker_main(["worker", "--pool", "solo", "--concurrency", "1", "--loglevel", "WARNING",
                         "--without-gossip", "--without-mingle", "--without-heartbeat"])

    return lambda kind, arg: task.delay(kind, arg), consume


def runs(folder: Path) -> list[dict]:
    log = folder / "runs.log"
    return [json.loads(line) for line in log.read_text().splitlines()] if log.exists() else []


def wait_for(predicate, timeout: float) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(0.05)
    return False


def consumer_process(candidate: str, url: str, folder: Path) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-m", "bench.queues", "--consume", candidate, "--url", url,
                             "--folder", str(folder)], cwd=ROOT, stdout=subprocess.DEVNULL,
                            stderr=open(folder / "consumer.log", "ab"), start_new_session=True)


def measure(candidate: str, url: str, folder: Path, n: int) -> dict:
    folder.mkdir(parents=True, exist_ok=True)
    send, _ = make_queue(candidate, url, folder)
    consumer = consumer_process(candidate, url, folder)
    try:
        send("ping", time.time())
        if not wait_for(lambda: runs(folder), 60):
            raise RuntimeError(f"{candidate}: the consumer never started a task")
        enqueue_s = []
        for _ in range(n):  # one at a time, against an idle worker
            started = time.perf_counter()
            send("ping", time.time())
            enqueue_s.append(time.perf_counter() - started)
            time.sleep(0.03)
        wait_for(lambda: len(runs(folder)) >= n + 1, 60)
        waits = [r["at"] - r["arg"] for r in runs(folder)[1:]]

        send("long", time.time())
        wait_for(lambda: any(r["kind"] == "long" for r in runs(folder)), 30)
        os.killpg(consumer.pid, signal.SIGKILL)
        consumer.wait(10)
        killed_at = time.time()
        consumer = consumer_process(candidate, url, folder)
        again = wait_for(lambda: sum(r["kind"] == "long" for r in runs(folder)) >= 2, VISIBILITY_S * 4 + 20)
        redelivered = [r for r in runs(folder) if r["kind"] == "long"][1:2]
        return {"candidate": candidate, "enqueue": percentiles(enqueue_s), "wait": percentiles(waits),
                "delivered": len(waits),
                "after_kill_9": (f"delivered again after {redelivered[0]['at'] - killed_at:.1f} s" if again
                                 else "lost (never delivered again)")}
    finally:
        os.killpg(consumer.pid, signal.SIGKILL)
        consumer.wait(10)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--candidates", default=",".join(CANDIDATES))
    parser.add_argument("--n", type=int, default=100)
    parser.add_argument("--consume", help=argparse.SUPPRESS)
    parser.add_argument("--url", help=argparse.SUPPRESS)
    parser.add_argument("--folder", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.consume:  # the child: one worker until killed
        make_queue(args.consume, args.url, Path(args.folder))[1]()
        return 0
    results = []
    with tempfile.TemporaryDirectory(prefix="zgzk-queues-") as tmp, LocalCluster(Path(tmp) / "cluster", milvus=False) as cluster:
        for i, candidate in enumerate(args.candidates.split(",")):
            url = cluster.env["REDIS_URL"].rsplit("/", 1)[0] + f"/{i + 1}"
            try:
                results.append(measure(candidate, url, Path(tmp) / candidate, args.n))
            except ImportError as exc:
                results.append({"candidate": candidate, "skipped": f"not installed: {exc.name}"})
            print(json.dumps(results[-1], ensure_ascii=False), flush=True)
    print(f"\ncores: {os.cpu_count()}")
    for r in results:
        if "skipped" in r:
            print(f"{r['candidate']:14s} skipped ({r['skipped']})")
            continue
        enqueue, wait = r["enqueue"], r["wait"]
        print(f"{r['candidate']:14s} enqueue p50 {enqueue['p50_ms']} ms p95 {enqueue['p95_ms']} ms | "
              f"wait p50 {wait['p50_ms']} ms p95 {wait['p95_ms']} ms | kill -9: {r['after_kill_9']}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
