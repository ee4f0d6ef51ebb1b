"""POST /api/upload: the multipart body read as it arrives.

Each file part goes straight into the import package's UploadStager, which writes it once, where it
is imported from, and refuses it at its limit; nothing is spooled to a temporary file first. The few
form fields are kept in memory, capped, and checked like any other request's fields.
"""
from __future__ import annotations

import asyncio
import json

from fastapi import Request
from fastapi.exceptions import RequestValidationError
from pydantic import ValidationError
from python_multipart import MultipartParser
from python_multipart.exceptions import FormParserError
from python_multipart.multipart import parse_options_header

from api.models import UploadForm
from graphs.importing import MAX_FILES, StagedBatch, UploadRejected, UploadStager, accepted_extensions
from services.settings import Settings, get_settings

FILES_FIELD = "files"
FIELD_LIMIT = 256 * 1024  # the form fields that are not files: `products` at its longest, every character 4 bytes
INVALID = "上传数据无法解析：不是合法的 multipart/form-data（文件名中不能有回车、换行等控制字符）"


def upload_body_limit() -> int:
    """Whole multipart body: every file at its maximum, plus room for the form framing."""
    return MAX_FILES * get_settings().max_upload_mb * 1024 * 1024 + 1024 * 1024


def upload_schema() -> dict:
    """The request body as /docs shows it: the files, and UploadForm's fields."""
    fields = UploadForm.model_json_schema()["properties"]
    files = {"type": "array", "items": {"type": "string", "format": "binary"},
             "description": "一个或多个文件：" + "、".join(accepted_extensions())}
    return {"required": True, "content": {"multipart/form-data": {"schema": {
        "type": "object", "required": [FILES_FIELD], "properties": {FILES_FIELD: files, **fields}}}}}


def _missing_files() -> RequestValidationError:
    return RequestValidationError([{"type": "missing", "loc": ("body", FILES_FIELD), "msg": "Field required"}])


def _text(raw: bytes) -> str:
    return raw.decode("utf-8", errors="replace")


class UploadReader:
    """The parser's callbacks: file parts to the stager, other parts into `fields`."""

    def __init__(self, stager: UploadStager):
        self.stager = stager
        self.fields: dict[str, str] = {}
        self.files = 0
        self.ended = False  # the closing delimiter was seen: the body is whole
        self._header = self._value = self._disposition = b""
        self._field: str | None = None  # the text part being read; None while a file part is
        self._data = bytearray()
        self._field_bytes = 0  # of every text part so far: they are kept in memory

    def callbacks(self) -> dict:
        return {"on_part_begin": self.part_begin, "on_header_field": self.header_field,
                "on_header_value": self.header_value, "on_header_end": self.header_end,
                "on_headers_finished": self.headers_finished, "on_part_data": self.part_data,
                "on_part_end": self.part_end, "on_end": self.end}

    def part_begin(self) -> None:
        self._disposition = b""
        self._field = None
        self._data.clear()

    def header_field(self, data: bytes, start: int, end: int) -> None:
        self._header += data[start:end]

    def header_value(self, data: bytes, start: int, end: int) -> None:
        self._value += data[start:end]

    def header_end(self) -> None:
        if self._header.lower() == b"content-disposition":
            self._disposition = self._value
        self._header = self._value = b""

    def headers_finished(self) -> None:
        _, options = parse_options_header(self._disposition)
        if b"name" not in options:
            raise UploadRejected(400, INVALID)
        name = _text(options[b"name"])
        if b"filename" not in options:
            self._field = name
            return
        if name != FILES_FIELD:
            raise UploadRejected(400, f"文件应放在 {FILES_FIELD} 字段中上传，收到的字段是“{name[:40]}”。")
        self.files += 1
        self.stager.begin(_text(options[b"filename"]))

    def part_data(self, data: bytes, start: int, end: int) -> None:
        if self._field is None:
            self.stager.write(data[start:end])
            return
        self._field_bytes += end - start
        if self._field_bytes > FIELD_LIMIT:
            raise UploadRejected(413, f"请求体过大：文件以外的字段合计超过了 {FIELD_LIMIT // 1024} KB 的上限，已停止接收")
        self._data += data[start:end]

    def part_end(self) -> None:
        if self._field is None:
            self.stager.end()
        else:
            self.fields[self._field] = _text(bytes(self._data))

    def end(self) -> None:
        self.ended = True

    def form(self) -> UploadForm:
        """The fields, checked as FastAPI checks a body (a RequestValidationError answers 422)."""
        if not self.files:
            raise _missing_files()
        try:
            return UploadForm.model_validate(self.fields)
        except ValidationError as exc:
            raise RequestValidationError([{**e, "loc": ("body", *e["loc"])} for e in exc.errors()]) from None


def parse_products(raw: str | None) -> dict[str, str]:
    """The `products` form field: {file name: product}."""
    if not raw:
        return {}
    try:
        data = json.loads(raw)
    except ValueError:
        data = None
    if not isinstance(data, dict) or not all(isinstance(k, str) and isinstance(v, str) and v.strip()
                                             for k, v in data.items()):
        raise UploadRejected(400, 'products 应为 JSON 对象：{"文件名": "产品名"}')
    return {k: " ".join(v.split()) for k, v in data.items()}


def _feed(parser: MultipartParser, chunk: bytes) -> None:
    try:
        parser.write(chunk)
    except FormParserError as exc:
        raise UploadRejected(400, INVALID) from exc


async def receive_upload(request: Request, settings: Settings) -> tuple[StagedBatch, str | None, dict[str, str]]:
    """The upload in `request`, staged, with the product it names for all its files and those named
    per file (`products`). Any refusal, and a client that goes away part way, leaves
    nothing behind (UploadRejected, RequestValidationError, the body cap's HTTPException or ClientDisconnect)."""
    kind, params = parse_options_header(request.headers.get("content-type", ""))
    if kind != b"multipart/form-data":  # a form without files, or no form at all
        raise _missing_files()
    if not params.get(b"boundary"):
        raise UploadRejected(400, "上传数据缺少 multipart 分隔符（boundary）")
    with UploadStager(settings) as stager:
        reader = UploadReader(stager)
        parser = MultipartParser(params[b"boundary"], reader.callbacks())
        # the parser writes files from its callbacks: it runs off the event loop, one chunk at a time
        async for chunk in request.stream():
            if chunk:
                await asyncio.to_thread(_feed, parser, chunk)
        if not reader.ended:
            raise UploadRejected(400, INVALID)  # cut short: the closing delimiter never came
        form = reader.form()
        per_file = parse_products(form.products)
        return await asyncio.to_thread(stager.stage), (form.product or "").strip() or None, per_file
