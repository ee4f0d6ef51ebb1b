"""Prompts are text files in `prompts/`, loaded by name and filled with `str.format`.

Literal braces (JSON examples) are written doubled in the files (`str.format` reads single ones as fields).
"""
from __future__ import annotations

from functools import lru_cache
from pathlib import Path

PROMPTS_DIR = Path(__file__).resolve().parent.parent / "prompts"


@lru_cache(maxsize=None)
def _read(name: str) -> str:
    path = PROMPTS_DIR / f"{name}.txt"
    if not path.is_file():
        raise FileNotFoundError(f"提示词文件不存在：{path}")
    return path.read_text(encoding="utf-8").strip()


def load_prompt(name: str, **values) -> str:
    return _read(name).format(**values) if values else _read(name).format()
