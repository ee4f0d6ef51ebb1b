"""pdf_to_markdown on the real BTT manuals (local backend) and against a fake MinerU API."""
import os
import re
from pathlib import Path

import pymupdf
import pytest

import services.pdf_parser as pdf_parser
from fakes.mineru_server import FAILED_MSG, FakeMinerU
from services.errors import PdfConversionError
from services.pdf_parser import page_count, pdf_to_markdown
from services.settings import Settings
from bench.shared import CORPUS

BTT_DIR = CORPUS / "btt-skr-mini-e3"
BTT = sorted(BTT_DIR.glob("*.pdf"))
V3 = BTT_DIR / "BTT SKR MINI E3 V3.0使用手册.pdf"
needs_corpus = pytest.mark.skipif(not BTT, reason="BTT sample PDFs not available")

IMAGE_LINK = re.compile(r"!\[[^\]]*\]\(([^)]+)\)")


@pytest.fixture
def local_settings(tmp_path) -> Settings:
    return Settings(data_dir=tmp_path, mineru_api_token="")


def _assert_links_resolve(md_path: Path) -> list[str]:
    links = IMAGE_LINK.findall(md_path.read_text(encoding="utf-8"))
    assert links, "expected at least one image"
    for link in links:
        assert link.startswith("images/")
        assert (md_path.parent / link).is_file(), link
    return links


@needs_corpus
@pytest.mark.parametrize("pdf", BTT, ids=lambda p: p.stem)
def test_local_btt_manual(pdf, tmp_path, local_settings):
    lines = []
    md_path = pdf_to_markdown(pdf, tmp_path / "out", settings=local_settings, progress=lines.append)
    assert md_path == tmp_path / "out" / f"{pdf.stem}.md"
    md = md_path.read_text(encoding="utf-8")
    assert "主板" in md and "SKR MINI E3" in md
    assert re.search(r"^#{1,6} ", md, re.M), "headings should be Markdown #"
    _assert_links_resolve(md_path)
    assert lines and all(isinstance(line, str) for line in lines)
    assert page_count(pdf) == len(pymupdf.open(pdf))


def test_ruled_table_page_keeps_its_table_while_plain_pages_skip_detection(tmp_path, local_settings):
    """Table detection runs only where ruling lines exist; such a table still comes out as a table."""
    doc = pymupdf.open()
    plain = doc.new_page()
    plain.insert_text((72, 72), "Plain page without any table", fontsize=12)
    page = doc.new_page()
    page.insert_text((72, 60), "Spec table", fontsize=14)
    rows, cols, x0, y0, w, h = 3, 2, 72, 80, 150, 24
    for r in range(rows + 1):
        page.draw_line((x0, y0 + r * h), (x0 + cols * w, y0 + r * h))
    for c in range(cols + 1):
        page.draw_line((x0 + c * w, y0), (x0 + c * w, y0 + rows * h))
    cells = [["Voltage", "12-24V"], ["MCU", "STM32G0B1"], ["Driver", "TMC2209"]]
    for r, row in enumerate(cells):
        for c, text in enumerate(row):
            page.insert_text((x0 + c * w + 6, y0 + r * h + 16), text, fontsize=11)
    pdf = tmp_path / "table.pdf"
    doc.save(pdf)
    assert pdf_parser._ruled_lines(doc[0]) < pdf_parser.RULED_MIN_LINES <= pdf_parser._ruled_lines(doc[1])
    md = pdf_to_markdown(pdf, tmp_path / "out", local_settings).read_text(encoding="utf-8")
    assert md.index("Plain page") < md.index("Spec table")
    assert re.search(r"^\|MCU\|[^\n]*STM32G0B1\|$", md, re.MULTILINE), md


def _write(path: Path, data: bytes) -> Path:
    path.write_bytes(data)
    return path


@pytest.mark.parametrize("make, message", [
    (lambda d: _write(d / "empty.pdf", b""), "为空"),
    (lambda d: _write(d / "random.pdf", os.urandom(4096)), "损坏"),
    (lambda d: _write(d / "text.pdf", "这不是 PDF".encode()), "损坏"),
    (lambda d: _write(d / "head.pdf", V3.read_bytes()[:2000]), "损坏"),
    (lambda d: _write(d / "cut.pdf", V3.read_bytes()[: V3.stat().st_size // 3]), "不完整"),
    (lambda d: d / "missing.pdf", "不存在"),
])
@needs_corpus
def test_bad_files_are_refused(make, message, tmp_path, local_settings):
    pdf = make(tmp_path)
    with pytest.raises(PdfConversionError, match=message):
        pdf_to_markdown(pdf, tmp_path / "out", settings=local_settings)
    with pytest.raises(PdfConversionError):
        page_count(pdf)


@needs_corpus
def test_encrypted_pdf_is_refused(tmp_path, local_settings):
    pdf = tmp_path / "locked.pdf"
    pymupdf.open(V3).save(pdf, encryption=pymupdf.PDF_ENCRYPT_AES_256, user_pw="user", owner_pw="owner")
    with pytest.raises(PdfConversionError, match="PDF 文件已加密，无法解析：需要密码"):
        pdf_to_markdown(pdf, tmp_path / "out", settings=local_settings)


def test_scanned_pdf_without_text_is_refused_locally(tmp_path, local_settings):
    doc = pymupdf.open()
    page = doc.new_page()
    page.draw_rect(pymupdf.Rect(50, 50, 200, 200), color=(0, 0, 0), fill=(0.5, 0.5, 0.5))
    doc.save(tmp_path / "scan.pdf")
    with pytest.raises(PdfConversionError, match="没有可提取的文字"):
        pdf_to_markdown(tmp_path / "scan.pdf", tmp_path / "out", settings=local_settings)


# --- MinerU backend against the fake API -----------------------------------------------------

@pytest.fixture
def mineru_settings(tmp_path):
    def make(server: FakeMinerU, **kw) -> Settings:
        return Settings(data_dir=tmp_path, mineru_api_token=server.token, mineru_base_url=server.base_url,
                        mineru_poll_interval_s=0.05, mineru_timeout_s=5, **kw)
    return make


@needs_corpus
def test_mineru_success(tmp_path, mineru_settings):
    lines = []
    with FakeMinerU(token="tok") as server:
        md_path = pdf_to_markdown(V3, tmp_path / "out", settings=mineru_settings(server), progress=lines.append)
        (batch,) = server.batches.values()
    assert batch["request"] == {"files": [{"name": V3.name}], "model_version": "vlm"}
    assert batch["files"][0]["bytes"] == V3.read_bytes()
    assert md_path == tmp_path / "out" / f"{V3.stem}.md"
    assert "主板" in md_path.read_text(encoding="utf-8")
    _assert_links_resolve(md_path)
    assert not (tmp_path / "out" / "layout.json").exists()
    assert any("MinerU 解析中" in line for line in lines)


@needs_corpus
def test_mineru_failed_state_reports_err_msg(tmp_path, mineru_settings):
    with FakeMinerU(mode="failed") as server, pytest.raises(PdfConversionError, match=FAILED_MSG):
        pdf_to_markdown(V3, tmp_path / "out", settings=mineru_settings(server))


@needs_corpus
def test_mineru_timeout(tmp_path, mineru_settings):
    with FakeMinerU(mode="never") as server:
        settings = mineru_settings(server).replace(mineru_timeout_s=0.3)
        with pytest.raises(PdfConversionError, match="超时"):
            pdf_to_markdown(V3, tmp_path / "out", settings=settings)


@needs_corpus
def test_mineru_retries_after_502(tmp_path, mineru_settings, monkeypatch):
    monkeypatch.setattr(pdf_parser, "RETRY_BACKOFF_S", 0.01)
    with FakeMinerU(mode="502_first") as server:
        md_path = pdf_to_markdown(V3, tmp_path / "out", settings=mineru_settings(server))
        (batch,) = server.batches.values()
    assert batch["polls"] >= 3  # 502, running, done
    _assert_links_resolve(md_path)


@needs_corpus
def test_mineru_bad_token(tmp_path, mineru_settings):
    with FakeMinerU(token="right") as server:
        settings = mineru_settings(server).replace(mineru_api_token="wrong")
        with pytest.raises(PdfConversionError, match="鉴权失败"):
            pdf_to_markdown(V3, tmp_path / "out", settings=settings)


@needs_corpus
def test_mineru_zip_path_traversal_is_refused(tmp_path, mineru_settings):
    with FakeMinerU(mode="traversal") as server, pytest.raises(PdfConversionError, match="非法路径"):
        pdf_to_markdown(V3, tmp_path / "out" / "deep", settings=mineru_settings(server))
    assert not list(tmp_path.rglob("evil.txt"))


def test_mineru_unreachable(tmp_path, monkeypatch):
    monkeypatch.setattr(pdf_parser, "RETRY_BACKOFF_S", 0.01)
    doc = pymupdf.open()
    doc.new_page().insert_text((72, 72), "hello")
    doc.save(tmp_path / "a.pdf")
    settings = Settings(data_dir=tmp_path, mineru_api_token="t", mineru_base_url="http://127.0.0.1:9/api/v4")
    with pytest.raises(PdfConversionError, match="无法连接 MinerU"):
        pdf_to_markdown(tmp_path / "a.pdf", tmp_path / "out", settings=settings)


# --- pages, running headers and heading levels (what the chunks are built from) ---------------

CHAPTERS = ["一、安全须知", "二、产品概览", "三、安装步骤", "四、网络配置", "五、日常维护", "六、故障排除"]
HEADER = "ACME 智能插座 用户手册"


def _paragraph(chapter: str, page: int) -> list[str]:
    return [f"{chapter}第{page}页第{i}行：插座额定电压 220V，请勿超载使用，连接前请断开电源。" for i in range(14)]


def _manual(path: Path, heading_sizes: list[int]) -> Path:
    """A generated manual unlike the BTT ones: a small running header in the top margin, a page
    number footer ("第 N 页 / 共 M 页") and one chapter per page, headed in the given font size."""
    doc = pymupdf.open()
    for n, (chapter, size) in enumerate(zip(CHAPTERS, heading_sizes), 1):
        page = doc.new_page(width=595, height=842)
        page.insert_text((60, 40), HEADER, fontsize=9, fontname="china-s")
        page.insert_text((60, 100), chapter, fontsize=size, fontname="china-s")
        y = 140
        for line in _paragraph(chapter, n):
            page.insert_text((60, y), line, fontsize=11, fontname="china-s")
            y += 20
        page.insert_text((260, 810), f"第 {n} 页 / 共 {len(CHAPTERS)} 页", fontsize=9, fontname="china-s")
    doc.save(path)
    return path


def _chunks(md_path: Path) -> list[dict]:
    from graphs.importing.chunking import html_to_markdown, split_markdown
    return split_markdown(html_to_markdown(md_path.read_text(encoding="utf-8")), md_path.stem)


def test_generated_manual_chunks_know_their_pages_and_lose_header_and_footer(tmp_path, local_settings):
    pdf = _manual(tmp_path / "插座手册.pdf", [18] * len(CHAPTERS))
    md_path = pdf_to_markdown(pdf, tmp_path / "out", local_settings)
    md = md_path.read_text(encoding="utf-8")
    assert [int(n) for n in pdf_parser.PAGE_MARKER_RE.findall(md)] == list(range(1, len(CHAPTERS) + 1))
    text = "".join(page.get_text() for page in pymupdf.open(pdf))
    assert text.count(HEADER) == text.count("页 / 共") == len(CHAPTERS)  # in the PDF, on every page
    assert HEADER not in md and "页 / 共" not in md
    chunks = _chunks(md_path)
    assert [c["title"] for c in chunks] == CHAPTERS
    assert [(c["page_start"], c["page_end"]) for c in chunks] == [(n, n) for n in range(1, len(CHAPTERS) + 1)]
    for n, c in enumerate(chunks, 1):
        assert _paragraph(CHAPTERS[n - 1], n)[-1] in c["content"]  # the chapter's text, whole
        assert HEADER not in c["content"] and "页 / 共" not in c["content"]
        assert "kb-page" not in c["content"]


def page(n):
    return pdf_parser.page_marker(n)


def test_running_header_and_footer_lines_are_dropped_but_body_repeats_stay():
    body = "\n".join(f"第{i}段：检查电源适配器输出是否为 5V。" * 2 for i in range(3))
    pages = [f"{page(n)}\n\n###### **ACME TECH**\n\n# 第{n}章 主题{n}\n\n{body}\n\n重要：断电操作。\n\n{body}\n\n"
             f"- {n} -" for n in range(1, 6)]
    kept = pdf_parser.drop_running_lines("\n".join(pages))
    assert "ACME" not in kept and not re.search(r"- \d -", kept)
    assert [int(n) for n in re.findall(r"^# 第(\d)章", kept, re.M)] == [1, 2, 3, 4, 5]  # numbered: not alike
    assert kept.count("重要：断电操作。") == 5  # repeated, yet mid-page body text


def test_running_lines_need_most_of_at_least_three_pages():
    two = f"{page(1)}\n\n页眉\n\n# 甲\n\n正文一\n\n{page(2)}\n\n页眉\n\n# 乙\n\n正文二"
    assert pdf_parser.drop_running_lines(two) == two
    some = "\n".join(f"{page(n)}\n\n{'页眉' if n < 3 else ''}\n\n# {name}\n\n{name}的说明。"
                     for n, name in enumerate("甲乙丙丁戊己庚", 1))
    assert pdf_parser.drop_running_lines(some) == some  # on 2 of 7 pages


def test_sibling_chapters_set_in_drifting_font_sizes_stay_siblings(tmp_path, local_settings):
    pdf = _manual(tmp_path / "drift.pdf", [20, 20, 20, 20, 16, 16])  # 五、六 set smaller, as in the BTT manuals
    md = pdf_to_markdown(pdf, tmp_path / "out", local_settings)
    levels = [len(m) for m in re.findall(r"^(#+) [五六]、", md.read_text(encoding="utf-8"), re.M)]
    assert levels and min(levels) > 1  # the converter does give them a deeper level
    chunks = _chunks(md)
    assert [c["title"] for c in chunks] == CHAPTERS
    assert {c["parent_title"] for c in chunks} == {"drift"}


@needs_corpus
@pytest.mark.parametrize("pdf", BTT, ids=lambda p: p.stem)
def test_btt_chunks_have_pages_and_no_running_header(pdf, tmp_path, local_settings):
    chunks = _chunks(pdf_to_markdown(pdf, tmp_path / "out", local_settings))
    pages = page_count(pdf)
    for c in chunks:
        assert not re.search(r"BIG ?TREE ?TECH", c["title"], re.I), c["title"]
        assert "BIG TREE TECH" not in c["content"] and "Shenzhen BIGTREE technology" not in c["content"]
        assert 1 <= c["page_start"] <= c["page_end"] <= pages
    by_title = {c["title"].split("-")[0]: c for c in chunks}
    assert by_title["一、主板简介"]["page_start"] == 1  # the cover folds into the first chapter
    assert "SKR MINI E3" in by_title["一、主板简介"]["content"]
    assert by_title["五、主板固件说明"]["parent_title"] == pdf.stem  # not a child of 四、
    assert by_title["五、主板固件说明"]["page_start"] == pages - 1
    assert [c["page_start"] for c in chunks] == sorted(c["page_start"] for c in chunks)


@needs_corpus
def test_mineru_page_index_marks_pages(tmp_path, mineru_settings):
    with FakeMinerU(token="tok") as server:
        md_path = pdf_to_markdown(V3, tmp_path / "out", settings=mineru_settings(server))
    md = md_path.read_text(encoding="utf-8")
    assert [int(n) for n in pdf_parser.PAGE_MARKER_RE.findall(md)] == list(range(1, page_count(V3) + 1))
    pages = re.split(r"<!-- kb-page: \d+ -->", md)[1:]
    for page, segment in zip(pymupdf.open(V3), pages):  # each page's own text follows its marker
        own = max((l.strip() for l in page.get_text().splitlines() if "BIG" not in l.upper()), key=len)
        assert own[:20] in segment, page.number
    assert "Shenzhen BIGTREE" not in md  # the fake puts the running header first on every page
    chunks = _chunks(md_path)
    assert chunks and all(1 <= c["page_start"] <= c["page_end"] <= page_count(V3) for c in chunks)
    assert not any("Shenzhen BIGTREE" in c["title"] or "Shenzhen BIGTREE" in c["content"] for c in chunks)


@needs_corpus
def test_mineru_result_without_page_index_still_converts(tmp_path, mineru_settings):
    with FakeMinerU(token="tok", mode="no_content_list") as server:
        md = pdf_to_markdown(V3, tmp_path / "out", settings=mineru_settings(server)).read_text(encoding="utf-8")
    assert "主板" in md and not pdf_parser.PAGE_MARKER_RE.search(md)


def test_page_markers_skip_blocks_missing_from_full_md():
    md = "# 标题\n\n第一页正文\n\n# 第二章\n\n第二页正文"
    blocks = [{"type": "text", "text": "标题", "page_idx": 0}, {"type": "text", "text": "不在 full.md 里", "page_idx": 1},
              {"type": "text", "text": "第二章", "page_idx": 1}, {"type": "text", "text": "第二页正文", "page_idx": 1}]
    assert pdf_parser.mark_pages(md, blocks) == (
        "<!-- kb-page: 1 -->\n\n# 标题\n\n第一页正文\n\n<!-- kb-page: 2 -->\n\n# 第二章\n\n第二页正文")
    assert pdf_parser.mark_pages(md, []) == md


# --- picture-heavy PDFs: image rectangles found without decoding, same output ---------------

PICTURES = sorted((CORPUS / "sipeed-mf" / "assets").rglob("*.png"))


def _picture_manual(path: Path) -> Path:
    """Three pages of real pictures: a JPEG shown twice (one xref), a picture with a soft mask and
    text set on top of a picture (which the parser leaves out as part of the picture)."""
    doc, font = pymupdf.open(), pymupdf.Font("cjk")
    for k in range(3):
        page = doc.new_page()
        page.insert_font(fontname="cjk", fontbuffer=font.buffer)
        page.insert_text((72, 60), f"{k + 1}. 安装步骤", fontname="cjk", fontsize=16)
        photo = pymupdf.Pixmap(pymupdf.Pixmap(str(PICTURES[k])), 0).tobytes("jpg")
        page.insert_image(pymupdf.Rect(72, 90, 300, 300), stream=photo)
        page.insert_image(pymupdf.Rect(320, 90, 540, 300), stream=photo)
        page.insert_image(pymupdf.Rect(72, 320, 400, 620), pixmap=pymupdf.Pixmap(pymupdf.Pixmap(str(PICTURES[k + 3])), 1))
        page.insert_text((100, 400), "图上的标注 J3", fontname="cjk", fontsize=9)
        page.insert_text((72, 700), ["先断开电源。", "把模块插入底板，拧紧螺丝。", "接好天线后通电。"][k],
                         fontname="cjk", fontsize=11)
    doc.save(path)
    return path


needs_pictures = pytest.mark.skipif(len(PICTURES) < 6, reason="sample pictures not available")


@needs_pictures
def test_image_rects_by_size_match_pymupdfs_decoded_digests(tmp_path):
    pdf = _picture_manual(tmp_path / "pictures.pdf")
    with pymupdf.open(pdf) as reference, pdf_parser._LayoutDocument(str(pdf)) as fast:
        for number in range(reference.page_count):
            ref_page, fast_page = reference[number], fast[number]
            xrefs = {item[0] for item in ref_page.get_images()}
            assert len(xrefs) == 2  # the twice-shown photo is one image
            for xref in xrefs:
                assert fast_page.get_image_rects(xref) == ref_page.get_image_rects(xref)
                assert fast_page.get_image_rects(xref, transform=True) == ref_page.get_image_rects(xref, transform=True)


@needs_pictures
def test_picture_manual_converts_as_with_decoded_digests_and_reports_every_page(tmp_path, local_settings,
                                                                                monkeypatch):
    pdf = _picture_manual(tmp_path / "pictures.pdf")
    lines = []
    fast = pdf_to_markdown(pdf, tmp_path / "fast", local_settings, progress=lines.append)
    monkeypatch.setattr(pdf_parser, "_LayoutDocument", pymupdf.Document)  # PyMuPDF's own lookup
    reference = pdf_to_markdown(pdf, tmp_path / "reference", local_settings)
    md = fast.read_text(encoding="utf-8")
    assert md == reference.read_text(encoding="utf-8")
    assert "拧紧螺丝" in md and "标注 J3" not in md
    links = _assert_links_resolve(fast)
    assert len(links) == 9
    for link in links:
        assert (fast.parent / link).read_bytes() == (reference.parent / link).read_bytes(), link
    assert [line for line in lines if "页" in line and "/" in line] == [
        f"本地解析 PDF：第 {n}/3 页" for n in (1, 2, 3)]


@needs_corpus
def test_btt_manual_converts_as_with_decoded_digests(tmp_path, local_settings, monkeypatch):
    fast = pdf_to_markdown(V3, tmp_path / "fast", local_settings)
    monkeypatch.setattr(pdf_parser, "_LayoutDocument", pymupdf.Document)
    reference = pdf_to_markdown(V3, tmp_path / "reference", local_settings)
    assert fast.read_text(encoding="utf-8") == reference.read_text(encoding="utf-8")
    for link in _assert_links_resolve(fast):
        assert (fast.parent / link).read_bytes() == (reference.parent / link).read_bytes(), link


# --- structure: front matter, a contents page, numbered headings in inconsistent sizes ------

def _structured_manual(path: Path) -> Path:
    """A made-up thermostat manual: cover, preface, a contents page with dot leaders, then
    numbered chapters where "1.1" is set as large as "1." and "2.1" smaller."""
    sections = [("前言", 20, "感谢选用本产品"), ("1. 产品简介", 16, "温控器用于地暖"),
                ("1.1 包装清单", 16, "盒内有主机与螺丝"), ("2. 安装", 16, "安装前断开电源"),
                ("2.1 接线", 13, "火线接 L 端子"), ("3. 规格", 16, "额定电压 230V")]
    doc = pymupdf.open()
    cover = doc.new_page(width=595, height=842)
    cover.insert_text((60, 300), "Orion HL5 温控器 用户手册", fontsize=26, fontname="china-s")
    toc = doc.new_page(width=595, height=842)
    toc.insert_text((60, 100), "目录", fontsize=20, fontname="china-s")
    for k, (title, _, _) in enumerate(sections[1:]):
        toc.insert_text((60, 150 + 24 * k), f"{title} {'.' * 30} {3 + k}", fontsize=11, fontname="china-s")
    for title, size, words in sections:
        page = doc.new_page(width=595, height=842)
        page.insert_text((60, 100), title, fontsize=size, fontname="china-s")
        for i in range(16):
            page.insert_text((60, 140 + 20 * i), f"{words}，第{i}行说明文字，请按步骤操作并妥善保管本手册。",
                             fontsize=11, fontname="china-s")
    doc.save(path)
    return path


def test_manual_with_preface_and_contents_page_gets_consistent_heading_paths(tmp_path, local_settings):
    md = pdf_to_markdown(_structured_manual(tmp_path / "hl5.pdf"), tmp_path / "out", local_settings)
    text = md.read_text(encoding="utf-8")
    assert re.search(r"^#+ 1\.1 包装清单", text, re.M) and re.search(r"^#+ 2\.1 接线", text, re.M)
    chunks = _chunks(md)
    def title_of(words):
        return next(c["title"] for c in chunks if words in c["content"])

    assert [title_of(words) for words in ("感谢选用本产品", "温控器用于地暖", "盒内有主机与螺丝", "安装前断开电源",
                                          "火线接 L 端子", "额定电压 230V")] == [
        "前言", "1. 产品简介", "1. 产品简介 > 1.1 包装清单", "2. 安装", "2. 安装 > 2.1 接线", "3. 规格"]
    assert not any(c["title"].startswith(("前言 >", "目录", "Orion")) for c in chunks)
    contents = [c for c in chunks if "2.1 接线 ....." in c["content"]]
    # the cover line and the contents page: text under the document's name, apart from the chapters
    assert len(contents) == 1 and contents[0]["title"] == "hl5" and contents[0]["page_end"] == 2
    assert "温控器用于地暖" not in contents[0]["content"]
