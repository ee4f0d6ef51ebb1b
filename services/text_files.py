"""Reading user-supplied text files whatever their encoding (UTF-8, UTF-8 with BOM, GBK, UTF-16...)."""
from __future__ import annotations

import codecs
from pathlib import Path

from charset_normalizer import from_bytes

from services.errors import FileProcessingError

# UTF-32 first: its little-endian mark begins with UTF-16's.  Windows Notepad's "Unicode" is UTF-16.
BOMS = [(codecs.BOM_UTF32_LE, "utf-32"), (codecs.BOM_UTF32_BE, "utf-32"), (codecs.BOM_UTF8, "utf-8-sig"),
        (codecs.BOM_UTF16_LE, "utf-16"), (codecs.BOM_UTF16_BE, "utf-16")]


def decode_bytes(raw: bytes, name: str = "") -> str:
    for bom, codec in BOMS:
        if raw.startswith(bom):
            return raw.decode(codec, errors="replace")
    if b"\x00" in raw[:4096]:  # without a byte-order mark, NUL bytes mean binary content
        raise FileProcessingError(f"文件“{name}”不是文本文件（含有二进制内容）。")
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError:
        pass
    try:  # Chinese manuals saved on Windows are usually GBK; gb18030 is its superset
        return raw.decode("gb18030")
    except UnicodeDecodeError:
        best = from_bytes(raw).best()
        if best is None:
            raise FileProcessingError(f"无法识别文件“{name}”的文字编码，请另存为 UTF-8 后重试。")
        return str(best)


def read_text(path: Path) -> str:
    try:
        raw = Path(path).read_bytes()
    except OSError as exc:
        raise FileProcessingError(f"无法读取文件 {path}：{exc}", cause=exc) from exc
    return decode_bytes(raw, Path(path).name)
