"""Converters that misbehave, for CONVERTER_OVERRIDE: each stands in for a parser hitting a native bug.
Every call is counted in `converter-calls.log` beside the conversion's output folder."""
from __future__ import annotations

import ctypes
import os
import time
from pathlib import Path


def _count(kwargs: dict) -> None:
    if kwargs.get("out_dir"):
        folder = Path(kwargs["out_dir"]).parent
        folder.mkdir(parents=True, exist_ok=True)
        with (folder / "converter-calls.log").open("a") as log:
            log.write(f"{os.getpid()}\n")


def abort(**kwargs) -> None:
    """A C library's assertion failing: SIGABRT."""
    _count(kwargs)
    os.abort()


def segfault(**kwargs) -> None:
    """A read through a null pointer inside native code: SIGSEGV."""
    _count(kwargs)
    ctypes.string_at(0)


def exhaust_memory(**kwargs) -> None:
    """A parser whose memory grows without end."""
    _count(kwargs)
    blocks = []
    while True:
        blocks.append(bytearray(32 * 1024 * 1024))


def hang(**kwargs) -> None:
    """A parser stuck in a loop."""
    _count(kwargs)
    time.sleep(3600)


def kill_host(**kwargs) -> None:
    """The converter host itself goes away mid-conversion (as under the OOM killer)."""
    _count(kwargs)
    os.kill(os.getppid(), 9)
    time.sleep(3600)
