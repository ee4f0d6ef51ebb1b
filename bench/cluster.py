"""Several processes on one machine sharing their stores, as replicas and workers would: a Redis
(the queue), a Milvus Lite server (the vectors), one DATA_DIR (history, tasks, registry, files), queue
workers (`scripts/worker.sh`) and API replicas (`uvicorn api:create_app`). Used by bench.workers
and by the tests; Redis is Debian's `redis-server` (scripts/install_system_deps.sh), without
persistence.
"""
from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
REDIS_HINT = "apt-get install redis-server（或 bash scripts/install_system_deps.sh）"


class ClusterError(RuntimeError):
    pass


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _wait_listening(port: int, proc: subprocess.Popen, what: str, timeout: float = 90) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise ClusterError(f"{what} 启动失败（退出码 {proc.returncode}）")
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=0.5):
                return
        except OSError:
            time.sleep(0.1)
    raise ClusterError(f"{what} {timeout:g} 秒内没有就绪")


class LocalCluster:
    """start() brings up Redis and the Milvus Lite server; add workers and apps as needed; close()
    stops everything it started. `env` is what every process of the cluster is given on top of this
    process's environment (API users included: API_KEYS)."""

    def __init__(self, root: Path, *, lease_s: float = 3.0, import_workers: int = 1, extra_env: dict | None = None,
                 milvus: bool = True):
        self.root, self.milvus = root, milvus
        self.data_dir = root / "data"
        self.redis_port, self.milvus_port = free_port(), free_port()
        self.env = {
            "DATA_DIR": str(self.data_dir), "REDIS_URL": f"redis://127.0.0.1:{self.redis_port}/0",
            "MILVUS_URL": f"http://127.0.0.1:{self.milvus_port}", "MONGO_URL": "", "MINIO_ENDPOINT": "",
            "MINERU_API_TOKEN": "", "OPENAI_API_KEY": "", "MCP_DASHSCOPE_BASE_URL": "",
            "TASK_LEASE_S": str(lease_s), "IMPORT_WORKERS": str(import_workers), "IMPORT_IN_APP": "false",
            "IMPORT_RETRY_DELAY_S": "0.5", **(extra_env or {})}
        self.workers: list[subprocess.Popen] = []
        self.apps: list[tuple[subprocess.Popen, str]] = []
        self._stores: list[subprocess.Popen] = []

    def _spawn(self, args: list[str], log_name: str) -> subprocess.Popen:
        self.root.mkdir(parents=True, exist_ok=True)
        log = open(self.root / f"{log_name}.log", "ab")
        env = {**os.environ, **self.env}
        env.pop("CI", None)
        return subprocess.Popen(args, cwd=ROOT, env=env, stdout=log, stderr=subprocess.STDOUT,
                                start_new_session=True)

    def start(self) -> "LocalCluster":
        if shutil.which("redis-server") is None:
            raise ClusterError(f"没有安装 redis-server：{REDIS_HINT}")
        redis = self._spawn(["redis-server", "--port", str(self.redis_port), "--bind", "127.0.0.1", "--save", "",
                             "--appendonly", "no", "--dir", str(self.root)], "redis")
        self._stores.append(redis)
        _wait_listening(self.redis_port, redis, "Redis")
        if not self.milvus:
            return self
        milvus = self._spawn([sys.executable, "-m", "services.milvus_server", "--data-dir", str(self.root / "milvus"),
                              "--host", "127.0.0.1", "--port", str(self.milvus_port)], "milvus")
        self._stores.append(milvus)
        _wait_listening(self.milvus_port, milvus, "Milvus Lite 服务")
        return self

    def start_worker(self) -> subprocess.Popen:
        worker = self._spawn(["bash", "scripts/worker.sh"], f"worker{len(self.workers)}")
        self.workers.append(worker)
        return worker

    def start_app(self) -> str:
        port = free_port()
        app = self._spawn([sys.executable, "-m", "uvicorn", "api:create_app", "--factory", "--host", "127.0.0.1",
                           "--port", str(port), "--log-level", "warning"], f"app{len(self.apps)}")
        _wait_listening(port, app, "API 服务")
        base_url = f"http://127.0.0.1:{port}"
        self.apps.append((app, base_url))
        return base_url

    def worker_pid(self, worker: str) -> int:
        """The pid in a task's lease holder ("host:pid:thread")."""
        return int(worker.split(":")[1])

    def kill(self, proc: subprocess.Popen) -> None:
        """As a crash would: SIGKILL, no clean-up."""
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait(30)

    def close(self) -> None:
        for proc in [*self.workers, *(a for a, _ in self.apps), *reversed(self._stores)]:
            if proc.poll() is None:
                proc.terminate()
        for proc in [*self.workers, *(a for a, _ in self.apps), *self._stores]:
            try:
                proc.wait(20)
            except subprocess.TimeoutExpired:
                proc.kill()

    def __enter__(self) -> "LocalCluster":
        try:
            return self.start()
        except BaseException:
            self.close()
            raise

    def __exit__(self, *exc: object) -> None:
        self.close()

