"""Helpers that need only numpy: they also run in a bare venv (bench.engine measures other engines there)."""
from __future__ import annotations

import json
from pathlib import Path

import numpy as np


def percentiles(values: list[float]) -> dict:
    """p50 / p95 in milliseconds."""
    if not values:
        return {"p50_ms": None, "p95_ms": None, "n": 0}
    p50, p95 = np.percentile(np.asarray(values, dtype=float) * 1000, [50, 95])
    return {"p50_ms": round(float(p50), 2), "p95_ms": round(float(p95), 2), "n": len(values)}


def fmt(value, digits: int = 3) -> str:
    if value is None:
        return "—"
    if isinstance(value, float):
        return f"{value:.{digits}f}"
    return str(value)


def md_table(headers: list[str], rows: list[list]) -> str:
    lines = ["| " + " | ".join(headers) + " |", "|" + "---|" * len(headers)]
    lines += ["| " + " | ".join(fmt(c) for c in row) + " |" for row in rows]
    return "\n".join(lines)


def write_json(path: Path, data) -> None:
    path.write_text(json.dumps(data, ensure_ascii=False, indent=2), encoding="utf-8")
