"""PDF -> Markdown with images beside it: MinerU's cloud API when a token is set, else local pymupdf4llm.

Output layout (both backends): `out_dir/{pdf_stem}.md` and `out_dir/images/*`, with image links
relative to the Markdown file (`images/xxx.jpg`).  Each page's text starts with a page marker line
(`PAGE_MARKER`, an HTML comment, so Markdown readers hide it), from which chunks learn their pages;
running headers and footers are left out.
"""
from __future__ import annotations

import io
import json
import math
import re
import time
import zipfile
from pathlib import Path, PurePosixPath
from typing import Callable

import httpx
import pymupdf
from pymupdf4llm.helpers import pymupdf_rag

from services.errors import PdfConversionError
from services.page_markers import PAGE_MARKER, PAGE_MARKER_RE
from services.settings import Settings, get_settings

NODE = "node_pdf_to_md"
Progress = Callable[[str], None] | None

HTTP_TIMEOUT_S = 60.0
MAX_RETRIES = 3
RETRY_BACKOFF_S = 1.0  # doubled on every retry
EOF_TAIL_BYTES = 1024
MATCH_KEY_CHARS = 12  # leading characters of a MinerU block looked up in full.md


RUNNING_MIN_PAGES = 3
RUNNING_SHARE = 0.5   # "most pages": at least half of them
RUNNING_EDGE_LINES = 3  # a running header or footer sits among a page's first or last lines
RUNNING_MAX_CHARS = 60  # and is short
HEADING_RE = re.compile(r"^\s*#{1,6}\s+.+")
EMPHASIS_RE = re.compile(r"\*\*|__|`")
IMAGE_LINE_RE = re.compile(r"!\[[^\]\n]*\]\([^)\n]*\)")


def page_marker(page: int) -> str:
    return PAGE_MARKER.format(page)


# --- running headers and footers ---------------------------------------------------------------

def _line_key(line):
    """A line as compared across pages: no heading or emphasis marks, spaces squeezed; in body
    text digits alike (so "第 3 页" and "第 4 页" are one footer, while "第3章" headings stay apart).
    Long lines are body text, never a running line: no key."""
    heading = HEADING_RE.match(line)
    key = " ".join(EMPHASIS_RE.sub("", line.strip().lstrip("#")).split()).lower()
    if len(key) > RUNNING_MAX_CHARS:
        return ""
    return key if heading else re.sub(r"\d+", "0", key)


def drop_running_lines(text: str) -> str:
    """Remove running headers and footers: a line among the first or last few of a page that
    recurs there on most pages of a converted PDF.  Text without page markers is returned as is."""
    pages = re.split(rf"(?m)^(?={PAGE_MARKER_RE.pattern})", text)
    marked = [p for p in pages if PAGE_MARKER_RE.match(p)]
    if len(marked) < RUNNING_MIN_PAGES:
        return text
    edges = []  # per page: indexes of its edge lines
    for page in pages:
        lines = page.split("\n")
        content = [i for i, l in enumerate(lines)
                   if l.strip() and not PAGE_MARKER_RE.fullmatch(l.strip()) and not IMAGE_LINE_RE.fullmatch(l.strip())]
        edges.append(set(content[:RUNNING_EDGE_LINES] + content[-RUNNING_EDGE_LINES:]))
    seen = {}
    for page, idx in zip(pages, edges):
        lines = page.split("\n")
        for key in {_line_key(lines[i]) for i in idx}:
            seen[key] = seen.get(key, 0) + 1
    need = max(RUNNING_MIN_PAGES, math.ceil(RUNNING_SHARE * len(marked)))
    running = {k for k, n in seen.items() if k and n >= need}
    if not running:
        return text
    out = []
    for page, idx in zip(pages, edges):
        lines = page.split("\n")
        out.append("\n".join(l for i, l in enumerate(lines) if i not in idx or _line_key(l) not in running))
    return "".join(out)


def _fail(message: str, cause: BaseException | None = None, transient: bool = False) -> PdfConversionError:
    return PdfConversionError(message, node=NODE, cause=cause, transient=transient)


def _say(progress: Progress, line: str) -> None:
    if progress:
        progress(line)


# --- validation ------------------------------------------------------------------------------

def _open_checked(pdf_path: Path) -> pymupdf.Document:
    """Open the PDF, refusing what neither backend can parse, with a message a user can act on."""
    pdf_path = Path(pdf_path)
    if not pdf_path.is_file():
        raise _fail(f"PDF 文件不存在：{pdf_path}")
    if pdf_path.stat().st_size == 0:
        raise _fail(f"PDF 文件为空（0 字节）：{pdf_path.name}")
    try:
        doc = pymupdf.open(pdf_path, filetype="pdf")
    except Exception as exc:
        raise _fail(f"PDF 文件已损坏或不是有效的 PDF：{pdf_path.name}", exc) from exc
    if doc.needs_pass:
        doc.close()
        raise _fail(f"PDF 文件已加密，无法解析：需要密码（{pdf_path.name}）")
    if doc.is_repaired and not _has_eof_marker(pdf_path):
        # MuPDF can rebuild a cut-off file, but the pages past the cut would silently be blank
        doc.close()
        raise _fail(f"PDF 文件不完整（文件被截断或已损坏）：{pdf_path.name}")
    if doc.page_count == 0:
        doc.close()
        raise _fail(f"PDF 文件没有任何页面：{pdf_path.name}")
    return doc


def _has_eof_marker(pdf_path: Path) -> bool:
    with pdf_path.open("rb") as f:
        f.seek(max(0, pdf_path.stat().st_size - EOF_TAIL_BYTES))
        return b"%%EOF" in f.read()


def page_count(pdf_path: Path) -> int:
    with _open_checked(pdf_path) as doc:
        return doc.page_count


def pdf_to_markdown(pdf_path: Path, out_dir: Path, settings: Settings | None = None,
                    progress: Progress = None, stem: str | None = None) -> Path:
    """Convert `pdf_path`; returns the written `{out_dir}/{stem}.md` (the PDF's own stem by default:
    callers importing a user's file pass a short id, so no written name outgrows the file system's
    255 bytes). Raises PdfConversionError."""
    settings = settings or get_settings()
    pdf_path, out_dir = Path(pdf_path), Path(out_dir)
    with _open_checked(pdf_path) as doc:
        pages = doc.page_count
        has_text = any(page.get_text().strip() for page in doc)
    out_dir.mkdir(parents=True, exist_ok=True)
    md_path = out_dir / f"{stem or pdf_path.stem}.md"
    if settings.mineru_api_token:
        _mineru(pdf_path, out_dir, md_path, settings, progress)
    else:
        if not has_text:
            raise _fail("PDF 中没有可提取的文字（可能是扫描件），本地解析无法处理；请配置 MINERU_API_TOKEN 使用 MinerU 解析")
        _say(progress, f"本地解析 PDF（共 {pages} 页）")
        _local(pdf_path, out_dir, md_path, progress)
    _say(progress, f"PDF 解析完成：{md_path.name}")
    return md_path


# --- local backend ---------------------------------------------------------------------------

RULED_MIN_LINES = 4  # a ruled table needs a few horizontal / vertical strokes


def _ruled_lines(page) -> int:
    return sum(1 for drawing in page.get_drawings() for item in drawing["items"] if item[0] in ("l", "re"))


class _LayoutDocument(pymupdf.Document):
    """The PDF as pymupdf4llm reads it, with a cheaper `Page.get_image_rects`.

    pymupdf4llm's column detection asks every page for the rectangles of each of its images, and
    PyMuPDF finds them by decoding the image and every image drawn on the page to compare MD5
    digests: half the parse time of a picture-heavy manual (measured: 1.8 of 3.8 s on 20 pages of
    three photos each).  An image drawn on the page has the pixel size of the image it shows, so
    matching on that size finds the same rectangles without decoding anything."""

    def load_page(self, page_id=0):
        page = super().load_page(page_id)
        page.get_image_rects = _image_rects_by_size(page)
        return page


def _image_rects_by_size(page):
    sizes, shown = {}, []

    def image_rects(name, transform=False):
        if not shown and not sizes:
            sizes.update((item[0], (item[2], item[3])) for item in page.get_images())
            shown.extend(page.get_image_info())  # the text page's image blocks: no decoding
        xref = name[0] if isinstance(name, (list, tuple)) else name
        size = sizes.get(xref)
        return [(pymupdf.Rect(im["bbox"]), pymupdf.Matrix(im["transform"])) if transform else pymupdf.Rect(im["bbox"])
                for im in shown if (im["width"], im["height"]) == size]

    return image_rects


def _local(pdf_path: Path, out_dir: Path, md_path: Path, progress: Progress = None) -> None:
    images = out_dir / "images"
    images.mkdir(exist_ok=True)
    # Image files are named "{filename}-{page}-{n}.jpg"; a link-safe stem keeps the Markdown links valid
    safe_stem = re.sub(r"[^\w.-]+", "-", md_path.stem)
    try:
        doc = _LayoutDocument(str(pdf_path))
        # Table detection is three quarters of the parse time (measured: 4.0 vs 15.7 pages/s on a
        # 102-page manual) and finds nothing on pages without ruling lines, so only ruled pages get it.
        ruled = {i for i, page in enumerate(doc) if _ruled_lines(page) >= RULED_MIN_LINES}
        headers = pymupdf_rag.IdentifyHeaders(doc)  # one heading scale for every page
        pages: dict[int, str] = {}
        for i in range(doc.page_count):
            # The legacy (non-layout) engine, called directly: needs neither the process-wide
            # pymupdf.layout switch nor OCR, and marks headings by font size as `#`.  One page per
            # call, so a long manual reports every page it finished.
            for chunk in pymupdf_rag.to_markdown(
                doc, pages=[i], hdr_info=headers, page_chunks=True,
                table_strategy="lines_strict" if i in ruled else None,
                write_images=True, image_path=str(images), image_format="jpg", filename=safe_stem,
                show_progress=False,
            ):
                pages[chunk["metadata"]["page"]] = chunk["text"]
            _say(progress, f"本地解析 PDF：第 {i + 1}/{doc.page_count} 页")
    except Exception as exc:
        raise _fail(f"本地 PDF 解析失败：{exc}", exc) from exc
    md = drop_running_lines("\n".join(f"{page_marker(k)}\n\n{pages[k]}" for k in sorted(pages)))
    md = md.replace(f"]({images.as_posix()}/", "](images/")
    md_path.write_text(md, encoding="utf-8")


# --- MinerU backend --------------------------------------------------------------------------

def _mineru(pdf_path: Path, out_dir: Path, md_path: Path, settings: Settings, progress: Progress) -> None:
    base = settings.mineru_base_url.rstrip("/")
    headers = {"Authorization": f"Bearer {settings.mineru_api_token}"}
    with httpx.Client(timeout=HTTP_TIMEOUT_S) as client:
        _say(progress, "向 MinerU 申请上传链接")
        batch = _api(client, "POST", f"{base}/file-urls/batch", headers=headers,
                     json={"files": [{"name": pdf_path.name}], "model_version": "vlm"})
        batch_id, upload_url = batch["batch_id"], batch["file_urls"][0]
        _say(progress, f"上传 PDF 到 MinerU（{pdf_path.stat().st_size // 1024} KB）")
        # The signed URL is a storage URL: no auth header, no content type (the signature covers them)
        _request(client, "PUT", upload_url, content=pdf_path.read_bytes())
        zip_url = _poll(client, f"{base}/extract-results/batch/{batch_id}", headers, pdf_path.name,
                        settings, progress)
        _say(progress, "下载 MinerU 解析结果")
        archive = _request(client, "GET", zip_url).content
    _unpack(archive, out_dir, md_path)


def _poll(client: httpx.Client, url: str, headers: dict, file_name: str, settings: Settings,
          progress: Progress) -> str:
    started = time.monotonic()
    while True:
        data = _api(client, "GET", url, headers=headers)
        result = next((r for r in data.get("extract_result", []) if r.get("file_name") == file_name), None)
        state = (result or {}).get("state", "pending")
        if state == "done":
            return result["full_zip_url"]
        if state == "failed":
            raise _fail(f"MinerU 解析失败：{result.get('err_msg') or '未知原因'}")
        waited = time.monotonic() - started
        if waited + settings.mineru_poll_interval_s > settings.mineru_timeout_s:
            raise _fail(f"MinerU 解析超时（已等待 {waited:.0f} 秒，上限 {settings.mineru_timeout_s:g} 秒）",
                        transient=True)
        _say(progress, f"MinerU 解析中（已等待 {waited:.0f} 秒）")
        time.sleep(settings.mineru_poll_interval_s)


def _api(client: httpx.Client, method: str, url: str, **kw) -> dict:
    """A MinerU JSON call: HTTP errors and `code != 0` both become PdfConversionError."""
    body = _request(client, method, url, **kw).json()
    if body.get("code") != 0:
        raise _fail(f"MinerU 返回错误：{body.get('msg') or body.get('code')}")
    return body.get("data") or {}


def _request(client: httpx.Client, method: str, url: str, **kw) -> httpx.Response:
    """Send with retries on 5xx and network errors; 4xx is final."""
    for attempt in range(MAX_RETRIES + 1):
        last = attempt == MAX_RETRIES
        try:
            response = client.request(method, url, **kw)
        except httpx.HTTPError as exc:
            if last:
                raise _fail(f"无法连接 MinerU 服务：{exc}", exc) from exc
        else:
            if response.status_code < 500:
                break
            if last:
                raise _fail(f"MinerU 服务暂时不可用（HTTP {response.status_code}），已重试 {MAX_RETRIES} 次",
                           transient=True)
        time.sleep(RETRY_BACKOFF_S * 2**attempt)
    if response.status_code in (401, 403):
        raise _fail("MinerU 鉴权失败：请检查 MINERU_API_TOKEN 是否正确、是否过期")
    if response.status_code >= 400:
        raise _fail(f"MinerU 请求失败（HTTP {response.status_code}）：{response.text[:200]}")
    return response


def _unpack(archive: bytes, out_dir: Path, md_path: Path) -> None:
    """Write full.md as `md_path` and images/* beside it; refuse entries that escape their folder."""
    try:
        zf = zipfile.ZipFile(io.BytesIO(archive))
    except zipfile.BadZipFile as exc:
        raise _fail("MinerU 返回的结果不是有效的 ZIP 文件", exc) from exc
    with zf:
        names = [n for n in zf.namelist() if not n.endswith("/")]
        md_name = next((n for n in names if PurePosixPath(n).name == "full.md"), None)
        if md_name is None:
            raise _fail("MinerU 结果中缺少 full.md")
        root = PurePosixPath(md_name).parent
        images = (out_dir / "images").resolve()
        for name in names:
            rel = PurePosixPath(name)
            if ".." in rel.parts or rel.is_absolute():
                raise _fail(f"MinerU 结果包含非法路径：{name}")
            if rel.parent.parts[: len(root.parts) + 1] != (*root.parts, "images"):
                continue  # layout.json, ...: not needed downstream
            target = images.joinpath(*rel.parts[len(root.parts) + 1:])
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_bytes(zf.read(name))
        md = zf.read(md_name).decode("utf-8")
        listing = next((n for n in names if PurePosixPath(n).parent == root
                        and PurePosixPath(n).name.endswith("content_list.json")), None)
        if listing:
            md = drop_running_lines(mark_pages(md, _content_list(zf.read(listing))))
        md_path.write_text(md, encoding="utf-8")


def _content_list(raw: bytes) -> list[dict]:
    """MinerU's reading-order block list ({type, text | img_path | table_body, page_idx}); an
    unreadable one only costs the page numbers, never the conversion."""
    try:
        blocks = json.loads(raw.decode("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError):
        return []
    return [b for b in blocks if isinstance(b, dict) and isinstance(b.get("page_idx"), int)] \
        if isinstance(blocks, list) else []


def _block_key(block: dict) -> str:
    """What of a content_list block full.md shows verbatim: the image file name or its first words."""
    if block.get("img_path"):
        return PurePosixPath(str(block["img_path"])).name
    text = str(block.get("text") or block.get("table_body") or "")
    return re.sub(r"\s+", " ", text).strip()[:MATCH_KEY_CHARS]


def mark_pages(md: str, blocks: list[dict]) -> str:
    """Insert a page marker before the first line of every page's first block found in `md`.

    Blocks are looked up in reading order from where the last one was found, so a phrase repeated
    on a later page is never taken for an earlier one; a block not found gives way to the next.
    """
    marks: list[tuple[int, int]] = []  # (offset of a line start, page)
    cursor, page = 0, None
    for block in blocks:
        key = _block_key(block)
        at = md.find(key, cursor) if key else -1
        if at < 0:
            continue
        cursor = at + len(key)
        if block["page_idx"] + 1 != page:
            page = block["page_idx"] + 1
            marks.append((md.rfind("\n", 0, at) + 1, page))
    if not marks:
        return md
    marks[0] = (0, marks[0][1])  # anything before the first block is on its page
    pieces, last = [], 0
    for offset, number in marks:
        pieces += [md[last:offset], f"{page_marker(number)}\n\n"]
        last = offset
    pieces.append(md[last:])
    return "".join(pieces)
