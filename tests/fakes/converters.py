"""Converters that misbehave, for CONVERTER_OVERRIDE: each stands in for a parser hitting a native bug."""
from __future__ import annotations

import ctypes
import os
import time


def abort(**_) -> None:
    """A C library's assertion failing: SIGABRT."""
    os.abort()


def segfault(**_) -> None:
    """A read through a null pointer inside native code: SIGSEGV."""
    ctypes.string_at(0)


def exhaust_memory(**_) -> None:
    """A parser whose memory grows without end."""
    blocks = []
    while True:
        blocks.append(bytearray(32 * 1024 * 1024))


def hang(**_) -> None:
    """A parser stuck in a loop."""
    time.sleep(3600)


def kill_host(**_) -> None:
    """The converter host itself goes away mid-conversion (as under the OOM killer)."""
    os.kill(os.getppid(), 9)
    time.sleep(3600)
