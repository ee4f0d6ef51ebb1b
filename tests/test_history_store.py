"""HistoryStore on every available backend: the embedded montydb always, a real MongoDB when TEST_MONGO_URL is set.

The pymongo code path is also exercised against an unreachable port (no MongoDB server can be installed here).
"""
from __future__ import annotations

import os
import socket
import threading
import time
import uuid

import pytest

from services.errors import StorageError, ValidationError
from services.history_store import HISTORY_COLLECTION, HistoryStore, get_history_store
from services.settings import Settings

BACKENDS = ["montydb"] + (["mongodb"] if os.environ.get("TEST_MONGO_URL") else [])


@pytest.fixture(params=BACKENDS)
def settings(request, tmp_path):
    """Settings for one backend, isolated per test; building a new store on them simulates a restart."""
    settings = Settings(data_dir=tmp_path / "data")
    if request.param == "montydb":
        yield settings
        return
    from pymongo import MongoClient

    settings = settings.replace(mongo_url=os.environ["TEST_MONGO_URL"], mongo_db_name=f"kbtest_{uuid.uuid4().hex}")
    yield settings
    with MongoClient(settings.mongo_url) as client:
        client.drop_database(settings.mongo_db_name)


def unreachable_mongo(tmp_path) -> Settings:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    return Settings(data_dir=tmp_path, mongo_url=f"mongodb://user:secret@127.0.0.1:{port}/?directConnection=true")


def assert_fails_fast(call, *, within_s: float = 8.0) -> StorageError:
    started = time.monotonic()
    with pytest.raises(StorageError) as info:
        call()
    assert time.monotonic() - started < within_s
    assert "不可用" in str(info.value) and "secret" not in str(info.value)
    return info.value


@pytest.fixture
def store(settings):
    return HistoryStore(settings)


def test_recent_returns_newest_messages_oldest_first(store):
    for i in range(15):
        store.add_message("s1", "user" if i % 2 == 0 else "assistant", f"m{i}")
    texts = [m["text"] for m in store.recent("s1", limit=10)]
    assert texts == [f"m{i}" for i in range(5, 15)]
    assert [m["text"] for m in store.recent("s1", limit=3)] == ["m12", "m13", "m14"]
    assert store.recent("s1", limit=0) == []
    assert store.recent("nobody") == []


def test_message_fields_and_update(store):
    message_id = store.add_message("s1", "user", "洗衣机怎么清洗滤网？")
    assert isinstance(message_id, str)
    (msg,) = store.recent("s1")
    assert msg["id"] == message_id and isinstance(msg["ts"], float)
    assert {k: msg[k] for k in ("session_id", "role", "text", "rewritten_query", "products", "image_urls",
                                "status")} == {
        "session_id": "s1", "role": "user", "text": "洗衣机怎么清洗滤网？", "rewritten_query": "",
        "products": [], "image_urls": [], "status": "complete"}

    assert store.update_message(message_id, rewritten_query="X1 洗衣机如何清洗滤网", products=["X1"],
                                status="streaming") is True
    (msg,) = store.recent("s1")
    assert (msg["rewritten_query"], msg["products"], msg["status"]) == ("X1 洗衣机如何清洗滤网", ["X1"], "streaming")

    assert store.update_message("0" * 24, text="x") is False
    with pytest.raises(ValidationError):
        store.update_message("not-an-id", text="x")
    with pytest.raises(ValidationError):
        store.update_message(message_id, session_id="other")
    with pytest.raises(ValidationError):
        store.add_message("", "user", "x")


def test_backfill_touches_only_missing_empty_or_null(store):
    ids = {name: store.add_message("s1", "user", name, products=names)
           for name, names in [("empty", []), ("kept", ["A"]), ("nulled", [])]}
    store.update_message(ids["nulled"], products=None)
    with store.db.collection(HISTORY_COLLECTION, "test") as messages:
        messages.insert_one({"session_id": "s1", "role": "user", "text": "missing", "ts": time.time()})
    other = store.add_message("s2", "user", "other session")

    assert store.backfill_products("s1", ["B"]) == 3
    assert {m["text"]: m["products"] for m in store.recent("s1")} == {
        "empty": ["B"], "kept": ["A"], "nulled": ["B"], "missing": ["B"]}
    assert store.recent("s2")[0]["id"] == other and store.recent("s2")[0]["products"] == []
    assert store.backfill_products("s1", ["C"]) == 0
    assert store.backfill_products("s2", []) == 0


def test_sessions_are_isolated_listed_and_deleted(store):
    store.add_message("s1", "user", "第一个问题")
    store.add_message("s2", "assistant", "欢迎")
    store.add_message("s2", "user", "s2 的问题")
    store.add_message("s1", "assistant", "回答")
    store.add_message("s2", "user", "s2 追问")

    assert [m["text"] for m in store.recent("s1")] == ["第一个问题", "回答"]
    sessions = store.list_sessions()
    assert [(s["session_id"], s["first_user_text"]) for s in sessions] == [("s2", "s2 的问题"), ("s1", "第一个问题")]
    assert sessions[0]["last_ts"] > sessions[1]["last_ts"]
    assert len(store.list_sessions(limit=1)) == 1

    assert store.delete_session("s2") == 3
    assert store.recent("s2") == []
    assert len(store.recent("s1")) == 2
    assert store.delete_session("s2") == 0


def test_concurrent_writes_from_threads(store):
    errors: list[BaseException] = []

    def writer(n: int) -> None:
        try:
            for i in range(25):
                message_id = store.add_message(f"t{n % 2}", "user", f"{n}-{i}")
                store.update_message(message_id, status="done")
        except BaseException as exc:  # noqa: BLE001 - surfaced by the assert below
            errors.append(exc)

    threads = [threading.Thread(target=writer, args=(n,)) for n in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert errors == []
    saved = store.recent("t0", limit=1000) + store.recent("t1", limit=1000)
    assert sorted(m["text"] for m in saved) == sorted(f"{n}-{i}" for n in range(8) for i in range(25))
    assert {m["status"] for m in saved} == {"done"}


def test_history_survives_restart(settings):
    HistoryStore(settings).add_message("s1", "user", "重启前的问题")
    reopened = HistoryStore(settings)
    assert [m["text"] for m in reopened.recent("s1")] == ["重启前的问题"]
    assert reopened.ping() is True


def test_factory_caches_per_configuration(settings, tmp_path):
    assert get_history_store(settings) is get_history_store(settings)
    assert get_history_store(settings) is not get_history_store(settings.replace(data_dir=tmp_path / "other"))


def test_unreachable_mongodb_raises_storage_error(tmp_path):
    store = HistoryStore(unreachable_mongo(tmp_path))  # constructing opens nothing
    assert store.backend == "mongodb"
    error = assert_fails_fast(lambda: store.add_message("s1", "user", "x"))
    assert "保存对话记录失败" in str(error)
    assert store.ping() is False


def test_claims_at_once_give_a_session_to_exactly_one_owner(settings):
    """Two processes' stores (two HistoryStore objects, one database) and many threads claim one id."""
    stores = [HistoryStore(settings), HistoryStore(settings)]
    session_id = uuid.uuid4().hex
    won: list[str] = []
    start = threading.Barrier(16)

    def claim(i: int) -> None:
        start.wait()
        if stores[i % 2].claim(session_id, f"user-{i}"):
            won.append(f"user-{i}")

    threads = [threading.Thread(target=claim, args=(i,)) for i in range(16)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(won) == 1 and stores[0].owner(session_id) == won[0] == stores[1].owner(session_id)
    assert stores[1].claim(session_id, won[0]) and not stores[0].claim(session_id, "user-late")
