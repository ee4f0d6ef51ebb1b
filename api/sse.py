"""The Server-Sent Events wire format of GET /api/stream: `id: N\nevent: NAME\ndata: JSON\n\n`
(clients read it with httpx-sse, as `bench.load.sse_messages` does)."""
from __future__ import annotations

import json

KEEPALIVE = ": keep-alive\n\n"  # a comment line: clients ignore it, proxies see traffic
RETRY_MS = 3000  # how long a browser's EventSource waits before it reconnects


def encode(name: str, data: dict, event_id: int | None = None, retry_ms: int | None = None) -> str:
    head = (f"retry: {retry_ms}\n" if retry_ms is not None else "") + (f"id: {event_id}\n" if event_id is not None else "")
    return f"{head}event: {name}\ndata: {json.dumps(data, ensure_ascii=False)}\n\n"
