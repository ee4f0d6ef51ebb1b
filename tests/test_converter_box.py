"""Converters in a box: real conversions in forked children of a converter host, and converters that
crash, hang or eat memory (tests/fakes/converters.py), which end only their own conversion."""
from __future__ import annotations

import threading
import time
from pathlib import Path

import pymupdf
import pytest

from bench.security import broken_pdf
from manual_files import web_manual, word_manual
from services import converter_box, doc_converter, pdf_parser
from services.errors import DocumentConversionError, PdfConversionError
from services.settings import Settings

FAKES = "fakes.converters"


@pytest.fixture
def settings(tmp_path) -> Settings:
    return Settings(data_dir=tmp_path / "data", mineru_api_token="")


def _with(settings: Settings, **changes) -> Settings:
    return settings.replace(**changes)


def _lamp_manual(path: Path, pages: int = 3) -> Path:
    """A made-up vendor's manual: one heading and a few lines per page."""
    doc = pymupdf.open()
    for n in range(1, pages + 1):
        page = doc.new_page(width=595, height=842)
        page.insert_text((60, 100), f"Lumora K{n} desk lamp", fontsize=20)
        for i in range(12):
            page.insert_text((60, 140 + 20 * i), f"Step {n}.{i}: hold the dimmer ring for {i + 2} seconds.", fontsize=11)
    doc.save(path)
    return path


def test_a_boxed_pdf_conversion_writes_what_the_parser_writes(tmp_path, settings):
    pdf = _lamp_manual(tmp_path / "lumora.pdf")
    md_path, pages = converter_box.pdf_to_markdown(pdf, tmp_path / "boxed", settings, stem="lumora")
    direct = pdf_parser.pdf_to_markdown(pdf, tmp_path / "direct", settings, stem="lumora")
    assert pages == 3 and md_path == tmp_path / "boxed" / "lumora.md"
    assert md_path.read_text(encoding="utf-8") == direct.read_text(encoding="utf-8")
    assert "Lumora K2 desk lamp" in md_path.read_text(encoding="utf-8")


def test_boxed_progress_reaches_the_caller(tmp_path, settings):
    lines: list[str] = []
    converter_box.pdf_to_markdown(_lamp_manual(tmp_path / "l.pdf"), tmp_path / "o", settings, stem="l",
                                  progress=lines.append)
    assert lines == ["本地解析 PDF（共 3 页）", *(f"本地解析 PDF：第 {k}/3 页" for k in (1, 2, 3)), "PDF 解析完成：l.md"]


def test_word_and_web_pages_convert_in_the_box_with_their_pictures(tmp_path, settings):
    word = word_manual(tmp_path / "word" / "manual.docx")
    converted = converter_box.convert_to_markdown(word, "docx", tmp_path / "w", max_bytes=10 << 20,
                                                  resolve_image=_no_image, settings=settings)
    direct = doc_converter.convert_to_markdown(word, "docx", tmp_path / "wd", max_bytes=10 << 20,
                                               resolve_image=_no_image)
    assert (converted.headings, converted.tables, converted.images) == (direct.headings, direct.tables, direct.images)
    assert converted.images and (tmp_path / "w" / "images").is_dir()
    page = web_manual(tmp_path / "site" / "page.html")
    text = converter_box.markdown_of(page, "html", max_bytes=10 << 20, settings=settings)
    assert text == doc_converter.markdown_of(page, "html", max_bytes=10 << 20)


def _no_image(_src: str) -> None:
    return None


def test_the_parsers_own_refusal_comes_back_unchanged_and_is_not_retried(tmp_path, settings):
    bad = broken_pdf(tmp_path / "bad.pdf", 1)
    with pytest.raises(PdfConversionError, match="损坏") as caught:
        converter_box.pdf_to_markdown(bad, tmp_path / "o", settings, stem="bad")
    assert caught.value.node == "node_pdf_to_md" and not caught.value.transient
    with pytest.raises(DocumentConversionError, match="不是有效的 .docx"):
        converter_box.convert_to_markdown(bad, "docx", tmp_path / "d", max_bytes=10 << 20, resolve_image=_no_image,
                                          settings=settings)


def test_two_invalid_pdfs_parsed_at_once_both_fail_with_reasons(tmp_path, settings):
    pdfs = [broken_pdf(tmp_path / f"bad{i}.pdf", 6) for i in range(2)]
    errors: dict[int, str] = {}

    def convert(i: int) -> None:
        try:
            converter_box.pdf_to_markdown(pdfs[i], tmp_path / f"o{i}", settings, stem=f"b{i}")
        except PdfConversionError as exc:
            errors[i] = exc.message

    threads = [threading.Thread(target=convert, args=(i,)) for i in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
    assert sorted(errors) == [0, 1] and all("PDF 文件" in e for e in errors.values()), errors


def _calls(out_dir: Path) -> int:
    log = out_dir.parent / "converter-calls.log"
    return len(log.read_text().splitlines()) if log.exists() else 0


@pytest.mark.parametrize("fake, reason", [("abort", "解析进程崩溃（SIGABRT）"), ("segfault", "解析进程崩溃（SIGSEGV）"),
                                          ("kill_host", "解析进程意外退出")])
def test_a_crash_is_tried_once_more_in_a_fresh_process_then_fails_with_a_reason(tmp_path, settings, fake, reason):
    boxed = _with(settings, converter_override=f"{FAKES}:{fake}")
    out = tmp_path / "run" / "pdf"
    with pytest.raises(PdfConversionError) as caught:
        converter_box.pdf_to_markdown(_lamp_manual(tmp_path / "l.pdf"), out, boxed, stem="l")
    assert reason in caught.value.message and "重试 1 次仍失败" in caught.value.message
    assert caught.value.node == "node_pdf_to_md" and not caught.value.transient
    assert _calls(out) == 2
    # the next conversion is unharmed
    assert converter_box.pdf_to_markdown(_lamp_manual(tmp_path / "m.pdf"), tmp_path / "ok", settings, stem="m")[1] == 3


def test_no_second_try_when_retries_are_off(tmp_path, settings):
    boxed = _with(settings, converter_override=f"{FAKES}:abort", convert_crash_retries=0)
    out = tmp_path / "run" / "pdf"
    with pytest.raises(PdfConversionError, match="SIGABRT") as caught:
        converter_box.pdf_to_markdown(_lamp_manual(tmp_path / "l.pdf"), out, boxed, stem="l")
    assert "重试" not in caught.value.message and _calls(out) == 1


def test_runaway_memory_stops_at_the_limit_and_is_not_retried(tmp_path, settings):
    boxed = _with(settings, converter_override=f"{FAKES}:exhaust_memory", convert_memory_mb=200)
    out = tmp_path / "run" / "pdf"
    with pytest.raises(PdfConversionError, match="内存用量超过了 200 MB 的上限"):
        converter_box.pdf_to_markdown(_lamp_manual(tmp_path / "l.pdf"), out, boxed, stem="l")
    assert _calls(out) == 1


def test_a_hanging_converter_is_stopped_at_the_time_limit(tmp_path, settings):
    boxed = _with(settings, converter_override=f"{FAKES}:hang", convert_timeout_s=1.0)
    out = tmp_path / "run" / "doc"
    converter_box.markdown_of(web_manual(tmp_path / "site" / "page.html"), "html", max_bytes=1 << 20,
                              settings=settings)  # a host is running: its start is not timed
    started = time.monotonic()
    with pytest.raises(DocumentConversionError, match="超过 1 秒仍未完成，已停止") as caught:
        # no resolver: one from this module would have the host import the test module, and it never runs
        converter_box.convert_to_markdown(tmp_path / "x.html", "html", out, max_bytes=1 << 20,
                                          resolve_image=None, settings=boxed)
    assert time.monotonic() - started < 15 and caught.value.node == "node_doc_to_md"
    assert _calls(out) == 1
