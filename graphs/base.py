"""What every node of both graphs shares: logging, timing, progress events, error wrapping.

Progress travels through LangGraph's custom stream (`get_stream_writer`), so the same events reach
the Chainlit app, the HTTP API and the CLI without module-level session dictionaries.
"""
from __future__ import annotations

import functools
import logging
import operator
import time
from typing import Annotated, Callable

from langgraph.config import get_stream_writer

from services.errors import ImportProcessError

NodeLog = Annotated[list[dict], operator.add]


def emit(event: dict) -> None:
    """Send a progress event to whoever streams the graph (no-op outside a stream)."""
    try:
        writer = get_stream_writer()
    except RuntimeError:  # called outside a graph run (unit tests of a node body)
        return
    writer(event)


def graph_node(graph: str, name: str, label: str, error_cls: type[ImportProcessError] = ImportProcessError):
    """Wrap a node body `fn(state) -> partial state`.

    The body may add `_summary` (short Chinese text for the UI), `_status` ("ok" | "skipped") and
    `_detail` (structured data for the UI) to its result; they become one `node_log` entry.
    """
    log = logging.getLogger(f"{graph}.{name}")

    def deco(fn: Callable[[dict], dict]):
        @functools.wraps(fn)
        def wrapper(state: dict) -> dict:
            emit({"type": "node_start", "node": name, "label": label})
            started = time.perf_counter()
            log.info("start")
            try:
                out = dict(fn(state) or {})
            except ImportProcessError as exc:
                exc.node = exc.node or name
                log.warning("failed: %s", exc)
                emit({"type": "node_error", "node": name, "label": label, "error": str(exc.message)})
                raise
            except Exception as exc:
                log.exception("crashed")
                emit({"type": "node_error", "node": name, "label": label, "error": str(exc)})
                raise error_cls(f"{label}失败：{exc}", node=name, cause=exc) from exc
            seconds = round(time.perf_counter() - started, 4)
            entry = {
                "node": name, "label": label, "status": out.pop("_status", "ok"),
                "summary": out.pop("_summary", ""), "detail": out.pop("_detail", None), "seconds": seconds,
            }
            log.info("done in %.3fs %s", seconds, entry["summary"])
            emit({"type": "node_end", **entry})
            out["node_log"] = [entry]
            return out

        wrapper.node_name = name
        return wrapper

    return deco
