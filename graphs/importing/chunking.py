"""Markdown -> retrieval chunks (node_document_split), as pure functions.

Pipeline for a manual: ``html_to_markdown`` (documentation sites leave HTML/MDX inside Markdown) then
``split_markdown``: heading sections -> long sections cut by RecursiveCharacterTextSplitter -> short
neighbours merged.  ``mode="plain"`` is the plain heading rule (heading text as title, 2000 / 500 characters); ``mode="smart"`` (default) keeps
callout and empty headings inline, titles chunks with their heading path, merges tiny sibling
sections, keeps numbered siblings at one level ("2.1" inside "2."), lets no document title or front
matter heading (前言, 修订历史, 版权声明 …) head every section, and keeps a table of contents out of
every section (its text stays, under the document's name).

Converted PDFs carry page markers (``services.page_markers.PAGE_MARKER``): every chunk then gets the
pages its text lies on.  Other documents get page 0.
"""
import html
import re
from dataclasses import dataclass

from langchain_text_splitters import RecursiveCharacterTextSplitter

from graphs.importing.state import Chunk
from services.page_markers import PAGE_MARKER_RE

NO_TITLE = "无标题"
PATH_SEP = " > "
MILVUS_VARCHAR_BYTES = 65535
MIN_MAX_LEN = 100
# The import's chunk sizes (characters): chunks are cut at headings, split above the maximum and
# merged with a neighbour of the same section below the minimum.
MAX_CONTENT_LENGTH = 2000
MIN_CONTENT_LENGTH = 500
SEPARATORS = ["\n\n", "\n", "。", "！", "？", "；", ".", "!", "?", ";", " ", ""]

HEADING_RE = re.compile(r"^\s*#{1,6}\s+.+")
FENCE_OPEN_RE = re.compile(r"^ {0,3}(`{3,}|~{3,})(.*)$")
FENCE_CLOSE_RE = re.compile(r"^ {0,3}(`{3,}|~{3,})[ \t]*$")
_WORD_RE = re.compile(r"[^\W\d_]")  # a letter or a CJK character
_CN_DIGITS = "零一二三四五六七八九"
_CN_NUMBER = "[零〇一二三四五六七八九十]+"
_NUMBERINGS = [  # heading numbering styles; group 1 is the number, other groups refine the style
    ("chapter", re.compile(rf"^第\s*(\d+|{_CN_NUMBER})\s*([章节篇部])")),
    ("cn", re.compile(rf"^({_CN_NUMBER})\s*[、.．]")),
    ("cn-paren", re.compile(rf"^[（(]\s*({_CN_NUMBER})\s*[)）]")),
    ("paren", re.compile(r"^[（(]\s*(\d+)\s*[)）]")),
    ("dotted", re.compile(r"^(\d+(?:\.\d+)*)(?=[.、．)）\s]|$)")),
]
_NUMBER_PREFIX_RE = re.compile(rf"^(?:[（(]?\s*(?:\d+(?:\.\d+)*|{_CN_NUMBER})\s*[)）.、．]?\s*)+")
PAGE_MARKER_LINE_RE = re.compile(rf"^[ \t]*{PAGE_MARKER_RE.pattern}[ \t]*\n?", re.MULTILINE)
_PAGE_OR_IMAGE_RE = re.compile(rf"{PAGE_MARKER_RE.pattern}|!\[[^\]\n]*\]\([^)\n]*\)")
# Front matter: headings that introduce the manual rather than head its chapters.
FRONT_MATTER_RE = re.compile(
    r"^(?:前言|序言|序|引言|写在前面|致用户|致尊敬的用户|目录|修订历史|修订记录|版本历史|版本记录|更新记录|文档历史|"
    r"版权|版权声明|版权信息|版权所有|版权说明|免责声明|法律声明|声明|商标|商标声明|关于本手册|关于本说明书|关于本文档|"
    r"关于本书|手册说明|阅读说明|contents|table of contents|preface|foreword|introduction to this manual|"
    r"revision history|document history|change log|changelog|copyright|copyright notice|disclaimer|"
    r"legal notice|legal information|trademarks?|about this (?:manual|guide|document))$", re.IGNORECASE)
TOC_HEADING_RE = re.compile(r"^(?:目录|contents|table of contents)$", re.IGNORECASE)
# A table of contents line: a title, dot leaders and a page number; a numbered title and a page
# number; or a list item linking to an anchor of the same page.
_TOC_LEADER_RE = re.compile(r"^(?P<title>.*?[^\W\d_].*?)\s*(?:…+|(?:[.．·•_-]\s?){3,})\s*(?P<page>\d{1,4})$")
_TOC_NUMBERED_RE = re.compile(
    rf"^(?P<title>(?:第\s*(?:\d+|{_CN_NUMBER})\s*[章节篇部]|\d+(?:\.\d+)*[.、．]?|{_CN_NUMBER}、)\s*\S.*?)"
    r"(?:\s+|\s*\|\s*)(?P<page>\d{1,4})$")
_TOC_ANCHOR_RE = re.compile(r"^(?:[-*+]|\d+[.)])\s+\[[^\]\n]+\]\(#[^)\s]*\)$")
TOC_MIN_LINES = 3
CALLOUT_RE = re.compile(
    r"^(?:说明|注意|注意事项|警告|提示|注|小贴士|note|notes|warning|tip|tips|caution|important)[！!：:]*$",
    re.IGNORECASE)


def embed_text(chunk: Chunk) -> str:
    """What a chunk is embedded as: the product name in the text separates near-identical
    instructions of twins."""
    return f"{chunk['product']}\n{chunk['content']}"


def normalize_newlines(text: str) -> str:
    return text.replace("\r\n", "\n").replace("\r", "\n")


def _classify(lines):
    """Yield (kind, line), kind in 'fence' (a marker line), 'fenced' (inside a block) or 'text'.

    A fence closes only on a line of the same character, at least as long, with nothing else on it;
    an unclosed fence runs to the end of the document.
    """
    fence = None
    for line in lines:
        if fence is None:
            m = FENCE_OPEN_RE.match(line)
            if m:
                fence = (m.group(1)[0], len(m.group(1)))
                yield "fence", line
            else:
                yield "text", line
        else:
            m = FENCE_CLOSE_RE.match(line)
            if m and m.group(1)[0] == fence[0] and len(m.group(1)) >= fence[1]:
                fence = None
                yield "fence", line
            else:
                yield "fenced", line


# ---------------------------------------------------------------------------------------------
# HTML / MDX clean-up

# Docusaurus YAML front matter (sidebar labels/positions) says nothing the page body does not.
_FRONT_MATTER_RE = re.compile(r"\A---\n.*?\n---[ \t]*(?:\n|\Z)", re.DOTALL)
_COMMENT_RE = re.compile(rf"(?!{PAGE_MARKER_RE.pattern})<!--.*?-->", re.DOTALL)  # page markers stay
_MDX_IMPORT_RE = re.compile(r"^import\s+(?:.+\s+from\s+)?['\"][^'\"]+['\"];?[ \t]*$", re.MULTILINE)
# ":::tip Title" / ":::" fence lines of Docusaurus admonitions; an optional title is kept as text.
_ADMONITION_RE = re.compile(r"^[ \t]*:::+[ \t]*[A-Za-z]*[ \t]*\[?(.*?)\]?[ \t]*$", re.MULTILINE)
_INLINE_CODE_RE = re.compile(r"(?<!`)(`+)(?!`)(.+?)(?<!`)\1(?!`)")
_ATTR_RE = re.compile(r"([A-Za-z_:][\w:.-]*)\s*=\s*(\"[^\"]*\"|'[^']*'|[^\s>]+)")
_IMG_RE = re.compile(r"<(?:img|Image)\b([^>]*?)/?>", re.IGNORECASE)
_LINK_RE = re.compile(r"<a\b([^>]*)>(.*?)</a\s*>", re.IGNORECASE | re.DOTALL)
_TABLE_RE = re.compile(r"<table\b[^>]*>(.*?)(?:</table\s*>|$)", re.IGNORECASE | re.DOTALL)
# End tags are optional in HTML, so a row/cell runs to the next opening tag.
_ROW_RE = re.compile(r"<tr\b[^>]*>(.*?)(?=<tr\b|</table|$)", re.IGNORECASE | re.DOTALL)
_CELL_RE = re.compile(r"<t[hd]\b[^>]*>(.*?)(?=<t[hd]\b|</tr|$)", re.IGNORECASE | re.DOTALL)
# Column padding of pipe tables only spends the chunk budget (GPIO tables are mostly spaces).
_PIPE_ROW_RE = re.compile(r"^[ \t]*\|.*\|[ \t]*$", re.MULTILINE)
_BR_RE = re.compile(r"<br\s*/?>", re.IGNORECASE)
# Only real HTML tags and capitalised MDX components are stripped: prose placeholders such as
# "ssh root@<ip>" or "<文件名>" must survive.
_INLINE_TAGS = "a|abbr|b|big|code|del|em|font|i|ins|kbd|mark|s|small|span|strong|sub|sup|u"
_BLOCK_TAGS = ("article|aside|blockquote|caption|center|col|colgroup|dd|details|div|dl|dt|figcaption|"
               "figure|footer|h[1-6]|header|hr|li|main|nav|ol|p|pre|section|summary|table|tbody|td|"
               "tfoot|th|thead|tr|ul")
_TAG_END = r"(?=[\s/>])[^<>]*>"
_INLINE_TAG_RE = re.compile(rf"</?(?i:{_INLINE_TAGS}){_TAG_END}")
_BLOCK_TAG_RE = re.compile(rf"</?(?:(?i:{_BLOCK_TAGS})|[A-Z][A-Za-z0-9]*){_TAG_END}")


def _attrs(raw):
    return {k.lower(): v.strip("\"'") for k, v in _ATTR_RE.findall(raw)}


def _md_url(url):
    # Spaces and brackets would end a Markdown link destination early (e.g. "bottom_v2(nand).png").
    return re.sub(r"[ ()<>]", lambda m: f"%{ord(m.group(0)):02X}", url)


def _img_to_md(m):
    attrs = _attrs(m.group(1))
    if "src" not in attrs:
        return ""
    alt = re.sub(r"[\[\]]", "", attrs.get("alt", "")).strip()
    return f"![{alt}]({_md_url(attrs['src'])})"


def _link_to_md(m):
    href, text = _attrs(m.group(1)).get("href"), m.group(2).strip()
    return f"[{text}]({_md_url(href)})" if href and text else text


def _strip_tags(text):
    # Block tags become a space so neighbouring words do not glue together.
    return _BLOCK_TAG_RE.sub(" ", _INLINE_TAG_RE.sub("", text))


def _table_to_text(m):
    rows = []
    for row in _ROW_RE.findall(m.group(1)):
        cells = [" ".join(_strip_tags(_BR_RE.sub(" ", c)).split()) for c in _CELL_RE.findall(row)]
        if any(cells):
            rows.append(" | ".join(cells))
    return "\n\n" + "\n".join(rows) + "\n\n" if rows else "\n"


def _convert_segment(text):
    """HTML/MDX -> Markdown for text outside fences; inline code spans are left verbatim."""
    codes = []

    def park(m):
        codes.append(m.group(0))
        return f"\x00{len(codes) - 1}\x00"

    text = _INLINE_CODE_RE.sub(park, text)
    text = _COMMENT_RE.sub("", text)
    text = _MDX_IMPORT_RE.sub("", text)
    text = _ADMONITION_RE.sub(lambda m: m.group(1), text)
    text = _IMG_RE.sub(_img_to_md, text)
    text = _LINK_RE.sub(_link_to_md, text)
    text = _TABLE_RE.sub(_table_to_text, text)
    text = _BR_RE.sub("\n", text)
    text = html.unescape(_strip_tags(text)).replace("\xa0", " ")
    text = _PIPE_ROW_RE.sub(lambda m: re.sub(r"-{4,}", "---", re.sub(r"[ \t]{2,}", " ", m.group(0))),
                            text)
    text = re.sub(r"\x00(\d+)\x00", lambda m: codes[int(m.group(1))], text)
    text = "\n".join(line.rstrip() for line in text.split("\n"))
    return re.sub(r"\n{3,}", "\n\n", text)


def html_to_markdown(text: str) -> str:
    """Turn the HTML/MDX that documentation sites leave in Markdown into plain Markdown.

    Tables become " | "-joined rows, <img>/<Image> become ![alt](src), <a> becomes [text](href), other
    tags are dropped keeping their text, entities are unescaped, pipe-table padding is squeezed,
    front matter, comments, MDX imports and ":::" admonition fences are removed.  Fenced code
    blocks and inline code spans are never touched.
    """
    out, segment = [], []
    text = _FRONT_MATTER_RE.sub("", normalize_newlines(text), count=1)
    for kind, line in _classify(text.split("\n")):
        if kind == "text":
            segment.append(line)
            continue
        if segment:
            out.append(_convert_segment("\n".join(segment)))
            segment = []
        out.append(line)
    if segment:
        out.append(_convert_segment("\n".join(segment)))
    return "\n".join(out)


# ---------------------------------------------------------------------------------------------
# Splitting

@dataclass
class _Section:
    title: str            # plain: heading text; smart: heading path
    parent_title: str
    parent_path: tuple    # heading path of the parent (smart-mode merge key)
    heading: str          # the original heading line ("" for preamble / no-heading documents)
    body: str
    toc: bool = False     # holds a table of contents: merged with no other section


@dataclass
class _Piece:
    first: int   # section whose title the piece carries
    last: int    # last section merged into it
    part: int
    title: str
    body: str    # content after the title prefix line


def _heading_text(line):
    return line.strip().lstrip("#").strip()


def _clean_heading(text):
    # Emphasis/code marks and a trailing colon add nothing to a heading path.
    return re.sub(r"\*\*|__|`", "", text).strip().rstrip("：:").strip() or text


def _trim_blank_lines(lines):
    while lines and not lines[0].strip():
        lines.pop(0)
    while lines and not lines[-1].strip():
        lines.pop()
    return "\n".join(lines)


def _is_heading_line(kind, line, smart):
    if kind != "text" or not HEADING_RE.match(line):
        return False
    if not smart:
        return True
    text = _clean_heading(_heading_text(line))
    # A "注意"/"Note" heading is a callout label, part of the running text; a heading of bare
    # numbers and marks ("1.", "（二）", "***") names nothing.
    return (not CALLOUT_RE.match(text) and bool(_WORD_RE.search(_NUMBER_PREFIX_RE.sub("", text)))
            and not _TOC_LEADER_RE.match(text))


def _numeral(text):
    """Value of "12" or of a Chinese numeral up to 九十九 ("十二", "二十"); None otherwise."""
    if text.isdigit():
        return int(text)
    text = text.replace("〇", "零")
    tens, ten, ones = text.partition("十")
    if not ten:
        tens, ones = "", text
    if len(tens) > 1 or len(ones) > 1 or not set(tens + ones) <= set(_CN_DIGITS) or not (ten or ones):
        return None
    return (_CN_DIGITS.index(tens) if tens else int(bool(ten))) * 10 + (_CN_DIGITS.index(ones) if ones else 0)


def _numbering(text):
    """(style, value) of a numbered heading: "四、" -> (("cn",), 4), "2.3 " -> (("dotted", "2"), 3)."""
    for style, pattern in _NUMBERINGS:
        m = pattern.match(text)
        if m:
            number = m.group(1)
            if style == "dotted":
                head, _, number = number.rpartition(".")
                return (style, head), _numeral(number)
            value = _numeral(number)
            return ((style, *m.groups()[1:]), value) if value is not None else None
    return None


def _toc_entry(line):
    """(form, page or None) when a line reads as a table-of-contents entry, else None."""
    text = re.sub(r"\*\*|__|`", "", line.strip().lstrip("#").strip()).strip(" |")
    if _TOC_ANCHOR_RE.match(text):
        return "anchor", None
    for form, pattern in (("leader", _TOC_LEADER_RE), ("numbered", _TOC_NUMBERED_RE)):
        m = pattern.match(text)
        if m:
            return form, int(m.group("page"))
    return None


def _toc_lines(kinds):
    """Indexes of the lines that make up tables of contents: runs of at least TOC_MIN_LINES entries
    (blank lines and page markers may sit between them) whose page numbers never go down, with the
    "目录" heading right above a run.  Numbered titles ending in a number ("3. 设置波特率 9600")
    can be steps of a procedure, so a run of only those needs that heading or twice the length.
    A table of contents repeats the headings; it is no section."""
    found, run, pages, forms = set(), [], [], set()

    def close():
        above = (run[0] if run else 0) - 1
        while above >= 0 and kinds[above][0] == "text" and _filler(kinds[above][1]):
            above -= 1
        headed = (above >= 0 and kinds[above][0] == "text" and HEADING_RE.match(kinds[above][1])
                  and TOC_HEADING_RE.match(_heading_name(kinds[above][1])))
        if len(run) >= TOC_MIN_LINES and (headed or forms != {"numbered"} or len(run) >= 2 * TOC_MIN_LINES):
            found.update(run)
            if headed:
                found.add(above)
        run.clear()
        pages.clear()
        forms.clear()

    for i, (kind, line) in enumerate(kinds):
        if kind == "text" and _filler(line):
            continue
        entry = _toc_entry(line) if kind == "text" else None
        if entry is None or (entry[1] is not None and pages and entry[1] < pages[-1]):
            close()
            if entry is None:
                continue
        run.append(i)
        forms.add(entry[0])
        if entry[1] is not None:
            pages.append(entry[1])
    close()
    return found


def _filler(line):
    return not line.strip() or bool(PAGE_MARKER_RE.fullmatch(line.strip()))


def _heading_name(line):
    """A heading's words without numbering, marks or inner spaces ("目  录" is "目录")."""
    text = _NUMBER_PREFIX_RE.sub("", _clean_heading(_heading_text(line))).strip()
    return re.sub(r"(?<=[^\x00-\x7f])\s+(?=[^\x00-\x7f])", "", text)


def _levels(headings):
    """Nesting level per heading line.  Font-size levels of a converted PDF drift ("五、" set smaller
    than "四、", "2.1" as large as "2."): a heading numbered right after an earlier one of the same
    style is its sibling, never its child, and "2.1" is a child of the "2" above it."""
    levels, last = [], {}  # style -> (value, level) of the latest heading of that style
    dotted = {}  # "2.1" -> level of the latest heading numbered so
    for line in headings:
        level = len(line.strip()) - len(line.strip().lstrip("#"))
        numbered = _numbering(_clean_heading(_heading_text(line)))
        if numbered:
            style, value = numbered
            if style in last and value == last[style][0] + 1:
                level = min(level, last[style][1])
            if style[0] == "dotted" and style[1] in dotted:
                # "2.1" set as large as "2." is still inside it
                level = max(level, dotted[style[1]] + 1)
            last[style] = (value, level)
            if style[0] == "dotted":
                dotted[f"{style[1]}.{value}".lstrip(".")] = level
        levels.append(level)
    return levels


def _blank(lines):
    return not _PAGE_OR_IMAGE_RE.sub("", "\n".join(lines)).strip()


def _title_block(raw, levels):
    """(first, last) entry of the headings that open the document and head every later heading
    (a cover's "BIGTREETECH / SKR MINI E3 V3.0 / 主板使用说明书", a lone "# 前言" above all
    chapters), or None.  Such titles say nothing about where a section is."""
    first = next(i for i, (line, _) in enumerate(raw) if line is not None)
    best, i = None, first
    while i < len(raw):
        if all(levels[j] > levels[i] for j in range(i + 1, len(raw)) if raw[j][0] is not None):
            best = i
        if i + 1 == len(raw) or not _blank(raw[i][1]) or levels[i + 1] <= levels[i]:
            break
        i += 1
    if best is None and first + 1 < len(raw) and _blank(raw[first][1]) and levels[first + 1] <= levels[first]:
        best = first  # a cover line above a heading of its own rank heads nothing
    return None if best is None or best == len(raw) - 1 else (first, best)


def _fold_title_block(raw, levels, min_len):
    """Turn the title block into text: its heading lines go into the body of the last title when
    it has one (that title then heads only its own text), else into the next section's body.
    Returns the entries and the index of a title that must not become a parent (or None).  A
    document shorter than one chunk keeps its title as the parent: that chunk is about all of it."""
    block = _title_block(raw, levels)
    if block is None or sum(len("".join(lines)) for _, lines in raw) < min_len:
        return raw, levels, None
    first, last = block
    keep = last if not _blank(raw[last][1]) else None
    target = keep if keep is not None else last + 1
    folded = [text for line, lines in raw[first:target] for text in (_clean_heading(_heading_text(line)), *lines)]
    raw, levels = list(raw), list(levels)
    raw[target][1][:0] = folded + [""]  # in place: the body keeps its identity (see toc_bodies)
    del raw[first:target], levels[first:target]
    return raw, levels, (first if keep is not None else None)


def _sections(text, file_title, smart, min_len):
    """Cut the document at headings outside fences; text before the first heading is a section."""
    raw, heading, body = [], None, []
    kinds = list(_classify(text.split("\n")))
    toc = _toc_lines(kinds) if smart else set()
    toc_bodies = set()  # id() of the body lists holding a table of contents
    in_toc = False  # the last line that was not blank was part of a table of contents
    for i, (kind, line) in enumerate(kinds):
        if kind == "text" and _filler(line):
            body.append(line)
            continue
        was_toc, in_toc = in_toc, i in toc
        if in_toc:
            if not was_toc and (heading is not None or not _blank(body)):
                # A table of contents is no part of the section above it, and neither is what
                # follows it up to the next heading: that text has no heading of its own.
                raw.append((heading, body))
                heading, body = None, []
            body.append(line)
            toc_bodies.add(id(body))
            continue
        if _is_heading_line(kind, line, smart):
            carried = []
            if heading is None and all(not l.strip() or PAGE_MARKER_RE.fullmatch(l.strip()) for l in body):
                carried, body = body, []  # page markers alone are no preamble: they open the section
            if heading is not None or any(l.strip() for l in body):
                raw.append((heading, body))
            heading, body = line, carried
        else:
            body.append(line)
    if heading is not None or any(l.strip() for l in body) or not raw:
        raw.append((heading, body))
    if all(h is None for h, _ in raw):
        return [_Section(NO_TITLE, NO_TITLE, (), "", _trim_blank_lines(raw[0][1]))]

    levels = _levels([line or "" for line, _ in raw])
    lone_title = None
    if smart:
        raw, levels, lone_title = _fold_title_block(raw, levels, min_len)
    sections, stack = [], []  # stack: [(level, clean heading text)] of the open headings
    for i, (line, lines) in enumerate(raw):
        if line is None:
            sections.append(_Section(file_title, file_title, (), "", _trim_blank_lines(lines), toc=id(lines) in toc_bodies))
            continue
        text_ = _heading_text(line)
        if not smart:
            sections.append(_Section(text_, text_, (), line.strip(), _trim_blank_lines(lines)))
            continue
        while stack and stack[-1][0] >= levels[i]:
            stack.pop()
        parent = tuple(t for _, t in stack)
        stack.append((levels[i], _clean_heading(text_)))
        sections.append(_Section(PATH_SEP.join(t for _, t in stack), PATH_SEP.join(parent) or file_title,
                                 parent, line.strip(), _trim_blank_lines(lines)))
        if i == lone_title or (FRONT_MATTER_RE.match(_heading_name(line)) and all(
                levels[j] > levels[i] for j in range(i + 1, len(raw)) if raw[j][0] is not None)):
            # A preface with no later heading of its rank would otherwise head every chapter.
            stack.pop()
    return sections


def _prefix(title, max_len):
    # A heading longer than a quarter of the budget is shortened in the prefix only, so the body
    # always keeps room and no chunk can exceed max_len.
    cap = max_len // 4
    return (title if len(title) <= cap else title[:cap - 1] + "…") + "\n\n"


def _pieces(sections, max_len):
    pieces = []
    for idx, sec in enumerate(sections):
        prefix = _prefix(sec.title, max_len)
        if len(prefix) + len(sec.body) <= max_len:
            pieces.append(_Piece(idx, idx, 1, sec.title, sec.body))
            continue
        splitter = RecursiveCharacterTextSplitter(
            chunk_size=max_len - len(prefix), chunk_overlap=0, separators=SEPARATORS,
            keep_separator="end")  # a Chinese full stop stays with its own sentence
        for i, body in enumerate(splitter.split_text(sec.body), start=1):
            pieces.append(_Piece(idx, idx, i, f"{sec.title}-{i}", body))
    return pieces


def _merge(pieces, sections, related, max_len, min_len):
    """Fold each piece into the previous one while that one is under min_len, the two are
    related and the result fits max_len; the merged piece keeps the first title and part."""
    out = []
    for piece in pieces:
        if out:
            cur = out[-1]
            prefix = _prefix(sections[cur.first].title, max_len)
            if piece.first == cur.last:  # next piece of the same section: its prefix is dropped
                body = f"{cur.body}\n{piece.body}"
            else:  # another section: its heading line stays inline as text
                body = f"{cur.body}\n\n{sections[piece.first].heading}\n\n{piece.body}".rstrip()
            if (len(prefix) + len(cur.body) < min_len and related(cur, piece)
                    and len(prefix) + len(body) <= max_len):
                out[-1] = _Piece(cur.first, piece.last, cur.part, cur.title, body.strip("\n"))
                continue
        out.append(piece)
    return out


def split_markdown(text: str, file_title: str, max_len: int = 2000, min_len: int = 500,
                   mode: str = "smart") -> list[Chunk]:
    """Split a Markdown manual into chunks (title, content, parent_title, part, page_start, page_end).

    Every content starts with a title prefix line and is at most max_len characters.  See the
    module docstring for the difference between mode="plain" and mode="smart"; pages are 1-based,
    0 for a document without page markers.
    """
    if mode not in ("plain", "smart"):
        raise ValueError(f"unknown split mode {mode!r}")
    # 4 bytes per character at most: the upper bound keeps content inside Milvus VARCHAR(65535);
    # the lower one leaves a title prefix room next to the text.
    if not (0 < min_len < max_len and MIN_MAX_LEN <= max_len <= MILVUS_VARCHAR_BYTES // 4):
        raise ValueError(f"need 0 < min_len < max_len and {MIN_MAX_LEN} <= max_len <= "
                         f"{MILVUS_VARCHAR_BYTES // 4}")
    smart = mode == "smart"
    sections = _sections(normalize_newlines(text), file_title, smart, min_len)
    pieces = _merge(_pieces(sections, max_len), sections, lambda a, b: a.first == b.first,
                    max_len, min_len)
    if smart:
        # Second pass: whole sections under the same heading path fold together, so a parent
        # heading with tiny children becomes one chunk.  Done after the first pass so a section's
        # own short lead-in piece stays with the rest of that section.
        def same_branch(a, b):
            if sections[a.first].toc or sections[b.first].toc:
                return False
            root = sections[a.first].parent_path
            return sections[b.first].parent_path[:len(root)] == root
        pieces = _merge(pieces, sections, same_branch, max_len, min_len)
    chunks: list[Chunk] = []
    page = 1 if PAGE_MARKER_RE.search(text) else 0
    for p in pieces:
        body, page_start, page_end, page = _pages(p.body, page)
        chunks.append({"title": p.title, "content": (_prefix(sections[p.first].title, max_len) + body).rstrip(),
                       "parent_title": sections[p.first].parent_title, "part": p.part,
                       "page_start": page_start, "page_end": page_end})
    return chunks


def _pages(body, page):
    """(body without page markers, first and last page its text lies on, page at its end), given the
    page its start is on.  Chunks come in document order, so the page carries from one to the next."""
    parts = PAGE_MARKER_RE.split(body)  # text, page, text, page, text ...
    on = [page] if parts[0].strip() else []
    for number, text in zip(parts[1::2], parts[2::2]):
        page = int(number)
        if text.strip():
            on.append(page)
    on = on or [page]
    body = re.sub(r"\n{3,}", "\n\n", PAGE_MARKER_LINE_RE.sub("", body)).strip("\n")
    return body, on[0], on[-1], page


def conformance_split(markdown_text: str, file_title: str) -> list[Chunk]:
    """Adapter for the shared Markdown-splitter conformance check (`md_split_check.py MODULE:FUNCTION`),
    which checks the plain rule."""
    return split_markdown(markdown_text, file_title, mode="plain")
