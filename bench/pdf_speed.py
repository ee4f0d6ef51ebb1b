"""PDF conversion speed: a picture-heavy manual beside a text manual, in pages per second.

    python -m bench.pdf_speed [--out DIR] [--pages 20] [--text-pages 100] [--repeat 3]

The picture-heavy PDF is built from the sample corpus's largest real pictures (2-4 per page, each
page a numbered heading and a line of text); the text PDF concatenates the corpus PDFs.  Each is
converted `--repeat` times (the fastest run counts: the machine is shared, and other work only
ever adds time), then imported once through the real import graph into a fresh data dir.  Beside
wall-clock seconds the conversion's CPU seconds are printed: the parser is single-threaded, so on
an idle machine the two agree, and on a busy one the CPU figure is what the code itself costs.
"""
from __future__ import annotations

import argparse
import os
import re
import sys
import tempfile
import time
from pathlib import Path

from bench.common import (
    BenchError, import_docs, isolated_data_dir, md_table, run_cli, write_json,
)
from bench.shared import CORPUS
from bench.speed import build_long_pdf
from services.embeddings import get_embedder
from services.pdf_parser import pdf_to_markdown
from services.settings import get_settings
from services.vector_store import get_vector_store

PICTURE_SUFFIXES = (".png", ".jpg", ".jpeg")
PAGES_TARGET = 5.0
PAGE_PROGRESS = re.compile(r"第 \d+/\d+ 页")


def corpus_pictures(root: Path = CORPUS) -> list[Path]:
    """The corpus's pictures, largest (in pixels) first."""
    import pymupdf

    sized = []
    for path in sorted(root.rglob("*")):
        if path.suffix.lower() in PICTURE_SUFFIXES and path.is_file():
            try:
                pix = pymupdf.Pixmap(str(path))
            except Exception:  # not a picture MuPDF reads: not material for the bench
                continue
            sized.append((pix.width * pix.height, path))
    return [p for _, p in sorted(sized, key=lambda s: -s[0])]


def build_picture_pdf(pictures: list[Path], pages: int, dest: Path) -> int:
    """A `pages`-page manual with 2-4 of `pictures` per page (round robin); returns the picture count."""
    import pymupdf

    if not pictures:
        raise BenchError("语料中没有可用的图片，无法生成图片型 PDF。")
    doc, font, placed = pymupdf.open(), pymupdf.Font("cjk"), 0
    try:
        for p in range(pages):
            page = doc.new_page()
            page.insert_font(fontname="cjk", fontbuffer=font.buffer)
            page.insert_text((72, 60), f"{p + 1}. 第{p + 1}步 安装与接线", fontname="cjk", fontsize=16)
            page.insert_text((72, 90), "按照下图连接模块与底板，注意接口方向。", fontname="cjk", fontsize=10)
            count = 2 + p % 3
            height = 680 // count
            for j in range(count):
                top = 110 + j * height
                pix = pymupdf.Pixmap(str(pictures[placed % len(pictures)]))
                if pix.alpha:  # as a JPEG, like the photos of a printed manual
                    pix = pymupdf.Pixmap(pix, 0)
                page.insert_image(pymupdf.Rect(72, top, 400, top + height - 20),
                                  stream=pix.tobytes("jpg", jpg_quality=85))
                placed += 1
        doc.save(dest)
        return placed
    finally:
        doc.close()


def conversion(pdf: Path, repeat: int, folder: Path) -> dict:
    pages, runs, cpu = [], [], []
    for i in range(repeat):
        started, started_cpu = time.perf_counter(), time.process_time()
        pdf_to_markdown(pdf, folder / f"run{i}", get_settings(), progress=pages.append)
        runs.append(time.perf_counter() - started)
        cpu.append(time.process_time() - started_cpu)
    per_page = sum(1 for line in pages if PAGE_PROGRESS.search(line)) // repeat
    return {"seconds": [round(s, 2) for s in runs], "best_s": round(min(runs), 2),
            "cpu_best_s": round(min(cpu), 2), "progress_lines_per_run": per_page}


def run(out: str | Path | None, pages: int, text_pages: int, repeat: int, log=print) -> dict:
    if get_settings().mineru_api_token:
        raise BenchError("本基准测本地解析：请先清空 MINERU_API_TOKEN。")
    pdfs = sorted(CORPUS.rglob("*.pdf"))
    if not pdfs:
        raise BenchError(f"语料目录里没有 PDF：{CORPUS}")
    rows, report = [], {"load_avg_start": [round(x, 2) for x in os.getloadavg()], "cores": os.cpu_count(), "pdfs": []}
    with tempfile.TemporaryDirectory(prefix="zgzk-pdf-speed-") as tmp:
        tmp = Path(tmp)
        picture_pdf = tmp / f"图片型手册-{pages}页.pdf"
        placed = build_picture_pdf(corpus_pictures(), pages, picture_pdf)
        text_pdf = tmp / f"文字型合订本-{text_pages}页.pdf"
        built = build_long_pdf(pdfs, text_pages, text_pdf)
        log(f"已生成：{picture_pdf.name}（{placed} 张图片），{text_pdf.name}（{built} 页）")
        for label, pdf, n in (("图片型", picture_pdf, pages), ("文字型", text_pdf, built)):
            conv = conversion(pdf, repeat, tmp / f"conv-{label}")
            with isolated_data_dir():
                get_embedder().embed_query("模型预热")  # model loading is not import time
                get_vector_store().client
                started = time.perf_counter()
                import_docs([pdf], log)
                import_s = time.perf_counter() - started
            entry = {"label": label, "pages": n, "size_kb": pdf.stat().st_size // 1024, "conversion": conv,
                     "conversion_pages_per_s": round(n / conv["best_s"], 2),
                     "conversion_cpu_pages_per_s": round(n / conv["cpu_best_s"], 2), "import_s": round(import_s, 2),
                     "import_pages_per_s": round(n / import_s, 2)}
            report["pdfs"].append(entry)
            rows.append([label, n, entry["size_kb"], conv["best_s"], entry["conversion_pages_per_s"],
                         conv["cpu_best_s"], entry["conversion_cpu_pages_per_s"],
                         " / ".join(map(str, conv["seconds"])), conv["progress_lines_per_run"],
                         entry["import_s"], entry["import_pages_per_s"]])
    report["load_avg_end"] = [round(x, 2) for x in os.getloadavg()]
    picture = report["pdfs"][0]
    report["target"] = {"name": "图片型 PDF 解析（按 CPU 时间，页/秒）", "target": f"≥ {PAGES_TARGET:g}",
                        "value": picture["conversion_cpu_pages_per_s"],
                        "met": picture["conversion_cpu_pages_per_s"] >= PAGES_TARGET}
    table = md_table(["PDF", "页", "KB", "解析最快（秒）", "解析 页/秒", "解析 CPU（秒）", "按 CPU 页/秒",
                      f"{repeat} 次解析（秒）", "每次的逐页进度行",
                      "整次导入（秒）", "导入 页/秒"], rows)
    log(table)
    log(f"{report['cores']} 核，负载 {report['load_avg_start']} → {report['load_avg_end']}；"
        f"目标 {report['target']['name']} {report['target']['target']}：{report['target']['value']}"
        f"（{'达成' if report['target']['met'] else '未达成'}）")
    if out:
        out = Path(out)
        out.mkdir(parents=True, exist_ok=True)
        write_json(out / "pdf_speed.json", report)
        (out / "pdf_speed.md").write_text(f"# PDF 解析速度\n\n{table}\n", encoding="utf-8")
    return report


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.pdf_speed", description="图片型与文字型 PDF 的解析速度（页/秒）")
    parser.add_argument("--out", help="报告输出目录（不写则只打印）")
    parser.add_argument("--pages", type=int, default=20, help="图片型 PDF 的页数")
    parser.add_argument("--text-pages", type=int, default=100, help="文字型 PDF 的最少页数")
    parser.add_argument("--repeat", type=int, default=3, help="每份 PDF 解析几次（取最快）")
    args = parser.parse_args(argv)
    if min(args.pages, args.text_pages, args.repeat) < 1:
        parser.error("页数和次数都必须是正整数")
    return run_cli(lambda: run(args.out, args.pages, args.text_pages, args.repeat), "基准")


if __name__ == "__main__":
    sys.exit(main())
