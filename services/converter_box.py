"""Converters that run native code (MuPDF for PDFs, lxml and python-docx for web pages and Word files)
run here, each conversion in a process of its own with a memory and a time limit: a crash, a hang or
runaway memory ends that one conversion, never the web server or the queue consumer that asked.

A converter host (`python -m services.converter_box`) imports the parsers once and forks one child per
conversion; the child applies RLIMIT_AS and an alarm, converts, and sends back its result (file paths:
the Markdown and images themselves are written to the caller's work folder). The host enforces the
wall-clock limit and reports how the child ended. Hosts are kept in a small pool, so a conversion costs
a fork, not an interpreter start; a host that dies is replaced by a fresh one.

Frames on every pipe: a 4-byte big-endian length, then a pickle.
"""
from __future__ import annotations

import atexit
import ctypes
import importlib
import math
import os
import pickle
import resource
import select
import signal
import struct
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any, Callable

import services.errors as errors
from services.errors import ImportProcessError
from services.settings import ROOT, Settings, get_settings

PRELOAD = ("services.pdf_parser", "services.doc_converter")
HOST_GRACE_S = 30.0   # the host enforces the time limit; the caller waits this much longer for its report
ALARM_GRACE_S = 5     # a child whose host died meanwhile still ends this long after its limit
HOST_START_S = 120.0  # importing the parsers on a loaded machine
_HEADER = struct.Struct(">I")
PR_SET_PDEATHSIG = 1  # linux/prctl.h

Progress = Callable[[str], None] | None


# --- frames --------------------------------------------------------------------------------------------

def _write_frame(fd: int, message: Any) -> None:
    data = pickle.dumps(message, protocol=pickle.HIGHEST_PROTOCOL)
    view = memoryview(_HEADER.pack(len(data)) + data)
    while view:
        view = view[os.write(fd, view):]


class _Frames:
    """Frames read from a file descriptor, each within a deadline."""

    def __init__(self, fd: int):
        self.fd, self.buffer = fd, b""

    def next(self, deadline: float) -> tuple[str, Any]:
        """The next message; ("eof", None) when the writer is gone, ("late", None) past the deadline."""
        while True:
            if len(self.buffer) >= _HEADER.size:
                size = _HEADER.unpack_from(self.buffer)[0]
                if len(self.buffer) >= _HEADER.size + size:
                    data = self.buffer[_HEADER.size:_HEADER.size + size]
                    self.buffer = self.buffer[_HEADER.size + size:]
                    return pickle.loads(data)
            left = None if deadline == math.inf else deadline - time.monotonic()
            if left is not None and left <= 0:
                return "late", None
            ready, _, _ = select.select([self.fd], [], [], left)
            if not ready:
                continue
            chunk = os.read(self.fd, 1 << 16)
            if not chunk:  # a partial frame of a writer that died is no message
                return "eof", None
            self.buffer += chunk


# --- the child: one conversion ---------------------------------------------------------------------------

def _resolve(target: str) -> Callable:
    module, _, name = target.partition(":")
    return getattr(importlib.import_module(module), name)


def _address_space() -> int:
    """Bytes of address space this process has mapped already (the parsers' libraries and arenas),
    which the memory limit comes on top of."""
    with open("/proc/self/statm") as f:
        return int(f.read().split()[0]) * resource.getpagesize()


def _convert_in_child(job: dict, out: int) -> None:
    """Runs in the forked child; never returns."""
    code = 0
    try:
        memory = _address_space() + int(job["memory_mb"]) * 1024 * 1024
        resource.setrlimit(resource.RLIMIT_AS, (memory, memory))
        signal.alarm(int(math.ceil(job["timeout_s"])) + ALARM_GRACE_S)
        func = _resolve(job["target"])
        kwargs = dict(job["kwargs"])
        if job["progress"]:
            kwargs["progress"] = lambda text: _write_frame(out, ("progress", str(text)))
        try:
            _write_frame(out, ("done", func(**kwargs)))
        except ImportProcessError as exc:  # the converter's own refusal, in its own words
            _write_frame(out, ("refused", (type(exc).__name__, exc.message, exc.node, exc.transient)))
        except MemoryError:
            _write_frame(out, ("memory", None))
        except Exception as exc:
            _write_frame(out, ("raised", f"{type(exc).__name__}: {exc}"[:500]))
    except BaseException:  # even the report failed (memory): the exit status tells the host
        code = 3
    os._exit(code)


# --- the host: one conversion at a time, each in a fresh child ---------------------------------------------

def _serve() -> None:
    """The host's loop: a job from stdin -> its child's messages, then how it ended, on stdout."""
    # frames go on a descriptor of their own: whatever a library prints goes to stderr, not into them
    out = os.dup(sys.stdout.fileno())
    os.dup2(sys.stderr.fileno(), sys.stdout.fileno())
    for name in PRELOAD:
        importlib.import_module(name)
    jobs = _Frames(sys.stdin.fileno())
    _write_frame(out, ("ready", os.getpid()))
    while True:
        kind, job = jobs.next(math.inf)
        if kind != "job":
            return  # stdin closed: the caller is gone
        try:
            _run_child(job, out)
        except BrokenPipeError:  # the caller went away mid-conversion; the child dies with this host
            return


def _die_with_parent(host: int) -> None:
    ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGKILL)
    if os.getppid() != host:  # the host died before the request took effect
        os._exit(4)


def _run_child(job: dict, out: int) -> None:
    read, write = os.pipe()
    host = os.getpid()
    pid = os.fork()
    if pid == 0:
        # the child holds no end of the caller's pipes (the caller must see the host's death at once)
        # and dies with its host
        os.close(read)
        os.close(out)
        os.dup2(os.open(os.devnull, os.O_RDONLY), sys.stdin.fileno())
        _die_with_parent(host)
        _convert_in_child(job, write)
    os.close(write)
    frames, deadline, timed_out = _Frames(read), time.monotonic() + float(job["timeout_s"]), False
    while True:
        kind, payload = frames.next(deadline)
        if kind == "late":
            os.kill(pid, signal.SIGKILL)
            timed_out = True
            break
        if kind == "eof":
            break
        _write_frame(out, (kind, payload))
    os.close(read)
    _, status = os.waitpid(pid, 0)
    _write_frame(out, ("exit", {"timed_out": timed_out, "signal": os.WTERMSIG(status) if os.WIFSIGNALED(status) else 0,
                                "code": os.WEXITSTATUS(status) if os.WIFEXITED(status) else 0}))


# --- the caller's side -----------------------------------------------------------------------------------

class _Host:
    def __init__(self) -> None:
        # the parent's import path, so that a converter named by CONVERTER_OVERRIDE resolves as it does here
        path = os.pathsep.join(p for p in sys.path if p)
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "services.converter_box"], cwd=ROOT, stdin=subprocess.PIPE,
            stdout=subprocess.PIPE, env={**os.environ, "PYTHONPATH": path}, start_new_session=True)
        self.frames = _Frames(self.proc.stdout.fileno())
        kind, _ = self.frames.next(time.monotonic() + HOST_START_S)
        if kind != "ready":
            self.close()
            raise RuntimeError("转换进程没有启动")

    def alive(self) -> bool:
        return self.proc.poll() is None

    def close(self) -> None:
        if self.alive():
            self.proc.kill()
        self.proc.wait()
        self.proc.stdin.close()
        self.proc.stdout.close()

    def run(self, job: dict, progress: Progress) -> tuple[str, Any, dict | None]:
        """(outcome, payload, how the child ended); outcome "lost" when the host itself went away."""
        try:
            _write_frame(self.proc.stdin.fileno(), ("job", job))
        except OSError:
            return "lost", None, None
        outcome, payload = "", None
        deadline = time.monotonic() + float(job["timeout_s"]) + HOST_GRACE_S
        while True:
            kind, message = self.frames.next(deadline)
            if kind == "progress":
                if progress:
                    progress(message)
            elif kind == "exit":
                return outcome, payload, message
            elif kind in ("eof", "late"):
                return "lost", None, None
            else:
                outcome, payload = kind, message


class _Pool:
    """Idle hosts; a busy one belongs to one conversion until it reports back."""

    def __init__(self) -> None:
        self.idle: list[_Host] = []
        self.lock = threading.Lock()

    def take(self) -> _Host:
        with self.lock:
            while self.idle:
                host = self.idle.pop()
                if host.alive():
                    return host
                host.close()
        return _Host()

    def give_back(self, host: _Host, keep: int) -> None:
        with self.lock:
            if host.alive() and len(self.idle) < keep:
                self.idle.append(host)
                return
        host.close()

    def close(self) -> None:
        with self.lock:
            hosts, self.idle = self.idle, []
        for host in hosts:
            host.close()


_pool = _Pool()
atexit.register(_pool.close)


def _reason(outcome: str, payload: Any, ended: dict | None, settings: Settings) -> tuple[str, bool]:
    """(why a conversion did not finish, in Chinese; whether it crashed its process)."""
    if outcome == "memory" or (ended and not outcome and ended["code"] == 3):
        return f"内存用量超过了 {settings.convert_memory_mb} MB 的上限，已停止", False
    if ended and ended["timed_out"]:
        return f"超过 {settings.convert_timeout_s:g} 秒仍未完成，已停止", False
    if outcome == "raised":
        return f"解析出错：{payload}", False
    if ended and ended["signal"]:
        try:
            name = signal.Signals(ended["signal"]).name
        except ValueError:
            name = f"信号 {ended['signal']}"
        return f"解析进程崩溃（{name}）", True
    if ended is None:
        return "解析进程意外退出", True
    return f"解析进程异常退出（退出码 {ended['code']}）", True


def run_isolated(target: str, kwargs: dict, *, what: str, error: type[ImportProcessError], node: str,
                 settings: Settings | None = None, progress: Progress = None) -> Any:
    """`target(**kwargs)` ("module:function"; it gets `progress=` too when `progress` is given) in a
    child process under the configured limits; returns what it returned. Its own ImportProcessError
    comes back as such; a crash is tried once more in a fresh process (CONVERT_CRASH_RETRIES), then
    it, a time-out or too much memory raises `error` naming `what` ("PDF 解析") and the reason."""
    settings = settings or get_settings()
    job = {"target": settings.converter_override or target, "kwargs": kwargs, "progress": progress is not None,
           "memory_mb": settings.convert_memory_mb, "timeout_s": settings.convert_timeout_s}
    attempts = 1 + settings.convert_crash_retries
    for attempt in range(1, attempts + 1):
        try:
            host = _pool.take()
        except (OSError, RuntimeError) as exc:
            raise error(f"{what}无法进行：转换进程没有启动（{exc}）", node=node, cause=exc, transient=True) from exc
        outcome = "lost"
        try:
            outcome, payload, ended = host.run(job, progress)
        finally:
            if outcome == "lost":  # it may not look dead yet: its pipes closed before its exit is reported
                host.close()
            else:
                _pool.give_back(host, settings.import_workers)
        if outcome == "done":
            return payload
        if outcome == "refused":
            cls, message, own_node, transient = payload
            found = getattr(errors, cls, None)
            kind = found if isinstance(found, type) and issubclass(found, ImportProcessError) else error
            raise kind(message, node=own_node or node, transient=transient)
        reason, crashed = _reason(outcome, payload, ended, settings)
        if not crashed or attempt == attempts:
            tried = f"，换新进程重试 {attempt - 1} 次仍失败" if crashed and attempt > 1 else ""
            raise error(f"{what}失败：{reason}{tried}。文件可能已损坏，或含有解析器无法处理的内容，"
                        "请检查文件后重新导入。", node=node)


# --- the converters, boxed ------------------------------------------------------------------------------

def _pdf_job(pdf_path: Path, out_dir: Path, settings: Settings, stem: str, progress: Progress = None) -> tuple[Path, int]:
    from services import pdf_parser

    md_path = pdf_parser.pdf_to_markdown(pdf_path, out_dir, settings, progress=progress, stem=stem)
    return md_path, pdf_parser.page_count(pdf_path)


def pdf_to_markdown(pdf_path: Path, out_dir: Path, settings: Settings, *, stem: str,
                    progress: Progress = None) -> tuple[Path, int]:
    """services.pdf_parser.pdf_to_markdown in a box: (the Markdown file, the PDF's page count)."""
    return run_isolated("services.converter_box:_pdf_job",
                        {"pdf_path": Path(pdf_path), "out_dir": Path(out_dir), "settings": settings, "stem": stem},
                        what="PDF 解析", error=errors.PdfConversionError, node="node_pdf_to_md",
                        settings=settings, progress=progress)


def convert_to_markdown(path: Path, kind: str, out_dir: Path, *, max_bytes: int, resolve_image: Callable,
                        settings: Settings | None = None):
    """services.doc_converter.convert_to_markdown in a box; `resolve_image` must pickle (a module-level
    function or a functools.partial of one)."""
    return run_isolated("services.doc_converter:convert_to_markdown",
                        {"path": Path(path), "kind": kind, "out_dir": Path(out_dir), "max_bytes": max_bytes,
                         "resolve_image": resolve_image},
                        what="文档转换", error=errors.DocumentConversionError, node="node_doc_to_md", settings=settings)


def markdown_of(path: Path, kind: str, *, max_bytes: int, settings: Settings | None = None) -> str:
    """services.doc_converter.markdown_of in a box."""
    return run_isolated("services.doc_converter:markdown_of", {"path": Path(path), "kind": kind, "max_bytes": max_bytes},
                        what="文档转换", error=errors.DocumentConversionError, node="node_doc_to_md", settings=settings)


if __name__ == "__main__":
    _serve()
