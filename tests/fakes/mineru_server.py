"""A fake MinerU v4 batch API on 127.0.0.1, producing a real result zip from the uploaded PDF.

    with FakeMinerU(token="tok") as mineru:
        settings = settings.replace(mineru_api_token="tok", mineru_base_url=mineru.base_url)

Modes: "normal" (running, then done on the 2nd poll), "failed", "never" (stays running),
"502_first" (the first poll answers HTTP 502, then as normal), "traversal" (the zip holds
an entry escaping its folder), "no_content_list" (a result without the page index, as older
MinerU versions returned).
"""
from __future__ import annotations

import io
import json
import threading
import uuid
import zipfile
from typing import Any

import pymupdf

from fakes._http import QuietHandler, ThreadedServer

MODES = ("normal", "failed", "never", "502_first", "traversal", "no_content_list")
FAILED_MSG = "文件解析失败：页面无法识别"


def build_result_zip(pdf_bytes: bytes, traversal: bool = False, content_list: bool = True) -> bytes:
    """full.md (page text as Markdown, one real image) + images/*.jpg + {id}_content_list.json (the
    blocks in reading order with their 0-based page_idx), as MinerU's full_zip_url holds."""
    doc = pymupdf.open(stream=pdf_bytes, filetype="pdf")
    lines: list[str] = []
    blocks: list[dict] = []
    image: tuple[str, bytes] | None = None
    for page in doc:
        text = page.get_text().strip()
        if text:
            head, _, rest = text.partition("\n")
            lines += [f"# {head.strip()}", "", rest.strip(), ""]
            blocks += [{"type": "text", "text": head.strip(), "text_level": 1, "page_idx": page.number},
                       {"type": "text", "text": rest.strip(), "page_idx": page.number}]
        if image is None and page.get_images():
            pix = pymupdf.Pixmap(doc, page.get_images()[0][0])
            if pix.n - pix.alpha > 3:  # CMYK etc. cannot be written as JPEG directly
                pix = pymupdf.Pixmap(pymupdf.csRGB, pix)
            data = pix.tobytes("jpg")
            image = (f"{uuid.uuid4().hex}.jpg", data)
            lines += [f"![](images/{image[0]})", ""]
            blocks.append({"type": "image", "img_path": f"images/{image[0]}", "page_idx": page.number})
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w") as zf:
        zf.writestr("full.md", "\n".join(lines))
        zf.writestr("layout.json", json.dumps({"pdf_info": [], "_backend": "vlm"}))
        if content_list:
            zf.writestr(f"{uuid.uuid4()}_content_list.json", json.dumps(blocks, ensure_ascii=False))
        if image:
            zf.writestr(f"images/{image[0]}", image[1])
        if traversal:
            zf.writestr("images/../../evil.txt", "escaped")
    return buf.getvalue()


class FakeMinerU(ThreadedServer):
    def __init__(self, token: str = "test-token", mode: str = "normal", polls_to_done: int = 2):
        assert mode in MODES, mode
        self.token, self.mode, self.polls_to_done = token, mode, polls_to_done
        self.batches: dict[str, dict[str, Any]] = {}  # batch_id -> {"request", "files", "polls"}
        self.requests: list[tuple[str, str]] = []  # (method, path)
        self._lock = threading.Lock()
        self.base_url = ""
        self.root = ""

    def _handler_class(self) -> type[QuietHandler]:
        return _make_handler(self)

    def _on_started(self, port: int) -> str:
        self.root = f"http://127.0.0.1:{port}"
        self.base_url = f"{self.root}/api/v4"
        return self.base_url

    def _result(self, batch_id: str) -> tuple[int, dict]:
        batch = self.batches[batch_id]
        with self._lock:
            batch["polls"] += 1
            polls = batch["polls"]
        if self.mode == "502_first" and polls == 1:
            return 502, {"code": -1, "msg": "Bad Gateway"}
        results = []
        for idx, f in enumerate(batch["files"]):
            item = {"file_name": f["name"], "data_id": f.get("data_id", ""), "err_msg": "", "full_zip_url": ""}
            if f["bytes"] is None:
                item["state"] = "waiting-file"
            elif self.mode == "failed":
                item.update(state="failed", err_msg=FAILED_MSG)
            elif self.mode != "never" and polls >= self.polls_to_done + (self.mode == "502_first"):
                item.update(state="done", full_zip_url=f"{self.root}/zips/{batch_id}/{idx}.zip")
            else:
                item.update(state="running", extract_progress={"extracted_pages": 1, "total_pages": 9,
                                                              "start_time": "2025-01-01 00:00:00"})
            results.append(item)
        return 200, {"code": 0, "msg": "ok", "trace_id": uuid.uuid4().hex,
                     "data": {"batch_id": batch_id, "extract_result": results}}


def _make_handler(fake: FakeMinerU) -> type[QuietHandler]:
    api = "/api/v4"

    class Handler(QuietHandler):
        def _authorized(self) -> bool:
            if self.headers.get("Authorization") != f"Bearer {fake.token}":
                self.send_json(401, {"code": "A0202", "msg": "用户 token 无效", "data": None})
                return False
            return True

        def do_POST(self) -> None:
            fake.requests.append(("POST", self.path))
            body = json.loads(self.read_body() or b"{}")
            if self.path != f"{api}/file-urls/batch":
                self.send_json(404, {"code": 404, "msg": "not found"})
                return
            if not self._authorized():
                return
            files = body.get("files") or []
            if not files or not all(f.get("name") for f in files):
                self.send_json(200, {"code": -10002, "msg": "参数错误：files 不能为空"})
                return
            batch_id = uuid.uuid4().hex
            fake.batches[batch_id] = {"request": body, "polls": 0,
                                      "files": [dict(f, bytes=None) for f in files]}
            urls = [f"{fake.root}/upload/{batch_id}/{i}?Signature={uuid.uuid4().hex}" for i in range(len(files))]
            self.send_json(200, {"code": 0, "msg": "ok", "trace_id": uuid.uuid4().hex,
                                 "data": {"batch_id": batch_id, "file_urls": urls}})

        def do_PUT(self) -> None:
            fake.requests.append(("PUT", self.path))
            parts = self.path.split("?")[0].split("/")  # /upload/{batch}/{idx}
            data = self.read_body()
            if len(parts) != 4 or parts[1] != "upload" or parts[2] not in fake.batches:
                self.send_bytes(403, b"<Error>SignatureDoesNotMatch</Error>", "application/xml")
                return
            fake.batches[parts[2]]["files"][int(parts[3])]["bytes"] = data
            self.send_bytes(200, b"", "text/plain")

        def do_GET(self) -> None:
            fake.requests.append(("GET", self.path))
            prefix = f"{api}/extract-results/batch/"
            if self.path.startswith(prefix):
                if not self._authorized():
                    return
                batch_id = self.path[len(prefix):]
                if batch_id not in fake.batches:
                    self.send_json(200, {"code": -60012, "msg": "找不到任务"})
                    return
                self.send_json(*fake._result(batch_id))
            elif self.path.startswith("/zips/"):
                _, _, batch_id, name = self.path.split("/")
                pdf = fake.batches[batch_id]["files"][int(name.split(".")[0])]["bytes"]
                archive = build_result_zip(pdf, traversal=fake.mode == "traversal",
                                           content_list=fake.mode != "no_content_list")
                self.send_bytes(200, archive, "application/zip")
            else:
                self.send_json(404, {"code": 404, "msg": "not found"})

    return Handler
