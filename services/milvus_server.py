"""A Milvus-protocol gRPC server on a TCP address, from the embedded engine itself (Milvus Lite's
C++ `milvus` binary): several processes on one machine share one vector store through
`MILVUS_URL=http://HOST:PORT`.

    python -m services.milvus_server --data-dir DIR [--host 127.0.0.1] [--port 19530]

The process becomes the binary (exec), so SIGTERM / SIGKILL reach the engine itself; it holds a
lock on the data file, so a second server (or an app opening the file directly) is refused.
"""
from __future__ import annotations

import argparse
import fcntl
import os
import sys
from pathlib import Path

from milvus_lite import server as lite

DB_FILE = "milvus.db"  # the name the app gives its embedded file (Settings.milvus_uri)


def command(data_dir: Path, host: str, port: int) -> tuple[list[str], dict[str, str]]:
    """The binary's argv and environment for serving `data_dir/milvus.db` on host:port, as
    milvus_lite.server.Server builds them (its object is not made: dropping it deletes the lock file)."""
    lib = os.environ.get("BIN_PATH") or lite.BIN_PATH
    env = {**os.environ, "LD_LIBRARY_PATH": ":".join(filter(None, [lib, os.environ.get("LD_LIBRARY_PATH")])),
           "DYLD_LIBRARY_PATH": ":".join(filter(None, [lib, os.environ.get("DYLD_LIBRARY_PATH")]))}
    return [str(Path(lib) / lite.Server.MILVUS_BIN), str(data_dir / DB_FILE), f"{host}:{port}",
            os.environ.get("LOG_LEVEL", "ERROR")], env


def lock(data_dir: Path) -> int:
    """Take the lock the embedded client takes on the file (`.milvus.db.lock`); kept across exec."""
    fd = os.open(data_dir / f".{DB_FILE}.lock", os.O_RDWR | os.O_CREAT, 0o644)
    try:
        fcntl.lockf(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        sys.exit(f"{data_dir / DB_FILE} 已被另一个进程打开（另一个 Milvus 服务或直接打开它的应用）")
    os.set_inheritable(fd, True)
    return fd


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description="在 TCP 地址上提供内嵌 Milvus Lite 引擎的 gRPC 服务")
    parser.add_argument("--data-dir", type=Path, required=True, help="数据目录（其中的 milvus.db）")
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=19530)
    args = parser.parse_args(argv)
    data_dir = args.data_dir.resolve()
    data_dir.mkdir(parents=True, exist_ok=True)
    if (data_dir / DB_FILE).is_dir():
        sys.exit(f"{data_dir / DB_FILE} 是旧版 Milvus Lite 3 的数据目录，当前引擎读不了它：请换一个数据目录")
    argv_, env = command(data_dir, args.host, args.port)
    lock(data_dir)
    os.chdir(data_dir)
    os.execve(argv_[0], argv_, env)


if __name__ == "__main__":
    main()
