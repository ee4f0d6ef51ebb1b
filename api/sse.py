"""The Server-Sent Events wire format of GET /api/stream: `id: N\nevent: NAME\ndata: JSON\n\n`.

Both directions live here so the server, the tests and the load bench speak exactly one format.
"""
from __future__ import annotations

import json
from typing import Iterable, Iterator

KEEPALIVE = ": keep-alive\n\n"  # a comment line: clients ignore it, proxies see traffic
RETRY_MS = 3000  # how long a browser's EventSource waits before it reconnects


def encode(name: str, data: dict, event_id: int | None = None, retry_ms: int | None = None) -> str:
    head = (f"retry: {retry_ms}\n" if retry_ms is not None else "") + (f"id: {event_id}\n" if event_id is not None else "")
    return f"{head}event: {name}\ndata: {json.dumps(data, ensure_ascii=False)}\n\n"


def iter_messages(lines: Iterable[str]) -> Iterator[tuple[int | None, str, dict]]:
    """(id or None, name, data) for each complete event in a stream of lines (comments skipped)."""
    event_id, name, data = None, "", []
    for line in lines:
        if line.startswith("id:"):
            event_id = int(line[len("id:"):].strip())
        elif line.startswith("event:"):
            name = line[len("event:"):].strip()
        elif line.startswith("data:"):
            data.append(line[len("data:"):].strip())
        elif not line and name:
            yield event_id, name, json.loads("\n".join(data))
            event_id, name, data = None, "", []


def iter_events(lines: Iterable[str]) -> Iterator[tuple[str, dict]]:
    """(name, data) for each complete event in a stream of lines (comments skipped)."""
    for _event_id, name, data in iter_messages(lines):
        yield name, data
