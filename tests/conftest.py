"""Session-wide set-up: an isolated DATA_DIR, the sample corpus imported once, fake servers.

Everything outside the process is real: Milvus Lite, the embedding model, the sample manuals,
and servers on 127.0.0.1 speaking the OpenAI and MCP protocols.
"""
from __future__ import annotations

import os
import tempfile
from pathlib import Path

# Before any service is imported: a fresh data dir, offline defaults, no developer .env leaking in.
_SESSION_DIR = Path(tempfile.mkdtemp(prefix="zgzk-test-"))
os.environ["DATA_DIR"] = str(_SESSION_DIR / "data")
for _var in ("OPENAI_API_KEY", "MINERU_API_TOKEN", "MILVUS_URL", "MONGO_URL", "MINIO_ENDPOINT",
             "MCP_DASHSCOPE_BASE_URL", "BGE_M3_PATH", "BGE_RERANKER_LARGE", "API_KEYS", "API_AUTH", "CORS_ORIGINS",
             "AUTH_USERS", "ADMIN_PASSWORD", "REMOTE_IMAGE_HOSTS"):
    os.environ[_var] = ""
# API users of the suite: `tester` is the one the `api` client speaks as (see api_fixtures.py)
API_USERS = {"tester": ("tester-key-0001", "editor"), "alice": ("alice-key-0001", "editor"),
             "bob": ("bob-key-0001", "editor"), "rita": ("rita-key-0001", "reader"),
             "root": ("root-key-0001", "admin")}
os.environ["API_KEYS"] = ",".join(f"{name}:{key}:{role}" for name, (key, role) in API_USERS.items())

import pytest  # noqa: E402

from bench.shared import CORPUS  # noqa: E402
from services.settings import reload_settings  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
CORPUS_DOCS = [
    CORPUS / "milkv-duo" / "duo.md",
    CORPUS / "milkv-duo" / "duo256m.md",
    CORPUS / "milkv-duo" / "duos.md",
    CORPUS / "sipeed-mf" / "zh_CN" / "MF1模块简明用户手册.md",
    CORPUS / "sipeed-mf" / "zh_CN" / "m01_mf1_v1_get_started.md",
    CORPUS / "sipeed-mf" / "zh_CN" / "m02_mf1_v2_get_started.md",
    CORPUS / "sipeed-mf" / "zh_CN" / "mf0_get_started.md",
    CORPUS / "btt-skr-mini-e3" / "BTT SKR MINI E3 V2.0使用手册.pdf",
    CORPUS / "btt-skr-mini-e3" / "BTT SKR MINI E3 V3.0使用手册.pdf",
]

reload_settings()


def auth_header(user: str = "tester") -> dict[str, str]:
    return {"Authorization": f"Bearer {API_USERS[user][0]}"}


@pytest.fixture(scope="session")
def session_dir() -> Path:
    return _SESSION_DIR


@pytest.fixture(scope="session")
def corpus_results():
    """Import the 9 sample manuals once for the whole session (offline defaults)."""
    from graphs.importing.runner import run_import

    results = {path.stem: run_import(path) for path in CORPUS_DOCS}
    failed = {k: r.error for k, r in results.items() if r.status != "completed"}
    assert not failed, failed
    return results


@pytest.fixture(scope="session")
def product_of(corpus_results) -> dict[str, str]:
    """Document stem -> the product name the pipeline recognised."""
    return {stem: r.product for stem, r in corpus_results.items()}


@pytest.fixture()
def env(monkeypatch):
    """Change settings for one test: env(OPENAI_API_KEY=..., ...) then settings are reloaded."""
    def apply(**values):
        for key, value in values.items():
            monkeypatch.setenv(key, str(value))
        return reload_settings()

    yield apply
    monkeypatch.undo()
    reload_settings()
