"""The knowledge base as people manage it: products and their documents, rename / merge, delete,
reindex, and the start-up repair that keeps the registry and the vector store in agreement.

Every function takes the import graph's configuration (`config`, as `run_import` does): the stores
and the embedder it names are the ones changed, so a caller or a test can manage another knowledge
base without touching the environment."""
from __future__ import annotations

import logging
import re
import shutil
import time
from pathlib import Path
from typing import Callable, TypedDict

from langchain_core.runnables import RunnableConfig

from graphs.importing.chunking import embed_text
from graphs.importing.configuration import ImportConfiguration
from graphs.importing.naming import MAX_NAME_CHARS, one_line
from graphs.importing.runner import ImportResult, run_import
from graphs.products import BRAND, EDITION_OF, MAX_ALIAS_CHARS, MAX_ALIASES, FacetFields, clean_alias, parse_facets
from services.documents import DAMAGED, IMPORTING, READY, AliasEntry, DocumentRecord, ProductSummary
from services.errors import ConfigurationError, ValidationError
from services.vector_store import eq_filter

log = logging.getLogger("import.catalog")

Progress = Callable[[str], None]
IMAGE_URL = re.compile(r"!\[[^\]]*\]\(([^)\s]+)\)")
REPAIR_AFTER_S = 60.0  # a pending write younger than this may still be running in another process


class CatalogProduct(ProductSummary, FacetFields):
    aliases: list[AliasEntry]


class DocumentChunk(TypedDict):
    """A chunk as the catalogue shows it."""
    chunk_id: str
    title: str                   # heading path
    parent_title: str
    part: int
    page_start: int              # 0: not from a PDF
    page_end: int
    content: str
    images: list[str]            # the picture URLs its text links


class DeletedDocument(TypedDict):
    doc_id: str
    file_name: str | None
    chunks: int
    objects: int                 # files removed from the object store


class DeletedProduct(TypedDict):
    product: str
    documents: list[str]         # their doc ids


# "from" is a keyword: the functional form names it
RenamedProduct = TypedDict("RenamedProduct", {"product": str, "from": str, "documents": int, "chunks": int,
                                              "merged": bool})


class MovedDocument(TypedDict):
    doc_id: str
    product: str
    chunks: int


class ReimportedDocument(TypedDict):
    doc_id: str
    file_name: str | None
    error: str                   # "" when it completed


class ReindexReport(TypedDict):
    documents: int
    completed: int
    failed: list[ReimportedDocument]


class RepairReport(TypedDict):
    """How many of each the start-up repair found and fixed."""
    adopted: int                 # interrupted writes whose new chunks were all there
    reverted: int                # interrupted writes removed
    recovered: int               # documents with chunks and no record, given one
    damaged: int                 # ready records whose chunks are gone
    names_added: int
    names_deduped: int


class ProductExists(ValidationError):
    """Renaming onto a product that exists merges the two: only when asked to."""


class NotFound(ValidationError):
    pass


def _quiet(_: str) -> None:
    return None


def products(*, config: RunnableConfig | None = None) -> list[CatalogProduct]:
    """Every product with its facets (brand, model, variant, version) and its aliases."""
    registry = ImportConfiguration.from_runnable_config(config).registry
    aliases = registry.aliases()
    return [{**p, **parse_facets(p["product"]).as_dict(), "aliases": aliases.get(p["product"], [])}
            for p in registry.products()]


def product_aliases(product: str, *, config: RunnableConfig | None = None) -> list[AliasEntry]:
    return ImportConfiguration.from_runnable_config(config).registry.product_aliases(product)


def set_aliases(product: str, aliases: list[str], *, updated_by: str = "",
                config: RunnableConfig | None = None) -> list[AliasEntry]:
    """The product's aliases become exactly `aliases` (a person's list: added ones are theirs)."""
    if not documents(product, config=config):
        raise NotFound(f"产品不存在：{product}")
    wanted = list(dict.fromkeys(clean_alias(a) for a in aliases))
    if any(not a for a in wanted):
        raise ValidationError("别名不能为空。")
    if any(len(" ".join(str(a).split())) > MAX_ALIAS_CHARS for a in aliases):
        raise ValidationError(f"别名太长，请不要超过 {MAX_ALIAS_CHARS} 个字。")
    if len(wanted) > MAX_ALIASES:
        raise ValidationError(f"一个产品最多 {MAX_ALIASES} 个别名。")
    registry = ImportConfiguration.from_runnable_config(config).registry
    # one alias names one product: the question it is written in must not find two
    taken = {p["product"].lower(): p["product"] for p in registry.products() if p["product"] != product}
    taken |= {a["alias"].lower(): other for other, entries in registry.aliases().items() if other != product
              for a in entries if a.get("of") not in (BRAND, EDITION_OF)}
    clash = next((a for a in wanted if a.lower() in taken), None)
    if clash:
        raise ValidationError(f"别名“{clash}”已经用于产品“{taken[clash.lower()]}”，一个别名只能指向一个产品。")
    return registry.set_aliases(product, wanted, updated_by)


def documents(product: str | None = None, *, config: RunnableConfig | None = None) -> list[DocumentRecord]:
    return ImportConfiguration.from_runnable_config(config).registry.list(product)


def document(doc_id: str, *, config: RunnableConfig | None = None) -> DocumentRecord:
    record = ImportConfiguration.from_runnable_config(config).registry.get(doc_id)
    if record is None:
        raise NotFound(f"文档不存在：{doc_id}")
    return record


def document_chunks(doc_id: str, *, config: RunnableConfig | None = None) -> list[DocumentChunk]:
    """The document's chunks as stored: heading path, text, pictures."""
    document(doc_id, config=config)
    return [{"chunk_id": r["chunk_id"], "title": r.get("title", ""), "parent_title": r.get("parent_title", ""),
             "part": r.get("part", 1), "page_start": r.get("page_start", 0), "page_end": r.get("page_end", 0),
             "content": r["content"], "images": IMAGE_URL.findall(r["content"])}
            for r in ImportConfiguration.from_runnable_config(config).vector_store.doc_rows(doc_id)]


def delete_document(doc_id: str, *, config: RunnableConfig | None = None) -> DeletedDocument:
    """Chunks, the product-name row if no other document uses it, images, original, record; nothing else."""
    cfg = ImportConfiguration.from_runnable_config(config)
    record = document(doc_id, config=config)
    cfg.vector_store.delete_document(doc_id)
    removed = cfg.object_store.delete_document(record["doc_key"]) if record.get("doc_key") else 0
    shutil.rmtree(cfg.settings.data_dir / "work" / str(record.get("doc_key") or "-"), ignore_errors=True)
    cfg.registry.delete(doc_id)
    return {"doc_id": doc_id, "file_name": record.get("file_name"), "chunks": record.get("chunks", 0),
            "objects": removed}


def delete_product(name: str, *, config: RunnableConfig | None = None) -> DeletedProduct:
    docs = documents(name, config=config)
    if not docs:
        raise NotFound(f"产品不存在：{name}")
    removed = [delete_document(d["doc_id"], config=config)["doc_id"] for d in docs]
    ImportConfiguration.from_runnable_config(config).registry.drop_aliases(name)
    return {"product": name, "documents": removed}


def _rewrite(cfg: ImportConfiguration, doc_id: str, new_name: str, updated_by: str) -> int:
    """One document's chunks under another product name. The embedded text holds the name, so the
    dense vectors are made again; the BM25 side reads the content alone."""
    settings, store, registry, embedder = cfg.settings, cfg.vector_store, cfg.registry, cfg.embedder
    rows = [{k: v for k, v in r.items() if k != "chunk_id"} | {"product": new_name}
            for r in store.doc_rows(doc_id)]
    batch = max(1, settings.embed_batch_size)
    for i in range(0, len(rows), batch):
        group = rows[i:i + batch]
        for row, vec in zip(group, embedder.embed([embed_text(r) for r in group])):
            row["dense"], row["sparse"] = vec["dense"], vec["sparse"]
    title = rows[0]["file_title"] if rows else ""
    item = {"file_title": title, "product": new_name, **embedder.embed([new_name])[0]}
    registry.begin(doc_id, {**(registry.get(doc_id) or {}), "product": new_name, "product_source": "user",
                            "product_evidence": "由用户改名", "chunks": len(rows), "updated_by": updated_by})
    try:
        ids = store.replace_document(doc_id, rows, item)
    except Exception:
        registry.abort(doc_id)
        raise
    registry.commit(doc_id, {"chunk_ids": ids})
    return len(ids)


def rename_product(old: str, new: str, *, merge: bool = False, updated_by: str = "",
                   progress: Progress = _quiet, config: RunnableConfig | None = None) -> RenamedProduct:
    """Every document of `old` under `new`. Onto an existing product only with merge=True."""
    new = one_line(new or "")
    if not new:
        raise ValidationError("新的产品名不能为空。")
    if len(new) > MAX_NAME_CHARS:
        raise ValidationError(f"产品名太长，请不要超过 {MAX_NAME_CHARS} 个字。")
    cfg = ImportConfiguration.from_runnable_config(config)
    docs = documents(old, config=config)
    if not docs:
        raise NotFound(f"产品不存在：{old}")
    if new != old and documents(new, config=config) and not merge:
        raise ProductExists(f"产品“{new}”已经存在：要把“{old}”并入它，请确认合并。")
    chunks = 0
    for n, d in enumerate(docs, 1):
        progress(f"正在更新 {n}/{len(docs)}：{d.get('file_name')}")
        chunks += _rewrite(cfg, d["doc_id"], new, updated_by)
    cfg.registry.move_aliases(old, new)
    return {"product": new, "from": old, "documents": len(docs), "chunks": chunks, "merged": bool(merge)}


def move_document(doc_id: str, product: str, *, updated_by: str = "",
                  config: RunnableConfig | None = None) -> MovedDocument:
    """One document to another (or a new) product."""
    product = one_line(product or "")
    if not product or len(product) > MAX_NAME_CHARS:
        raise ValidationError(f"产品名不能为空，也不能超过 {MAX_NAME_CHARS} 个字。")
    document(doc_id, config=config)
    cfg = ImportConfiguration.from_runnable_config(config)
    return {"doc_id": doc_id, "product": product, "chunks": _rewrite(cfg, doc_id, product, updated_by)}


def reindex_all(*, updated_by: str = "", progress: Progress = _quiet,
                config: RunnableConfig | None = None) -> ReindexReport:
    """Import every document again from its stored original, under its product. After a switch of
    embedder the old collections are dropped first: their vectors mean nothing to the new model."""
    cfg = ImportConfiguration.from_runnable_config(config)
    store, registry = cfg.vector_store, cfg.registry
    records = [r for r in registry.list() if r.get("original_key")]
    try:
        store.open()
    except ConfigurationError:
        progress("向量模型已更换：清空旧的向量集合后重新导入全部文档")
        store.recreate()
    done: list[ReimportedDocument] = []
    failed: list[ReimportedDocument] = []
    for n, record in enumerate(records, 1):
        progress(f"重新导入 {n}/{len(records)}：{record.get('file_name')}")
        result = _reimport(record, updated_by, config=config)
        (done if result.status == "completed" else failed).append(
            {"doc_id": record["doc_id"], "file_name": record.get("file_name"), "error": result.error})
    return {"documents": len(records), "completed": len(done), "failed": failed}


def reimportable(doc_id: str, *, config: RunnableConfig | None = None) -> DocumentRecord:
    """The record of a document that can be imported again from its stored original."""
    record = document(doc_id, config=config)
    if not record.get("original_key"):
        raise ValidationError("这份文档没有保存原件，请重新上传。")
    return record


def reimport_document(doc_id: str, *, updated_by: str = "", task_id: str | None = None,
                      may_retry: bool = False, config: RunnableConfig | None = None) -> ImportResult:
    """One document imported again from its stored original, under its product (a queue task's body)."""
    return _reimport(reimportable(doc_id, config=config), updated_by, task_id=task_id, may_retry=may_retry,
                     config=config)


def _reimport(record: DocumentRecord, updated_by: str, *, task_id: str | None = None, may_retry: bool = False,
              config: RunnableConfig | None = None) -> ImportResult:
    cfg = ImportConfiguration.from_runnable_config(config)
    settings = cfg.settings
    folder = settings.data_dir / "reindex" / record["doc_id"]
    folder.mkdir(parents=True, exist_ok=True)
    name = Path(record["original_key"]).name
    source = Path(record.get("source_path") or "")
    # a file imported by path is read where it lies (its images are beside it); an upload from its original
    path = source if record.get("source") == "path" and source.is_file() else folder / name
    try:
        if path.parent == folder:
            path.write_bytes(cfg.object_store.open_original(record["original_key"]))
        return run_import(path, product=record.get("product"), product_source=record.get("product_source") or "user",
                          product_evidence=record.get("product_evidence", ""), identity=record.get("identity"),
                          original_key=record["original_key"], updated_by=updated_by,
                          source=record.get("source") or "path", file_name=record.get("file_name", ""),
                          task_id=task_id, may_retry=may_retry, config=config)
    finally:
        shutil.rmtree(folder, ignore_errors=True)


def repair(*, older_than_s: float = REPAIR_AFTER_S, config: RunnableConfig | None = None) -> RepairReport:
    """Make the registry and the vector store agree (run at start-up; returns what it did).

    - a write interrupted mid-way: its new chunks are adopted when they are all there (the old ones
      go), else removed (the old version, or no document, stays);
    - chunks of a document with no record: a record is made from them (nothing is thrown away);
    - a ready record whose chunks are gone: marked damaged, to be re-imported;
    - a product with chunks but no name row gets one, a product with two keeps the newest.
    """
    cfg = ImportConfiguration.from_runnable_config(config)
    store, registry = cfg.vector_store, cfg.registry
    report: RepairReport = {"adopted": 0, "reverted": 0, "recovered": 0, "damaged": 0, "names_added": 0, "names_deduped": 0}
    now = time.time()
    for record in registry.pending():
        pending = record.get("pending") or {}
        if now - float(pending.get("started") or 0) < older_than_s:
            continue
        doc_id = record["doc_id"]
        committed = {str(i) for i in record.get("chunk_ids") or []}
        present = {str(r["chunk_id"]) for r in store.query_all(store.chunks, eq_filter("doc_id", doc_id), ["chunk_id"])}
        new = sorted(present - committed, key=int)
        if new and len(new) == int(pending.get("chunks") or -1):
            store.delete_chunks(sorted(committed & present, key=int))
            registry.commit(doc_id, {"chunk_ids": new})
            report["adopted"] += 1
        else:
            store.delete_chunks(new)
            registry.abort(doc_id)
            report["reverted"] += 1
    counts = store.doc_counts()
    known = {r["doc_id"]: r for r in registry.list(with_chunk_ids=True)}
    for doc_id, n in counts.items():
        if doc_id not in known:
            rows = store.doc_rows(doc_id)
            registry.begin(doc_id, {"file_name": rows[0]["file_title"], "product": rows[0]["product"],
                                    "product_source": "recovered", "chunks": n, "source": "recovered"})
            registry.commit(doc_id, {"chunk_ids": [r["chunk_id"] for r in rows]})
            report["recovered"] += 1
    for doc_id, record in known.items():
        if record.get("status") == READY and not counts.get(doc_id):
            registry.update(doc_id, status=DAMAGED, error="向量库中找不到这份文档的切片，请重新导入或重建索引")
            report["damaged"] += 1
    report["names_deduped"] = store.dedupe_names()
    named = {r["product"] for r in store.products()}
    embedder = cfg.embedder
    for record in registry.list():
        if record.get("status") in (READY, IMPORTING) and record.get("product") and record["product"] not in named:
            if counts.get(record["doc_id"]):
                store.add_name_row({"file_title": record.get("file_name", ""), "product": record["product"],
                                    **embedder.embed([record["product"]])[0]}, record["doc_id"])
                named.add(record["product"])
                report["names_added"] += 1
    if any(report.values()):
        log.warning("知识库修复：%s", report)
    return report
