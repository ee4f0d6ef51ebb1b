"""Chat history (collection `chat_message`) and the document database it lives in.

The database is MongoDB when settings.mongo_url is set, otherwise an embedded montydb on SQLite
under {data_dir}/history. services/task_store.py shares it. Nothing connects at import time or
construction (a server that is down must not stop the app from starting); every backend failure
surfaces as StorageError with a Chinese message.
"""
from __future__ import annotations

import fcntl
import os
import sqlite3
import threading
import time
from contextlib import contextmanager, nullcontext
from functools import lru_cache
from typing import Iterator, Sequence, TypedDict
from urllib.parse import urlsplit

from services.errors import StorageError, ValidationError
from services.settings import Settings, get_settings

HISTORY_COLLECTION = "chat_message"
OWNERS_COLLECTION = "session_owner"  # session_id -> the user it belongs to (chat threads and API sessions)
LEGACY_PRODUCTS = "item_names"
UPDATABLE_FIELDS = frozenset({"role", "text", "rewritten_query", "products", "image_urls", "status", "ts"})

IndexKeys = Sequence[tuple[str, int]]

# montydb applies updates as read-modify-write in Python, so every user of one SQLite file, in this
# process or another (workers, a second app), must take turns
_repository_locks: dict[str, "RepositoryLock"] = {}
_repository_locks_guard = threading.Lock()


class RepositoryLock:
    """Re-entrant within a thread, exclusive across threads (RLock) and processes (flock on a file
    beside the database); the file lock is held only by the outermost holder."""

    def __init__(self, folder: str):
        self._folder = folder
        self._thread_lock = threading.RLock()
        self._depth = 0
        self._fd: int | None = None

    def __enter__(self) -> "RepositoryLock":
        self._thread_lock.acquire()
        try:
            if self._depth == 0:
                if self._fd is None:
                    os.makedirs(self._folder, exist_ok=True)
                    self._fd = os.open(os.path.join(self._folder, ".lock"), os.O_RDWR | os.O_CREAT, 0o644)
                fcntl.flock(self._fd, fcntl.LOCK_EX)
        except BaseException:
            self._thread_lock.release()
            raise
        self._depth += 1
        return self

    def __exit__(self, *exc: object) -> None:
        self._depth -= 1
        if self._depth == 0:
            fcntl.flock(self._fd, fcntl.LOCK_UN)
        self._thread_lock.release()


def _repository_lock(path: str) -> RepositoryLock:
    with _repository_locks_guard:
        return _repository_locks.setdefault(path, RepositoryLock(path))


class DocumentDatabase:
    """Lazily opened database handing out pymongo-compatible collections."""

    def __init__(self, settings: Settings):
        self.backend = "mongodb" if settings.mongo_url else "montydb"
        self._url = settings.mongo_url
        self._db_name = settings.mongo_db_name
        self._repository = settings.data_dir / "history"
        self._client = None
        # SQLite objects are bound to the thread that made them: one montydb client per thread
        self._local = threading.local()
        self._init_lock = threading.Lock()
        self._storage_ready = False
        self._indexed: set[str] = set()
        self._op_lock = nullcontext() if self._url else _repository_lock(str(self._repository))

    def describe(self) -> str:
        if self._url:
            parts = urlsplit(self._url)
            return f"MongoDB {parts.hostname or ''}{f':{parts.port}' if parts.port else ''}"  # no credentials
        return f"本地数据库 {self._repository}"

    def _database(self):
        if self._url:
            with self._init_lock:
                if self._client is None:
                    from pymongo import MongoClient

                    self._client = MongoClient(self._url, serverSelectionTimeoutMS=3000, connectTimeoutMS=3000)
            return self._client[self._db_name]
        client = getattr(self._local, "client", None)
        if client is None:
            from montydb import MontyClient, set_storage

            with self._init_lock:
                if not self._storage_ready:
                    self._repository.mkdir(parents=True, exist_ok=True)
                    set_storage(str(self._repository), storage="sqlite", use_bson=True)
                    self._storage_ready = True
            client = self._local.client = MontyClient(str(self._repository))
        return client[self._db_name]

    @contextmanager
    def collection(self, name: str, action: str, indexes: Sequence[IndexKeys] = ()) -> Iterator:
        """Yield collection `name`; a backend failure inside becomes StorageError("{action}失败…")."""
        from montydb.errors import MontyError
        from pymongo.errors import PyMongoError

        try:
            with self._op_lock:
                collection = self._database()[name]
                if name not in self._indexed:
                    for keys in indexes:
                        collection.create_index(list(keys))  # idempotent on MongoDB, a no-op on montydb
                    self._indexed.add(name)
                yield collection
        except (PyMongoError, MontyError, sqlite3.Error, OSError) as exc:
            raise StorageError(f"{action}失败（{self.describe()}不可用）：{exc}", cause=exc) from exc

    def ping(self) -> bool:
        try:
            with self.collection(HISTORY_COLLECTION, "连接检查") as collection:
                collection.find_one({})
            return True
        except StorageError:
            return False


class Turn(TypedDict, total=False):
    """One message of a conversation, as `recent` returns it."""
    id: str
    session_id: str
    role: str                    # "user" | "assistant"
    text: str
    rewritten_query: str         # what the question was understood as
    products: list[str]          # the products it was about
    image_urls: list[str]
    ts: float                    # when it was written (Unix seconds)
    status: str


def _public(doc: dict) -> Turn:
    """Stored document → plain JSON-able dict with `id` instead of the ObjectId `_id`."""
    doc = dict(doc)
    doc["id"] = str(doc.pop("_id"))
    # messages saved before the field was called `products` keep it as `item_names`
    old = doc.pop(LEGACY_PRODUCTS, None)
    if old and not doc.get("products"):
        doc["products"] = old
    return doc


def _object_id(message_id: str):
    from bson import ObjectId
    from bson.errors import InvalidId

    try:
        return ObjectId(message_id)
    except (InvalidId, TypeError) as exc:
        raise ValidationError(f"消息ID无效：{message_id!r}", cause=exc) from exc


_clock_lock = threading.Lock()
_last_ts = 0.0


def now_ts() -> float:
    """Epoch seconds, strictly increasing within the process so that ordering by ts is never ambiguous."""
    global _last_ts
    with _clock_lock:
        _last_ts = max(time.time(), _last_ts + 1e-6)
        return _last_ts


class HistoryStore:
    def __init__(self, settings: Settings | None = None, db: DocumentDatabase | None = None):
        self.db = db or DocumentDatabase(settings or get_settings())
        self.backend = self.db.backend

    def _messages(self, action: str):
        return self.db.collection(HISTORY_COLLECTION, action, indexes=[[("session_id", 1), ("ts", -1)]])

    def add_message(self, session_id: str, role: str, text: str, *, rewritten_query: str = "",
                    products: list[str] | None = None, image_urls: list[str] | None = None,
                    status: str = "complete") -> str:
        if not session_id:
            raise ValidationError("会话ID不能为空")
        doc = {
            "session_id": session_id, "role": role, "text": text, "rewritten_query": rewritten_query,
            "products": list(products or []), "image_urls": list(image_urls or []),
            "ts": now_ts(), "status": status,
        }
        with self._messages("保存对话记录") as messages:
            return str(messages.insert_one(doc).inserted_id)

    def update_message(self, message_id: str, **fields) -> bool:
        """Set the given fields on one message; False when no such message exists."""
        unknown = set(fields) - UPDATABLE_FIELDS
        if unknown:
            raise ValidationError(f"不支持更新的字段：{', '.join(sorted(unknown))}")
        if not fields:
            return False
        oid = _object_id(message_id)
        with self._messages("更新对话记录") as messages:
            return messages.update_one({"_id": oid}, {"$set": fields}).matched_count == 1

    def recent(self, session_id: str, limit: int = 10) -> list[Turn]:
        """The newest `limit` messages of a session, oldest first."""
        if limit <= 0:
            return []  # MongoDB would read limit(0) as "no limit"
        with self._messages("读取对话记录") as messages:
            docs = list(messages.find({"session_id": session_id}).sort([("ts", -1)]).limit(limit))
        return [_public(doc) for doc in reversed(docs)]

    def backfill_products(self, session_id: str, products: list[str]) -> int:
        """Attach confirmed product names to the session's messages that have none yet."""
        if not products:
            return 0
        query = {"session_id": session_id,
                 "$and": [{"$or": [{"products": {"$exists": False}}, {"products": []}, {"products": None}]},
                          {"$or": [{LEGACY_PRODUCTS: {"$exists": False}}, {LEGACY_PRODUCTS: []}]}]}
        with self._messages("补充商品名称") as messages:
            return messages.update_many(query, {"$set": {"products": list(products)}}).modified_count

    def list_sessions(self, limit: int = 50) -> list[dict]:
        """Sessions newest first: session_id, last_ts, first_user_text."""
        # folded here rather than with $group: montydb has no aggregate()
        sessions: dict[str, dict] = {}
        with self._messages("读取会话列表") as messages:
            cursor = messages.find({}, {"session_id": 1, "role": 1, "text": 1, "ts": 1}).sort([("ts", 1)])
            for doc in cursor:
                entry = sessions.setdefault(doc["session_id"], {
                    "session_id": doc["session_id"], "last_ts": doc["ts"], "first_user_text": ""})
                entry["last_ts"] = doc["ts"]
                if not entry["first_user_text"] and doc.get("role") == "user":
                    entry["first_user_text"] = doc.get("text", "")
        return sorted(sessions.values(), key=lambda s: s["last_ts"], reverse=True)[:max(limit, 0)]

    def owner(self, session_id: str) -> str | None:
        with self.db.collection(OWNERS_COLLECTION, "读取会话归属", indexes=[[("session_id", 1)]]) as owners:
            doc = owners.find_one({"session_id": session_id})
        return (doc or {}).get("owner")

    def claim(self, session_id: str, owner: str) -> bool:
        """Give an unowned session to `owner`; True when it is (now or already) theirs. The session
        id is the owner record's `_id`, so of two claims at once (any process, any backend) exactly
        one inserts it. Ownership is never released, so a deleted conversation's id can not be
        taken over by someone else."""
        from montydb.errors import DuplicateKeyError as MontyDuplicate
        from pymongo.errors import DuplicateKeyError

        if not session_id or not owner:
            raise ValidationError("会话ID和用户不能为空")
        with self.db.collection(OWNERS_COLLECTION, "保存会话归属", indexes=[[("session_id", 1)]]) as owners:
            doc = owners.find_one({"session_id": session_id})
            if doc is None:
                try:
                    owners.insert_one({"_id": session_id, "session_id": session_id, "owner": owner, "ts": now_ts()})
                except (DuplicateKeyError, MontyDuplicate):  # the other claim came first
                    pass
                doc = owners.find_one({"session_id": session_id})
        return (doc or {}).get("owner") == owner

    def delete_session(self, session_id: str) -> int:
        with self._messages("删除会话记录") as messages:
            return messages.delete_many({"session_id": session_id}).deleted_count

    def ping(self) -> bool:
        return self.db.ping()


_databases: dict[tuple, DocumentDatabase] = {}
_databases_lock = threading.Lock()


def get_database(settings: Settings | None = None) -> DocumentDatabase:
    """One database per distinct configuration (Settings itself is unhashable: it holds a dict)."""
    settings = settings or get_settings()
    key = (settings.mongo_url, settings.mongo_db_name, str(settings.data_dir))
    with _databases_lock:
        if key not in _databases:
            _databases[key] = DocumentDatabase(settings)
        return _databases[key]


def get_history_store(settings: Settings | None = None) -> HistoryStore:
    return _history_store_for(get_database(settings))


@lru_cache(maxsize=None)
def _history_store_for(db: DocumentDatabase) -> HistoryStore:
    return HistoryStore(db=db)
