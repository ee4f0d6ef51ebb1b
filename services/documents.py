"""The document registry (collection `kb_document`): one record per imported document.

Lives in the same database as the chat history (MongoDB, or the embedded montydb default). A record
follows its chunks through a two-step write: `begin` parks the new version under `pending` before the
chunks are written, `commit` makes it the record once they are, `abort` drops it when they are not. A
process that dies in between leaves a `pending` entry, which the start-up repair resolves.
"""
from __future__ import annotations

from functools import lru_cache
from typing import Literal, TypedDict

from services.errors import StorageError
from services.history_store import DocumentDatabase, get_database, now_ts
from services.settings import Settings

DOCUMENT_COLLECTION = "kb_document"
# Per product: its aliases ({"alias", "of": "product" | "brand" | "edition", "source": "document" | "user", "by"})
# and the ones a person removed, which a re-import of the documents does not bring back. Kept apart
# from the documents' records so a reindex or a re-import, which rewrite those, leaves them be.
PRODUCT_COLLECTION = "kb_product"
IMPORTING, READY, DAMAGED = "importing", "ready", "damaged"
# What a version of a document says about itself (set by `begin`, made current by `commit`).
VERSION_FIELDS = ("identity", "doc_key", "file_name", "source", "source_path", "content_hash", "product", "product_source",
                  "product_evidence", "pages", "chunks", "chunk_ids", "images_resolved", "images_missing",
                  "bytes", "embedder", "original_key", "set_id", "updated_by")
LIST_FIELDS = {"_id": 0, "chunk_ids": 0, "pending": 0}


class DocumentVersion(TypedDict, total=False):
    """What a version of a document says about itself (the keys of VERSION_FIELDS)."""
    identity: str                # what the document id is made from (a resolved path, an upload's name + hash)
    doc_key: str                 # its folder in the object store and under DATA_DIR/work
    file_name: str               # the name shown to people
    source: str                  # "path" | "upload" | "recovered"
    source_path: str             # a file imported by path: where it lies ("" for an upload)
    content_hash: str
    product: str
    product_source: str          # how the product was decided (see graphs.importing.naming)
    product_evidence: str
    pages: int
    chunks: int
    chunk_ids: list[str]
    images_resolved: int
    images_missing: int
    bytes: int
    embedder: str                # "name/dimension" of the embedder that made its vectors
    original_key: str            # the original in the object store ("": none kept, cannot be re-imported)
    set_id: str                  # documents recognised together
    updated_by: str


class PendingVersion(DocumentVersion, total=False):
    started: float               # when the write began (the start-up repair waits for a young one)


class DocumentRecord(DocumentVersion, total=False):
    """A `kb_document` record as the registry returns it (without the database's `_id`)."""
    doc_id: str
    status: Literal["importing", "ready", "damaged"]
    created: float
    updated: float
    imported_at: float
    error: str
    pending: PendingVersion      # a version being written (read by `pending` and with chunk ids)


class ProductSummary(TypedDict):
    product: str
    documents: int               # its ready documents
    chunks: int


class AliasEntry(TypedDict, total=False):
    alias: str
    of: Literal["product", "brand", "edition"]  # edition: what the document says it is ("旧版")
    source: Literal["document", "user"]
    by: str                      # who added it (a document's: "")


def _public(doc: dict | None) -> DocumentRecord | None:
    if doc is None:
        return None
    return {k: v for k, v in doc.items() if k != "_id"}  # type: ignore[return-value]  # the stored fields


class DocumentRegistry:
    def __init__(self, db: DocumentDatabase):
        self.db = db

    def _docs(self, action: str):
        return self.db.collection(DOCUMENT_COLLECTION, action, indexes=[[("doc_id", 1)], [("product", 1)]])

    def begin(self, doc_id: str, version: DocumentVersion) -> None:
        """Park a new version of the document; a first version makes an `importing` record."""
        fields = {k: version.get(k) for k in VERSION_FIELDS if k in version}
        now = now_ts()
        with self._docs("登记文档") as docs:
            if docs.find_one({"doc_id": doc_id}, {"_id": 1}) is None:
                docs.insert_one({"doc_id": doc_id, "status": IMPORTING, "created": now, "updated": now,
                                 "pending": {**fields, "started": now}})
            else:
                docs.update_one({"doc_id": doc_id}, {"$set": {"pending": {**fields, "started": now}, "updated": now}})

    def commit(self, doc_id: str, final: DocumentVersion) -> DocumentRecord:
        """The chunks are written: the pending version, completed by `final`, becomes the record."""
        with self._docs("登记文档") as docs:
            doc = docs.find_one({"doc_id": doc_id})
            if doc is None:
                raise StorageError(f"登记文档失败：没有文档 {doc_id} 的待定记录")
            fields = {**(doc.get("pending") or {}), **{k: v for k, v in final.items() if k in VERSION_FIELDS}}
            fields.pop("started", None)
            now = now_ts()
            update = {"$set": {**fields, "status": READY, "imported_at": now, "updated": now, "error": ""},
                      "$unset": {"pending": ""}}
            docs.update_one({"doc_id": doc_id}, update)
            return _public(docs.find_one({"doc_id": doc_id}, {"_id": 0, "chunk_ids": 0}))

    def abort(self, doc_id: str) -> None:
        """The chunks were not written: an earlier version stays as it was, a first version goes."""
        with self._docs("撤销文档登记") as docs:
            docs.delete_one({"doc_id": doc_id, "status": IMPORTING})
            docs.update_one({"doc_id": doc_id}, {"$unset": {"pending": ""}})

    def get(self, doc_id: str, *, with_chunk_ids: bool = False) -> DocumentRecord | None:
        projection = {"_id": 0} if with_chunk_ids else {"_id": 0, "chunk_ids": 0}
        with self._docs("读取文档记录") as docs:
            return docs.find_one({"doc_id": doc_id}, projection)

    def list(self, product: str | None = None, *, with_chunk_ids: bool = False) -> list[DocumentRecord]:
        """Records (pending ones included, with their status), by product then file name."""
        query = {"product": product} if product is not None else {}
        projection = {"_id": 0, "pending": 0} if with_chunk_ids else LIST_FIELDS
        with self._docs("读取文档列表") as docs:
            rows = list(docs.find(query, projection))
        return sorted(rows, key=lambda r: (r.get("product") or "", r.get("file_name") or "", r["doc_id"]))

    def pending(self) -> list[DocumentRecord]:
        with self._docs("读取待定文档") as docs:
            return [_public(d) for d in docs.find({"pending": {"$exists": True}})]

    def update(self, doc_id: str, **fields) -> None:
        unknown = set(fields) - set(VERSION_FIELDS) - {"status", "error"}
        if unknown:
            raise StorageError(f"更新文档记录失败：不支持的字段 {', '.join(sorted(unknown))}")
        with self._docs("更新文档记录") as docs:
            docs.update_one({"doc_id": doc_id}, {"$set": {**fields, "updated": now_ts()}})

    def delete(self, doc_id: str) -> bool:
        with self._docs("删除文档记录") as docs:
            return docs.delete_one({"doc_id": doc_id}).deleted_count == 1

    def products(self) -> list[ProductSummary]:
        """Every product that has a ready document."""
        out: dict[str, ProductSummary] = {}
        for r in self.list():
            if r.get("status") != READY or not r.get("product"):
                continue
            entry = out.setdefault(r["product"], {"product": r["product"], "documents": 0, "chunks": 0})
            entry["documents"] += 1
            entry["chunks"] += int(r.get("chunks") or 0)
        return sorted(out.values(), key=lambda e: e["product"])

    # -- product aliases ------------------------------------------------------------------
    def _products(self, action: str):
        return self.db.collection(PRODUCT_COLLECTION, action, indexes=[[("product", 1)]])

    def aliases(self) -> dict[str, list[AliasEntry]]:
        """product -> its aliases, for every product that has one."""
        with self._products("读取产品别名") as products:
            return {p["product"]: list(p.get("aliases") or []) for p in products.find({}, {"_id": 0})}

    def product_aliases(self, product: str) -> list[AliasEntry]:
        with self._products("读取产品别名") as products:
            found = products.find_one({"product": product}, {"_id": 0})
        return list((found or {}).get("aliases") or [])

    def add_document_aliases(self, product: str, entries: list[AliasEntry]) -> None:
        """Aliases a document writes: added unless present or removed by a person."""
        with self._products("保存产品别名") as products:
            found = products.find_one({"product": product}) or {}
            have = list(found.get("aliases") or [])
            skip = {a["alias"] for a in have} | set(found.get("removed") or [])
            new = [{**e, "source": "document", "by": ""} for e in entries if e["alias"] not in skip]
            if new:
                products.update_one({"product": product}, {"$set": {"aliases": have + new, "updated": now_ts()}},
                                    upsert=True)

    def set_aliases(self, product: str, aliases: list[str], by: str) -> list[AliasEntry]:
        """A person's list: those kept stay as they were, new ones are theirs, the rest are removed."""
        with self._products("保存产品别名") as products:
            found = products.find_one({"product": product}) or {}
            have = {a["alias"]: a for a in found.get("aliases") or []}
            kept = [have.get(a) or {"alias": a, "of": "product", "source": "user", "by": by} for a in aliases]
            removed = sorted((set(found.get("removed") or []) | set(have)) - set(aliases))
            products.update_one({"product": product},
                                {"$set": {"aliases": kept, "removed": removed, "updated": now_ts()}}, upsert=True)
        return kept

    def move_aliases(self, old: str, new: str) -> None:
        """A renamed product keeps its aliases; merged into another, the two lists join."""
        if old == new:
            return
        with self._products("保存产品别名") as products:
            src = products.find_one({"product": old})
            if src is None:
                return
            dst = products.find_one({"product": new}) or {}
            names = {a["alias"] for a in dst.get("aliases") or []}
            aliases = list(dst.get("aliases") or []) + [a for a in src.get("aliases") or [] if a["alias"] not in names]
            removed = sorted(set(dst.get("removed") or []) | set(src.get("removed") or []))
            products.update_one({"product": new}, {"$set": {"aliases": aliases, "removed": removed,
                                                            "updated": now_ts()}}, upsert=True)
            products.delete_one({"product": old})

    def drop_aliases(self, product: str) -> None:
        with self._products("删除产品别名") as products:
            products.delete_one({"product": product})

    def ping(self) -> bool:
        return self.db.ping()


def get_document_registry(settings: Settings | None = None) -> DocumentRegistry:
    return _registry_for(get_database(settings))


@lru_cache(maxsize=None)
def _registry_for(db: DocumentDatabase) -> DocumentRegistry:
    return DocumentRegistry(db)
