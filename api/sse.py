"""The Server-Sent Events wire format of GET /api/stream: `event: NAME\ndata: JSON\n\n`.

Both directions live here so the server, the tests and the load bench speak exactly one format.
"""
from __future__ import annotations

import json
from typing import Iterable, Iterator

KEEPALIVE = ": keep-alive\n\n"  # a comment line: clients ignore it, proxies see traffic


def encode(name: str, data: dict) -> str:
    return f"event: {name}\ndata: {json.dumps(data, ensure_ascii=False)}\n\n"


def iter_events(lines: Iterable[str]) -> Iterator[tuple[str, dict]]:
    """(name, data) for each complete event in a stream of lines (comments skipped)."""
    name, data = "", []
    for line in lines:
        if line.startswith("event:"):
            name = line[len("event:"):].strip()
        elif line.startswith("data:"):
            data.append(line[len("data:"):].strip())
        elif not line and name:
            yield name, json.loads("\n".join(data))
            name, data = "", []
