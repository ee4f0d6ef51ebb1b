"""The HTTP API over real HTTP: uvicorn on 127.0.0.1, httpx as the client, the sample corpus imported."""
from __future__ import annotations

import asyncio
import json
import threading
import time
from datetime import datetime

import httpx
import pytest
from fastapi import FastAPI

from api import health as api_health, mount_api, runs as api_runs
from api_fixtures import (  # noqa: F401 (fixtures)
    ApiServer, api, api_client, api_server, ask_stream, iter_sse, model, question_of, raw_multipart, read_sse, wait_task,
)
from api.runs import QueryRuns
from conftest import CORPUS_DOCS
from graphs.importing import jobs as import_jobs
from services.errors import MinioError
from services.object_store import LocalObjectStore
from services.settings import get_settings
from services.task_store import TaskStore

DUO_MD, DUOS_MD = CORPUS_DOCS[0], CORPUS_DOCS[2]
ALL_NODES = {"node_load_history", "node_save_history", "node_product_confirm", "node_plan", "node_search_embedding", "node_search_embedding_hyde",
             "node_web_search_mcp", "node_rrf", "node_rerank", "node_grade", "node_answer_output"}


@pytest.fixture(autouse=True)
def _corpus(corpus_results):
    """Every test here asks about the session's imported manuals (or checks none leaked into it)."""


# --- schema and mounting -------------------------------------------------------------------------

def test_openapi_schema_documents_every_endpoint(api):
    schema = api.get("/openapi.json").json()
    paths = schema["paths"]
    assert set(paths) == {"/api/upload", "/api/status/{task_id}", "/api/query", "/api/stream/{session_id}",
                          "/api/history/{session_id}", "/api/health", "/api/products", "/api/products/{name}",
                          "/api/documents", "/api/documents/{doc_id}", "/api/documents/{doc_id}/chunks",
                          "/api/reindex"}
    assert set(paths["/api/history/{session_id}"]) == {"get", "delete"}
    assert set(paths["/api/products/{name}"]) == {"patch", "delete"}
    assert set(paths["/api/documents/{doc_id}"]) == {"get", "delete"}
    query = schema["components"]["schemas"]["QueryRequest"]
    assert query["required"] == ["query"]
    assert query["properties"]["is_stream"]["default"] is False
    upload = paths["/api/upload"]["post"]["requestBody"]["content"]
    assert "multipart/form-data" in upload
    assert "text/event-stream" in paths["/api/stream/{session_id}"]["get"]["responses"]["200"]["content"]
    assert schema["components"]["securitySchemes"]["HTTPBearer"]["scheme"] == "bearer"
    assert "security" not in paths["/api/health"]["get"]  # health needs no key
    assert paths["/api/query"]["post"]["security"] == [{"HTTPBearer": []}]
    answer = schema["components"]["schemas"]["Answer"]["properties"]
    assert {"session_id", "answer", "products", "candidates", "image_urls", "sources", "done_list"} <= set(answer)


def test_mount_api_goes_before_a_catch_all_route():
    host = FastAPI()

    @host.get("/{path:path}")
    def catch_all(path: str):
        return {"caught": path}

    mount_api(host)
    with ApiServer(host) as server, api_client(server.base_url, timeout=60) as client:
        assert client.get("/api/status/nope").json() == {"error": "导入任务不存在：nope"}
        assert client.get("/api/health").json()["status"] == "ok"
        assert client.get("/chat/page").json() == {"caught": "chat/page"}


# --- health -----------------------------------------------------------------------------------------

def test_health_reports_each_backend_offline(api):
    reply = api.get("/api/health")
    assert reply.status_code == 200, reply.text
    health = reply.json()
    assert health["status"] == "ok"
    assert (health["vector_store"]["backend"], health["vector_store"]["ok"]) == ("milvus-lite", True)
    assert (health["history_store"]["backend"], health["history_store"]["ok"]) == ("montydb", True)
    assert (health["object_store"]["backend"], health["object_store"]["ok"]) == ("local", True)
    assert (health["task_queue"]["backend"], health["task_queue"]["ok"]) == ("sqlite", True)
    assert (health["models"]["embedder"]["backend"], health["models"]["embedder"]["ok"]) == ("use-m3", True)
    assert health["models"]["reranker"]["backend"].startswith("offline:")
    assert health["models"]["reranker"]["ok"] is True
    chat = health["models"]["chat"]
    assert (chat["configured"], chat["ok"]) == (False, None)
    assert "OPENAI_API_KEY" in chat["error"]


def test_health_says_whether_the_chat_model_answers(api, model, env):
    model()
    chat = api.get("/api/health").json()["models"]["chat"]
    assert (chat["configured"], chat["ok"], chat["backend"]) == (True, True, "qwen-flash")
    env(OPENAI_API_BASE="http://127.0.0.1:9/v1")  # nothing listens on the discard port
    reply = api.get("/api/health")
    assert reply.status_code == 503
    assert reply.json()["status"] == "degraded"
    assert reply.json()["models"]["chat"]["ok"] is False
    assert "不可达" in reply.json()["models"]["chat"]["error"]


# --- query, stream, history --------------------------------------------------------------------------

def test_a_comparison_streams_each_sub_question_and_its_sources(api, product_of):
    v2, v3 = product_of["BTT SKR MINI E3 V2.0使用手册"], product_of["BTT SKR MINI E3 V3.0使用手册"]
    _, events = ask_stream(api, "SKR MINI E3 V2.0 和 V3.0 的主控芯片有什么区别？")
    progress = [e.data for e in events if e.name == "progress"]
    subs = [p for p in progress if p["node"] == "node_sub_question" and "status" in p]
    assert len(subs) == 2 and {p["detail"]["question"].split(" 的")[0] for p in subs} == {v2, v3}
    first_end = progress.index(subs[0])
    assert "node_sub_question" in progress[first_end]["running_list"]  # the other one still runs
    assert "node_sub_question" not in progress[progress.index(subs[1])]["running_list"]
    final = events[-1].data
    assert events[-1].name == "final" and {s["product"] for s in final["sources"]} == {v2, v3}


def test_query_without_stream_returns_the_answer_and_history_keeps_it(api, product_of):
    duo = product_of["duo"]
    # worded as the manual words it ("芯片"): offline, evidence grading declines what no passage covers
    reply = api.post("/api/query", json={"query": f"{duo} 用的是什么芯片？"})
    assert reply.status_code == 200, reply.text
    body = reply.json()
    assert body["status"] == "completed"
    assert body["products"] == [duo]
    assert body["answer"].strip()
    assert body["sources"] and all(s["product"] == duo for s in body["sources"] if s["source"] == "local")
    assert set(body["done_list"]) == ALL_NODES
    session = body["session_id"]

    messages = api.get(f"/api/history/{session}").json()["messages"]
    assert [(m["role"], m["status"]) for m in messages] == [("user", "complete"), ("assistant", "complete")]
    assert messages[1]["text"] == body["answer"]
    assert messages[0]["products"] == [duo]

    # the same session continues: a follow-up without a product name inherits it from history
    follow = api.post("/api/query", json={"query": "它的内存有多大？", "session_id": session}).json()
    assert follow["products"] == [duo]
    assert len(api.get(f"/api/history/{session}").json()["messages"]) == 4

    assert api.delete(f"/api/history/{session}").json() == {"session_id": session, "deleted": 4}
    assert api.get(f"/api/history/{session}").json() == {"session_id": session, "messages": []}


def test_stream_is_incremental_and_follows_the_seed_protocol(api, api_server, model, product_of):
    answer = "Milk-V Duo S 提供一个 USB 2.0 接口 [1]。详细说明见资料。"
    model(answer, delay_s=1.0)
    reply = api.post("/api/query", json={"query": f"{product_of['duos']} 有几个 USB 接口？", "is_stream": True})
    assert reply.status_code == 200 and set(reply.json()) == {"session_id"}
    session = reply.json()["session_id"]
    assert not api_server.app.state.zgzk_api.runs.get(session).done  # answered at once, the run goes on

    events = list(iter_sse(api, session))
    names = [e.name for e in events]
    assert names[0] == "ready" and events[0].data == {"session_id": session}
    assert names[-1] == "final" and "error" not in names
    deltas = [e for e in events if e.name == "delta"]
    assert len(deltas) > 3
    assert "".join(d.data["delta"] for d in deltas) == events[-1].data["answer"] == answer
    # events arrived as they happened: the first delta waited for the model, the ready event did not
    assert deltas[0].at - events[0].at > 0.8
    assert deltas[-1].at > deltas[0].at
    progress = [e.data for e in events if e.name == "progress"]
    assert progress[0]["running_list"] == ["node_load_history"] and progress[0]["done_list"] == []
    assert set(progress[-1]["done_list"]) == ALL_NODES and progress[-1]["running_list"] == []
    first_delta = names.index("delta")
    assert "node_rerank" in events[first_delta - 1].data["done_list"]  # retrieval finished before answering
    final = events[-1].data
    assert final["status"] == "completed" and final["session_id"] == session
    assert final["products"] == [product_of["duos"]]
    assert {"answer", "image_urls", "sources", "candidates", "warnings"} <= set(final)


def test_a_late_client_still_gets_final(api, product_of):
    reply = api.post("/api/query", json={"query": f"{product_of['duo256m']} 的内存有多大？", "is_stream": True})
    session = reply.json()["session_id"]
    deadline = time.monotonic() + 60
    while len(api.get(f"/api/history/{session}").json()["messages"]) < 2:  # the run has finished
        assert time.monotonic() < deadline
        time.sleep(0.1)
    for _ in range(2):  # and again: the stored result is not consumed by a reader, and never replayed
        events = read_sse(api, session)
        assert [e.name for e in events] == ["ready", "final"]
        assert events[-1].data["answer"].strip()
        assert events[-1].data["products"] == [product_of["duo256m"]]


def test_two_concurrent_sessions_never_see_each_others_events(api, api_server, model, product_of):
    model(lambda body: f"会话答复：{question_of(body)}。" * 3, delay_s=0.3, chunk_chars=3)
    questions = {"a": f"{product_of['duo']} 的 CPU 是什么？标记AAA111",
                 "b": f"{product_of['m01_mf1_v1_get_started']} 怎么上电？标记BBB222"}
    results: dict[str, tuple[str, list]] = {}

    def session(key: str) -> None:
        with api_client(api_server.base_url) as client:
            results[key] = ask_stream(client, questions[key])

    threads = [threading.Thread(target=session, args=(k,)) for k in questions]
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
    (sid_a, events_a), (sid_b, events_b) = results["a"], results["b"]
    assert sid_a != sid_b
    for own, other, sid, events in (("AAA111", "BBB222", sid_a, events_a), ("BBB222", "AAA111", sid_b, events_b)):
        text = "".join(e.data.get("delta", "") for e in events)
        assert own in text and other not in text
        assert all(other not in str(e.data) for e in events)
        assert events[-1].name == "final" and events[-1].data["session_id"] == sid
        assert text == events[-1].data["answer"]
    # the two runs overlapped in time, so isolation was really exercised
    assert events_a[1].at < events_b[-1].at and events_b[1].at < events_a[-1].at
    assert results["a"][1][-1].data["products"] == [product_of["duo"]]
    assert results["b"][1][-1].data["products"] == [product_of["m01_mf1_v1_get_started"]]


def test_one_run_at_a_time_per_session(api, model, product_of):
    model(delay_s=1.0)
    question = {"query": f"{product_of['duo']} 支持哪些系统？", "session_id": "busy-session-1", "is_stream": True}
    assert api.post("/api/query", json=question).status_code == 200
    busy = api.post("/api/query", json=question)
    assert busy.status_code == 409 and "还在回答中" in busy.json()["error"]
    assert read_sse(api, "busy-session-1")[-1].name == "final"
    assert api.post("/api/query", json={**question, "is_stream": False}).status_code == 200


def test_stream_of_an_unknown_session_is_404(api):
    reply = api.get("/api/stream/never-asked")
    assert reply.status_code == 404
    assert "POST /api/query" in reply.json()["error"]


# --- access ---------------------------------------------------------------------------------------------

def test_api_key_guards_every_route_but_health(api, api_server):
    calls = [("GET", "/api/status/x"), ("POST", "/api/query"), ("GET", "/api/stream/x"),
             ("GET", "/api/history/x"), ("DELETE", "/api/history/x"), ("POST", "/api/upload")]
    with httpx.Client(base_url=api_server.base_url, timeout=60) as stranger:
        for method, path in calls:
            for headers in ({}, {"Authorization": "Bearer wrong"}, {"Authorization": "Basic czNjcmV0LWtleQ=="}):
                reply = stranger.request(method, path, headers=headers,
                                         json={"query": "x"} if method == "POST" else None)
                assert reply.status_code == 401, (method, path, headers)
                assert reply.headers["www-authenticate"] == "Bearer"
                assert "API 密钥" in reply.json()["error"]
        assert stranger.get("/api/health").status_code == 200
    assert api.get("/api/status/x").status_code == 404  # past the key check
    assert api.get("/api/history/x").status_code == 404 and "会话不存在" in api.get("/api/history/x").json()["error"]


# --- bad requests -------------------------------------------------------------------------------------------

def test_bad_requests_get_chinese_json_errors(api, api_server):
    malformed = api.post("/api/query", content=b'{"query": "Duo', headers={"Content-Type": "application/json"})
    assert malformed.status_code == 422 and "不是合法的 JSON" in malformed.json()["error"]
    missing = api.post("/api/query", json={"is_stream": True})
    assert missing.status_code == 422 and "query：缺少必填字段" in missing.json()["error"]
    assert missing.json()["detail"][0]["loc"] == ["body", "query"]
    blank = api.post("/api/query", json={"query": "   "})
    assert blank.status_code == 422 and "问题不能为空" in blank.json()["error"]
    wrong_type = api.post("/api/query", json={"query": "Duo", "is_stream": "maybe"})
    assert wrong_type.status_code == 422 and "is_stream" in wrong_type.json()["error"]
    bad_session = api.post("/api/query", json={"query": "Duo", "session_id": "../../etc"})
    assert bad_session.status_code == 422 and "session_id：格式不正确" in bad_session.json()["error"]
    assert api.get("/api/history/a%20b").status_code == 422
    assert api.get("/api/history/x", params={"limit": 0}).status_code == 422

    huge = b'{"query": "' + b"x" * (1024 * 1024) + b'"}'
    declared = api.post("/api/query", content=huge, headers={"Content-Type": "application/json"})
    assert declared.status_code == 413 and "请求体过大" in declared.json()["error"]

    def chunks():  # no Content-Length: the cap applies while reading
        for _ in range(64):
            yield b"x" * 16384

    streamed = api.post("/api/query", content=chunks(), headers={"Content-Type": "application/json"})
    assert streamed.status_code == 413 and "请求体过大" in streamed.json()["error"]


def test_a_10000_character_question_is_answered_from_its_first_2000(api, product_of):
    question = f"{product_of['duo']} 的 CPU 是什么？" + "请详细说明。" * 2000
    reply = api.post("/api/query", json={"query": question[:10_000]})
    assert reply.status_code == 200, reply.text
    assert "问题过长，只使用了前 2000 个字。" in reply.json()["warnings"]
    assert reply.json()["products"] == [product_of["duo"]]
    too_long = api.post("/api/query", json={"query": question[:10_001]})
    assert too_long.status_code == 422 and "query：内容过长" in too_long.json()["error"]


# --- upload and status ---------------------------------------------------------------------------------------

def _files(*items: tuple[str, bytes]) -> list:
    return [("files", (name, data, "application/octet-stream")) for name, data in items]


def test_upload_imports_in_background_and_status_survives_a_restart(api, env, tmp_path):
    settings = env(DATA_DIR=str(tmp_path / "data"))
    hostile = ["../../../escape.md", "C:\\Users\\x\\..\\win.md", "/etc/na\x00me.md"]
    contents = [DUO_MD.read_bytes(), DUOS_MD.read_bytes(), DUO_MD.read_bytes().replace(b"Duo", b"Duo Mini")]
    body, headers = raw_multipart(*zip(hostile, contents))
    reply = api.post("/api/upload", content=body, headers=headers)
    assert reply.status_code == 200, reply.text
    task_ids = reply.json()["task_ids"]
    assert len(task_ids) == 3 and len(set(task_ids)) == 3
    first = api.get(f"/api/status/{task_ids[0]}").json()
    assert first["status"] in ("pending", "processing", "completed")

    done = [wait_task(api, t) for t in task_ids]
    assert [d["status"] for d in done] == ["completed"] * 3, done
    assert [d["file_name"] for d in done] == ["escape.md", "win.md", "name.md"]
    assert all(d["chunks"] > 0 and d["running_list"] == [] for d in done)
    assert "node_import_milvus" in done[0]["done_list"] and done[0]["product"] == "Milk-V Duo"

    day = datetime.now().strftime("%Y%m%d")
    uploads = settings.data_dir / "uploads" / day
    saved = sorted(p.relative_to(tmp_path) for p in tmp_path.rglob("*.md") if "uploads" in p.parts)
    assert saved == sorted((uploads / t / d["file_name"]).relative_to(tmp_path) for t, d in zip(task_ids, done))
    assert (uploads / task_ids[0] / "escape.md").read_bytes() == contents[0]
    originals = settings.data_dir / "objects" / settings.minio_bucket_name / "pdf_files"
    for path in tmp_path.parent.rglob("*"):  # no copy escaped to where the hostile names pointed
        if path.name in {"escape.md", "win.md", "name.md"}:
            assert path.parent.parent in (uploads, originals), path
    assert sorted(p.name for p in originals.rglob("*.md")) == ["escape.md", "name.md", "win.md"]

    # a "restart": a fresh task store on the same data dir, and a fresh app
    assert TaskStore(settings).get(task_ids[1])["status"] == "completed"
    with ApiServer() as restarted, api_client(restarted.base_url, timeout=60) as client:
        again = client.get(f"/api/status/{task_ids[1]}").json()
        assert (again["status"], again["chunks"], again["product"]) == ("completed", done[1]["chunks"], "Milk-V Duo S")
        assert client.get("/api/status/0123456789abcdef").status_code == 404

    # uploading the same file again replaces that manual instead of adding a copy
    before = _chunk_total(api, "Milk-V Duo")
    task = api.post("/api/upload", files=_files(("escape.md", contents[0]))).json()["task_ids"][0]
    assert wait_task(api, task)["status"] == "completed"
    assert _chunk_total(api, "Milk-V Duo") == before


def _chunk_total(api, product: str) -> int:
    from services.vector_store import eq_filter, get_vector_store

    store = get_vector_store(get_settings())
    return store.count(store.chunks, eq_filter("product", product))


def test_upload_validation_rejects_the_whole_batch(api, env, tmp_path, monkeypatch):
    settings = env(DATA_DIR=str(tmp_path / "data"), MAX_UPLOAD_MB="1")
    good = ("ok.md", b"# ok\n\ncontent")
    cases = {
        "不支持的文件类型“.csv”": (400, _files(good, ("notes.csv", b"hello"))),
        "是空的（0 字节）": (400, _files(good, ("empty.md", b""))),
        # refused while it arrives, at the byte that passes the limit
        "单个文件超过了 1 MB 的上限": (413, _files(good, ("big.pdf", b"%PDF" + b"0" * (1024 * 1024 + 10)))),
        "不支持的文件类型“无扩展名”": (400, _files(("..", b"# dots only"))),
        "一次最多上传 50 个文件": (400, _files(*[good] * 51)),
    }
    for message, (status, files) in cases.items():
        reply = api.post("/api/upload", files=files)
        assert reply.status_code == status, reply.text
        assert message in reply.json()["error"]
    missing = api.post("/api/upload", data={"product": "x"})
    assert missing.status_code == 422 and "files：缺少必填字段" in missing.json()["error"]

    over = api.post("/api/upload", files=_files(("huge.pdf", b"0" * (52 * 1024 * 1024))))
    assert over.status_code == 413 and "请求体过大" in over.json()["error"]

    def refuse(self, path, doc_key):
        raise MinioError("对象存储不可用")

    monkeypatch.setattr(LocalObjectStore, "upload_original", refuse)
    down = api.post("/api/upload", files=_files(good))
    assert down.status_code == 503 and "原件保存失败" in down.json()["error"]

    uploads = settings.data_dir / "uploads"
    assert not [p for p in uploads.rglob("*") if p.is_file()]  # nothing of a rejected batch is kept
    assert TaskStore(settings).list() == []  # and no task was started


def test_a_background_import_that_crashes_is_recorded_as_failed(api, env, tmp_path, monkeypatch):
    env(DATA_DIR=str(tmp_path / "data"))

    def crash(*args, **kwargs):
        raise RuntimeError("磁盘已满")

    monkeypatch.setattr(import_jobs, "run_import", crash)
    task = api.post("/api/upload", files=_files(("crash.md", b"# crash\n\ntext"))).json()["task_ids"][0]
    status = wait_task(api, task)
    assert (status["status"], status["error"]) == ("failed", "导入失败：磁盘已满")


# --- SSE wire format, limits, health failures ---------------------------------------------------------------

def test_sse_wire_format_with_keepalives(api, api_server, model, monkeypatch, product_of):
    monkeypatch.setattr(api_server.app.state.zgzk_api.runs, "keepalive_s", 0.2)
    model(delay_s=1.0)  # a second of silence while the model "thinks"
    session = api.post("/api/query", json={"query": f"{product_of['duo']} 怎么供电？", "is_stream": True}).json()[
        "session_id"]
    with api.stream("GET", f"/api/stream/{session}") as response:
        raw = "".join(response.iter_text())
    blocks = raw.split("\n\n")
    assert blocks[0] == f'retry: 3000\nevent: ready\ndata: {{"session_id": "{session}"}}' and blocks[-1] == ""
    assert ": keep-alive" in blocks
    events = [b for b in blocks[1:-1] if not b.startswith(":")]
    ids = []
    for block in events:
        event_id, name, data = block.split("\n")
        assert event_id.startswith("id: ") and name.startswith("event: ") and data.startswith("data: ")
        ids.append(int(event_id[len("id: "):]))
        json.loads(data[len("data: "):])
    assert ids == sorted(set(ids))  # strictly increasing
    assert events[-1].split("\n")[1] == "event: final"


def test_too_many_runs_at_once_is_503(api, api_server, monkeypatch):
    monkeypatch.setattr(api_server.app.state.zgzk_api.runs, "max_active", 0)
    reply = api.post("/api/query", json={"query": "Milk-V Duo 的 CPU？"})
    assert reply.status_code == 503 and "同时进行的提问太多" in reply.json()["error"]


def test_health_reports_a_missing_model_and_a_hanging_backend(api, env, tmp_path, monkeypatch):
    env(BGE_M3_PATH=str(tmp_path / "no-model"))
    monkeypatch.setattr(api_health, "CHECK_TIMEOUT_S", 0.3)
    monkeypatch.setattr(LocalObjectStore, "ping", lambda self: time.sleep(1.5) or True)
    reply = api.get("/api/health")
    assert reply.status_code == 503 and reply.json()["status"] == "degraded"
    health = reply.json()
    for part in (health["models"]["embedder"], health["vector_store"]):
        assert part["ok"] is False and "BGE-M3 模型目录不存在" in part["error"]
    # the offline reranker is lexical: no model folder can break it (its first probe may still
    # outlast this test's 0.3 s deadline while jieba loads its dictionary)
    assert health["models"]["reranker"]["backend"] == "offline:lexical"
    assert "BGE-M3" not in (health["models"]["reranker"]["error"] or "")
    assert health["object_store"] == {**health["object_store"], "backend": "local", "ok": False,
                                      "error": "超过 0.3 秒没有响应"}
    assert health["history_store"]["ok"] is True


# --- the run registry itself ---------------------------------------------------------------------------------

async def _collect(channel, after: int = 0) -> list:
    return [e async for e in channel.follow(keepalive_s=5, after=after)]


async def _runner(events, delay: float = 0.0):
    for event in events:
        await asyncio.sleep(delay)
        yield event


async def test_replay_buffer_is_bounded_but_keeps_final(monkeypatch):
    deltas = [{"type": "delta", "delta": str(i)} for i in range(10)]
    final = {"type": "final", "answer": "完整答案", "session_id": "s1"}
    monkeypatch.setattr(api_runs, "astream_query", lambda *a, **k: _runner([*deltas, final]))
    runs = QueryRuns(max_events=4)
    channel = runs.start("s1", "问题", None)
    await channel.task
    late = await _collect(channel, after=1)  # a reconnect from the first event: only the buffer is left
    assert [e.name for e in late] == ["delta", "delta", "delta", "final"]
    assert late[-1].data["answer"] == "完整答案" and late[-1].data["status"] == "completed"


async def test_finished_channels_expire_and_are_capped(monkeypatch):
    final = {"type": "final", "answer": "答", "session_id": "x"}
    monkeypatch.setattr(api_runs, "astream_query", lambda *a, **k: _runner([final]))
    runs = QueryRuns(ttl_s=3600, max_channels=2)
    for sid in ("a", "b", "c"):
        await runs.start(sid, "问题", None).task
    assert runs.get("a") is None and runs.get("b") and runs.get("c")  # the oldest went first
    runs.ttl_s = 0
    assert runs.get("c") is None


async def test_a_run_that_crashes_or_ends_without_final_reports_an_error(monkeypatch):
    async def crashing(*args, **kwargs):
        yield {"type": "delta", "delta": "半"}
        raise RuntimeError("boom")

    runs = QueryRuns()
    monkeypatch.setattr(api_runs, "astream_query", crashing)
    crashed = await _collect(runs.start("crash", "问题", None))
    assert [e.name for e in crashed] == ["delta", "error"] and crashed[-1].data["error"] == "处理问题时出错：boom"
    monkeypatch.setattr(api_runs, "astream_query", lambda *a, **k: _runner([]))
    silent = await _collect(runs.start("silent", "问题", None))
    assert [(e.name, e.data["error"]) for e in silent] == [("error", "回答没有正常结束")]


async def test_closing_the_registry_aborts_running_answers(monkeypatch):
    monkeypatch.setattr(api_runs, "astream_query",
                        lambda *a, **k: _runner([{"type": "delta", "delta": "慢"}] * 3, delay=5))
    runs = QueryRuns()
    channel = runs.start("slow", "问题", None)
    follower = asyncio.create_task(_collect(channel))
    await asyncio.sleep(0.05)
    await runs.aclose()
    events = await asyncio.wait_for(follower, 2)
    assert [(e.name, e.data["error"]) for e in events] == [("error", "服务正在关闭，回答已中止")]
    assert channel.done and runs.active() == 0
