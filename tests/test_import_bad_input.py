"""Bad input and crashes: each gives a clear Chinese message and leaves nothing half-written."""
from __future__ import annotations

import os
import shutil

import pymupdf
import pytest

import services.vector_store as vector_store
from conftest import CORPUS
from graphs.importing.runner import run_import
from import_fixtures import (  # noqa: F401 - fresh_data, refusal_data and refusal_dir are fixtures
    Killed, assert_consistent, assert_refused, doc_chunks, failed_with, fresh_data, name_rows, nothing_written,
    refusal_data, refusal_dir, store, write_md,
)
from services.embeddings import get_embedder
from services.object_store import local_images_root
from services.settings import get_settings
from services.vector_store import eq_filter

BTT_V3 = CORPUS / "btt-skr-mini-e3" / "BTT SKR MINI E3 V3.0使用手册.pdf"
IMAGE_DIR = CORPUS / "sipeed-mf" / "assets" / "mf_module"
MANUAL = """# 苏伯尓 C21 电磁炉

苏伯尓 C21 是一款 2100W 的家用电磁炉。

## 安全须知

使用前请确认插座额定电流不低于 10A。不要在炉面上放置空锅加热。

## 清洁与保养

断电冷却后用湿布擦拭面板，不要用水直接冲洗。

## 故障代码

E1 表示锅具不合适，E2 表示炉面过热，E3 表示电压异常。
"""


# Long enough sections that the splitter keeps them apart: several chunks, several batches.
LONG_MANUAL = "# 苏伯尓 C21 电磁炉\n\n" + "".join(
    f"## 第{i}章\n\n" + f"第{i}章的说明：插座额定电流不低于 10A，炉面保持干燥，清洁前断电冷却。" * 16 + "\n\n"
    for i in range(1, 6))


@pytest.mark.parametrize("name, data, node, phrases", [
    ("表格.xlsx", b"PK\x03\x04 not supported", "node_entry", ["不支持的文件类型", ".xlsx", "PDF", "Word", "Markdown"]),
    ("README", b"text", "node_entry", ["不支持的文件类型", "无扩展名"]),
    ("空文件.md", b"", "node_entry", ["空的", "0 字节"]),
    ("空文件.PDF", b"", "node_entry", ["空的", "0 字节"]),
    ("坏文件.pdf", os.urandom(4096), "node_pdf_to_md", ["已损坏"]),
    ("截断.pdf", BTT_V3.read_bytes()[: BTT_V3.stat().st_size // 3], "node_pdf_to_md", ["不完整"]),
    ("空白.md", b"  \n\t\r\n   \n", "node_md_img", ["没有任何文字内容"]),
    ("二进制.md", b"\x89PNG\r\n\x1a\n\x00\x00\x00", "node_md_img", ["不是文本文件"]),
])
def test_refused_files(refusal_data, tmp_path, name, data, node, phrases):
    path = tmp_path / name
    path.write_bytes(data)
    assert_refused(path, node, *phrases)


def test_missing_file_and_empty_path(refusal_data, tmp_path):
    failed_with(run_import(tmp_path / "不存在.md"), "node_entry", "文件不存在")
    failed_with(run_import(""), "node_entry", "没有给出要导入的文件路径")
    failed_with(run_import("  "), "node_entry", "没有给出要导入的文件路径")
    failed_with(run_import(tmp_path / "无扩展名的缺失路径"), "node_entry", "文件不存在")
    failed_with(run_import(tmp_path), "node_entry", "不是文件")


def test_encrypted_pdf(refusal_data, tmp_path):
    pdf = tmp_path / "加密.pdf"
    pymupdf.open(BTT_V3).save(pdf, encryption=pymupdf.PDF_ENCRYPT_AES_256, user_pw="user", owner_pw="owner")
    result = run_import(pdf)
    failed_with(result, "node_pdf_to_md", "已加密", "需要密码")
    nothing_written(result)


def test_markdown_with_only_images_uploads_nothing(refusal_data, tmp_path):
    shutil.copyfile(IMAGE_DIR / "mf0_front.png", tmp_path / "front.png")
    md = write_md(tmp_path / "只有图片.md", "![](front.png)\n\n<img src=\"front.png\" width=\"500\"/>\n\n---\n")
    result = run_import(md)
    failed_with(result, "node_md_img", "没有任何文字内容", "只有图片")
    nothing_written(result)


def test_file_over_the_size_limit(refusal_data, env, tmp_path):
    env(MAX_UPLOAD_MB=1)
    big = write_md(tmp_path / "大文件.md", "# 大文件\n\n" + "这是一段很长的说明文字。\n" * 60000)
    assert big.stat().st_size > 1024 * 1024
    result = run_import(big)
    failed_with(result, "node_entry", "超过了 1 MB 的上限", "大文件.md")
    nothing_written(result)


@pytest.mark.parametrize("encoding", ["gbk", "utf-16", "utf-8-sig"])  # Windows editors' choices
def test_markdown_in_other_encodings_is_decoded(fresh_data, tmp_path, encoding):
    md = write_md(tmp_path / f"{encoding}说明书.md", MANUAL, encoding=encoding)
    assert md.read_bytes().decode("utf-8", errors="replace") != MANUAL  # a naive reader gets it wrong
    result = run_import(md)
    assert result.status == "completed", result.error
    chunks = doc_chunks(result.doc_id)
    content = "\n".join(c["content"] for c in chunks)
    for phrase in ("苏伯尓 C21 是一款 2100W 的家用电磁炉", "E2 表示炉面过热", "不要用水直接冲洗"):
        assert phrase in content
    assert "\ufeff" not in content and all(c["title"].startswith("苏伯尓 C21 电磁炉") for c in chunks)
    assert "苏伯尓" in result.product


def test_product_and_file_names_with_quotes_backslashes_newlines(fresh_data, tmp_path):
    product = 'He said "hi" \\ back\nslash'
    stored_name = 'He said "hi" \\ back slash'  # one line: filters cannot match CR/LF/tab
    md = write_md(tmp_path / "说明书 \"X1\" it's \\ v2.md", MANUAL)
    first = run_import(md, product=product)
    assert first.status == "completed", first.error
    assert first.product == stored_name
    s = store()
    by_name = s.query(s.chunks, eq_filter("product", stored_name), ["file_title", "product"])
    assert len(by_name) == first.chunks > 0
    assert {r["file_title"] for r in by_name} == {"说明书 \"X1\" it's \\ v2"}
    assert [r["product"] for r in name_rows(eq_filter("product", stored_name))] == [stored_name]
    # The same product name given with other blanks is the same product.
    assert s.count(s.chunks, eq_filter("product", product)) == first.chunks

    again = run_import(md, product=product)
    assert again.chunks == first.chunks and len(doc_chunks(first.doc_id)) == first.chunks
    assert_consistent()

    s.delete_document(first.doc_id)
    assert s.count(s.chunks) == 0 and name_rows() == []
    third = run_import(md, product=product)
    assert third.status == "completed" and len(doc_chunks(third.doc_id)) == first.chunks
    assert_consistent()


def test_overlong_title_makes_a_name_that_fits(fresh_data, tmp_path):
    md = write_md(tmp_path / "长标题.md", "# SKR " + "超长的标题文字" * 600 + "\n\n正文说明。\n")
    result = run_import(md)
    assert result.status == "completed", result.error
    assert 0 < len(result.product) <= 100 and result.product.startswith("SKR")
    assert_consistent()


def test_overlong_product_name_is_refused_before_anything_is_written(refusal_data, tmp_path):
    md = write_md(tmp_path / "a.md", MANUAL)
    result = run_import(md, product="超长商品名" * 30)
    failed_with(result, "node_entry", "商品名太长")
    nothing_written(result)


# --- crashes -------------------------------------------------------------------------------------

def _clean_import(md):
    result = run_import(md)
    assert result.status == "completed", result.error
    return result, sorted(c["content"] for c in doc_chunks(result.doc_id)), sorted(c["chunk_id"] for c in
                                                                                    doc_chunks(result.doc_id))


def test_embedder_failing_on_second_batch_writes_nothing(fresh_data, env, monkeypatch, tmp_path):
    env(EMBED_BATCH_SIZE=2)
    md = write_md(tmp_path / "c21.md", LONG_MANUAL)
    embedder = get_embedder()
    real, calls = embedder.embed, []

    def flaky(texts, **kw):
        calls.append(len(texts))
        if len(calls) == 2:
            raise RuntimeError("模拟：第二批向量化时崩溃")
        return real(texts, **kw)

    monkeypatch.setattr(embedder, "embed", flaky)
    crashed = run_import(md)
    failed_with(crashed, "node_bge_embedding", "模拟：第二批向量化时崩溃")
    assert doc_chunks(crashed.doc_id) == [] and name_rows() == []
    monkeypatch.setattr(embedder, "embed", real)
    rerun, contents, _ = _clean_import(md)
    assert rerun.chunks == len(contents) >= 3  # more than one batch of 2
    assert_consistent()


def test_failed_new_document_leaves_no_pictures_an_old_version_keeps_its_own(fresh_data, monkeypatch, tmp_path):
    shutil.copyfile(IMAGE_DIR / "mf0_front.png", tmp_path / "front.png")
    md = write_md(tmp_path / "c21.md", LONG_MANUAL + "\n![正面](front.png)\n")
    embedder = get_embedder()
    real = embedder.embed

    def broken(texts, **kw):
        raise RuntimeError("模拟：向量化失败")

    def pictures():
        return sorted(p.name for p in local_images_root(get_settings()).rglob("*") if p.is_file())

    monkeypatch.setattr(embedder, "embed", broken)
    failed = run_import(md)
    failed_with(failed, "node_bge_embedding", "模拟：向量化失败")
    assert failed.images_uploaded == 1 and pictures() == []  # uploaded, then taken back
    monkeypatch.setattr(embedder, "embed", real)
    good, contents, _ = _clean_import(md)
    assert pictures() == ["front.png"]
    monkeypatch.setattr(embedder, "embed", broken)
    assert run_import(md).status == "failed"
    assert pictures() == ["front.png"]  # the stored version still shows its picture
    assert sorted(c["content"] for c in doc_chunks(good.doc_id)) == contents


@pytest.mark.parametrize("fail_at", ["second chunk batch", "name row", "old chunk delete"])
def test_failed_write_keeps_the_previous_version(fresh_data, tmp_path, fail_at):
    """A failure while writing rolls the new version back: the old one stays whole and alone."""
    md = write_md(tmp_path / "c21.md", LONG_MANUAL)
    old, old_contents, old_ids = _clean_import(md)
    assert old.chunks >= 3  # more than one insert batch of 2
    write_md(md, LONG_MANUAL.replace("10A", "16A") + "\n## 新增章节\n\n第二版新增的一段说明。\n")
    client = store().client
    real_insert, real_delete, inserts = client.insert, client.delete, []

    def insert(collection, data, **kw):
        inserts.append(collection)
        if fail_at == "second chunk batch" and inserts.count(store().chunks) == 2:
            raise RuntimeError("模拟：第二批写入失败")
        if fail_at == "name row" and collection == store().items:
            raise RuntimeError("模拟：商品名写入失败")
        return real_insert(collection, data, **kw)

    def delete(collection, filter="", **kw):
        if fail_at == "old chunk delete" and "not in" in filter:
            raise RuntimeError("模拟：删除旧切片失败")
        return real_delete(collection, filter=filter, **kw)

    with pytest.MonkeyPatch.context() as faults:
        faults.setattr(vector_store, "INSERT_BATCH", 2)
        faults.setattr(client, "insert", insert)
        faults.setattr(client, "delete", delete)
        failed = run_import(md)
    failed_with(failed, "node_import_milvus", "模拟")
    stored = doc_chunks(old.doc_id)
    assert sorted(c["chunk_id"] for c in stored) == old_ids  # the old version, untouched
    assert sorted(c["content"] for c in stored) == old_contents
    assert [r["product"] for r in name_rows()] == [old.product]
    assert_consistent()

    new = run_import(md)
    assert new.status == "completed"
    contents = [c["content"] for c in doc_chunks(new.doc_id)]
    assert len(contents) == new.chunks and any("第二版新增的一段说明" in c for c in contents)
    assert not any("10A" in c for c in contents)
    assert_consistent()


def test_process_killed_between_writes_then_rerun(fresh_data, tmp_path):
    """Killed after the new chunks went in but before the old ones went out: both versions are
    there (never neither); the re-run leaves exactly one clean import's worth."""
    md = write_md(tmp_path / "c21.md", MANUAL)
    old, old_contents, _ = _clean_import(md)
    client = store().client
    real_delete = client.delete

    def killed(collection, filter="", **kw):
        if "not in" in filter:
            raise Killed()
        return real_delete(collection, filter=filter, **kw)

    with pytest.MonkeyPatch.context() as faults, pytest.raises(Killed):
        faults.setattr(client, "delete", killed)
        run_import(md)
    assert len(doc_chunks(old.doc_id)) == 2 * old.chunks

    rerun = run_import(md)
    assert rerun.status == "completed" and rerun.chunks == old.chunks
    assert sorted(c["content"] for c in doc_chunks(old.doc_id)) == old_contents
    assert_consistent()


def test_renamed_product_keeps_a_name_another_document_still_uses(fresh_data, tmp_path):
    a = write_md(tmp_path / "a" / "manual.md", MANUAL)
    b = write_md(tmp_path / "b" / "manual.md", MANUAL.replace("C21", "C22"))
    ra = run_import(a, product="苏伯尓电磁炉")
    rb = run_import(b, product="苏伯尓电磁炉")
    assert [r["product"] for r in name_rows()] == ["苏伯尓电磁炉"]  # one row per product name
    assert_consistent()

    rb2 = run_import(b, product="苏伯尓 C22 电磁炉")  # b turns out to be another product
    assert rb2.status == "completed"
    assert sorted(r["product"] for r in name_rows()) == ["苏伯尓 C22 电磁炉", "苏伯尓电磁炉"]
    assert {c["product"] for c in doc_chunks(ra.doc_id)} == {"苏伯尓电磁炉"}
    assert_consistent()

    store().delete_document(rb.doc_id)
    assert [r["product"] for r in name_rows()] == ["苏伯尓电磁炉"]
    store().delete_document(ra.doc_id)
    assert name_rows() == []


def test_uploaded_markdown_cannot_publish_files_outside_its_folder(env, tmp_path):
    """A crafted `../` image link in an upload must not copy a server file into the public store."""
    import io

    from graphs.importing import run_import, stage_uploads

    settings = env(DATA_DIR=str(tmp_path / "data"))
    secret = tmp_path / "data" / "secret.png"
    secret.parent.mkdir(parents=True, exist_ok=True)
    secret.write_bytes(b"\x89PNG\r\n\x1a\n not for the public")
    text = "# 产品 X100\n\n说明文字足够长，用来导入。\n\n![图](../../../secret.png)\n"
    staged = stage_uploads([("manual.md", io.BytesIO(text.encode("utf-8")))], settings)[0]
    assert staged.path.parent.parent.parent == settings.data_dir / "uploads"  # the link reaches data/
    result = run_import(staged.path, staged=staged)
    assert result.status == "completed", result.error
    assert result.images_uploaded == 0
    assert result.missing_images == ["../../../secret.png"]
