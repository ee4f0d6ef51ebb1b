"""The 9 sample manuals through the real import graph with the embedded defaults (offline)."""
from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from collections import Counter
from pathlib import Path
from urllib.parse import quote, unquote

from conftest import CORPUS, CORPUS_DOCS, ROOT
from graphs.importing.chunking import HEADING_RE, PATH_SEP
from graphs.importing.runner import run_import
from import_fixtures import (  # noqa: F401 - fresh_data is a fixture
    assert_consistent, doc_chunks, fresh_data, name_rows, store, write_md,
)
from services.object_store import LOCAL_URL_PREFIX, local_objects_root
from services.settings import get_settings
from services.vector_store import eq_filter

MD_DOCS = [p for p in CORPUS_DOCS if p.suffix == ".md"]
PDF_DOCS = [p for p in CORPUS_DOCS if p.suffix == ".pdf"]
BROKEN_UPSTREAM = {"mf0_dock_front.png", "mf0_dock_buttom.png"}  # missing in the origin too (MANIFEST)
IMAGES_PER_BTT_PDF = 11  # MANIFEST
# Independent of the importer's own patterns: Markdown images and <img>/<Image> tags.
IMAGE_REF = re.compile(r"!\[[^\]\n]*\]\([^)\s]+[^)]*\)|<(?:img|Image)\b[^>]*\bsrc=", re.IGNORECASE)
FENCE = re.compile(r"^ {0,3}(`{3,}|~{3,})(.*)$")


def fenced_and_open_headings(text: str) -> tuple[set[str], set[str]]:
    """Heading-like lines inside fenced code, and real headings outside, as heading texts."""
    fenced, real, fence = set(), set(), None
    for line in text.splitlines():
        m = FENCE.match(line)
        if fence is None and m:
            fence = m.group(1)
        elif fence is not None and m and m.group(1)[0] == fence[0] and len(m.group(1)) >= len(fence) \
                and not m.group(2).strip():
            fence = None
        elif HEADING_RE.match(line):
            (real if fence is None else fenced).add(line.strip().lstrip("#").strip())
    return fenced, real


def test_every_manual_imports(corpus_results):
    assert sorted(corpus_results) == sorted(p.stem for p in CORPUS_DOCS)
    for stem, r in corpus_results.items():
        assert r.status == "completed" and not r.error, (stem, r.error)
        assert r.chunks > 0 and r.product and r.doc_id
        stored = doc_chunks(r.doc_id)
        assert len(stored) == r.chunks, stem  # what the result reports is what Milvus holds
        assert {c["file_title"] for c in stored} == {stem}
        assert set(r.node_seconds) >= {"node_entry", "node_md_img", "node_document_split",
                                       "node_product_recognition", "node_bge_embedding", "node_import_milvus"}
    assert_consistent()


def test_every_chunk_has_its_fields_and_fits(corpus_results, product_of):
    for stem, r in corpus_results.items():
        for c in doc_chunks(r.doc_id):
            assert 0 < len(c["content"]) <= 2000, (stem, c["title"], len(c["content"]))
            assert c["title"].strip() and c["parent_title"].strip(), (stem, c)
            assert isinstance(c["part"], int) and c["part"] >= 1
            assert c["product"] == product_of[stem]
    assert sorted(r["product"] for r in name_rows()) == sorted(set(product_of.values()))


def test_hash_lines_in_code_fences_stay_code(corpus_results):
    checked = 0
    for path in MD_DOCS:
        fenced, real = fenced_and_open_headings(path.read_text(encoding="utf-8"))
        code_only = fenced - real
        if not code_only:
            continue
        chunks = doc_chunks(corpus_results[path.stem].doc_id)
        segments = {seg.strip() for c in chunks for seg in re.sub(r"-\d+$", "", c["title"]).split(PATH_SEP)}
        for text in code_only:
            assert text not in segments, (path.name, text)
            assert any(f"# {text}" in c["content"] for c in chunks), f"lost code line: {text}"
            checked += 1
    assert checked >= 3  # duos.md holds three shell comments inside a fence


def test_markdown_images_resolve(corpus_results):
    objects = local_objects_root(get_settings())
    for path in MD_DOCS:
        r = corpus_results[path.stem]
        refs = len(IMAGE_REF.findall(path.read_text(encoding="utf-8")))
        assert r.images_uploaded > 0, path.name
        assert r.images_uploaded + r.images_missing == refs, (path.name, r.images_uploaded, r.images_missing, refs)
        content = "\n".join(c["content"] for c in doc_chunks(r.doc_id))
        prefix = f"{LOCAL_URL_PREFIX}/upload-images/{quote(r.doc_key)}/"
        urls = set(re.findall(rf"\]\(({re.escape(prefix)}[^)]+)\)", content))
        assert 0 < len(urls) <= r.images_uploaded, path.name
        for url in urls:  # every link in the chunks points at an uploaded file
            assert (objects / unquote(url[len(LOCAL_URL_PREFIX) + 1:])).is_file(), url
        # Offline captions come from alt text or the image's own section, never the front matter.
        captions = re.findall(rf"!\[([^\]]*)\]\({re.escape(prefix)}", content)
        assert captions and all(c.strip() and "sidebar_" not in c and "---" not in c for c in captions)
        missing = {Path(src).name for src in r.missing_images}
        assert missing == (BROKEN_UPSTREAM if path.stem == "mf0_get_started" else set()), path.name


def test_offline_captions_name_the_section(corpus_results):
    content = "\n".join(c["content"] for c in doc_chunks(corpus_results["duo"].doc_id))
    assert "![插图：Duo](" in content and "![插图：Duo GPIO 引脚分配](" in content
    assert "![插图：USB-TTL 串口线 - 常见的 USB 转 TTL 串口线的引脚定义如下：](" in content


def test_pdfs_yield_text_and_images(corpus_results):
    for path in PDF_DOCS:
        r = corpus_results[path.stem]
        assert r.pages in (8, 9) and r.images_uploaded == IMAGES_PER_BTT_PDF and r.images_missing == 0
        text = "\n".join(c["content"] for c in doc_chunks(r.doc_id))
        assert len(re.findall(r"[\u4e00-\u9fff]", text)) > 1000, path.name
        assert "SKR MINI E3" in text and "/kb-files/upload-images/" in text


def test_pdf_chunks_are_stored_with_their_pages(corpus_results):
    from graphs.query.configuration import QueryConfiguration
    from graphs.query.retrieval import search_chunks
    fields = ["title", "page_start", "page_end"]
    for path in CORPUS_DOCS:
        r = corpus_results[path.stem]
        rows = store().query(store().chunks, eq_filter("doc_id", r.doc_id), fields)
        if path.suffix == ".pdf":
            assert all(1 <= c["page_start"] <= c["page_end"] <= r.pages for c in rows), path.name
            assert not any(re.search(r"BIG ?TREE ?TECH", c["title"], re.I) for c in rows), path.name
        else:
            assert all(c["page_start"] == c["page_end"] == 0 for c in rows), path.name
    v3 = corpus_results["BTT SKR MINI E3 V3.0使用手册"]
    hits = search_chunks(QueryConfiguration(), "主板固件怎么更新", [v3.product])
    assert hits and all(h["page_start"] >= 1 for h in hits)


def test_near_twins_get_distinct_names(product_of):
    groups = [("duo", "duo256m", "duos"), ("m01_mf1_v1_get_started", "m02_mf1_v2_get_started"),
              ("BTT SKR MINI E3 V2.0使用手册", "BTT SKR MINI E3 V3.0使用手册")]
    for group in groups:
        names = [product_of[s] for s in group]
        assert len(set(names)) == len(names), names
    assert "256" in product_of["duo256m"] and re.search(r"Duo\s*S\b", product_of["duos"])
    assert "V1" in product_of["m01_mf1_v1_get_started"] and "V2" in product_of["m02_mf1_v2_get_started"]
    assert "V2.0" in product_of["BTT SKR MINI E3 V2.0使用手册"]
    assert "V3.0" in product_of["BTT SKR MINI E3 V3.0使用手册"]


def _snapshot() -> tuple[dict, list]:
    s = store()
    rows = s.query(s.chunks, "chunk_id >= 0", ["doc_id", "content"])
    per_doc = Counter(r["doc_id"] for r in rows)
    contents = {d: sorted(r["content"] for r in rows if r["doc_id"] == d) for d in per_doc}
    return contents, sorted((r["doc_id"], r["product"]) for r in name_rows())


def test_reimporting_the_corpus_changes_no_counts(fresh_data):
    first = {p.stem: run_import(p) for p in CORPUS_DOCS}
    assert all(r.status == "completed" for r in first.values())
    before = _snapshot()
    again = {p.stem: run_import(p) for p in CORPUS_DOCS}
    assert {k: (r.chunks, r.product, r.doc_id) for k, r in again.items()} == \
           {k: (r.chunks, r.product, r.doc_id) for k, r in first.items()}
    assert _snapshot() == before
    assert len(name_rows()) == len(CORPUS_DOCS)
    assert_consistent()


def test_same_file_name_in_two_folders(fresh_data, tmp_path):
    source = CORPUS / "sipeed-mf" / "zh_CN" / "m01_mf1_v1_get_started.md"
    a = tmp_path / "e20c" / "introduction.md"
    b = tmp_path / "e52c" / "introduction.md"
    for target in (a, b):
        target.parent.mkdir()
        shutil.copyfile(source, target)
    ra, rb = run_import(a), run_import(b)
    assert ra.status == rb.status == "completed"
    assert ra.doc_id != rb.doc_id and ra.doc_key != rb.doc_key
    assert len(doc_chunks(ra.doc_id)) == ra.chunks > 0 and len(doc_chunks(rb.doc_id)) == rb.chunks
    assert {c["file_title"] for c in doc_chunks(ra.doc_id)} == {"introduction"}
    # Re-importing one of them replaces it, and only it.
    write_md(a, source.read_text(encoding="utf-8") + "\n\n## 追加章节\n\n新加的一段说明文字。\n")
    ra2 = run_import(a)
    assert ra2.doc_id == ra.doc_id
    assert len(doc_chunks(ra.doc_id)) == ra2.chunks
    assert any("新加的一段说明文字" in c["content"] for c in doc_chunks(ra.doc_id))
    assert not any("新加的一段说明文字" in c["content"] for c in doc_chunks(rb.doc_id))
    assert len(doc_chunks(rb.doc_id)) == rb.chunks
    assert_consistent()


def test_cli_reports_each_file_and_fails_after_trying_all(tmp_path):
    folder = tmp_path / "docs"
    write_md(folder / "a_blank.md", "  \n\n  ")  # sorts first: must not stop the others
    shutil.copyfile(CORPUS / "sipeed-mf" / "zh_CN" / "m01_mf1_v1_get_started.md", folder / "b_good.md")
    write_md(folder / "notes.csv", "不是说明书")  # not importable: a folder walk skips it
    unsupported = write_md(tmp_path / "表格.xlsx", "x")
    missing = tmp_path / "不存在的文件夹"
    env = {**os.environ, "DATA_DIR": str(tmp_path / "data"), "PYTHONPATH": str(ROOT)}
    proc = subprocess.run([sys.executable, "-m", "graphs.importing", str(folder), str(unsupported), str(missing), "--json",
                           "--product", "Sipeed MF1"],
                          cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)
    lines = [json.loads(line) for line in proc.stdout.splitlines() if line.startswith("{")]
    assert proc.returncode == 1, proc.stderr[-2000:]
    assert [Path(r["file"]).name for r in lines] == ["a_blank.md", "b_good.md", "表格.xlsx", missing.name]
    blank, good, docx, gone = lines
    assert blank["status"] == "failed" and "没有任何文字内容" in blank["error"]
    assert good["status"] == "completed" and good["chunks"] > 0 and good["product"] == "Sipeed MF1"
    assert docx["status"] == "failed" and "不支持的文件类型" in docx["error"]
    assert gone["status"] == "failed" and "文件不存在" in gone["error"]

    ok = subprocess.run([sys.executable, "-m", "graphs.importing", str(folder / "b_good.md")],
                        cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)
    assert ok.returncode == 0, ok.stderr[-2000:]
    assert "b_good.md" in ok.stdout and "切片" in ok.stdout
