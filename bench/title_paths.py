"""How well chunk titles say where a chunk is: per document, the share of chunks whose heading path
starts with the same first element (a front-matter heading that parents everything scores 1.0).

    python -m bench.title_paths [PATH...]      (default: every document of the sample corpus)

PDFs are converted with the local parser first.  Prints one row per document and one per corpus.
"""
from __future__ import annotations

import argparse
import sys
import tempfile
from collections import Counter
from pathlib import Path

from bench.common import corpus_docs, expand_docs, md_table, run_cli
from bench.shared import CORPUS
from graphs.importing.chunking import MAX_CONTENT_LENGTH, MIN_CONTENT_LENGTH, PATH_SEP, html_to_markdown, split_markdown
from services.pdf_parser import pdf_to_markdown
from services.settings import Settings
from services.text_files import read_text


def document_chunks(path: Path, work: Path) -> list[dict]:
    if path.suffix.lower() == ".pdf":
        md = pdf_to_markdown(path, work / path.stem, Settings(data_dir=work, mineru_api_token=""))
        text = md.read_text(encoding="utf-8")
    else:
        text = read_text(path)
    return split_markdown(html_to_markdown(text), path.stem, MAX_CONTENT_LENGTH, MIN_CONTENT_LENGTH)


def first_share(chunks: list[dict]) -> tuple[float, str]:
    """(share of the most common first heading-path element, that element)."""
    firsts = Counter(c["title"].removesuffix(f"-{c['part']}").split(PATH_SEP)[0] for c in chunks)
    head, n = firsts.most_common(1)[0]
    return n / len(chunks), head


def run(paths: list[str] | None, log=print) -> list[dict]:
    files = expand_docs(paths) if paths else corpus_docs()
    rows = []
    with tempfile.TemporaryDirectory(prefix="zgzk-titles-") as tmp:
        for path in files:
            chunks = document_chunks(path, Path(tmp))
            share, head = first_share(chunks)
            try:
                corpus = path.resolve().relative_to(CORPUS.resolve()).parts[0]
            except ValueError:
                corpus = path.parent.name
            rows.append({"corpus": corpus, "file": path.name, "chunks": len(chunks), "share": round(share, 3),
                         "first": head})
    log(md_table(["语料", "文档", "切片", "同一首元素占比", "最常见的首元素"],
                 [[r["corpus"], r["file"], r["chunks"], r["share"], r["first"]] for r in rows]))
    by_corpus = {}
    for r in rows:
        by_corpus.setdefault(r["corpus"], []).append(r)
    log(md_table(["语料", "文档", "切片", "按切片加权的占比", "占比 ≥ 0.8 的多切片文档"],
                 [[c, len(rs), sum(r["chunks"] for r in rs),
                   round(sum(r["share"] * r["chunks"] for r in rs) / sum(r["chunks"] for r in rs), 3),
                   sum(1 for r in rs if r["chunks"] >= 5 and r["share"] >= 0.8)]
                  for c, rs in by_corpus.items()]))
    return rows


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.title_paths", description="切片标题路径的首元素集中度")
    parser.add_argument("paths", nargs="*", help="文档或文件夹（默认全部样例语料）")
    args = parser.parse_args(argv)
    return run_cli(lambda: run(args.paths), "统计")


if __name__ == "__main__":
    sys.exit(main())
