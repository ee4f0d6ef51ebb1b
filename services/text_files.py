"""Reading user-supplied text files whatever their encoding (UTF-8, UTF-8 with BOM, GBK, UTF-16...)."""
from __future__ import annotations

import codecs
import functools
import re
import unicodedata
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


# Unassigned planes 3-13 hold no control or format characters; scanning only the planes that do
# keeps the one-time cost at a few milliseconds.
_CONTROL_PLANES = (range(0x0, 0x20000), range(0xE0000, 0xE1000))
_LINE_BREAKS = re.compile(r"\r\n?|[\u2028\u2029\x85]")
_PRIVATE_OR_SURROGATE = re.compile("[\ud800-\udfff\ue000-\uf8ff\U000f0000-\U0010ffff]")


@functools.lru_cache(maxsize=1)
def _invisible() -> dict[int, None]:
    """Control (but tab and newline) and format characters (zero-width, bidi marks, soft hyphen,
    BOM), as a str.translate table: nothing a reader sees, yet they split words for the index."""
    return {cp: None for plane in _CONTROL_PLANES for cp in plane
            if unicodedata.category(chr(cp)) in ("Cc", "Cf") and chr(cp) not in "\t\n"}


def sanitize_text(text: str) -> str:
    """Text as it enters the knowledge base, whatever the format: one line-break convention,
    Unicode NFC (a decomposed é and a composed é index alike), invisible characters removed."""
    text = _PRIVATE_OR_SURROGATE.sub("", _LINE_BREAKS.sub("\n", text).translate(_invisible()))
    return unicodedata.normalize("NFC", text)
