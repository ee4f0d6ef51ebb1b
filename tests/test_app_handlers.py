"""The Chainlit handlers of app.py, awaited directly under a Chainlit context with a capturing emitter.

Everything below the UI is real: the query and import graphs, Milvus Lite, the history database
(also behind the data layer), the local object store and the app's own image route.
"""
from __future__ import annotations

import asyncio
import io
import os
import re
import threading
import time
import uuid
from pathlib import Path
from urllib.parse import unquote

import httpx
import pymupdf
import pytest
from chainlit.chat_context import chat_context
from chainlit.config import config
from chainlit.context import ChainlitContext, context_var, local_steps
from chainlit.emitter import BaseChainlitEmitter
from chainlit.session import HTTPSession
from chainlit.types import Feedback, Pagination, ThreadFilter
from chainlit.user import User

import app
import chainlit as cl
import services.pdf_parser as pdf_parser
from bench.cluster import free_port
from conftest import CORPUS_DOCS, auth_header
from fakes.mineru_server import FakeMinerU
from graphs.importing import MAX_FILES, stop_in_app_workers
from graphs.importing.runner import run_import
from graphs.importing.filetypes import accepted_labels
from manual_files import PANEL_PNG, WEB_PRODUCT, WORD_PRODUCT, web_manual, word_manual
from site_files import PAGES, PICTURES, PICTURES_PER_PAGE, png, site_zip, zip_of
from query_fixtures import model, user_text, web  # noqa: F401  (fixtures)
from services.errors import StorageError
from services.history_store import get_history_store
from services.object_store import local_images_root
from services.settings import get_settings
from services.task_store import get_task_store
from services.vector_store import get_vector_store
from services.accounts import ADMIN_HASH_FILE, parse_credentials
from ui.auth import announce_admin_password, check_login, ensure_auth_secret
from ui.data_layer import HistoryDataLayer

DUO, DUO256M, DUOS = CORPUS_DOCS[0], CORPUS_DOCS[1], CORPUS_DOCS[2]
PICTURE = DUO.parent / "static" / "docs" / "duo" / "duo-v1.2.png"
QUERY_LABELS = {"读取对话历史", "保存对话", "产品确认", "问题分析", "向量检索", "HyDE 检索", "联网搜索", "RRF 融合", "精排", "证据评估", "生成回答"}
WAIT_S = 120


class CaptureEmitter(BaseChainlitEmitter):
    """Records what the UI would receive; answers AskUserMessage from a script."""

    def __init__(self, session, replies=()):
        super().__init__(session)
        self.events: list[tuple[float, str, dict]] = []
        self.replies = list(replies)

    def record(self, name: str, data) -> None:
        self.events.append((time.perf_counter(), name, dict(data) if isinstance(data, dict) else data))

    async def emit(self, event, data):
        self.record(event, data)

    async def send_step(self, step_dict):
        self.record("new_message", step_dict)

    async def update_step(self, step_dict):
        self.record("update_message", step_dict)

    async def stream_start(self, step_dict):
        self.record("stream_start", step_dict)

    async def send_token(self, id, token, is_sequence=False, is_input=False):
        self.record("stream_token", {"id": id, "token": token})

    async def send_element(self, element_dict):
        self.record("element", element_dict)

    def set_chat_settings(self, settings):
        self.session.chat_settings = settings

    async def task_end(self):
        self.record("task_end", {})

    async def set_commands(self, commands):
        self.record("set_commands", {"commands": commands})

    async def send_ask_user(self, step_dict, spec, raise_on_timeout=False):
        self.record("ask", step_dict)
        return self.replies.pop(0) if self.replies else None


class Session:
    """One browser tab: a Chainlit session whose handlers run in their own task (own context)."""

    def __init__(self, thread_id: str | None = None, replies=(), user: str = "tester", role: str = "editor"):
        self.session = HTTPSession(id=str(uuid.uuid4()), client_type="webapp", thread_id=thread_id,
                                   user=User(identifier=user, metadata={"provider": "credentials", "role": role}))
        self.emitter = CaptureEmitter(self.session, replies)
        self.thread_id = self.session.thread_id

    async def run(self, fn, *args):
        async def inside():
            context_var.set(ChainlitContext(self.session, self.emitter))
            local_steps.set(None)
            return await fn(*args)
        return await asyncio.create_task(inside())

    async def start(self):
        await self.run(config.code.on_chat_start)

    async def send(self, text: str, files: list[Path] = ()):
        async def send():
            elements = [cl.File(name=f.name, path=str(f), mime="application/octet-stream") for f in files]
            message = cl.Message(content=text, author="tester", type="user_message", elements=elements)
            chat_context.add(message)  # as Chainlit's emitter does with an incoming message
            await config.code.on_message(message)
        await self.run(send)

    async def click(self, action: dict):
        callback = config.code.action_callbacks[action["name"]]
        await self.run(callback, cl.Action(**{k: action[k] for k in ("name", "payload", "label", "id", "forId")}))

    # -- what the UI shows ------------------------------------------------------------------
    def steps(self) -> dict[str, dict]:
        """Latest state of every step/message, in the order they first appeared."""
        latest: dict[str, dict] = {}
        for _, name, data in self.emitter.events:
            if name in ("new_message", "update_message", "stream_start"):
                latest[data["id"]] = {**latest.get(data["id"], {}), **data}
        return latest

    def node_steps(self) -> list[dict]:
        """Query-node steps; `name` is the node's label, `header` what the step's title shows (a
        skipped node's says why: "联网搜索（已跳过：…）")."""
        steps = [{**s, "header": s["name"], "name": s["name"].split("（已跳过：")[0]} for s in self.steps().values()]
        return [s for s in steps if s["name"] in QUERY_LABELS and s["type"] != "assistant_message"]

    def replies(self) -> list[dict]:
        return [s for s in self.steps().values() if s["type"] == "assistant_message"]

    def actions(self, name: str) -> list[dict]:
        removed = {d["id"] for _, n, d in self.emitter.events if n == "remove_action"}
        return [d for _, n, d in self.emitter.events if n == "action" and d["name"] == name and d["id"] not in removed]

    def elements(self, for_id: str) -> list[dict]:
        return [d for _, n, d in self.emitter.events if n == "element" and d.get("forId") == for_id]

    def tokens(self, message_id: str) -> list[str]:
        return [d["token"] for _, n, d in self.emitter.events if n == "stream_token" and d["id"] == message_id]

    async def wait_for(self, predicate, timeout: float = WAIT_S):
        deadline = time.monotonic() + timeout
        while not predicate():
            assert time.monotonic() < deadline, f"timed out; last replies: {[r.get('output', '')[:200] for r in self.replies()]}"
            await asyncio.sleep(0.05)

    def import_messages(self) -> list[dict]:
        return [r for r in self.replies() if "《" in r.get("output", "")]

    async def wait_imports(self, n: int = 1) -> list[dict]:
        def done():
            finished = [m for m in self.import_messages() if m["output"].startswith(("✅", "❌"))]
            # Chainlit sends a message's buttons after the message itself: wait for them too
            with_button = {d["forId"] for _, name, d in self.emitter.events if name == "action"}
            offered = all(m["id"] in with_button for m in finished if "“修改商品名”" in m["output"])
            return len(finished) >= n and offered
        await self.wait_for(done)
        return self.import_messages()


@pytest.fixture()
def own_data(env, tmp_path):
    """A data dir of its own, for tests that import or break things; the queue consumer its imports
    started in this process stops after the test."""
    yield env(DATA_DIR=str(tmp_path / "data"))
    stop_in_app_workers()


def answer_of(s: Session) -> dict:
    return s.replies()[-1]


# -- asking ---------------------------------------------------------------------------------
async def test_confirmed_answer_has_a_step_per_node_images_and_sources(product_of):
    s = Session()
    await s.start()
    # offline: the switches of absent backends are off, and cannot be turned on
    assert s.session.chat_settings == {"web_search": False, "hyde": False, "show_sources": True}
    widgets = {w["id"]: w for _, n, d in s.emitter.events if n == "chat_settings" for w in d}
    for key, why in (("web_search", "未配置联网搜索服务"), ("hyde", "未配置大模型")):
        assert widgets[key]["initial"] is False and widgets[key]["disabled"] is True
        assert widgets[key]["description"].startswith(why)
    assert widgets["show_sources"]["initial"] is True and not widgets["show_sources"]["disabled"]
    await s.send("Milk-V Duo 的 GPIO 引脚分配是怎样的？")

    steps = s.node_steps()
    names = [st["name"] for st in steps]
    assert sorted(names) == sorted(QUERY_LABELS), names  # each node that ran, once
    assert {st["name"]: st["type"] for st in steps} == {
        "读取对话历史": "tool", "保存对话": "tool", "产品确认": "tool", "问题分析": "tool", "向量检索": "retrieval", "HyDE 检索": "retrieval", "联网搜索": "tool",
        "RRF 融合": "retrieval", "精排": "rerank", "证据评估": "tool", "生成回答": "llm"}
    run = next(st for st in s.steps().values() if st["name"] == "on_message")
    assert {st["parentId"] for st in steps} == {run["id"]}  # siblings, the three recalls included
    by_name = {st["name"]: st["output"] for st in steps}
    assert f"已确认：{product_of['duo']}" in by_name["产品确认"]
    assert "| # | 标题 | 产品 | 分数 |" in by_name["向量检索"] and product_of["duo"] in by_name["向量检索"]
    assert by_name["HyDE 检索"].startswith("⏭️ 已跳过：未配置大模型")
    assert by_name["联网搜索"].startswith("⏭️ 已跳过：") and "未配置" in by_name["联网搜索"]
    headers = {st["name"]: st["header"] for st in steps}
    assert headers["联网搜索"] == "联网搜索（已跳过：未配置联网搜索）"
    assert headers["HyDE 检索"].startswith("HyDE 检索（已跳过：未配置大模型")
    assert headers["精排"] == "精排"  # a node that ran keeps its plain name
    assert "评分器" in by_name["精排"] and "截断位置：第" in by_name["精排"]
    assert by_name["证据评估"].startswith("可以回答") and "评估方式：`offline`" in by_name["证据评估"]
    assert all(st.get("end") for st in steps)

    reply = answer_of(s)
    assert reply["parentId"] == run["id"]
    assert s.tokens(reply["id"]) or any(n == "stream_start" and d["id"] == reply["id"] for _, n, d in s.emitter.events)
    assert "**来源**：点击下方按钮查看原文" in reply["output"]
    elements = s.elements(reply["id"])
    images = [e for e in elements if e["type"] == "image"]
    assert images and all(e["url"].startswith("/kb-files/upload-images/") and e["display"] == "inline" for e in images)
    # sources are chips under the answer; nothing is sent for the side panel until one is clicked
    assert not [e for _, n, e in s.emitter.events if n == "element" and e.get("display") == "side"]
    chips = [a for a in s.actions("open_source") if a["forId"] == reply["id"]]
    cited = sorted({int(n) for n in re.findall(r"(?m)^\*\*\[(\d+)\] ", reply["output"])})  # the quoted sources
    assert chips and [c["payload"]["index"] for c in chips] == cited[:5]  # the cited sources only
    assert chips[0]["label"].startswith(f"[{cited[0]}] duo · ")
    assert len({c["label"] for c in chips}) == len(chips)  # no two read alike
    assert reply["metadata"]["sources"] == [c["payload"] for c in chips]  # kept for a resumed thread

    # the pictures load from the app's own image route, inserted before Chainlit's catch-all, for signed-in users
    transport = httpx.ASGITransport(app=app.chainlit_app)
    async with httpx.AsyncClient(transport=transport, base_url="http://app", headers=auth_header()) as client:
        for image in images:
            res = await client.get(image["url"])
            assert res.status_code == 200 and res.headers["content-type"].startswith("image/"), image["url"]
            assert (await client.get(image["url"], headers={"Authorization": ""})).status_code == 401
        assert (await client.get("/kb-files/upload-images/no-such-doc/none.png")).status_code == 404


async def test_model_answer_streams_token_by_token_with_web_sources(model, web, product_of):
    question = "Milk-V Duo S 怎么烧录系统镜像？"

    def reply(body: dict) -> str:  # cites two manual sources and the web page, by their numbers in the prompt
        page = re.search(r"\[(\d+)\]\[source=web\]", user_text(body)).group(1)
        return f"根据说明书，先下载镜像 [1]，再用烧录工具写入 SD 卡 [2]。网上的教程 [{page}] 步骤相同。"

    model.on_answer(question, reply)
    web.set_pages({"Duo S": [{"title": "Duo S 烧录教程", "url": "https://example.com/duos",
                              "snippet": "Duo S 烧录系统镜像的步骤：下载镜像，写入 SD 卡。"}]})
    s = Session()
    await s.start()
    await s.send(question)
    outputs = {st["name"]: st["output"] for st in s.node_steps()}
    assert "假设文档" in outputs["HyDE 检索"] and not outputs["HyDE 检索"].startswith("⏭️")
    assert "[Duo S 烧录教程](https://example.com/duos)" in outputs["联网搜索"]
    reply = answer_of(s)
    tokens = s.tokens(reply["id"])
    assert len(tokens) > 5  # streamed piece by piece as the model wrote it
    assert reply["output"].startswith("根据说明书，先下载镜像 [1]，再用烧录工具写入 SD 卡 [2]。")
    web_sources = [line for line in reply["output"].split("　") if "example.com" in line]
    assert web_sources and "[Duo S 烧录教程](https://example.com/duos)" in web_sources[0]  # links out
    assert not [e for e in s.elements(reply["id"]) if "烧录教程" in e["name"]]  # no side panel for web pages
    # the model's [n] is source n: local chips and web links share one numbering, as in its prompt,
    # and only the sources it cites are shown
    chips = [int(a["label"][1:].split("]")[0]) for a in s.actions("open_source") if a["forId"] == reply["id"]]
    linked = [int(line.split("]")[0].lstrip("[")) for line in web_sources]
    cited = sorted({int(n) for n in re.findall(r"\[(\d+)\]", reply["output"].split("**来源**")[0])})
    assert chips and len(linked) == 1 and sorted(chips + linked) == cited
    prompt = model.requests("answer")[-1]["messages"][-1]["content"]
    for n in chips[:2]:
        payload = next(a["payload"] for a in s.actions("open_source") if a["label"].startswith(f"[{n}] "))
        assert f"[{n}][source=local][chunk_id={payload['chunk_id']}]" in prompt


async def test_comparison_shows_each_sub_question_as_a_nested_step(product_of):
    s = Session()
    await s.start()
    await s.send("SKR MINI E3 V2.0 和 V3.0 的主控芯片有什么区别？")
    steps = list(s.steps().values())
    fan_out = [st for st in steps if st["name"] == "子问题检索"]
    assert len(fan_out) == 1 and fan_out[0].get("end")  # both parallel runs in one step, ended after the last
    assert fan_out[0]["output"].count("子问题 ") == 2
    subs = [st for st in steps if st["name"].startswith("子问题 ") and st["name"] != "子问题检索"]
    assert sorted(st["name"][:5] for st in subs) == ["子问题 1", "子问题 2"]
    assert all(st["parentId"] == fan_out[0]["id"] and st.get("end") and "置信度" in st["output"] for st in subs)
    for stem, sub in zip(("BTT SKR MINI E3 V2.0使用手册", "BTT SKR MINI E3 V3.0使用手册"), sorted(subs, key=lambda st: st["name"])):
        assert product_of[stem] in sub["name"]
    synthesis = next(st for st in steps if st["name"] == "汇总子问题")
    assert "2/2 个子问题有相关资料" in synthesis["output"]
    reply = answer_of(s)
    # both products' chips are in the answer (the manual vocabulary rates 主控芯片 against "MCU" as strong
    # evidence now, so no caution is added: the cautious band is shown in test_query_grading)
    assert "**来源**：" in reply["output"]
    assert "STM32F103RCT6" in reply["output"] and "STM32G0B1RET6" in reply["output"]


async def test_a_split_question_shows_its_whole_question_as_one_more_nested_step(product_of):
    s = Session()
    await s.start()
    await s.send("Duo S 有多大内存？带不带 WiFi 和蓝牙？")
    steps = list(s.steps().values())
    fan_out = next(st for st in steps if st["name"] == "子问题检索")
    nested = sorted(st["name"] for st in steps if st.get("parentId") == fan_out["id"])
    assert nested == ["原问题：Duo S 有多大内存？带不带 WiFi 和蓝牙？", "子问题 1：Duo S 有多大内存？",
                      "子问题 2：Duo S 带不带 WiFi 和蓝牙？"]
    synthesis = next(st for st in steps if st["name"] == "汇总子问题")
    assert "2/2 个子问题有相关资料" in synthesis["output"] and "连同原问题的检索结果" in synthesis["output"]


async def test_a_failing_node_is_marked_and_the_reply_says_so(product_of, monkeypatch):
    from services.errors import MilvusError

    def broken(*args, **kwargs):
        raise MilvusError("向量库连接中断（测试注入）")
    monkeypatch.setattr("graphs.query.nodes.search_embedding.search_chunks", broken)
    s = Session()
    await s.start()
    await s.send("Milk-V Duo 怎么烧录系统镜像？")
    failed = next(st for st in s.node_steps() if st["name"] == "向量检索")
    assert failed["isError"] and failed["output"].startswith("❌ 出错：") and "测试注入" in failed["output"]
    reply = answer_of(s)
    assert reply["output"].startswith("❌ 抱歉，这次没能回答：") and "测试注入" in reply["output"]


async def test_hidden_sources_and_switched_off_branches(model, web, corpus_results):
    s = Session()
    await s.start()
    widgets = {w["id"]: w for _, n, d in s.emitter.events if n == "chat_settings" for w in d}
    assert all(w["initial"] and not w["disabled"] for w in widgets.values())  # every backend configured
    s.session.chat_settings.update(web_search=False, hyde=False, show_sources=False)
    await s.send("Milk-V Duo 怎么烧录系统镜像？")
    outputs = {st["name"]: st["output"] for st in s.node_steps()}
    assert outputs["联网搜索"].startswith("⏭️ 已跳过：已在设置中关闭联网搜索")
    assert outputs["HyDE 检索"].startswith("⏭️ 已跳过：已在设置中关闭 HyDE")
    assert web.calls == []
    reply = answer_of(s)
    assert "来源" not in reply["output"]
    assert not s.actions("open_source") and not (reply.get("metadata") or {}).get("sources")


async def test_a_switch_without_its_backend_stays_off(corpus_results):
    s = Session()
    await s.start()
    s.session.chat_settings.update(web_search=True, hyde=True)  # as a stored thread may say
    await s.send("Milk-V Duo 怎么烧录系统镜像？")
    headers = {st["name"]: st["header"] for st in s.node_steps()}
    assert headers["联网搜索"] == "联网搜索（已跳过：未配置联网搜索）"
    assert headers["HyDE 检索"].startswith("HyDE 检索（已跳过：未配置大模型")


# -- sources: chips that open the original ----------------------------------------------------
BTT_V3 = CORPUS_DOCS[8]


def sidebar(s: Session) -> list[tuple[str, dict]]:
    """What the side panel was told to show, in order: ("elements", {...}) and ("title", text)."""
    out = []
    for _, n, d in s.emitter.events:
        if n == "set_sidebar_elements":
            out.append(("elements", d))
        elif n == "set_sidebar_title":
            out.append(("title", d))
    return out


async def ask_for_chips(s: Session, question: str) -> tuple[dict, list[dict]]:
    await s.start()
    await s.send(question)
    reply = answer_of(s)
    return reply, [a for a in s.actions("open_source") if a["forId"] == reply["id"]]


async def test_a_pdf_chip_opens_the_original_at_its_page(product_of):
    s = Session()
    reply, chips = await ask_for_chips(s, f"{product_of[BTT_V3.stem]} 的主板固件怎么更新？")
    assert chips and sidebar(s) == []  # closed until clicked
    chip = chips[0]
    page = chip["payload"]["page_start"]
    assert page >= 1 and f"· 第 {page}" in chip["label"] and chip["label"].startswith(f"[1] {BTT_V3.stem} · ")
    await s.click(chip)
    (_, shown), (_, title) = sidebar(s)
    (pdf,) = shown["elements"]
    assert (pdf["type"], pdf["display"], pdf["page"], pdf["forId"]) == ("pdf", "page", page, "")
    assert title == chip["label"] == pdf["name"]
    file = s.session.files[pdf["chainlitKey"]]  # a session file: served only to this session's user
    assert Path(file["path"]).read_bytes() == BTT_V3.read_bytes()
    # another chip replaces what the panel shows, opened at that chip's page
    other = chips[-1]
    await s.click(other)
    again = [d for kind, d in sidebar(s) if kind == "elements"][-1]
    assert [e["page"] for e in again["elements"]] == [other["payload"]["page_start"] or 1]
    assert again["key"] == str(other["payload"]["chunk_id"])


async def test_a_markdown_chip_shows_its_section(product_of):
    s = Session()
    reply, chips = await ask_for_chips(s, "Milk-V Duo 的 GPIO 引脚分配是怎样的？")
    chip = chips[0]
    assert chip["payload"]["page_start"] == 0 and "第" not in chip["label"].split(" · ", 1)[1]
    await s.click(chip)
    (_, shown), _ = sidebar(s)
    (text,) = shown["elements"]
    assert (text["type"], text["display"]) == ("text", "page")
    body = Path(s.session.files[text["chainlitKey"]]["path"]).read_text(encoding="utf-8")
    stored = get_vector_store().query(get_vector_store().chunks, f"chunk_id == {int(chip['payload']['chunk_id'])}",
                                      ["content"])[0]["content"]
    assert body.startswith("**文件**：duo") and body.endswith(stored)


async def test_a_pdf_chip_without_its_original_shows_the_passage_and_says_why(product_of, monkeypatch):
    s = Session()
    reply, chips = await ask_for_chips(s, f"{product_of[BTT_V3.stem]} 的主板固件怎么更新？")
    monkeypatch.setattr("ui.sources.get_document_registry", lambda: type("Empty", (), {"get": lambda self, _: None})())
    await s.click(chips[0])
    (_, shown), _ = sidebar(s)
    (text,) = shown["elements"]
    body = Path(s.session.files[text["chainlitKey"]]["path"]).read_text(encoding="utf-8")
    assert text["type"] == "text" and body.startswith("> ⚠️ 原始 PDF 无法打开：知识库中没有这份说明书的原件记录")
    assert "**章节**：" in body


async def test_a_resumed_thread_gets_its_chips_back(product_of):
    first = Session()
    reply, chips = await ask_for_chips(first, "Milk-V Duo 的 GPIO 引脚分配是怎样的？")
    # the thread as the data layer hands it back: its steps as they were sent
    stored = {"id": first.thread_id, "name": "旧对话", "metadata": {}, "steps": list(first.steps().values())}
    later = Session(thread_id=first.thread_id)
    await later.run(config.code.on_chat_resume, stored)
    restored = later.actions("open_source")
    assert [(a["label"], a["forId"]) for a in restored] == [(c["label"], c["forId"]) for c in chips]


async def test_footer_and_step_headers_say_what_is_configured(env):
    async def translation() -> dict:
        transport = httpx.ASGITransport(app=app.chainlit_app)
        async with httpx.AsyncClient(transport=transport, base_url="http://app") as client:
            res = await client.get("/project/translations", params={"language": "en-US"})
        assert res.status_code == 200
        return res.json()["translation"]
    offline = await translation()
    assert "模型" not in offline["chat"]["watermark"] and "摘录" in offline["chat"]["watermark"]
    assert offline["chat"]["messages"]["status"]["used"] == ""  # no "已使用" before a skipped step's name
    assert offline["chat"]["messages"]["status"]["using"] == "使用中"  # the rest is Chainlit's zh-CN text
    env(OPENAI_API_KEY="sk-test", LLM_DEFAULT_MODEL="qwen-plus")
    assert "大模型 qwen-plus" in (await translation())["chat"]["watermark"]


async def test_ambiguous_question_buttons_pin_the_product(product_of):
    s = Session()
    await s.start()
    question = "Milk-V 的开发板怎么烧录系统？"
    await s.send(question)
    assert [st["name"] for st in s.node_steps()] == ["读取对话历史", "产品确认", "生成回答", "保存对话"]
    clarification = answer_of(s)
    buttons = s.actions("choose_product")
    twins = {product_of["duo"], product_of["duo256m"], product_of["duos"]}
    assert {b["label"] for b in buttons} == twins
    assert all(b["forId"] == clarification["id"] and b["payload"]["question"] == question for b in buttons)
    assert "您问的是哪一款产品" in clarification["output"]

    chosen = next(b for b in buttons if b["label"] == product_of["duos"])
    before = len(s.node_steps())
    await s.click(chosen)
    assert s.actions("choose_product") == []  # every button of that message is gone
    new_steps = s.node_steps()[before:]
    confirm = next(st for st in new_steps if st["name"] == "产品确认")["output"]
    assert f"已确认：{product_of['duos']}" in confirm and "判定方式：`pinned`" in confirm
    assert len(new_steps) == len(QUERY_LABELS)
    assert product_of["duos"] in answer_of(s)["output"]
    recent = get_history_store().recent(s.thread_id, 2)
    assert recent[-1]["products"] == [product_of["duos"]]


async def test_typing_a_candidate_instead_of_clicking(product_of):
    s = Session()
    await s.start()
    await s.send("Milk-V 的开发板怎么烧录系统？")
    before = len(s.node_steps())
    await s.send("Duo256M")
    confirm = next(st for st in s.node_steps()[before:] if st["name"] == "产品确认")["output"]
    assert f"已确认：{product_of['duo256m']}" in confirm and "判定方式：`pinned`" in confirm
    assert "烧录" in confirm  # the original question was answered, not the bare model name


async def test_unknown_product_is_refused_with_what_the_kb_covers(product_of):
    s = Session()
    await s.start()
    await s.send("小米电饭煲怎么预约煮饭？")
    refusal = answer_of(s)
    assert refusal["output"].startswith("抱歉，知识库中没有找到与您的问题相关的产品资料")
    labels = [b["label"] for b in s.actions("choose_product")]
    assert labels and set(labels) <= set(product_of.values()) and len(labels) <= 8


async def test_starters_follow_the_knowledge_base(product_of, own_data):
    empty = await config.code.set_starters(None)
    assert [st.label for st in empty] == [label for label, _ in app.EXAMPLE_QUESTIONS]
    # the empty knowledge base's first starter shows how to attach, at once and without a search
    s = Session()
    await s.start()
    started = time.perf_counter()
    await s.send(next(message for label, message in app.EXAMPLE_QUESTIONS if label == "怎么导入说明书"))
    assert time.perf_counter() - started < 1.0 and not s.node_steps()
    help_text = answer_of(s)["output"]
    assert "📎" in help_text and "拖进对话框" in help_text and ".zip" in help_text
    assert accepted_labels() in help_text and "只读" not in help_text
    reader = Session(user="rita", role="reader")
    await reader.start()
    await reader.send(app.IMPORT_QUESTION)
    assert "只读角色" in answer_of(reader)["output"]
    run_import(DUOS)
    filled = await config.code.set_starters(None)
    assert [st.label for st in filled] == [f"{product_of['duos']} 快速上手"]


# -- attachments ----------------------------------------------------------------------------
async def test_unsupported_too_big_and_empty_files_are_refused(own_data, tmp_path, env):
    env(MAX_UPLOAD_MB=1)
    notes = tmp_path / "notes.csv"
    notes.write_text("不是说明书", encoding="utf-8")
    empty = tmp_path / "empty.md"
    empty.write_bytes(b"")
    big = tmp_path / "big.md"
    big.write_text("# 大文件\n\n" + "很长的说明。" * 200_000, encoding="utf-8")
    s = Session()
    await s.start()
    await s.send("", [notes, empty, big])
    messages = {m["output"].split("》")[0]: m["output"] for m in await s.wait_imports(3)}
    assert "不支持的文件类型“.csv”" in messages["❌ 《notes.csv"]
    assert "是空的（0 字节）" in messages["❌ 《empty.md"]
    assert "超过了 1 MB 的上限" in messages["❌ 《big.md"]
    assert not list((get_settings().data_dir / "uploads").rglob("*.*"))  # nothing kept
    assert get_vector_store().count() == 0
    # a thread opened by files alone gets a name for the sidebar
    named = [d for _, n, d in s.emitter.events if n == "first_interaction"]
    assert named == [{"interaction": "导入：notes.csv、empty.md、big.md", "thread_id": s.thread_id}]
    thread = await HistoryDataLayer().get_thread(s.thread_id)
    assert thread and thread["name"] == "导入：notes.csv、empty.md、big.md"


async def test_import_then_question_and_rename(own_data, product_of):
    s = Session(replies=[{"output": "我的 Duo 开发板"}])
    await s.start()
    await s.send("Duo256M 用的是什么处理器？", [DUO256M])  # the manual's own word: graded answerable offline
    progress = (await s.wait_imports(1))[0]
    assert progress["output"].startswith("✅ 《duo256m.md》导入完成")
    assert f"商品名：**{product_of['duo256m']}**" in progress["output"]
    assert "切片：" in progress["output"] and "用时：" in progress["output"]
    updates = [d["output"] for _, n, d in s.emitter.events if n == "update_message" and d["id"] == progress["id"]]
    assert any(u.startswith("⏳") and "⏳ 向量化" in u for u in updates)  # updated at each node
    assert any("✅ 检查文件" in u for u in updates)
    # the question waited for its attachment
    await s.wait_for(lambda: any(st["name"] == "生成回答" and st.get("end") for st in s.node_steps()))
    await s.wait_for(lambda: "来源" in answer_of(s)["output"])
    confirm = next(st for st in s.node_steps() if st["name"] == "产品确认")
    assert f"已确认：{product_of['duo256m']}" in confirm["output"]
    imported_at = min(t for t, n, d in s.emitter.events
                      if n == "update_message" and d["id"] == progress["id"] and d["output"].startswith("✅"))
    asked_at = min(t for t, n, d in s.emitter.events if n == "new_message" and d["id"] == confirm["id"])
    assert asked_at > imported_at
    staged = list((get_settings().data_dir / "uploads").rglob("duo256m.md"))
    assert len(staged) == 1 and staged[0].parent.parent.name == time.strftime("%Y%m%d")

    store = get_vector_store()
    chunks = store.count()
    rename = s.actions("rename_product")
    assert len(rename) == 1 and set(rename[0]["payload"]) == {"upload"}  # no path leaves the server
    await s.click(rename[0])  # returns at once (the browser waits on it): asking and importing go on after
    assert not [m for m in s.import_messages()[1:] if m["output"].startswith("✅")]
    await s.wait_for(lambda: any(n == "ask" and "正确商品名" in d["output"] for _, n, d in s.emitter.events))
    ask = next(d for _, n, d in s.emitter.events if n == "ask")
    assert ask["parentId"] == rename[0]["forId"]  # shown under the message whose button was clicked
    await s.wait_for(lambda: [n for _, n, _ in s.emitter.events if n in ("ask", "task_end")][-2:] == ["ask", "task_end"])
    second = (await s.wait_imports(2))[-1]
    assert "商品名：**我的 Duo 开发板**" in second["output"]
    names = {r["product"] for r in store.products()}
    assert names == {"我的 Duo 开发板"}  # replaced itself, no copy under the old name
    assert store.count() == chunks

    # the same file uploaded again replaces itself too
    await s.send("", [DUO256M])
    await s.wait_imports(3)
    assert store.count() == chunks and len(store.products()) == 1

    # each import was a task on the queue, run by this process's consumer thread, not the chat's own
    tasks = sorted(get_task_store().list(), key=lambda t: t["created"])
    assert [(t["status"], t["attempts"], t["job"]["kind"]) for t in tasks] == [("completed", 1, "import")] * 3
    assert [t["job"]["product"] for t in tasks] == [None, "我的 Duo 开发板", None]  # the rename names it
    assert len({t["task_id"] for t in tasks}) == 3  # the rename is a task of its own
    names = {thread.ident: thread.name for thread in threading.enumerate()}
    assert all(int(t["worker"].split(":")[1]) == os.getpid() for t in tasks)
    assert {names.get(int(t["worker"].split(":")[2]), "")[:7] for t in tasks} == {"Worker-"}  # Huey's threads
    # what the chat showed came from the task store: the steps it recorded
    assert [st["label"] for st in tasks[0]["steps"] if st["type"] == "node_end"][:1] == ["检查文件"]


async def test_word_and_web_attachments_answer_with_their_pictures(own_data, tmp_path):
    docx = word_manual(tmp_path / "c21.docx")
    page = web_manual(tmp_path / "c22.html", local_picture=PANEL_PNG.name)
    s = Session()
    await s.start()
    await s.send(f"{WORD_PRODUCT}的控制面板是什么样的？", [docx, page])
    messages = await s.wait_imports(2)
    done = {m["output"].split("》")[0]: m["output"] for m in messages}
    word, web = done["✅ 《c21.docx"], done["✅ 《c22.html"]
    assert f"商品名：**{WORD_PRODUCT}**" in word and "图片：2 张" in word
    assert f"商品名：**{WEB_PRODUCT}**" in web and "图片：1 张" in web  # the embedded one; panel.png stayed behind
    updates = [d["output"] for _, n, d in s.emitter.events if n == "update_message"]
    assert any("✅ 文档转 Markdown　Word 文档 → c21.md：标题 4 个，表格 1 个，图片 2 张" in u for u in updates)
    assert any("✅ 文档转 Markdown　网页 → c22.md：标题 4 个，表格 1 个，图片 1 张" in u for u in updates)
    await s.wait_for(lambda: "来源" in answer_of(s)["output"])
    reply = answer_of(s)
    images = [e for e in s.elements(reply["id"]) if e["type"] == "image"]
    assert images and all(e["url"].startswith("/kb-files/upload-images/c21-") for e in images), images
    # the app serves the session's data dir; this test's own store holds the picture itself
    stored = local_images_root(get_settings()) / images[0]["url"].split("/upload-images/", 1)[1]
    assert stored.read_bytes() == PANEL_PNG.read_bytes()


async def test_a_site_archive_attached_in_the_chat_imports_with_its_pictures(own_data, tmp_path):
    archive = site_zip(tmp_path / "澜舟站点.zip")
    s = Session()
    await s.start()
    await s.send("", [archive])
    messages = await s.wait_imports(len(PAGES))
    done = {m["output"].split("》")[0].removeprefix("✅ 《"): m["output"] for m in messages if m["output"].startswith("✅")}
    assert set(done) == set(PAGES), [m["output"][:80] for m in messages]
    for page, pictures in PICTURES_PER_PAGE.items():
        assert f"图片：{pictures} 张" in done[page] and "缺失" not in done[page], done[page]
    assert "1 张只在忽略大小写时找到：images/Reset-Hole.PNG" in done["lz-cam3/reset.md"]
    note = next(r["output"] for r in s.replies() if r["output"].startswith("📦"))
    assert note.startswith("📦 《澜舟站点.zip》：4 份文档、5 张图片") and "assets/site.css" in note
    await s.wait_for(lambda: any(r["output"].startswith("识别为 2 个产品") for r in s.replies()))
    summary = next(r["output"] for r in s.replies() if r["output"].startswith("识别为"))
    assert "LZ-Hub7" in summary and "LZ-Cam3" in summary and "（2 个文件）" in summary
    # asked, the camera's own picture comes with the answer
    cam = next(p for p in get_vector_store().product_names() if "LZ-Cam3" in p)
    await s.send(f"{cam} 的镜头外圈是什么？")
    await s.wait_for(lambda: "来源" in answer_of(s)["output"])
    images = [e for e in s.elements(answer_of(s)["id"]) if e["type"] == "image"]
    assert images, answer_of(s)["output"]
    stored = local_images_root(get_settings())
    assert all((stored / unquote(e["url"].split("/upload-images/", 1)[1])).read_bytes() in
               {png(c) for c in PICTURES.values()} for e in images)
    assert "图片缺失" not in answer_of(s)["output"]


async def test_a_hostile_archive_attached_in_the_chat_is_refused_and_leaves_nothing(own_data, tmp_path):
    escape = zip_of(tmp_path / "escape.zip", {"docs/index.md": b"# x\n\ntext", "../../evil.md": b"# evil"})
    s = Session()
    await s.start()
    await s.send("", [escape])
    [refused] = await s.wait_imports(1)
    assert refused["output"].startswith("❌ 《escape.zip》无法导入：压缩包“escape.zip”没有导入：") and "含有“..”" in refused["output"]
    assert not [p for p in (get_settings().data_dir / "uploads").rglob("*") if p.is_file()]
    assert get_vector_store().count() == 0


def manual_pdf(path: Path) -> Path:
    """A one-page PDF manual with a picture, so that a failed import has pictures to leave behind."""
    doc = pymupdf.open()
    page = doc.new_page()
    page.insert_text((72, 72), "Milk-V Duo Test Manual", fontsize=20)
    page.insert_textbox(pymupdf.Rect(72, 100, 520, 200), "CV1800B chip, 64MB memory, USB-C power.", fontsize=12)
    page.insert_image(pymupdf.Rect(72, 220, 400, 500), filename=str(PICTURE))
    doc.save(path)
    return path


async def test_failed_import_leaves_nothing(own_data, monkeypatch, tmp_path):
    from services.errors import MilvusError
    from services.vector_store import VectorStore

    original = VectorStore._call

    def failing(self, what, fn, *args, **kwargs):  # the product-name row, after the chunks went in
        if what == "写入商品名":
            raise MilvusError("写入商品名失败（测试注入）")
        return original(self, what, fn, *args, **kwargs)
    monkeypatch.setattr(VectorStore, "_call", failing)
    s = Session()
    await s.start()
    await s.send("", [manual_pdf(tmp_path / "测试手册.pdf")])
    failed = (await s.wait_imports(1))[0]
    assert failed["output"].startswith("❌ 《测试手册.pdf》导入失败：") and "测试注入" in failed["output"]
    assert "✅ 图片处理　图片 1 张已上传" in failed["output"]  # it got as far as storing a picture
    assert "这份文件没有写入知识库" in failed["output"]
    assert not s.actions("rename_product")
    store = get_vector_store()
    assert store.count() == 0 and store.products() == []  # the chunks written before the failure are gone
    images = get_settings().data_dir / "objects"
    assert not [p for p in images.rglob("*") if p.is_file() and "upload-images" in p.parts]


async def test_rename_needs_a_known_upload_and_a_name(own_data):
    s = Session(replies=[None])  # the person let the question time out
    await s.start()
    await s.send("", [DUOS])
    await s.wait_imports(1)
    button = s.actions("rename_product")[0]
    await s.click(button)
    await s.wait_for(lambda: answer_of(s)["output"] == "没有收到新的商品名，保持原样。")
    assert s.actions("rename_product") == [button]  # still there to try again
    await s.click({**button, "payload": {"upload": "no-such-upload"}})
    await s.wait_for(lambda: answer_of(s)["output"].startswith("找不到这次上传的文件"))


async def test_a_set_whose_queue_breaks_off_part_way_imports_the_queued_file(own_data, monkeypatch):
    from queue_fixtures import break_queue_after_first

    break_queue_after_first(monkeypatch)
    s = Session()
    await s.start()
    await s.send("", [DUO, DUO256M])
    shown = {m["output"].split("》")[0]: m["output"] for m in await s.wait_imports(2)}
    assert shown["✅ 《duo.md"].startswith("✅ 《duo.md》导入完成")
    assert shown["❌ 《duo256m.md"].startswith("❌ 《duo256m.md》的导入任务无法创建，没有开始导入：") and "disk I/O" in shown["❌ 《duo256m.md"]
    assert not list((get_settings().data_dir / "uploads").rglob("duo256m.md"))  # the refused file is not kept
    assert {r["product"] for r in get_vector_store().products()} == {"Milk-V Duo"}


async def test_a_queue_that_refuses_says_so_and_keeps_what_the_api_would(own_data, env):
    s = Session(replies=[{"output": "Duo S 新名字"}])
    await s.start()
    await s.send("", [DUOS])
    await s.wait_imports(1)
    chunks = get_vector_store().count()
    [kept] = list((get_settings().data_dir / "uploads").rglob("duos.md"))

    env(REDIS_URL=f"redis://127.0.0.1:{free_port()}/0")  # the queue: nothing listens there
    await s.send("", [DUO, DUO256M])
    refused = {m["output"].split("》")[0]: m["output"] for m in (await s.wait_imports(3))[1:]}
    for name in ("duo.md", "duo256m.md"):
        assert refused[f"❌ 《{name}"].startswith(
            f"❌ 《{name}》的导入任务无法创建，没有开始导入：任务无法加入队列（Redis不可用）"), refused
    # as POST /api/upload does: the refused set's files are not kept, its tasks say why
    assert sorted(p.name for p in (get_settings().data_dir / "uploads").rglob("*") if p.is_file()) == ["duos.md"]
    failed = [t for t in get_task_store().list() if t["status"] == "failed"]
    assert len(failed) == 2 and all("导入任务没有排上队" in t["error"] for t in failed)
    assert not [r for r in s.replies() if r["output"].startswith("识别为")][1:]  # no summary for the refused set

    # a rename refused by the queue keeps its button and the imported file, to try again
    [button] = s.actions("rename_product")
    await s.click(button)
    await s.wait_for(lambda: s.import_messages()[-1]["output"].startswith("❌ 《duos.md》的导入任务无法创建"))
    assert s.actions("rename_product") == [button] and kept.is_file()
    assert get_vector_store().count() == chunks and {r["product"] for r in get_vector_store().products()} == {
        "Milk-V Duo S"}


async def test_a_transient_fault_is_retried_by_the_queue_and_the_chat_shows_it(own_data, env, monkeypatch, tmp_path):
    monkeypatch.setattr(pdf_parser, "RETRY_BACKOFF_S", 0.01)
    # the parser's own retries (1 + MAX_RETRIES requests) all meet the outage: the queue tries again later
    with FakeMinerU(token="tok", outage=1 + pdf_parser.MAX_RETRIES) as mineru:
        env(MINERU_API_TOKEN="tok", MINERU_BASE_URL=mineru.base_url, MINERU_POLL_INTERVAL_S="0.05",
            IMPORT_RETRY_DELAY_S="3")  # longer than the chat's slowest poll: it sees the wait
        s = Session()
        await s.start()
        await s.send("", [manual_pdf(tmp_path / "测试手册.pdf")])
        done = (await s.wait_imports(1))[0]
    assert done["output"].startswith("✅ 《测试手册.pdf》导入完成"), done["output"]
    updates = [d["output"] for _, n, d in s.emitter.events if n == "update_message" and d["id"] == done["id"]]
    waiting = [i for i, u in enumerate(updates) if "🔁" in u]
    assert waiting, updates
    assert "MinerU 服务暂时不可用" in updates[waiting[0]] and "秒后重试" in updates[waiting[0]]
    assert not [u for u in updates if u.startswith("❌")]  # never shown as failed
    # the second attempt starts its steps over: the first one's failed node is not shown with them
    assert "❌" not in updates[waiting[-1] + 1] and "⏳ 检查文件" in updates[waiting[-1] + 1]
    [task] = get_task_store().list()
    assert (task["status"], task["attempts"]) == ("completed", 2)


async def test_progress_that_cannot_be_read_says_the_import_may_still_finish(own_data, monkeypatch):
    from services.task_store import TaskStore
    from ui.progress import FileView, follow_tasks

    def unreadable(self, task_ids):
        raise StorageError("读取导入任务失败（测试注入）")
    monkeypatch.setattr("ui.progress.LOST_AFTER_S", 0.5)
    monkeypatch.setattr(TaskStore, "get_many", unreadable)
    s = Session()

    async def follow():
        view = FileView("duos.md")
        await view.show()
        return await follow_tasks({"no-answer": view})
    assert await s.run(follow) == {}
    assert s.import_messages()[-1]["output"] == ("⚠️ 《duos.md》的导入进度无法读取：读取导入任务失败（测试注入）\n\n"
                                                 "导入可能仍在后台进行，稍后可在“知识库”中查看结果。")


async def test_a_task_no_process_takes_says_it_is_queued_then_runs_when_a_worker_starts(own_data, env, monkeypatch):
    from graphs.importing import start_in_app_worker

    env(IMPORT_IN_APP="false")  # imports are left to worker processes, and none is running yet
    monkeypatch.setattr("ui.progress.QUEUED_NOTICE_S", 0.5)
    s = Session()
    await s.start()
    await s.send("", [DUOS])
    await s.wait_for(lambda: any("正在排队" in m["output"] for m in s.import_messages()))
    queued = s.import_messages()[-1]["output"]
    assert "已收到并保存" in queued and "几秒到几分钟" in queued and "联系管理员" in queued
    assert "worker" not in queued and "bash" not in queued  # words for an operator, not for a user
    monkeypatch.setattr("ui.knowledge.QUEUED_NOTICE_S", 0.0)
    for user, role, hinted in [("root", "admin", True), ("eddy", "editor", False), ("rita", "reader", False)]:
        viewer = Session(user=user, role=role)
        await viewer.start()
        await viewer.send("/知识库")
        overview = answer_of(viewer)["output"]
        assert ("`bash scripts/worker.sh`" in overview) is hinted, (role, overview)
        assert ("管理员提示：有 1 个导入任务" in overview) is hinted
    start_in_app_worker()  # a worker comes up: the queued file is imported, nothing was lost
    assert (await s.wait_imports(1))[-1]["output"].startswith("✅ 《duos.md》导入完成")


async def test_an_import_that_crashes_still_ends_its_message(own_data, monkeypatch):
    def disk_full(*args, **kwargs):
        raise OSError(28, "No space left on device")
    monkeypatch.setattr("ui.attachments.stage_attachment", disk_full)
    s = Session()
    await s.start()
    await s.send("", [DUOS])
    message = (await s.wait_imports(1))[0]
    assert message["output"].startswith("❌ 《duos.md》导入失败：导入出错：") and "No space left" in message["output"]


async def test_two_sessions_while_an_import_runs(own_data, product_of):
    run_import(DUOS)
    a, b = Session(), Session()
    await asyncio.gather(a.start(), b.start())
    upload = asyncio.create_task(a.send("", [DUO]))
    await a.wait_for(lambda: any("⏳ " in m["output"].split("\n", 2)[-1] for m in a.import_messages()))
    asked_at = time.perf_counter()
    await b.send("Duo S 的 USB 接口有什么用？")
    await upload
    done = (await a.wait_imports(1))[0]
    assert done["output"].startswith("✅ 《duo.md》导入完成")
    a_done_at = max(t for t, n, d in a.emitter.events if isinstance(d, dict) and d.get("id") == done["id"])
    b_steps_at = [t for t, n, d in b.emitter.events if n == "new_message" and d.get("name") in QUERY_LABELS]
    assert min(b_steps_at) < a_done_at and asked_at < a_done_at  # the chat answered during the import

    assert not a.node_steps() and not [m for m in b.replies() if "《" in m["output"]]  # no cross-talk
    assert all(d["threadId"] == a.thread_id for _, n, d in a.emitter.events if n in ("new_message", "update_message"))
    assert all(d["threadId"] == b.thread_id for _, n, d in b.emitter.events if n in ("new_message", "update_message"))
    assert f"已确认：{product_of['duos']}" in next(st["output"] for st in b.node_steps() if st["name"] == "产品确认")
    assert len([st for st in b.node_steps()]) == len(QUERY_LABELS)


async def test_resumed_thread_answers_a_follow_up_with_it(product_of):
    first = Session()
    await first.start()
    await first.send("Milk-V Duo S 怎么烧录系统镜像？")
    later = Session(thread_id=first.thread_id)  # a new connection to the same thread
    thread = {"id": first.thread_id, "name": "旧对话", "steps": [], "metadata": {}}
    await later.run(config.code.on_chat_resume, thread)
    assert any(n == "chat_settings" for _, n, _ in later.emitter.events)
    await later.send("它有几个 USB 接口？")
    confirm = next(st["output"] for st in later.node_steps() if st["name"] == "产品确认")
    assert f"已确认：{product_of['duos']}" in confirm and "判定方式：`history`" in confirm


async def test_a_chat_opened_with_another_users_session_id_gets_a_new_conversation(own_data):
    history = get_history_store()
    taken = uuid.uuid4().hex  # alice's API session, named by a browser as the thread to open
    assert history.claim(taken, "alice")
    history.add_message(taken, "user", "Alice 的问题")
    history.add_message(taken, "assistant", "Alice 的回答")
    before = history.recent(taken, 10)
    bob = Session(thread_id=taken, user="bob")
    await bob.start()
    fresh = bob.session.thread_id
    assert fresh != taken and len(fresh) == 36 and bob.session.thread_id_to_resume is None
    await bob.send("这个产品怎么用？")
    assert bob.replies(), "bob got no answer"
    assert history.recent(taken, 10) == before  # nothing read into or added to alice's conversation
    assert [m["text"] for m in history.recent(fresh, 10)][0] == "这个产品怎么用？"
    assert history.owner(fresh) == "bob" and history.owner(taken) == "alice"
    resumed = Session(thread_id=taken, user="bob")  # the same through a resume
    await resumed.run(config.code.on_chat_resume, {"id": taken, "name": "x", "steps": [], "metadata": {}})
    assert resumed.session.thread_id not in (taken, fresh)
    alice = Session(thread_id=taken, user="alice")  # its owner keeps it
    await alice.start()
    assert alice.session.thread_id == taken


def test_upload_settings_take_manuals_only_up_to_the_cap():
    """Chainlit checks uploads against .chainlit/config.toml before a handler sees them."""
    from chainlit.server import validate_file_upload
    from starlette.datastructures import Headers, UploadFile

    cap = get_settings().max_upload_mb
    assert config.features.spontaneous_file_upload.max_size_mb == cap
    assert config.features.spontaneous_file_upload.max_files == MAX_FILES  # one message, one set

    def upload(name: str, mime: str, size: int = 10) -> UploadFile:
        return UploadFile(io.BytesIO(b"x"), filename=name, size=size, headers=Headers({"content-type": mime}))
    for name, mime in [("site.zip", "application/zip"), ("site.zip", "application/x-zip-compressed"),
                       ("site.tar.gz", "application/gzip"), ("site.tar.gz", "application/octet-stream"),
                       ("a.md", "text/markdown"), ("a.md", "application/octet-stream"),
                       ("a.PDF", "application/pdf"), ("a.markdown", "text/x-markdown"),
                       ("a.docx", "application/vnd.openxmlformats-officedocument.wordprocessingml.document"),
                       ("a.docx", "application/octet-stream"), ("a.html", "text/html"), ("a.HTM", "text/html"),
                       ("a.txt", "text/plain")]:
        validate_file_upload(upload(name, mime))
    for name, mime in [("a.png", "image/png"), ("a.rar", "application/octet-stream"),
                       ("a.csv", "text/csv"), ("a.exe", "application/octet-stream"), ("a.doc", "application/msword"),
                       ("a.js", "text/javascript"), ("a.html", "text/plain")]:
        with pytest.raises(ValueError, match="File type not allowed"):
            validate_file_upload(upload(name, mime))
    with pytest.raises(ValueError, match="File size too large"):
        validate_file_upload(upload("a.pdf", "application/pdf", size=cap * 1024 * 1024 + 1))


# -- start-up -------------------------------------------------------------------------------
async def test_startup_leaves_another_process_s_running_import_alone(own_data):
    tasks = get_task_store()
    tasks.create("left-running", "duo.md")
    tasks.start("left-running", lease_s=60)  # another replica or worker is on it right now
    tasks.create("finished", "duos.md")
    tasks.complete("finished", {"chunks": 1})
    await config.code.on_app_startup()
    assert tasks.get("left-running")["status"] == "processing" and tasks.get("left-running")["error"] == ""
    assert tasks.get("finished")["status"] == "completed"
    await config.code.on_app_shutdown()


async def test_startup_survives_an_unavailable_queue(monkeypatch, caplog):
    def unavailable():
        raise StorageError("任务无法加入队列（测试注入）")
    monkeypatch.setattr(app, "start_in_app_worker", unavailable)
    await config.code.on_app_startup()
    assert "无法启动导入队列" in caplog.text and "测试注入" in caplog.text


# -- login ----------------------------------------------------------------------------------
async def test_password_login(env, tmp_path):
    login = config.code.password_auth_callback
    settings = env(ADMIN_PASSWORD="from-env-pass", LOGIN_DELAY_S=0)
    admin = await login("admin", "from-env-pass")
    assert admin.identifier == "admin" and admin.metadata["role"] == "admin"
    assert await login("admin", "wrong") is None
    assert parse_credentials("alice:s3cret, bob:pa:ss ,broken,:x", "AUTH_USERS") == [
        ("alice", "s3cret", "editor"), ("bob", "pa:ss", "editor")]
    assert parse_credentials("rita:pw:reader,ann:a:b:admin", "AUTH_USERS") == [
        ("rita", "pw", "reader"), ("ann", "a:b", "admin")]
    settings = env(AUTH_USERS="alice:s3cret,rita:pw:reader")
    assert (await check_login(settings, "alice", "s3cret")).role == "editor"
    assert (await login("rita", "pw")).metadata["role"] == "reader"
    assert await check_login(settings, "admin", "admin") is None
    assert await check_login(settings, "nobody", "") is None


async def test_no_shared_default_password_one_is_generated_and_printed_once(env, tmp_path, capsys):
    settings = env(DATA_DIR=str(tmp_path / "data"), ADMIN_PASSWORD="", LOGIN_DELAY_S=0)
    assert await check_login(settings, "admin", "admin") is None  # the old shared default is gone
    announce_admin_password(settings)
    printed = capsys.readouterr().out
    password = printed.split("密码 ")[1].split()[0]
    assert len(password) >= 16
    stored = (settings.data_dir / ADMIN_HASH_FILE).read_text()
    assert stored.startswith("scrypt$") and password not in stored  # only a hash is kept
    assert (await check_login(settings, "admin", password)).role == "admin"
    announce_admin_password(settings)  # a restart: nothing new is generated or shown
    assert capsys.readouterr().out == ""
    assert (await check_login(settings, "admin", password)).name == "admin"


async def test_wrong_passwords_slow_down_then_lock_even_the_right_one(env, tmp_path):
    settings = env(DATA_DIR=str(tmp_path / "data"), ADMIN_PASSWORD="right-pass", AUTH_USERS="eve:evepass",
                   LOGIN_MAX_FAILURES=4, LOGIN_LOCK_S=1.5, LOGIN_DELAY_S=0.05)
    waits = []
    for _ in range(3):
        started = time.perf_counter()
        assert await check_login(settings, "admin", "guess", "10.0.0.9") is None
        waits.append(time.perf_counter() - started)
    assert waits[0] >= 0.05 and waits[1] >= 0.1 and waits[2] >= 0.2  # each failure waits longer
    assert await check_login(settings, "admin", "guess", "10.0.0.9") is None  # the 4th: locked
    assert await check_login(settings, "admin", "right-pass", "10.0.0.7") is None  # the name is locked
    assert await check_login(settings, "eve", "evepass", "10.0.0.9") is None  # and so is the address
    assert (await check_login(settings, "eve", "evepass", "10.0.0.8")).name == "eve"  # others are not
    time.sleep(1.6)
    assert (await check_login(settings, "admin", "right-pass", "10.0.0.9")).name == "admin"  # the lock ends


async def test_login_page_asks_for_a_user_name_and_strangers_get_no_cors():
    transport = httpx.ASGITransport(app=app.chainlit_app)
    async with httpx.AsyncClient(transport=transport, base_url="http://app") as client:
        labels = (await client.get("/project/translations", params={"language": "zh-CN"})).json()
        form = labels["translation"]["auth"]["login"]["form"]["email"]
        assert form["label"] == "用户名" and "@" not in form["placeholder"]
        for method in ("GET", "OPTIONS"):
            reply = await client.request(method, "/api/health", headers={
                "Origin": "https://evil.example.com", "Access-Control-Request-Method": "GET"})
            assert "access-control-allow-origin" not in reply.headers, reply.headers
            assert "access-control-allow-credentials" not in reply.headers


async def test_an_empty_attachment_is_said_to_be_empty_not_upload_failed():
    from chainlit.auth import create_jwt

    token = create_jwt(User(identifier="tester", metadata={"provider": "credentials", "role": "editor"}))
    transport = httpx.ASGITransport(app=app.chainlit_app)
    async with httpx.AsyncClient(transport=transport, base_url="http://app",
                                 cookies={"access_token": token}) as client:
        empty = await client.post("/project/file", params={"session_id": "s-1"},
                                  files={"file": ("空.pdf", b"", "application/pdf")})
        # the browser's toast puts the file's name in front ("上传失败 空.pdf: …"): said once, not twice
        assert empty.status_code == 400 and empty.json()["detail"] == "文件是空的（0 字节），没有可导入的内容。"
        # anything else is Chainlit's own route, unchanged: here, no such chat session
        other = await client.post("/project/file", params={"session_id": "s-1"},
                                  files={"file": ("a.pdf", b"%PDF-1.4", "application/pdf")})
        assert other.status_code == 404 and other.json()["detail"] == "Session not found"
        stranger = await client.post("/project/file", params={"session_id": "s-1"}, cookies={"access_token": "x"},
                                     files={"file": ("空.pdf", b"", "application/pdf")})
        assert stranger.status_code == 401


async def test_a_reader_cannot_import_or_rename_in_the_chat(own_data, tmp_path):
    manual = tmp_path / "manual.md"
    manual.write_text("# 手册\n\n正文内容。", encoding="utf-8")
    s = Session(user="rita", role="reader")
    await s.start()
    await s.send("", [manual])
    refused = [r["output"] for r in s.replies()]
    assert refused and "只读角色" in refused[-1]
    await s.click({"name": "rename_product", "payload": {"upload": "x"}, "label": "修改商品名", "id": "a1",
                   "forId": "m1"})
    assert "只读角色" in s.replies()[-1]["output"]
    assert not list((get_settings().data_dir / "uploads").rglob("*.*")) and get_vector_store().count() == 0


def test_auth_secret_is_generated_once_and_kept(env, monkeypatch, tmp_path):
    monkeypatch.delenv("CHAINLIT_AUTH_SECRET", raising=False)
    first = ensure_auth_secret(tmp_path)
    assert len(first) > 40 and (tmp_path / ".chainlit_secret").read_text() == first
    monkeypatch.delenv("CHAINLIT_AUTH_SECRET")
    assert ensure_auth_secret(tmp_path) == first  # a restart keeps logins valid
    monkeypatch.setenv("CHAINLIT_AUTH_SECRET", "from-env")
    assert ensure_auth_secret(tmp_path / "other") == "from-env"
    assert not (tmp_path / "other").exists()


# -- the data layer -------------------------------------------------------------------------
async def test_data_layer_threads_steps_feedback(own_data):
    await Session().run(data_layer_round_trip)  # Chainlit's write queue looks at the session


async def data_layer_round_trip():
    layer = HistoryDataLayer()
    user = await layer.create_user(User(identifier="alice", metadata={"provider": "credentials"}))
    assert (await layer.get_user("alice")).id == user.id
    assert (await layer.create_user(User(identifier="alice"))).id == user.id  # stable id
    assert await layer.get_user("nobody") is None

    threads = [str(uuid.uuid4()) for _ in range(3)]
    for i, tid in enumerate(threads):
        await layer.update_thread(tid, name=f"对话 {i}", user_id=user.id, metadata={"session_id": tid})
        await asyncio.sleep(0.002)
    await layer.update_thread(threads[0], metadata={"chat_settings": {"hyde": False}})
    step = {"id": "s1", "threadId": threads[0], "type": "assistant_message", "name": "掌柜智库",
            "output": "旧", "createdAt": "2026-01-01T00:00:01Z", "metadata": {}}
    # an update overtaking its create keeps the newer content
    await layer.update_step({**step, "output": "新"})
    await layer.create_step(step)
    await layer.create_step({**step, "id": "s0", "type": "user_message", "output": "问题",
                             "createdAt": "2026-01-01T00:00:00Z"})
    feedback_id = await layer.upsert_feedback(Feedback(forId="s1", threadId=threads[0], value=1, comment="好"))

    text = cl.Text(name="[1] 标题", content="**文件**：x", display="side", for_id="s1", thread_id=threads[0])
    await layer.create_element(text)

    thread = await layer.get_thread(threads[0])
    assert thread["userIdentifier"] == "alice" and thread["name"] == "对话 0"
    assert thread["metadata"] == {"session_id": threads[0], "chat_settings": {"hyde": False}}
    assert [s["output"] for s in thread["steps"]] == ["问题", "新"]
    assert thread["steps"][1]["feedback"]["value"] == 1 and thread["steps"][1]["feedback"]["id"] == feedback_id
    element = thread["elements"][0]
    assert element["url"].startswith("data:text/plain;charset=utf-8;base64,") and "content" not in element
    assert (await layer.get_element(threads[0], text.id))["name"] == "[1] 标题"
    assert await layer.get_thread_author(threads[0]) == "alice"
    # the thread's user owns its session for the API too: nobody else can claim it
    assert get_history_store().owner(threads[0]) == "alice"
    assert not get_history_store().claim(threads[0], "bob")

    page = await layer.list_threads(Pagination(first=2), ThreadFilter(userId=user.id))
    assert [t["id"] for t in page.data] == [threads[2], threads[1]] and page.pageInfo.hasNextPage
    rest = await layer.list_threads(Pagination(first=2, cursor=page.pageInfo.endCursor), ThreadFilter(userId=user.id))
    assert [t["id"] for t in rest.data] == [threads[0]] and not rest.pageInfo.hasNextPage
    rated = await layer.list_threads(Pagination(first=10), ThreadFilter(userId=user.id, feedback=1))
    assert [t["id"] for t in rated.data] == [threads[0]]
    found = await layer.list_threads(Pagination(first=10), ThreadFilter(userId=user.id, search="对话 1"))
    assert [t["id"] for t in found.data] == [threads[1]]
    assert (await layer.list_threads(Pagination(first=10), ThreadFilter(userId="someone-else"))).data == []

    await layer.update_thread(threads[1], name="改过的名字")  # rename from the sidebar
    assert (await layer.get_thread(threads[1]))["name"] == "改过的名字"
    assert await layer.delete_feedback(feedback_id)
    assert "feedback" not in (await layer.get_thread(threads[0]))["steps"][1]

    await layer.set_step_favorite({**step, "output": "新"}, True)
    assert [s["id"] for s in await layer.get_favorite_steps(user.id)] == ["s1"]

    history = get_history_store()
    history.add_message(threads[0], "user", "问题")
    await layer.delete_thread(threads[0])
    assert await layer.get_thread(threads[0]) is None
    assert history.recent(threads[0], 5) == []  # the query graph's history of the thread goes too
    await layer.delete_thread(str(uuid.uuid4()))  # unknown thread: nothing to do, no error
    await layer.delete_step("s0")
