"""The chat app as a browser meets it: `chainlit run app.py` in a child process on a free loopback
port, with a data dir of its own. Used by bench.security and by the tests.

The app gets its own Chainlit app root too (links to `.chainlit/`, `public/` and `chainlit.md`):
Chainlit deletes `{app root}/.files` when a server stops, which would break any other Chainlit
server working in the checkout (a developer's, or another test's) if they shared one.
"""
from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import httpx

from bench.cluster import ROOT, free_port

START_TIMEOUT_S = 120
STOP_TIMEOUT_S = 15


def log_tail(path: Path, lines: int = 60) -> str:
    return "\n".join(path.read_text(encoding="utf-8", errors="replace").splitlines()[-lines:])


class ChatApp:
    """`with ChatApp(base, env) as app:` the app answers at `app.url`; its log is `app.log_path`.
    `env` goes on top of this process's environment (DATA_DIR defaults to `base/data`)."""

    def __init__(self, base: Path, env: dict[str, str]):
        self.data_dir = Path(env.get("DATA_DIR") or base / "data")
        self.app_root, self.log_path = base / "root", base / "app.log"
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.env = {**os.environ, "DATA_DIR": str(self.data_dir), "CHAINLIT_APP_ROOT": str(self.app_root),
                    "PYTHONUNBUFFERED": "1", **env}
        # `chainlit run` reads CI=true (set by CI) as its own CI mode, which plants a fake OPENAI_API_KEY.
        self.env.pop("CI", None)
        self.proc: subprocess.Popen | None = None

    def __enter__(self) -> "ChatApp":
        self.app_root.mkdir(parents=True, exist_ok=True)
        for name in (".chainlit", "public", "chainlit.md"):
            if not (self.app_root / name).exists():
                (self.app_root / name).symlink_to(ROOT / name)
        with open(self.log_path, "w", encoding="utf-8") as log:
            self.proc = subprocess.Popen(
                [str(Path(sys.executable).parent / "chainlit"), "run", str(ROOT / "app.py"), "--headless",
                 "--host", "127.0.0.1", "--port", str(self.port)],
                cwd=self.app_root, env=self.env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
        try:
            self._wait_until_up()
        except BaseException:
            self.__exit__()
            raise
        return self

    def _wait_until_up(self) -> None:
        deadline = time.monotonic() + START_TIMEOUT_S
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"app exited with {self.proc.returncode}:\n{log_tail(self.log_path)}")
            try:
                if httpx.get(f"{self.url}/health", timeout=2).status_code == 200:
                    return
            except httpx.HTTPError:
                pass
            time.sleep(0.3)
        raise RuntimeError(f"app did not answer within {START_TIMEOUT_S}s:\n{log_tail(self.log_path)}")

    def __exit__(self, *exc: object) -> None:
        try:
            os.killpg(self.proc.pid, signal.SIGTERM)
            self.proc.wait(timeout=STOP_TIMEOUT_S)
        except ProcessLookupError:
            return
        except subprocess.TimeoutExpired:
            os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait(timeout=STOP_TIMEOUT_S)
