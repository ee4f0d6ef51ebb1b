"""The real app, once per session: `chainlit run app.py` in a subprocess with a data dir of its own
(bench/chat_app.py).

Import the fixture into a test module with `from app_fixtures import running_app  # noqa: F401`.
"""
from __future__ import annotations

import json
import subprocess
import sys
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Iterator

import pytest

from bench.chat_app import ChatApp, log_tail
from bench.cluster import free_port  # noqa: F401 (for the tests)
from conftest import CORPUS_DOCS

ROOT = Path(__file__).resolve().parent.parent
# Milk-V Duo / Duo256M / Duo S: near-twins, with their pictures; a PDF manual, for page citations
PRELOADED = [*CORPUS_DOCS[:3], CORPUS_DOCS[8]]
IMPORT_TIMEOUT_S = 300
ADMIN_PASSWORD = "browser-admin-pass-1"  # the admin's password set from the environment, as a deployment may


@dataclass
class RunningApp:
    url: str
    data_dir: Path
    log_path: Path
    products: dict[str, str]  # file stem -> product name the import recognised

    def log_tail(self, lines: int = 60) -> str:
        return log_tail(self.log_path, lines)


@contextmanager
def app_server(base: Path, preload=(), **extra_env: str) -> Iterator[RunningApp]:
    """The app on a free port with a data dir under `base`, after importing `preload`."""
    # offline like the rest of the suite (conftest cleared the keys); the admin logs in with ADMIN_PASSWORD
    app = ChatApp(base, {"AUTH_USERS": "", "ADMIN_PASSWORD": ADMIN_PASSWORD, "CHAINLIT_AUTH_SECRET": "", **extra_env})
    products: dict[str, str] = {}
    if preload:
        done = subprocess.run([sys.executable, "-m", "graphs.importing", *map(str, preload), "--json"],
                              cwd=ROOT, env=app.env, capture_output=True, text=True, timeout=IMPORT_TIMEOUT_S)
        assert done.returncode == 0, done.stdout + done.stderr[-4000:]
        results = [json.loads(line) for line in done.stdout.splitlines() if line.startswith("{")]
        products = {Path(r["file"]).stem: r["product"] for r in results}
    with app:
        yield RunningApp(url=app.url, data_dir=app.data_dir, log_path=app.log_path, products=products)


@pytest.fixture(scope="session")
def running_app(tmp_path_factory) -> Iterator[RunningApp]:
    with app_server(tmp_path_factory.mktemp("app"), PRELOADED) as running:
        yield running
