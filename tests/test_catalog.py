"""The product catalogue: a documentation site imported as a set (CLI and API), the document registry
written with the chunks, and the knowledge-base actions over HTTP."""
from __future__ import annotations

import json
from collections import Counter

import pytest

from api_fixtures import api, api_server, wait_task  # noqa: F401 (fixtures)
from conftest import CORPUS
from graphs.importing import catalog
from graphs.importing.__main__ import main as import_cli
from import_fixtures import Killed, assert_consistent, name_rows, store
from services.documents import get_document_registry
from test_recognition import manifest

DOCS = CORPUS / "milkv-docs"


@pytest.fixture(scope="module")
def site(tmp_path_factory):
    """milkv-docs imported once by the CLI into this module's own data dir."""
    mp = pytest.MonkeyPatch()
    from services.settings import reload_settings

    mp.setenv("DATA_DIR", str(tmp_path_factory.mktemp("catalog") / "data"))
    reload_settings()
    assert import_cli([str(DOCS), "--json"]) == 0
    yield
    mp.undo()
    reload_settings()


def registry_by_page() -> dict[str, dict]:
    return {r["source_path"].split("milkv-docs/", 1)[1]: r for r in get_document_registry().list()}


def agree() -> None:
    """Registry and chunks agree: every ready record's chunk count is what the store holds, and the
    store holds no document without a record."""
    counts = store().doc_counts()
    records = {r["doc_id"]: r for r in get_document_registry().list()}
    assert set(counts) == {d for d, r in records.items() if r["status"] == "ready"}
    assert all(counts[d] == records[d]["chunks"] for d in counts), (counts, records)
    assert_consistent()


def test_cli_folder_import_records_every_page_under_its_product(site):
    truth = manifest()
    pages = registry_by_page()
    assert {p: r["product"] for p, r in pages.items()} == truth
    assert all(r["status"] == "ready" and r["chunks"] > 0 and r["original_key"] for r in pages.values())
    assert [p["product"] for p in catalog.products()] == ["Milk-V Jupiter", "Milk-V Mars", "Milk-V Mars CM"]
    assert sorted(r["product"] for r in name_rows()) == ["Milk-V Jupiter", "Milk-V Mars", "Milk-V Mars CM"]
    boot = pages["mars/getting-started/boot.md"]
    assert boot["images_resolved"] > 0 and boot["images_missing"] == 0 and boot["bytes"] > 0
    agree()


def test_api_lists_products_documents_and_chunks(site, api):
    products = api.get("/api/products").json()
    assert [(p["product"], p["documents"]) for p in products] == [
        ("Milk-V Jupiter", 14), ("Milk-V Mars", 11), ("Milk-V Mars CM", 8)]
    docs = api.get("/api/documents", params={"product": "Milk-V Mars CM"}).json()
    assert len(docs) == 8 and all(d["product"] == "Milk-V Mars CM" for d in docs)
    boot = next(d for d in docs if d["file_name"] == "boot.md")
    assert api.get(f"/api/documents/{boot['doc_id']}").json()["chunks"] == boot["chunks"]
    chunks = api.get(f"/api/documents/{boot['doc_id']}/chunks").json()
    assert len(chunks) == boot["chunks"] and any(c["images"] for c in chunks)
    assert all(c["title"] for c in chunks)
    assert api.get("/api/documents/nope").status_code == 404
    assert "不存在" in api.get("/api/documents/nope/chunks").json()["error"]
    schema = api.get("/openapi.json").json()["paths"]
    for path in ("/api/products", "/api/documents", "/api/documents/{doc_id}", "/api/documents/{doc_id}/chunks",
                 "/api/products/{name}", "/api/reindex"):
        assert path in schema, path


def test_deleting_one_document_changes_nothing_else(site, api):
    before = {r["doc_id"]: r["chunks"] for r in get_document_registry().list()}
    victim = registry_by_page()["jupiter/build-os/ubuntu.md"]
    reply = api.delete(f"/api/documents/{victim['doc_id']}")
    assert reply.status_code == 200 and reply.json()["chunks"] == victim["chunks"]
    after = store().doc_counts()
    del before[victim["doc_id"]]
    assert after == before
    assert api.get(f"/api/documents/{victim['doc_id']}").status_code == 404
    assert api.delete(f"/api/documents/{victim['doc_id']}").status_code == 404
    agree()


def test_rename_merges_only_on_purpose_and_updates_chunks_and_names(site, api):
    clash = api.patch("/api/products/Milk-V Mars CM", json={"new_name": "Milk-V Mars"})
    assert clash.status_code == 409 and "合并" in clash.json()["error"]
    renamed = api.patch("/api/products/Milk-V Mars CM", json={"new_name": "Milk-V Mars Compute Module"})
    assert renamed.status_code == 200 and renamed.json()["documents"] == 8
    s = store()
    names = Counter(r["product"] for r in s.query_all(s.chunks, "chunk_id >= 0", ["product"]))
    assert "Milk-V Mars CM" not in names and names["Milk-V Mars Compute Module"] > 0
    assert "Milk-V Mars Compute Module" in [r["product"] for r in name_rows()]
    agree()
    # back again, then a deliberate merge: both products' documents under one name
    assert api.patch("/api/products/Milk-V Mars Compute Module", json={"new_name": "Milk-V Mars CM"}).status_code == 200
    merged = api.patch("/api/products/Milk-V Mars CM", json={"new_name": "Milk-V Mars", "merge": True})
    assert merged.status_code == 200 and merged.json()["merged"] is True
    assert [p["product"] for p in api.get("/api/products").json()] == ["Milk-V Jupiter", "Milk-V Mars"]
    assert api.patch("/api/products/nope", json={"new_name": "x"}).status_code == 404
    assert api.patch("/api/products/Milk-V Mars", json={"new_name": " "}).status_code in (400, 422)
    agree()


def test_reindex_rebuilds_every_document_from_its_original(site, api):
    before = {r["doc_id"]: (r["product"], r["chunks"]) for r in get_document_registry().list()}
    task = api.post("/api/reindex").json()["task_id"]
    status = wait_task(api, task, timeout=300)
    assert status["status"] == "completed", status
    after = {r["doc_id"]: (r["product"], r["chunks"]) for r in get_document_registry().list()}
    assert after == before
    agree()


def test_delete_product_removes_its_documents_only(site, api):
    jupiter = {r["doc_id"] for r in get_document_registry().list("Milk-V Jupiter")}
    reply = api.delete("/api/products/Milk-V Jupiter")
    assert reply.status_code == 200 and set(reply.json()["documents"]) == jupiter
    assert [p["product"] for p in api.get("/api/products").json()] == ["Milk-V Mars"]
    assert api.delete("/api/products/Milk-V Jupiter").status_code == 404
    agree()


def test_same_named_uploads_keep_both_originals_and_records(env, tmp_path, api):
    settings = env(DATA_DIR=str(tmp_path / "data"))
    files = [("files", ("faq.md", "# Radxa E20C 常见问题\n\nE20C 长按 RESET 键恢复出厂设置。\n".encode())),
             ("files", ("faq.md", "# Radxa E52C 常见问题\n\nE52C 长按 RESET 键恢复出厂设置。\n".encode()))]
    tasks = api.post("/api/upload", files=files).json()["task_ids"]
    assert [wait_task(api, t)["status"] for t in tasks] == ["completed", "completed"]
    records = get_document_registry().list()
    assert len(records) == 2 and len({r["original_key"] for r in records}) == 2
    originals = sorted(settings.data_dir.rglob("pdf_files/*/faq.md"))
    assert len(originals) == 2 and {p.read_text(encoding="utf-8")[:12] for p in originals} == {
        "# Radxa E20C", "# Radxa E52C"}
    assert sorted(r["product"] for r in records) == ["Radxa E20C", "Radxa E52C"]
    # a product per file, given by the caller, wins over recognition
    three = [("files", ("notes.md", "# 说明\n\n这是 E20C 的补充说明，足够长的一段文字。\n".encode()))]
    task = api.post("/api/upload", files=three, data={"products": json.dumps({"notes.md": "Radxa E20C"})}).json()
    assert wait_task(api, task["task_ids"][0])["product"] == "Radxa E20C"
    bad = api.post("/api/upload", files=three, data={"products": "[1, 2]"})
    assert bad.status_code == 400 and "JSON 对象" in bad.json()["error"]


def test_a_crash_between_the_writes_is_repaired(env, tmp_path, monkeypatch):
    """The process dies after the new chunks are in and before the old ones go: start-up repair (and a
    re-run alike) leave registry and chunks in agreement, with no duplicates."""
    from graphs.importing import run_import
    from services.vector_store import VectorStore

    env(DATA_DIR=str(tmp_path / "data"))
    doc = tmp_path / "m.md"
    doc.write_text("# Radxa E20C\n\nE20C 是一款网络小主机。\n\n## 供电\n\nE20C 使用 12V 供电。\n", encoding="utf-8")
    first = run_import(doc)
    assert first.status == "completed"
    doc.write_text(doc.read_text(encoding="utf-8") + "\n## 网口\n\nE20C 有两个网口。\n", encoding="utf-8")
    real_call = VectorStore._call

    def die_before_delete(self, what, fn, *args, **kwargs):
        if what == "删除旧切片":
            raise Killed()
        return real_call(self, what, fn, *args, **kwargs)

    monkeypatch.setattr(VectorStore, "_call", die_before_delete)
    with pytest.raises(Killed):
        run_import(doc)
    monkeypatch.setattr(VectorStore, "_call", real_call)
    assert get_document_registry().pending()  # the interrupted version is visible as pending
    report = catalog.repair(older_than_s=0)
    assert report["adopted"] + report["reverted"] == 1
    agree()
    # a re-run after the crash ends in the same agreement
    assert run_import(doc).status == "completed"
    agree()
    assert not get_document_registry().pending()


def test_an_api_upload_of_a_site_export_keeps_its_folders_for_recognition(env, tmp_path, api):
    env(DATA_DIR=str(tmp_path / "data"))
    pages = sorted(DOCS.rglob("*.md"))
    files = [("files", (str(p.relative_to(DOCS)), p.read_bytes())) for p in pages]
    tasks = api.post("/api/upload", files=files).json()["task_ids"]
    done = [wait_task(api, t, timeout=300) for t in tasks]
    assert all(d["status"] == "completed" for d in done), [d["error"] for d in done if d["error"]]
    truth = manifest()
    got = {str(p.relative_to(DOCS)): d["product"] for p, d in zip(pages, done)}
    assert got == truth
    # nothing was stored under the client's folder names
    assert not list((tmp_path / "data" / "uploads").rglob("compute-module"))


def test_questions_over_a_recognised_site_never_guess_the_product(env, tmp_path):
    """Two mini-PCs imported as a site beside a car manual: naming a model confirms it, naming only the
    vendor asks between its models, and a vendor the knowledge base lacks is refused with what it covers."""
    from graphs.importing import import_set, iter_import_files
    from graphs.query.runner import run_query

    env(DATA_DIR=str(tmp_path / "data"))
    site = tmp_path / "site"
    for model in ("E20C", "E52C"):
        folder = site / model.lower()
        folder.mkdir(parents=True)
        (folder / "introduction.md").write_text(
            f"---\ntitle: 产品简介\n---\n\n# 产品主要特性\n\nRadxa {model} 是一款网络小主机。\n", encoding="utf-8")
        (folder / "faq.md").write_text(
            f"# 常见问题\n\n## 恢复出厂设置\n\n{model} 断电后按住 RESET 键再上电，保持 10 秒，{model} 即恢复出厂设置。\n",
            encoding="utf-8")
    car = tmp_path / "car.md"
    car.write_text("# 汽车使用手册\n\n欢迎选择 AITO M9。本手册介绍 M9 汽车。\n\n## 蓝牙电话\n\n"
                   "M9 的中控屏可以连接手机蓝牙，在设置中打开蓝牙并选择车辆名称完成配对。\n", encoding="utf-8")
    results = import_set(iter_import_files([site]), root=site) + import_set([car])
    assert sorted({r.product for r in results}) == ["AITO M9", "Radxa E20C", "Radxa E52C"]

    off = {"web_search": False, "hyde": False}
    named = run_query("Radxa E52C 怎么恢复出厂设置？", options=off)
    assert (named["branch"], named["products"]) == ("confirmed", ["Radxa E52C"])
    vendor = run_query("Radxa 的网络小主机怎么恢复出厂设置？", options=off)
    assert vendor["branch"] == "ask" and set(vendor["candidates"]) == {"Radxa E20C", "Radxa E52C"}
    stranger = run_query("小米的扫地机器人怎么恢复出厂设置？", options=off)
    assert stranger["branch"] == "refuse" and "AITO M9" in stranger["answer"]
