"""What every node of both graphs shares: logging, timing, progress events, error wrapping.

Progress travels through LangGraph's custom stream (`get_stream_writer`), so the same events reach
the Chainlit app, the HTTP API and the CLI without module-level session dictionaries.
"""
from __future__ import annotations

import functools
import inspect
import logging
import operator
import time
from typing import Annotated, Any, Callable, Generic, Literal, Mapping, Self, TypedDict, TypeVar

from langchain_core.runnables import RunnableConfig
from langgraph.config import get_stream_writer

from services.errors import ImportProcessError
from services.settings import Settings, get_settings


class NodeLogEntry(TypedDict):
    """One node's run, as the step list shows it (also sent as its `node_end` event)."""
    node: str                    # the node id
    label: str                   # its name in the step list
    status: Literal["ok", "skipped"]
    summary: str                 # short Chinese text
    detail: object               # structured data for the step's detail view (None: none)
    seconds: float


class NodeEventFields(TypedDict, total=False):
    """What `graph_node` emits about a node in either graph (each graph's event types add `type`)."""
    node: str
    label: str
    status: str                  # node_end: "ok" | "skipped"
    summary: str
    detail: object
    seconds: float
    error: str
    text: str                    # node_progress


class StepReport(TypedDict, total=False):
    """What a node body adds to the state it returns; `graph_node` turns it into a `NodeLogEntry`."""
    _summary: str
    _status: Literal["ok", "skipped"]
    _detail: object


# Lists that several nodes (or parallel branches) add to: each node returns only its new items.
NodeLog = Annotated[list[NodeLogEntry], operator.add]
Warnings = Annotated[list[str], operator.add]


T = TypeVar("T")


class Service(Generic[T]):
    """A configuration's service: the one handed in under this name, else the process's own for the
    configuration's settings, made on first use (a node that does not need the reranker never loads it)."""

    def __init__(self, factory: Callable[[Settings], T]):
        self.factory = factory

    def __set_name__(self, owner: type, name: str) -> None:
        self.name = name

    def __get__(self, cfg: "Configuration | None", owner: type | None = None) -> T:
        if cfg is None:
            return self  # type: ignore[return-value]  # the class attribute itself
        found = cfg.given.get(self.name)
        return found if found is not None else self.factory(cfg.settings)


class Configuration:
    """The settings and services a graph's nodes use, read from LangGraph's configuration
    (`config["configurable"]`): a caller or a test passes its own settings or service objects and the
    environment is never consulted for them. Subclasses declare their services as `Service` fields."""

    def __init__(self, settings: Settings | None = None, **services: Any):
        unknown = set(services) - self.service_names()
        if unknown:
            raise TypeError(f"unknown services: {sorted(unknown)}")
        self.settings = settings or get_settings()
        self.given = {k: v for k, v in services.items() if v is not None}

    @classmethod
    @functools.cache  # per class: every node reads its configuration on every run
    def service_names(cls) -> frozenset[str]:
        return frozenset(name for klass in cls.__mro__ for name, v in vars(klass).items() if isinstance(v, Service))

    @classmethod
    def from_runnable_config(cls, config: RunnableConfig | None = None) -> Self:
        configurable = (config or {}).get("configurable") or {}
        names = cls.service_names()
        return cls(settings=configurable.get("settings"), **{k: v for k, v in configurable.items() if k in names})


def emit(event: Mapping[str, object]) -> None:
    """Send a progress event to whoever streams the graph (no-op outside a stream)."""
    try:
        writer = get_stream_writer()
    except RuntimeError:  # called outside a graph run (unit tests of a node body)
        return
    writer(event)


def graph_node(graph: str, name: str, label: str, error_cls: type[ImportProcessError] = ImportProcessError):
    """Wrap a node body `fn(state[, config]) -> partial state`. LangGraph passes `config` (typed
    `RunnableConfig`) when the body's signature names it; the body reads its graph's configuration
    from it.

    The body may add `_summary` (short Chinese text for the UI), `_status` ("ok" | "skipped") and
    `_detail` (structured data for the UI) to its result; they become one `node_log` entry.
    """
    log = logging.getLogger(f"{graph}.{name}")

    def deco(fn: Callable[..., Mapping[str, Any]]):
        takes_config = "config" in inspect.signature(fn).parameters

        @functools.wraps(fn)
        def wrapper(state: Mapping[str, Any], config: RunnableConfig | None = None) -> Mapping[str, Any]:
            emit({"type": "node_start", "node": name, "label": label})
            started = time.perf_counter()
            log.info("start")
            try:
                out = dict((fn(state, config) if takes_config else fn(state)) or {})
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
            entry: NodeLogEntry = {
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
