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
