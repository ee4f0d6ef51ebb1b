"""The real app, once per session: `chainlit run app.py` in a subprocess with a data dir of its own.

Import the fixture into a test module with `from app_fixtures import running_app  # noqa: F401`.

The app gets its own Chainlit app root too (links to `.chainlit/`, `public/` and `chainlit.md`):
Chainlit deletes `{app root}/.files` when a server stops, which would break any other Chainlit
server working in the checkout (a developer's, or another test's) if they shared one.
"""
from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Iterator

import httpx
import pytest

from conftest import CORPUS_DOCS

ROOT = Path(__file__).resolve().parent.parent
# Milk-V Duo / Duo256M / Duo S: near-twins, with their pictures; a PDF manual, for page citations
PRELOADED = [*CORPUS_DOCS[:3], CORPUS_DOCS[8]]
IMPORT_TIMEOUT_S = 300
START_TIMEOUT_S = 120
STOP_TIMEOUT_S = 15
ADMIN_PASSWORD = "browser-admin-pass-1"  # the admin's password set from the environment, as a deployment may


@dataclass
class RunningApp:
    url: str
    data_dir: Path
    log_path: Path
    products: dict[str, str]  # file stem -> product name the import recognised

    def log_tail(self, lines: int = 60) -> str:
        return "\n".join(self.log_path.read_text(encoding="utf-8", errors="replace").splitlines()[-lines:])


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def wait_until_up(url: str, proc: subprocess.Popen, log_path: Path) -> None:
    deadline = time.monotonic() + START_TIMEOUT_S
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"app exited with {proc.returncode}:\n{log_path.read_text(errors='replace')[-4000:]}")
        try:
            if httpx.get(f"{url}/health", timeout=2).status_code == 200:
                return
        except httpx.HTTPError:
            pass
        time.sleep(0.3)
    raise RuntimeError(f"app did not answer within {START_TIMEOUT_S}s:\n{log_path.read_text(errors='replace')[-4000:]}")


def stop(proc: subprocess.Popen) -> None:
    try:
        os.killpg(proc.pid, signal.SIGTERM)
        proc.wait(timeout=STOP_TIMEOUT_S)
    except ProcessLookupError:
        return
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(timeout=STOP_TIMEOUT_S)


@contextmanager
def serve_app(base: Path, preload=(), **extra_env: str) -> Iterator[RunningApp]:
    """`chainlit run app.py` on a free port with a data dir under `base`, after importing `preload`."""
    data_dir, app_root, log_path = base / "data", base / "root", base / "app.log"
    app_root.mkdir()
    for name in (".chainlit", "public", "chainlit.md"):
        (app_root / name).symlink_to(ROOT / name)
    # offline like the rest of the suite (conftest cleared the keys); the admin logs in with ADMIN_PASSWORD
    env = {**os.environ, "DATA_DIR": str(data_dir), "AUTH_USERS": "", "ADMIN_PASSWORD": ADMIN_PASSWORD,
           "CHAINLIT_AUTH_SECRET": "",
           "CHAINLIT_APP_ROOT": str(app_root), "PYTHONUNBUFFERED": "1", **extra_env}
    # `chainlit run` reads CI=true (set by CI) as its own CI mode, which plants a fake OPENAI_API_KEY.
    env.pop("CI", None)
    products: dict[str, str] = {}
    if preload:
        done = subprocess.run([sys.executable, "-m", "graphs.importing", *map(str, preload), "--json"],
                              cwd=ROOT, env=env, capture_output=True, text=True, timeout=IMPORT_TIMEOUT_S)
        assert done.returncode == 0, done.stdout + done.stderr[-4000:]
        results = [json.loads(line) for line in done.stdout.splitlines() if line.startswith("{")]
        products = {Path(r["file"]).stem: r["item_name"] for r in results}
    port = free_port()
    with open(log_path, "w", encoding="utf-8") as log:
        proc = subprocess.Popen(
            [str(Path(sys.executable).parent / "chainlit"), "run", str(ROOT / "app.py"), "--headless",
             "--host", "127.0.0.1", "--port", str(port)],
            cwd=app_root, env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    try:
        url = f"http://127.0.0.1:{port}"
        wait_until_up(url, proc, log_path)
        yield RunningApp(url=url, data_dir=data_dir, log_path=log_path, products=products)
    finally:
        stop(proc)


@pytest.fixture(scope="session")
def running_app(tmp_path_factory) -> Iterator[RunningApp]:
    with serve_app(tmp_path_factory.mktemp("app"), PRELOADED) as running:
        yield running
