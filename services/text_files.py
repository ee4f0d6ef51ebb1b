"""Reading user-supplied text files whatever their encoding (UTF-8, UTF-8 with BOM, GBK...)."""
from __future__ import annotations

from pathlib import Path

from charset_normalizer import from_bytes

from services.errors import FileProcessingError


def decode_bytes(raw: bytes) -> str:
    if raw.startswith(b"\xef\xbb\xbf"):
        return raw[3:].decode("utf-8", errors="replace")
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError:
        pass
    try:  # Chinese manuals saved on Windows are usually GBK; gb18030 is its superset
        return raw.decode("gb18030")
    except UnicodeDecodeError:
        best = from_bytes(raw).best()
        if best is None:
            raise FileProcessingError("无法识别文件的文字编码，请另存为 UTF-8 后重试。")
        return str(best)


def read_text(path: Path) -> str:
    try:
        raw = Path(path).read_bytes()
    except OSError as exc:
        raise FileProcessingError(f"无法读取文件 {path}：{exc}", cause=exc) from exc
    if b"\x00" in raw[:4096]:
        raise FileProcessingError(f"文件“{Path(path).name}”不是文本文件（含有二进制内容）。")
    return decode_bytes(raw)
