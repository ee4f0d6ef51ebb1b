"""Milvus: the chunk and product collections (`kb_chunks`, `kb_item_names` on disk).

One code path for Milvus Lite (a file under DATA_DIR) and a Milvus server (`MILVUS_URL`).
The embedded engine is Milvus Lite 2.5 (the server's C++ core, run by pymilvus as a child process
per file). Facts designed around (measured on Milvus Lite 2.5.1 with pymilvus 3.0.2): collection
properties and schema functions are not kept (the signature rides in the schema description, BM25
shows as a function-output field), an INT16 `default_value` is refused, and `filter_params`
templates fail (and an unparsable filter is retried by pymilvus for minutes), so filters are built
here with escaping.
"""
from __future__ import annotations

import contextlib
import json
import logging
import threading
import time
import warnings
from pathlib import Path
from typing import Callable

from pymilvus import (
    AnnSearchRequest, DataType, Function, FunctionType, MilvusClient, RRFRanker, WeightedRanker,
)

from services.embeddings import Embedder, Vectors, get_embedder
from services.errors import ConfigurationError, MilvusError
from services.hits import Hit
from services.settings import Settings, get_settings

log = logging.getLogger("services.vector_store")
# Milvus Lite 2.5 reads its version through pkg_resources, which warns on every start.
warnings.filterwarnings("ignore", message="pkg_resources is deprecated", category=UserWarning)
# Lite hands query iterators no MVCC timestamp; the client-side one it falls back to is what we want.
logging.getLogger("pymilvus.client.iterator.query_iterator").setLevel(logging.ERROR)

MAX_CONTENT_BYTES = 65000  # VARCHAR(65535) is counted in UTF-8 bytes by the server
INSERT_BATCH = 256  # rows per insert call: keeps each request far below the gRPC message limit
QUERY_PAGE = 4096  # rows per page of a read: a server refuses offset + limit above 16384, an iterator has no cap
CHUNK_FIELDS = ["chunk_id", "content", "title", "parent_title", "file_title", "doc_id", "product", "part",
                "page_start", "page_end"]
PRODUCT_FIELDS = ["product", "file_title", "doc_id"]
# The product is stored as `item_name` (the field name of data folders written before it was called
# a product); the mapping lives here alone, so every caller reads and writes `product`.
STORED_AS = {"product": "item_name"}
READ_AS = {v: k for k, v in STORED_AS.items()}
ANALYZER = {"tokenizer": "jieba", "filter": ["lowercase"]}  # Milvus keeps case: "PoE" must find "POE"


def escape_filter_value(value: str) -> str:
    """A string literal safe inside a Milvus boolean expression: quotes and backslashes escaped,
    line breaks made spaces, so no value can end the literal and add a clause."""
    value = value.replace("\\", "\\\\").replace('"', '\\"').replace("'", "\\'")
    for ch in "\r\n\t":
        value = value.replace(ch, " ")
    return f'"{value}"'


def stored(fields: list[str]) -> list[str]:
    return [STORED_AS.get(f, f) for f in fields]


def as_stored(row: dict) -> dict:
    """A row with the field names it has on disk (for writers that insert through the client)."""
    return {STORED_AS.get(k, k): v for k, v in row.items()}


def as_read(row: dict) -> dict:
    """A row with the stored field names replaced by the ones callers use."""
    return {READ_AS.get(k, k): v for k, v in row.items()}


def in_filter(field: str, values: list[str]) -> str:
    field = STORED_AS.get(field, field)
    return f"{field} in [{', '.join(escape_filter_value(v) for v in values)}]"


def eq_filter(field: str, value: str) -> str:
    field = STORED_AS.get(field, field)
    return f"{field} == {escape_filter_value(value)}"


def clip_utf8(text: str, limit: int) -> str:
    raw = text.encode("utf-8")
    if len(raw) <= limit:
        return text
    return raw[:limit].decode("utf-8", errors="ignore")


def hit_to_dict(hit) -> Hit:
    """Flatten a search hit whatever shape the client returns; pk reported as `chunk_id`."""
    if isinstance(hit, dict):
        flat = dict(hit.get("entity") or {})
        flat.update({k: v for k, v in hit.items() if k != "entity"})
    else:  # pymilvus Hit object
        flat = dict(getattr(hit, "entity", {}) or {})
        for key in ("id", "distance", "score"):
            if hasattr(hit, key):
                flat.setdefault(key, getattr(hit, key))
    pk = flat.get("chunk_id", flat.get("pk", flat.get("id")))
    if pk is not None:
        flat["chunk_id"] = str(pk)
    flat["score"] = float(flat.get("distance", flat.get("score", 0.0)) or 0.0)
    return as_read(flat)  # type: ignore[return-value]  # the fields asked for, under their read names


class VectorStore:
    def __init__(self, settings: Settings, embedder: Embedder) -> None:
        self.settings = settings
        self.embedder = embedder
        self.chunks = settings.chunks_collection
        self.items = settings.product_collection
        self._lock = threading.RLock()  # guards the client's creation and closing
        # Lite is one file served by one in-process engine: keep its calls serial. A server takes
        # concurrent calls, and serialising them here would make every question wait for an import.
        self._serial = self._lock if not settings.milvus_url else contextlib.nullcontext()
        self._client: MilvusClient | None = None
        self._ready = False
        self._names: tuple[tuple[int, int], list[dict]] | None = None  # ((rows, newest pk), rows) of the product collection

    @property
    def backend(self) -> str:
        return "milvus" if self.settings.milvus_url else "milvus-lite"

    # -- connection and schema ------------------------------------------------------------
    @property
    def client(self) -> MilvusClient:
        with self._lock:
            if self._client is None:
                uri = self.settings.milvus_uri
                if not self.settings.milvus_url:
                    self.settings.data_dir.mkdir(parents=True, exist_ok=True)
                    if self._lite3_data():
                        raise ConfigurationError(
                            f"{uri} 是旧版 Milvus Lite 3 的数据目录，当前内嵌向量库（Milvus Lite 2.5）读不了它。"
                            "请在知识库管理里“重建索引”（旧目录改名保留，全部文档从原件重新导入），或换一个 DATA_DIR。")
                try:
                    self._client = MilvusClient(uri=uri)
                except Exception as exc:
                    raise MilvusError(f"无法连接向量库 Milvus（{uri}）：{exc}", cause=exc) from exc
            if not self._ready:
                self._ensure_collections(self._client)
                self._ready = True
            return self._client

    def _lite3_data(self) -> bool:
        """Milvus Lite 3 kept a data file as a folder; Lite 2.5's is a single file."""
        return not self.settings.milvus_url and Path(self.settings.milvus_uri).is_dir()

    def open(self) -> None:
        """Connect and check (or create) the collections now, so configuration errors surface early."""
        _ = self.client

    def _signature(self) -> str:
        return json.dumps({"embedder": self.embedder.name, "dim": self.embedder.dim}, sort_keys=True)

    def _check_signature(self, client: MilvusClient, name: str, fields: list[str]) -> None:
        """Refuse a collection another embedder made, or one without today's fields (Milvus Lite
        cannot add a field).  The signature is the schema description; the dimension and the sparse
        kind are compared as well (they tell models apart on any backend)."""
        desc = client.describe_collection(name)
        missing = sorted(set(fields) - {f.get("name") for f in desc.get("fields", [])})
        if missing:
            raise ConfigurationError(f"集合 {name} 由旧版本创建，缺少字段 {'、'.join(missing)}。"
                                     "请换一个 DATA_DIR / 集合名，或删除该集合后重新导入全部文档。")
        made_by = desc.get("description") or ""
        dense = next((f for f in desc.get("fields", []) if f.get("name") == "dense"), {})
        dim = int((dense.get("params") or {}).get("dim") or 0)
        sparse = next((f for f in desc.get("fields", []) if f.get("name") == "sparse"), {})
        bm25 = bool(desc.get("functions")) or bool(sparse.get("is_function_output"))
        if (made_by and made_by != self._signature()) or dim != self.embedder.dim \
                or bm25 != (self.embedder.sparse_mode == "bm25"):
            found = made_by or f"{dim} 维稠密向量，稀疏向量{'由 BM25 生成' if bm25 else '由模型生成'}"
            raise ConfigurationError(
                f"集合 {name} 由另一个向量模型创建（{found}），当前模型为 {self._signature()}。"
                "请换一个 DATA_DIR / 集合名，或重新导入全部文档。"
            )

    def _sparse_field(self, schema, text_field: str) -> None:
        schema.add_field("sparse", DataType.SPARSE_FLOAT_VECTOR)
        if self.embedder.sparse_mode == "bm25":
            schema.add_function(Function(
                name=f"{text_field}_bm25", function_type=FunctionType.BM25,
                input_field_names=[text_field], output_field_names=["sparse"],
            ))

    def _sparse_index(self, index) -> None:
        metric = "BM25" if self.embedder.sparse_mode == "bm25" else "IP"
        index.add_index("sparse", index_type="SPARSE_INVERTED_INDEX", metric_type=metric)

    def _create(self, client: MilvusClient, name: str, schema, index) -> None:
        client.create_collection(name, schema=schema)
        # sync=False: pymilvus would poll each index every 0.5 s (2 s per new data dir) although an
        # empty collection has nothing to build; loading below waits for what matters.
        client.create_index(name, index, sync=False)

    def _ensure(self, client: MilvusClient, name: str, pk: str, text: tuple[str, int],
                fields: list[tuple[str, DataType, dict]], dense_index: dict) -> None:
        """Check the collection's signature, or create it: `pk`, the analysed text field (BM25
        reads it offline), the other scalar fields, the dense and the sparse vectors."""
        if client.has_collection(name):
            self._check_signature(client, name, [f for f, _, _ in fields])
            return
        bm25 = self.embedder.sparse_mode == "bm25"
        schema = client.create_schema(auto_id=True, description=self._signature())
        schema.add_field(pk, DataType.INT64, is_primary=True)
        schema.add_field(text[0], DataType.VARCHAR, max_length=text[1],
                         enable_analyzer=bm25, analyzer_params=ANALYZER if bm25 else None)
        for field_name, dtype, params in fields:
            schema.add_field(field_name, dtype, **params)
        schema.add_field("dense", DataType.FLOAT_VECTOR, dim=self.embedder.dim)
        self._sparse_field(schema, text[0])
        index = client.prepare_index_params()
        index.add_index("dense", metric_type="COSINE", **dense_index)
        self._sparse_index(index)
        self._create(client, name, schema, index)

    def _ensure_collections(self, client: MilvusClient) -> None:
        varchar = lambda n: {"max_length": n}  # noqa: E731
        self._ensure(client, self.chunks, "chunk_id", ("content", 65535), [
            ("title", DataType.VARCHAR, varchar(2048)), ("parent_title", DataType.VARCHAR, varchar(2048)),
            ("file_title", DataType.VARCHAR, varchar(1024)), ("doc_id", DataType.VARCHAR, varchar(256)),
            ("item_name", DataType.VARCHAR, varchar(1024)), ("part", DataType.INT8, {}),
            ("page_start", DataType.INT16, {}),  # 0: not from a PDF (every write gives both)
            ("page_end", DataType.INT16, {}),
        ], {"index_type": "AUTOINDEX"})
        self._ensure(client, self.items, "pk", ("item_name", 1024), [
            ("file_title", DataType.VARCHAR, varchar(1024)), ("doc_id", DataType.VARCHAR, varchar(256)),
        ], {"index_type": "IVF_FLAT", "params": {"nlist": 128}})
        for name in (self.chunks, self.items):
            client.load_collection(name)

    def _call(self, what: str, fn, *args, **kwargs):
        with self._serial:
            try:
                return fn(*args, **kwargs)
            except (ConfigurationError, MilvusError):
                raise
            except Exception as exc:
                raise MilvusError(f"向量库操作失败（{what}）：{exc}", cause=exc) from exc

    # -- writes ---------------------------------------------------------------------------
    def _chunk_row(self, r: dict) -> dict:
        row = {k: r[k] for k in ("doc_id", "part", "dense")}
        row["item_name"] = r["product"]
        row.update({k: int(r.get(k) or 0) for k in ("page_start", "page_end")})
        row["content"] = clip_utf8(r["content"], MAX_CONTENT_BYTES)
        for k in ("title", "parent_title"):
            row[k] = clip_utf8(r[k], 2000)
        row["file_title"] = clip_utf8(r["file_title"], 1000)
        if self.embedder.sparse_mode == "model":
            row["sparse"] = r["sparse"]
        return row

    def replace_document(self, doc_id: str, rows: list[dict], item: dict,
                         progress: Callable[[str], None] | None = None) -> list[str]:
        """Swap a document's chunks and its product-name row for new ones; return the new chunk ids.

        `item` is {"file_title", "product", "dense", "sparse"}.  The new version is written before
        the old one is removed, and a failed write removes what it wrote, so readers see the old
        version or the new one, never a part of either; a process killed in between leaves both,
        which the next import of the document cleans up (it removes every other row of the doc).
        """
        client = self.client
        old_names = self._names_of(doc_id)
        ids: list[int] = []
        pk = None
        try:
            for start in range(0, len(rows), INSERT_BATCH):
                batch = [self._chunk_row(r) for r in rows[start:start + INSERT_BATCH]]
                ids += self._call("写入切片", client.insert, self.chunks, batch)["ids"]
                if progress:
                    progress(f"已写入 {len(ids)}/{len(rows)} 个切片")
            row = {"file_title": clip_utf8(item["file_title"], 1000), "doc_id": doc_id,
                   "item_name": item["product"], "dense": item["dense"]}
            if self.embedder.sparse_mode == "model":
                row["sparse"] = item["sparse"]
            pk = self._call("写入商品名", client.insert, self.items, [row])["ids"][0]
            stale = eq_filter("doc_id", doc_id) + (f" and chunk_id not in {list(ids)}" if ids else "")
            self._call("删除旧切片", client.delete, self.chunks, filter=stale)
            # One row per product name, so each product is one candidate: older rows of this name go.
            self._call("删除旧商品名", client.delete, self.items,
                       filter=f"{eq_filter('product', item['product'])} and pk != {pk}")
        except Exception:
            self._rollback(ids, pk)
            raise
        self._prune_names(old_names - {item["product"]})
        self._flush()
        return [str(i) for i in ids]

    def _rollback(self, ids: list[int], pk: int | None) -> None:
        """Best effort: remove a half-written new version (the next import removes it otherwise)."""
        try:
            if ids:
                self._call("回滚切片", self.client.delete, self.chunks, filter=f"chunk_id in {list(ids)}")
            if pk is not None:
                self._call("回滚商品名", self.client.delete, self.items, filter=f"pk == {pk}")
            self._flush()
        except Exception:
            log.exception("rollback failed; the next import of the document cleans up")

    def _names_of(self, doc_id: str) -> set[str]:
        """Product names the document's chunks and name rows carry now."""
        expr = eq_filter("doc_id", doc_id)
        return ({r["product"] for r in self.query(self.chunks, expr, ["product"])}
                | {r["product"] for r in self.query(self.items, expr, ["product"])})

    def _prune_names(self, names: set[str]) -> None:
        """Drop the name rows no chunk carries any more: another document may still use a name
        this one gave up, and its row must stay (no orphans either way)."""
        unused = [n for n in names if not self.count(self.chunks, eq_filter("product", n))]
        if unused:
            self._call("删除商品名", self.client.delete, self.items, filter=in_filter("product", unused))

    def _flush(self) -> None:
        for name in (self.chunks, self.items):  # seals the writes: at most 10 ms on Lite 2.5 at 100k rows
            self._call("刷新", self.client.flush, name)
        self._names = None

    def delete_document(self, doc_id: str) -> None:
        names = self._names_of(doc_id)
        self._call("删除文档", self.client.delete, self.chunks, filter=eq_filter("doc_id", doc_id))
        self._prune_names(names)
        self._flush()

    # -- reads ----------------------------------------------------------------------------
    def count(self, collection: str | None = None, expr: str = "") -> int:
        name = collection or self.chunks
        # Strong: a server must count after the writes just made (its default is bounded staleness).
        res = self._call("计数", self.client.query, name, filter=expr, output_fields=["count(*)"],
                         consistency_level="Strong")
        return int(res[0]["count(*)"]) if res else 0

    def query(self, collection: str, expr: str, fields: list[str]) -> list[dict]:
        """Every row matching `expr`, read page by page: no cap on how many."""
        return [as_read(r) for r in self._call("查询", self._read_all, collection, expr, stored(fields))]

    def _read_all(self, collection: str, expr: str, fields: list[str]) -> list[dict]:
        pages = self.client.query_iterator(collection, batch_size=QUERY_PAGE, filter=expr, output_fields=fields)
        rows: list[dict] = []
        try:
            while page := pages.next():
                rows += page
        finally:
            pages.close()
        return rows

    # One paged read under both names: offset paging would fail past offset + limit = 16384 on a server.
    query_all = query

    def doc_counts(self) -> dict[str, int]:
        """doc_id -> chunks, for every document the store holds."""
        counts: dict[str, int] = {}
        for row in self.query_all(self.chunks, "chunk_id >= 0", ["doc_id"]):
            counts[row["doc_id"]] = counts.get(row["doc_id"], 0) + 1
        return counts

    def doc_rows(self, doc_id: str) -> list[dict]:
        """A document's chunks with every scalar field, in the order they were written."""
        rows = self.query_all(self.chunks, eq_filter("doc_id", doc_id), CHUNK_FIELDS)
        return [{**r, "chunk_id": str(r["chunk_id"])} for r in sorted(rows, key=lambda r: int(r["chunk_id"]))]

    def delete_chunks(self, ids: list[str]) -> None:
        if ids:
            self._call("删除切片", self.client.delete, self.chunks, filter=f"chunk_id in {[int(i) for i in ids]}")
            self._prune_names({r["product"] for r in self.products()})
            self._flush()

    def dedupe_names(self) -> int:
        """One row per product name (a write interrupted mid-way can leave two); returns how many went."""
        newest: dict[str, int] = {}
        rows = self.query_all(self.items, "pk >= 0", ["pk", "product"])
        for row in rows:
            newest[row["product"]] = max(newest.get(row["product"], -1), int(row["pk"]))
        extra = [int(r["pk"]) for r in rows if int(r["pk"]) != newest[r["product"]]]
        if extra:
            self._call("删除重复商品名", self.client.delete, self.items, filter=f"pk in {extra}")
            self._flush()
        return len(extra)

    def add_name_row(self, item: dict, doc_id: str) -> None:
        """A product name row for chunks that have none (the start-up repair)."""
        row = {"file_title": clip_utf8(item["file_title"], 1000), "doc_id": doc_id,
               "item_name": item["product"], "dense": item["dense"]}
        if self.embedder.sparse_mode == "model":
            row["sparse"] = item["sparse"]
        self._call("写入商品名", self.client.insert, self.items, [row])
        self._flush()

    def recreate(self) -> None:
        """Drop both collections and make them anew for the current embedder (reindexing after a
        switch of embedder: the old vectors are of no use to it)."""
        with self._lock:
            if self._lite3_data():  # kept aside, not deleted: the only copy of the old vectors
                old = Path(self.settings.milvus_uri)
                old.rename(old.with_name(f"{old.name}.lite3-{time.strftime('%Y%m%d%H%M%S')}"))
            client = self._client or MilvusClient(uri=self.settings.milvus_uri)
            for name in (self.chunks, self.items):
                if client.has_collection(name):
                    client.drop_collection(name)
            self._client, self._ready, self._names = client, False, None
        self.open()

    def products(self) -> list[dict]:
        """Every product row, sorted. Read on every question, so kept until the product collection changes,
        whichever process changes it: auto ids only grow, so a write shows as a pk above the newest
        one read or as a lower row count (two counts, under a millisecond, instead of every row)."""
        cached = self._names
        if cached and self._names_unchanged(*cached[0]):
            return list(cached[1])
        rows = self.query(self.items, "pk >= 0", ["pk", *PRODUCT_FIELDS])
        version = (len(rows), max((int(r.pop("pk")) for r in rows), default=-1))
        rows = sorted(rows, key=lambda r: r["product"])
        self._names = (version, rows)
        return list(rows)

    def _names_unchanged(self, rows: int, newest_pk: int) -> bool:
        return self.count(self.items) == rows and not self.count(self.items, f"pk > {newest_pk}")

    def product_names(self) -> list[str]:
        """Distinct product names, sorted: what the knowledge base covers."""
        return list(dict.fromkeys(r["product"] for r in self.products()))

    def _requests(self, vec: Vectors, text: str, expr: str, limit: int) -> list[AnnSearchRequest]:
        dense = AnnSearchRequest(data=[vec["dense"]], anns_field="dense",
                                 param={"metric_type": "COSINE"}, limit=limit, expr=expr or None)
        if self.embedder.sparse_mode == "bm25":
            sparse = AnnSearchRequest(data=[text], anns_field="sparse",
                                      param={"metric_type": "BM25"}, limit=limit, expr=expr or None)
        else:
            sparse = AnnSearchRequest(data=[vec["sparse"]], anns_field="sparse",
                                      param={"metric_type": "IP"}, limit=limit, expr=expr or None)
        return [dense, sparse]

    def hybrid_search(self, collection: str, vec: Vectors, text: str, *, expr: str = "", limit: int = 10,
                      weights: tuple[float, float] = (0.8, 0.2), fields: list[str] | None = None,
                      ranker: str = "weighted") -> list[Hit]:
        fields = stored(fields or (CHUNK_FIELDS if collection == self.chunks else PRODUCT_FIELDS))
        rank = WeightedRanker(*weights, norm_score=True) if ranker == "weighted" else RRFRanker(60)
        res = self._search("混合检索", self.client.hybrid_search, collection,
                           reqs=self._requests(vec, text, expr, limit), ranker=rank,
                           limit=limit, output_fields=fields)
        return [hit_to_dict(h) for h in (res[0] if res else [])]

    def _search(self, what: str, fn, collection: str, **kwargs):
        """A search; one over a collection nothing was ever written to finds nothing (Milvus Lite
        2.5's BM25 fails there: its average document length is 0 / 0)."""
        try:
            return self._call(what, fn, collection, **kwargs)
        except MilvusError:
            if self.count(collection) == 0:
                return []
            raise

    def dense_search(self, collection: str, vec: Vectors, *, expr: str = "", limit: int = 10,
                     fields: list[str] | None = None) -> list[Hit]:
        res = self._call("稠密检索", self.client.search, collection, data=[vec["dense"]],
                         anns_field="dense", search_params={"metric_type": "COSINE"},
                         filter=expr, limit=limit, output_fields=stored(fields or CHUNK_FIELDS))
        return [hit_to_dict(h) for h in (res[0] if res else [])]

    def sparse_search(self, collection: str, vec: Vectors, text: str, *, expr: str = "", limit: int = 10,
                      fields: list[str] | None = None) -> list[Hit]:
        bm25 = self.embedder.sparse_mode == "bm25"
        res = self._search("稀疏检索", self.client.search, collection,
                           data=[text if bm25 else vec["sparse"]], anns_field="sparse",
                           search_params={"metric_type": "BM25" if bm25 else "IP"},
                           filter=expr, limit=limit, output_fields=stored(fields or CHUNK_FIELDS))
        return [hit_to_dict(h) for h in (res[0] if res else [])]

    def ping(self) -> bool:
        try:
            self.client.list_collections()
            return True
        except Exception:
            return False

    def close(self) -> None:
        with self._lock:
            if self._client is not None:
                self._client.close()
            self._client, self._ready = None, False


_stores: dict[tuple, VectorStore] = {}
_stores_lock = threading.Lock()


def get_vector_store(settings: Settings | None = None) -> VectorStore:
    """One store per Milvus target and embedder: Milvus Lite allows one client per file per process,
    so settings that differ elsewhere (an API key) must share it."""
    s = settings or get_settings()
    embedder = get_embedder(s)
    key = (s.milvus_uri, s.chunks_collection, s.product_collection, embedder.name, embedder.dim)
    with _stores_lock:
        if key not in _stores:
            _stores[key] = VectorStore(s, embedder)
        return _stores[key]
