"""Run the query graph and turn its stream into one event interface.

Events (`graphs.query.contracts`): node_start / node_end / node_error / node_progress, delta, final, error.
The Chainlit app, the HTTP API and the CLI all consume `astream_query` / `run_query`.
"""
from __future__ import annotations

import logging
import time
import uuid
from typing import AsyncIterator, Callable

from langchain_core.runnables import RunnableConfig

from graphs.query.contracts import ErrorEvent, Event, FinalEvent, Options, QueryRun
from graphs.query.graph import build_query_graph
from graphs.query.state import QueryGraphState
from services.errors import ImportProcessError

log = logging.getLogger("query.runner")

SUMMARY_KEYS = ("session_id", "original_query", "rewritten_query", "branch", "products", "candidates",
                "decision", "answer", "image_urls", "sources", "rerank_info", "warnings", "plan", "sub_questions",
                "grade", "rewrite")


def initial_state(query: str, session_id: str | None = None, product: str | None = None,
                  options: Options | None = None, is_stream: bool = True, owner: str = "") -> QueryGraphState:
    state: QueryGraphState = {"session_id": session_id or uuid.uuid4().hex, "original_query": query, "is_stream": is_stream,
             "options": {"web_search": True, "hyde": True, **(options or {})}}
    if owner:
        state["owner"] = owner
    if product:
        state["pinned_product"] = product
    return state


def final_event(state: QueryGraphState, seconds: float) -> FinalEvent:
    summary = {k: state.get(k) for k in SUMMARY_KEYS}
    summary["node_log"] = state.get("node_log") or []
    summary["done_list"] = [e["node"] for e in summary["node_log"]]
    summary["seconds"] = round(seconds, 4)
    summary["rrf"] = [{"chunk_id": d.get("chunk_id"), "title": d.get("title"), "score": d.get("rrf_score")}
                      for d in state.get("rrf_chunks") or []]
    return {"type": "final", "status": "completed", **summary}


def error_event(exc: Exception, session_id: str) -> ErrorEvent:
    if isinstance(exc, ImportProcessError):
        return {"type": "error", "error": exc.message, "node": exc.node or "", "session_id": session_id}
    log.exception("query crashed")  # never let one session's failure escape as a crash
    return {"type": "error", "error": f"处理问题时出错：{exc}", "node": "", "session_id": session_id}


async def astream_query(query: str, *, session_id: str | None = None, product: str | None = None,
                        options: Options | None = None, config: RunnableConfig | None = None,
                        owner: str = "") -> AsyncIterator[Event]:
    """Progress and answer events, ending with one `final` or one `error` event. `config` carries the
    graph's configuration (`{"configurable": {"settings": ..., "reranker": ...}}`, see configuration.py).
    `owner`: the user asking; a session someone else owns is refused before its history is read."""
    state = initial_state(query, session_id, product, options, owner=owner)
    started = time.perf_counter()
    last: QueryGraphState = state
    try:
        async for mode, payload in build_query_graph().astream(state, config, stream_mode=["custom", "values"]):
            if mode == "custom":
                yield payload
            else:
                last = payload
    except Exception as exc:
        yield error_event(exc, state["session_id"])
        return
    yield final_event(last, time.perf_counter() - started)


def run_query(query: str, *, session_id: str | None = None, product: str | None = None,
              options: Options | None = None, on_event: Callable[[Event], None] | None = None,
              config: RunnableConfig | None = None, owner: str = "") -> QueryRun:
    """Blocking form for the CLI, benchmarks and tests: the final (or error) event, plus all events."""
    state = initial_state(query, session_id, product, options, owner=owner)
    started = time.perf_counter()
    last: QueryGraphState = state
    events: list[Event] = []
    try:
        for mode, payload in build_query_graph().stream(state, config, stream_mode=["custom", "values"]):
            if mode == "custom":
                events.append(payload)
                if on_event:
                    on_event(payload)
            else:
                last = payload
    except Exception as exc:
        return {**error_event(exc, state["session_id"]), "events": events}
    return {**final_event(last, time.perf_counter() - started), "events": events}
