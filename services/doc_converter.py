"""Word (.docx), web page (.html / .htm) and plain-text (.txt) manuals -> Markdown, as
services.pdf_parser does for PDFs.

Output layout (every type): `out_dir/{stem}.md` and `out_dir/images/*`, with image links relative
to the Markdown file, so the image step captions and uploads them like a Markdown manual's own.
"""
from __future__ import annotations

import base64
import binascii
import re
import shutil
import tempfile
import zipfile
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import Callable, Iterator
from urllib.parse import quote, unquote_to_bytes

import docx
import msoffcrypto
from bs4 import BeautifulSoup, NavigableString, Tag
from bs4.element import PreformattedString
from docx.enum.style import WD_STYLE_TYPE
from docx.oxml.ns import qn
from docx.table import Table
from docx.text.paragraph import Paragraph
from markdownify import MarkdownConverter

from services.errors import DocumentConversionError
from services.text_files import BOMS, decode_bytes, read_text

NODE = "node_doc_to_md"
# A local image reference as the source wrote it -> the file it names, or None where it may not be
# used (the import graph passes its own rule: an upload may only use its own folder).
ImageResolver = Callable[[str], "Path | None"]
KIND_NAMES = {"docx": "Word 文档", "html": "网页", "txt": "文本文件"}


@dataclass
class Converted:
    md_path: Path
    headings: int
    tables: int
    images: int


def _fail(message: str, cause: BaseException | None = None) -> DocumentConversionError:
    return DocumentConversionError(message, node=NODE, cause=cause)


class _Images:
    """The pictures of one document, written to `out_dir/images` under fresh link-safe names."""

    def __init__(self, out_dir: Path):
        self.folder = out_dir / "images"
        self.count = 0

    def add(self, data: bytes, suffix: str) -> str:
        self.count += 1
        self.folder.mkdir(parents=True, exist_ok=True)
        name = f"image-{self.count:03d}{re.sub(r'[^.a-z0-9]', '', suffix.lower())}"
        (self.folder / name).write_bytes(data)
        return f"images/{name}"


def _write(out_dir: Path, stem: str, markdown: str) -> Path:
    out_dir.mkdir(parents=True, exist_ok=True)
    md_path = out_dir / f"{stem}.md"
    md_path.write_text(re.sub(r"\n{3,}", "\n\n", markdown).strip() + "\n", encoding="utf-8")
    return md_path


def _heading_count(markdown: str) -> int:
    return len(re.findall(r"^#{1,6}\s", markdown, re.MULTILINE))


def convert_to_markdown(path: Path, kind: str, out_dir: Path, *, max_bytes: int,
                        resolve_image: ImageResolver) -> Converted:
    """Convert `path` (a "docx", "html" or "txt" file); raises DocumentConversionError in Chinese."""
    path, out_dir = Path(path), Path(out_dir)
    converters = {"docx": _docx, "html": _html, "txt": _txt}
    if kind not in converters:
        raise _fail(f"无法转换“{path.name}”：不支持的类型 {kind}")
    return converters[kind](path, out_dir, max_bytes=max_bytes, resolve_image=resolve_image)


def markdown_of(path: Path, kind: str, *, max_bytes: int) -> str:
    """The Markdown a document converts to, for reading only: its pictures are not resolved and
    nothing it writes is kept."""
    with tempfile.TemporaryDirectory() as tmp:
        converted = convert_to_markdown(path, kind, Path(tmp), max_bytes=max_bytes, resolve_image=lambda _src: None)
        return converted.md_path.read_text(encoding="utf-8")


# --- plain text --------------------------------------------------------------------------------

def _txt(path: Path, out_dir: Path, **_) -> Converted:
    text = read_text(path)
    md_path = _write(out_dir, path.stem, text)
    return Converted(md_path, _heading_count(text), 0, 0)


# --- Word ----------------------------------------------------------------------------------------

OLE_MAGIC = b"\xd0\xcf\x11\xe0\xa1\xb1\x1a\xe1"
# A .docx is a zip: unpacked to more than this many times the upload limit it is a zip bomb.
MAX_UNPACKED_RATIO = 5
MC_FALLBACK = "{http://schemas.openxmlformats.org/markup-compatibility/2006}Fallback"
A_BLIP = "{http://schemas.openxmlformats.org/drawingml/2006/main}blip"
V_IMAGEDATA = "{urn:schemas-microsoft-com:vml}imagedata"
W_T, W_TAB, W_BR, W_CR = qn("w:t"), qn("w:tab"), qn("w:br"), qn("w:cr")
W_P, W_TBL, W_SDT = qn("w:p"), qn("w:tbl"), qn("w:sdt")
WP_DOCPR = qn("wp:docPr")
DOCX_LEAVES = {W_T, W_TAB, W_BR, W_CR, WP_DOCPR, A_BLIP, V_IMAGEDATA}
# Built-in styles are stored under their English names; WPS and localised templates use Chinese.
HEADING_STYLE = re.compile(r"^(?:heading|标题)\s*([1-9])$", re.IGNORECASE)
TITLE_STYLES = {"title", "标题"}
CAPTION_STYLES = {"caption", "题注"}
TOC_STYLE = re.compile(r"^(?:toc|目录)\s*\d$", re.IGNORECASE)


def _check_docx(path: Path, max_bytes: int) -> None:
    """Refuse, before parsing, what python-docx cannot read or should not unpack."""
    with path.open("rb") as f:
        magic = f.read(len(OLE_MAGIC))
        f.seek(0)
        if magic == OLE_MAGIC:  # an encrypted .docx is an OLE container; so is a Word 97-2003 file
            try:
                encrypted = msoffcrypto.OfficeFile(f).is_encrypted()
            except Exception:  # an OLE container of another kind
                encrypted = False
            if encrypted:
                raise _fail(f"Word 文件已加密，无法解析：需要密码（{path.name}）。请去掉密码后重新导入。")
            raise _fail(f"“{path.name}”不是 .docx 格式（可能是旧版 Word 97-2003 的 .doc 文件），"
                        "请在 Word 里另存为 .docx 后再导入。")
    try:
        with zipfile.ZipFile(path) as archive:
            unpacked = sum(info.file_size for info in archive.infolist())
    except (zipfile.BadZipFile, OSError) as exc:
        raise _fail(f"Word 文件已损坏或不是有效的 .docx 文件：{path.name}", exc) from exc
    limit = max_bytes * MAX_UNPACKED_RATIO
    if unpacked > limit:
        raise _fail(f"Word 文件“{path.name}”解压后有 {unpacked / 1024 / 1024:.1f} MB，"
                    f"超过了 {limit / 1024 / 1024:.0f} MB 的上限。")


def _leaves(element) -> Iterator:
    """Text, break, picture and picture-description elements in document order; the fallback
    copy that Word writes beside a drawing for old readers is skipped."""
    for child in element:
        if child.tag == MC_FALLBACK:
            continue
        if child.tag in DOCX_LEAVES:
            yield child
        else:
            yield from _leaves(child)


class _Styles:
    """Each paragraph style's name and the names it is based on, lower-cased, read once
    (python-docx looks a paragraph's style up by scanning every style, each time it is asked)."""

    def __init__(self, document):
        by_id = {s.style_id: s for s in document.styles if s.type == WD_STYLE_TYPE.PARAGRAPH}
        self.chains: dict[str, list[str]] = {}
        for style_id, style in by_id.items():
            names = []
            while style is not None and len(names) < 20:  # a loop of base styles ends somewhere
                names.append((style.name or "").strip().lower())
                style = style.base_style
            self.chains[style_id] = names
        default = document.styles.default(WD_STYLE_TYPE.PARAGRAPH)
        self.default = self.chains.get(default.style_id, []) if default is not None else []

    def names(self, block) -> list[str]:
        if not isinstance(block, Paragraph):
            return []
        ref = block._p.find(f"{qn('w:pPr')}/{qn('w:pStyle')}")
        return self.chains.get(ref.get(qn("w:val")), self.default) if ref is not None else self.default

    def has(self, block, wanted: set[str]) -> bool:
        return any(n in wanted for n in self.names(block))

    def heading_level(self, paragraph: Paragraph, title_offset: int) -> int:
        """1-6 for a heading (Word style or outline level), 0 for body text.  Below a document
        title (the Title style) every heading moves one level down."""
        if self.has(paragraph, TITLE_STYLES):
            return 1
        for name in self.names(paragraph):
            m = HEADING_STYLE.match(name)
            if m:
                return min(6, int(m.group(1)) + title_offset)
        outline = paragraph._p.find(f"{qn('w:pPr')}/{qn('w:outlineLvl')}")
        level = int(outline.get(qn("w:val"), "9")) if outline is not None else 9
        return min(6, level + 1 + title_offset) if level < 9 else 0

    def is_list_item(self, paragraph: Paragraph) -> bool:
        own = self.names(paragraph)[:1]
        return paragraph._p.find(f"{qn('w:pPr')}/{qn('w:numPr')}") is not None or bool(
            own and own[0].startswith("list"))


def _blocks(element, parent, styles: _Styles) -> Iterator[Paragraph | Table]:
    """Paragraphs and tables in body order, those inside content controls (a cover page) too;
    a table of contents is left out: it only repeats the headings."""
    for child in element:
        if child.tag == W_P:
            paragraph = Paragraph(child, parent)
            if not any(TOC_STYLE.match(name) for name in styles.names(paragraph)):
                yield paragraph
        elif child.tag == W_TBL:
            yield Table(child, parent)
        elif child.tag == W_SDT:
            gallery = child.find(f"{qn('w:sdtPr')}/{qn('w:docPartObj')}/{qn('w:docPartGallery')}")
            content = child.find(qn("w:sdtContent"))
            if content is not None and (gallery is None or "contents" not in (gallery.get(qn("w:val")) or "").lower()):
                yield from _blocks(content, parent, styles)


class _DocxWriter:
    def __init__(self, document, images: _Images):
        self.document = document
        self.images = images
        self.styles = _Styles(document)
        self.tables = 0

    def inline(self, p_element, caption: str = "") -> str:
        """A paragraph's text with its pictures in place, as Markdown."""
        out, alt = [], ""
        for el in _leaves(p_element):
            if el.tag == W_T:
                out.append(el.text or "")
            elif el.tag == W_TAB:
                out.append(" ")
            elif el.tag in (W_BR, W_CR):
                out.append("\n")
            elif el.tag == WP_DOCPR:
                alt = el.get("descr") or el.get("title") or ""
            else:
                part = self.document.part.related_parts.get(el.get(qn("r:embed")) or el.get(qn("r:id")) or "")
                if part is None:  # a linked picture outside the file: nothing to extract
                    continue
                link = self.images.add(part.blob, PurePosixPath(str(part.partname)).suffix)
                label = re.sub(r"[\[\]\n]+", " ", alt or caption).strip()
                out.append(f"\n\n![{label}]({link})\n\n")
                alt = ""
        return "".join(out)

    def table(self, table: Table) -> str:
        rows = []
        for row in table.rows:
            cells, seen = [], set()
            for cell in row.cells:
                if id(cell._tc) in seen:  # a cell spanning columns repeats once per column
                    continue
                seen.add(id(cell._tc))
                text = " ".join(self.inline(p._p) for p in cell.paragraphs)
                text += " " + " ".join(self.table(t).replace("\n", " ") for t in cell.tables)
                cells.append(" ".join(text.split()).replace("|", "\\|"))
            if any(cells):
                rows.append(cells)
        if not rows:
            return ""
        self.tables += 1
        width = max(len(r) for r in rows)
        rows = [r + [""] * (width - len(r)) for r in rows]
        lines = ["| " + " | ".join(rows[0]) + " |", "|" + " --- |" * width]
        lines += ["| " + " | ".join(r) + " |" for r in rows[1:]]
        return "\n".join(lines)

    def body(self) -> str:
        styles = self.styles
        blocks = list(_blocks(self.document.element.body, self.document._body, styles))
        title_offset = int(any(styles.has(b, TITLE_STYLES) for b in blocks))
        out = []
        for i, block in enumerate(blocks):
            if isinstance(block, Table):
                out.append(self.table(block))
                continue
            following = blocks[i + 1] if i + 1 < len(blocks) else None
            # Word's own caption paragraph under a picture describes it when the picture has no alt text
            caption = following.text.strip() if styles.has(following, CAPTION_STYLES) else ""
            text = self.inline(block._p, caption).strip()
            if not text:
                continue
            level = styles.heading_level(block, title_offset)
            if level and "![" not in text:
                out.append("#" * level + " " + " ".join(text.split()))
            elif styles.is_list_item(block):
                if out and out[-1].startswith("- "):  # one list, not one list per item
                    out[-1] += "\n- " + text
                else:
                    out.append("- " + text)
            else:
                out.append(text)
        return "\n\n".join(out)


def _docx(path: Path, out_dir: Path, *, max_bytes: int, **_) -> Converted:
    _check_docx(path, max_bytes)
    try:
        document = docx.Document(str(path))
    except Exception as exc:  # not a Word package (a renamed .xlsx, a zip of anything)
        raise _fail(f"Word 文件已损坏或不是有效的 .docx 文件：{path.name}", exc) from exc
    writer = _DocxWriter(document, _Images(out_dir))
    markdown = writer.body()
    md_path = _write(out_dir, path.stem, markdown)
    return Converted(md_path, _heading_count(markdown), writer.tables, writer.images.count)


# --- HTML ----------------------------------------------------------------------------------------

# Not <form>: some sites wrap the whole page in one.  Not hidden elements: tab panes of a spec
# sheet are hidden until clicked.
DROP_TAGS = ["script", "style", "noscript", "template", "iframe", "object", "embed", "canvas", "svg",
             "button", "input", "select", "textarea", "nav", "aside", "dialog", "link", "meta"]
DROP_ROLES = {"navigation", "banner", "contentinfo", "complementary", "search", "menu", "menubar", "dialog"}
# class / id words of site chrome; "header" and "footer" only outside the main content, where
# an article's own header holds its title
CHROME_WORDS = {"nav", "navbar", "navigation", "menu", "sidebar", "sidenav", "breadcrumb", "breadcrumbs",
                "toc", "cookie", "cookies", "share", "social", "pagination", "pager", "related", "comments",
                "advert", "ads", "skip"}
PAGE_CHROME_WORDS = CHROME_WORDS | {"header", "footer", "topbar"}
# A block of several links that are nearly all its text is a menu, whatever its markup.
LINK_BLOCK_TAGS = {"ul", "ol", "div", "section", "p", "dl"}
LINK_BLOCK_MIN_LINKS = 3
LINK_BLOCK_MIN_SHARE = 0.7
DECLARED_CHARSET = re.compile(rb"<meta[^>]+charset\s*=\s*[\"']?([A-Za-z0-9_-]+)", re.IGNORECASE)
DATA_IMAGE = re.compile(r"^data:image/([\w.+-]+)(;base64)?,(.*)$", re.IGNORECASE | re.DOTALL)
IMAGE_TYPES = {"png": ".png", "jpeg": ".jpg", "jpg": ".jpg", "gif": ".gif", "webp": ".webp", "bmp": ".bmp",
               "svg+xml": ".svg"}


def _words(tag: Tag) -> set[str]:
    words: set[str] = set()
    for value in (" ".join(tag.get("class") or []), tag.get("id") or ""):
        for name in str(value).lower().split():
            words.update(w for w in re.split(r"[^a-z0-9]+", name) if w)
            words.add(re.sub(r"[^a-z0-9]+", "", name))
    return words


def _main_content(soup: BeautifulSoup) -> tuple[Tag, bool]:
    """(the element holding the page's content, whether it was marked as such by the page)."""
    for found in (soup.find("main"), soup.find(attrs={"role": "main"})):
        if isinstance(found, Tag):
            return found, True
    articles = soup.find_all("article")
    if articles:
        return max(articles, key=lambda a: len(a.get_text(" ", strip=True))), True
    return soup.body or soup, False


def _strip_chrome(root: Tag, marked: bool) -> None:
    for tag in root.find_all(DROP_TAGS):
        tag.decompose()
    if not marked:
        for tag in root.find_all(["header", "footer"]):
            tag.decompose()
    words = CHROME_WORDS if marked else PAGE_CHROME_WORDS
    for tag in root.find_all(True):
        if tag.decomposed:
            continue
        if str(tag.get("role") or "").lower() in DROP_ROLES or _words(tag) & words:
            tag.decompose()
    _drop_link_blocks(root)


def _drop_link_blocks(tag: Tag) -> tuple[int, int, int]:
    """(text characters, link-text characters, links) of `tag` once the menus inside it are gone.
    Innermost first, in one pass: once a menu is gone, the block around it is judged on what is left."""
    text = linked = links = 0
    for child in list(tag.children):
        if isinstance(child, NavigableString):
            text += 0 if isinstance(child, PreformattedString) else len(child.strip())  # comments are no text
            continue
        if not isinstance(child, Tag):
            continue
        t, k_text, k = _drop_link_blocks(child)
        if child.name == "a":
            k_text, k = t, k + 1
        if child.name in LINK_BLOCK_TAGS and k >= LINK_BLOCK_MIN_LINKS and t and k_text / t >= LINK_BLOCK_MIN_SHARE:
            child.decompose()
            continue
        text, linked, links = text + t, linked + k_text, links + k
    return text, linked, links


def _image_alt(img: Tag) -> str:
    alt = (img.get("alt") or img.get("title") or "").strip()
    figure = img.find_parent("figure")
    caption = figure.find("figcaption") if figure else None
    return alt or (caption.get_text(" ", strip=True) if caption else "")


def _relink_images(root: Tag, images: _Images, resolve_image: ImageResolver) -> None:
    """Embedded (data:) and local pictures are written beside the Markdown; remote ones stay links."""
    for img in root.find_all("img"):
        src = str(img.get("src") or img.get("data-src") or img.get("data-original") or "").strip()
        if not src and img.get("srcset"):
            src = str(img["srcset"]).split(",")[0].split()[0]
        if not src:
            img.decompose()
            continue
        img.attrs = {"alt": _image_alt(img), "src": src}
        embedded = DATA_IMAGE.match(src)
        if embedded:
            kind, is_base64, payload = embedded.groups()
            suffix = IMAGE_TYPES.get(kind.lower())
            try:
                data = base64.b64decode(payload, validate=False) if is_base64 else unquote_to_bytes(payload)
            except (binascii.Error, ValueError):
                data = b""
            if suffix is None or not data:
                img.decompose()  # an unreadable inline picture: nothing to show or describe
                continue
            img["src"] = images.add(data, suffix)
        elif re.match(r"^(https?:)?//", src, re.IGNORECASE):
            img["src"] = quote(src, safe=":/?#[]@!$&'*+,;=%~")
        else:
            local = resolve_image(src)
            if local is not None:
                img["src"] = images.add(local.read_bytes(), local.suffix)
            else:  # kept as written: the image step reports it as missing
                img["src"] = quote(src, safe="/#?%")


class _Markdown(MarkdownConverter):
    """markdownify, keeping pictures inside table cells and links (its default drops them to alt)."""

    def __init__(self):
        super().__init__(heading_style="ATX", bullets="-", escape_asterisks=False, escape_underscores=False,
                         escape_misc=False, table_infer_header=True,
                         keep_inline_images_in=["td", "th", "a", "span", "strong", "em", "b", "i", "li"])


def _read_page(path: Path) -> str:
    """A page in the charset it declares (Big5, Shift_JIS... are not guessed right), else decoded
    like any text file."""
    try:
        raw = path.read_bytes()
    except OSError as exc:
        raise _fail(f"无法读取文件 {path.name}：{exc}", exc) from exc
    declared = DECLARED_CHARSET.search(raw[:4096])
    if declared and not any(raw.startswith(bom) for bom, _codec in BOMS):
        try:
            return raw.decode(declared.group(1).decode("ascii"))
        except (LookupError, UnicodeDecodeError):  # unknown or wrong declaration (GB2312 holding GBK)
            pass
    return decode_bytes(raw, path.name)


def _html(path: Path, out_dir: Path, *, resolve_image: ImageResolver, **_) -> Converted:
    soup = BeautifulSoup(_read_page(path), "lxml")
    page_title = soup.title.get_text(" ", strip=True) if soup.title else ""
    had_text = bool(re.search(r"\w", (soup.body or soup).get_text(" ", strip=True)))
    root, marked = _main_content(soup)
    _strip_chrome(root, marked)
    images = _Images(out_dir)
    _relink_images(root, images, resolve_image)
    tables = len(root.find_all("table"))
    markdown = _Markdown().convert_soup(root)
    if not re.search(r"^#\s", markdown, re.MULTILINE) and page_title:
        markdown = f"# {page_title}\n\n{markdown}"
    body_only = re.sub(r"^#.*$|!\[[^\]]*\]\([^)]*\)", "", markdown, flags=re.MULTILINE)
    if had_text and not re.search(r"\w", body_only):
        shutil.rmtree(out_dir, ignore_errors=True)
        raise _fail(f"网页“{path.name}”里没有找到正文（只有导航、页眉页脚等），无法导入。")
    md_path = _write(out_dir, path.stem, markdown)
    return Converted(md_path, _heading_count(markdown), tables, images.count)
