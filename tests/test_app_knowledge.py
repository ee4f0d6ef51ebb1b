"""The knowledge base in the chat, driven through the real Chainlit handlers (see test_app_handlers):
an upload of several files as one set with its summary, the `/知识库` view and every change made
from it. Below the UI everything is real: import graph, Milvus Lite, registry, object store."""
from __future__ import annotations

import hashlib
import re
import time

from chainlit.chat_context import chat_context
from chainlit.config import config

import chainlit as cl
from bench.cluster import free_port
from bench.shared import CORPUS
from conftest import CORPUS_DOCS
from graphs.importing import catalog, run_import
from services.settings import get_settings
from services.task_store import get_task_store
from services.vector_store import get_vector_store
from test_app_handlers import Session, own_data  # noqa: F401  (fixture)
from ui import knowledge
from ui.format import CHUNK_PAGE as PAGE

DUO, DUOS = CORPUS_DOCS[0], CORPUS_DOCS[2]
MILKV = CORPUS / "milkv-docs"
READER_REFUSED = "❌ 账号“rita”是只读角色，不能导入或修改说明书；请联系管理员。"
# Two products whose overview pages name them in their titles, and a page that names neither.
MARS, JUPITER, GPIO = (MILKV / "mars" / "overview.md", MILKV / "jupiter" / "overview.md",
                       MILKV / "mars" / "getting-started" / "gpio.md")


def buttons(s: Session, label: str | None = None) -> list[dict]:
    """Buttons still on screen (optionally those with this label)."""
    removed = {d["id"] for _, n, d in s.emitter.events if n == "remove_action"}
    return [d for _, n, d in s.emitter.events
            if n == "action" and d["id"] not in removed and (label is None or d["label"] == label)]


def under(s: Session, message: dict) -> list[str]:
    return [b["label"] for b in buttons(s) if b["forId"] == message["id"]]


async def reply(s: Session, prefix: str, after: int = 0) -> dict:
    """The first assistant message from the `after`-th on that starts with `prefix`, once it does."""
    def found():
        return next((r for r in s.replies()[after:] if r.get("output", "").startswith(prefix)), None)
    await s.wait_for(found)
    return found()


async def click(s: Session, label: str, prefix: str) -> dict:
    """Click the newest button with this label; the message its work ends with."""
    target = buttons(s, label)[-1]
    seen = len(s.replies())
    started = time.perf_counter()
    await s.click(target)
    assert time.perf_counter() - started < 1.0  # the callback returned at once: the composer is free
    return await reply(s, prefix, seen)


async def command(s: Session, name: str) -> None:
    """A message sent with a composer command selected and no text."""
    async def send():
        message = cl.Message(content="", author="tester", type="user_message")
        message.command = name
        chat_context.add(message)
        await config.code.on_message(message)
    await s.run(send)


def product_names() -> list[str]:
    return [p["product"] for p in catalog.products()]


async def test_several_attachments_are_one_set_with_one_summary(own_data):
    s = Session(replies=[{"output": "Milk-V Mars"}, {"output": "Milk-V Jupiter 开发板"}, {"output": "Milk-V Jupiter 开发板"}])
    await s.start()
    await s.send("", [MARS, JUPITER, GPIO])
    summary = await reply(s, "识别为")
    lines = summary["output"].split("\n")
    assert lines[0] == "识别为 2 个产品：Milk-V Mars（2 个文件）、Milk-V Jupiter（1 个文件）"
    assert "- 《gpio.md》未写明产品，暂归入 Milk-V Mars，请确认" in lines
    assert len([r for r in s.replies() if r["output"].startswith("识别为")]) == 1  # one summary per set
    done = [m["output"].split("》")[0] for m in s.import_messages() if m["output"].startswith("✅")]
    assert sorted(done) == ["✅ 《gpio.md", "✅ 《overview.md", "✅ 《overview.md"]  # a progress message per file
    assert under(s, summary) == ["接受", "改名：Milk-V Mars", "改名：Milk-V Jupiter", "移动《overview.md》（Milk-V Mars）",
                                 "移动《overview.md》（Milk-V Jupiter）", "移动《gpio.md》（Milk-V Mars）"]
    assert sorted(product_names()) == ["Milk-V Jupiter", "Milk-V Mars"]
    gpio = next(d for d in catalog.documents() if d["file_name"] == "gpio.md")

    # move the unsure page: a button per candidate product, and "其他"
    chooser = await click(s, "移动《gpio.md》（Milk-V Mars）", "把《gpio.md》")
    assert chooser["output"] == "把《gpio.md》（现属“Milk-V Mars”）移到哪个产品？"
    assert chooser["parentId"] == summary["id"]  # next to the button, not somewhere below
    assert under(s, chooser) == ["Milk-V Jupiter", "其他…"]
    moved = await click(s, "Milk-V Jupiter", "✅ 已把《gpio.md》移到")
    assert moved["output"].startswith("✅ 已把《gpio.md》移到“Milk-V Jupiter”（")
    assert not under(s, chooser)
    assert catalog.document(gpio["doc_id"])["product"] == "Milk-V Jupiter"
    assert {r["product"] for r in get_vector_store().doc_rows(gpio["doc_id"])} == {"Milk-V Jupiter"}

    # renaming onto an existing product asks first, and a cancel changes nothing
    ask_merge = await click(s, "改名：Milk-V Jupiter", "产品“Milk-V Mars”已经存在")
    ask = next(d for _, n, d in s.emitter.events if n == "ask")
    assert ask["output"] == "请输入“Milk-V Jupiter”的新产品名：" and ask["parentId"] == summary["id"]
    assert under(s, ask_merge) == ["合并到“Milk-V Mars”", "取消"]
    assert sorted(product_names()) == ["Milk-V Jupiter", "Milk-V Mars"]
    await click(s, "取消", "已取消，知识库没有变化。")
    assert sorted(product_names()) == ["Milk-V Jupiter", "Milk-V Mars"]

    renamed = await click(s, "改名：Milk-V Jupiter", "✅ 已把")
    assert renamed["output"] == "✅ 已把“Milk-V Jupiter”改名为“Milk-V Jupiter 开发板”：2 份文档、" \
                                f"{sum(d['chunks'] for d in catalog.documents('Milk-V Jupiter 开发板'))} 个切片已更新。"
    assert sorted(product_names()) == ["Milk-V Jupiter 开发板", "Milk-V Mars"]
    assert {r["product"] for r in get_vector_store().products()} == {"Milk-V Jupiter 开发板", "Milk-V Mars"}
    # starters follow the catalogue at once, real names only
    starters = await config.code.set_starters(None)
    assert [st.label for st in starters] == ["Milk-V Jupiter 开发板 快速上手", "Milk-V Mars 快速上手"]

    # a button of a product renamed since says so, and asks nothing
    asked = len([1 for _, n, _ in s.emitter.events if n == "ask"])
    await click(s, "改名：Milk-V Jupiter", "❌ 产品不存在：Milk-V Jupiter")
    assert len([1 for _, n, _ in s.emitter.events if n == "ask"]) == asked
    # a merge on purpose: the name of a product that exists, confirmed
    await click(s, "改名：Milk-V Mars", "产品“Milk-V Jupiter 开发板”已经存在")
    merged = await click(s, "合并到“Milk-V Jupiter 开发板”", "✅ 已把")
    assert merged["output"].startswith("✅ 已把“Milk-V Mars”并入“Milk-V Jupiter 开发板”：1 份文档、")
    assert product_names() == ["Milk-V Jupiter 开发板"] and len(catalog.documents("Milk-V Jupiter 开发板")) == 3
    assert {r["product"] for r in get_vector_store().products()} == {"Milk-V Jupiter 开发板"}

    await click(s, "接受", "好的，已按识别结果保存。")
    assert not under(s, summary)  # every button of the summary is gone


async def test_the_knowledge_base_view_lists_shows_and_changes(own_data):
    run_import(DUO)
    run_import(DUOS)
    s = Session(replies=[{"output": "Duo S 小板"}])
    await s.start()
    assert [d for _, n, d in s.emitter.events if n == "set_commands"] == [{"commands": knowledge.COMMANDS}]
    await command(s, knowledge.COMMAND)
    overview = await reply(s, "## 📚 知识库：2 个产品，2 份文档")
    docs = {d["file_name"]: d for d in catalog.documents()}
    for name, product in (("duo.md", "Milk-V Duo"), ("duos.md", "Milk-V Duo S")):
        assert f"### {product}（1 份文档，{docs[name]['chunks']} 个切片）" in overview["output"]
        assert f"| {name} | ✅ 可用 | — | {docs[name]['chunks']} |" in overview["output"]
        assert overview["output"].count("| 本地文件 |") == 2
    assert under(s, overview) == ["管理：Milk-V Duo", "管理：Milk-V Duo S", "重建索引"]

    product = await click(s, "管理：Milk-V Duo", "### Milk-V Duo")
    assert "| duo.md | ✅ 可用 |" in product["output"] and "duos.md" not in product["output"]
    assert under(s, product) == ["《duo.md》", "改名", "删除产品"]

    # a document's chunks: heading path, text, pictures; a page at a time
    page = await click(s, "《duo.md》", "### 《duo.md》")
    chunks = catalog.document_chunks(docs["duo.md"]["doc_id"])
    assert f"切片：{len(chunks)} 个" in page["output"] and f"第 1–{PAGE} 个，共 {len(chunks)} 个。" in page["output"]
    heading = next(line for line in page["output"].split("\n") if line.startswith("**1. "))
    assert chunks[0]["title"] in heading
    text = " ".join(re.sub(r"!\[[^\]]*\]\([^)]*\)", "🖼", chunks[0]["content"]).split())
    assert f"> {text[:40]}" in page["output"]  # its text on one line, a picture marked where it was
    assert f"**{PAGE + 1}. " not in page["output"]
    pictures = [e for e in s.elements(page["id"]) if e["type"] == "image"]
    assert pictures and {e["url"] for e in pictures} <= {u for c in chunks[:PAGE] for u in c["images"]}
    assert under(s, page) == ["下一页", "移到别的产品", "重新导入", "删除"]
    second = await click(s, "下一页", "### 《duo.md》")
    assert f"**{PAGE + 1}. " in second["output"] and "**1. " not in second["output"]

    # re-import one document from its stored original
    before = catalog.document(docs["duo.md"]["doc_id"])
    [again] = [b for b in buttons(s, "重新导入") if b["forId"] == page["id"]]
    await s.click(again)
    done = await reply(s, "✅ 《duo.md》导入完成")
    assert "商品名：**Milk-V Duo**" in done["output"] and "修改商品名" not in done["output"]
    after = catalog.document(docs["duo.md"]["doc_id"])
    assert after["chunks"] == before["chunks"] and after["imported_at"] > before["imported_at"]

    # reindex everything, with progress in one message
    [reindex] = buttons(s, "重建索引")
    await s.click(reindex)
    ask = await reply(s, "重建索引会按原件重新导入全部 2 份文档")
    finished = await click(s, "开始重建", "✅ 重建索引完成")
    assert finished["output"] == "✅ 重建索引完成：共 2 份文档，成功 2 份。"
    updates = [d["output"] for _, n, d in s.emitter.events if n == "update_message" and d["id"] == finished["id"]]
    assert any(u.startswith("⏳ 正在重建索引……") and "重新导入 2/2" in u for u in updates)
    assert not under(s, ask)
    # both ran as tasks on the queue (the documents' own imports are tasks without a job)
    queued = sorted((t for t in get_task_store().list() if t.get("job")), key=lambda t: t["created"])
    assert [(t["job"]["kind"], t["status"], t["attempts"]) for t in queued] == [
        ("reimport", "completed", 1), ("reindex", "completed", 1)]
    assert queued[0]["result"]["doc_id"] == docs["duo.md"]["doc_id"]

    # delete one document after a confirmation: the other keeps every count
    store = get_vector_store()
    kept = catalog.document(docs["duos.md"]["doc_id"])
    kept_rows = len(store.doc_rows(kept["doc_id"]))
    [delete] = [b for b in buttons(s, "删除") if b["forId"] == page["id"]]
    await s.click(delete)
    confirm = await reply(s, "确定删除《duo.md》吗？")
    assert catalog.document(docs["duo.md"]["doc_id"])  # nothing gone before the confirmation
    gone = await click(s, "确认删除", "🗑️ 已删除《duo.md》")
    assert gone["output"] == f"🗑️ 已删除《duo.md》（{docs['duo.md']['chunks']} 个切片）。"
    assert not under(s, confirm)
    assert [d["doc_id"] for d in catalog.documents()] == [kept["doc_id"]]
    assert catalog.document(kept["doc_id"])["chunks"] == kept["chunks"] and len(store.doc_rows(kept["doc_id"])) == kept_rows

    # rename and delete a product from the view
    await command(s, knowledge.COMMAND)
    await reply(s, "## 📚 知识库：1 个产品，1 份文档", len(s.replies()) - 1)
    await click(s, "管理：Milk-V Duo S", "### Milk-V Duo S")
    renamed = await click(s, "改名", "✅ 已把")
    assert renamed["output"].startswith("✅ 已把“Milk-V Duo S”改名为“Duo S 小板”：1 份文档、")
    assert product_names() == ["Duo S 小板"]
    await s.send("/知识库")  # typed instead of picked from the composer
    await reply(s, "## 📚 知识库：1 个产品，1 份文档", len(s.replies()) - 1)
    await click(s, "管理：Duo S 小板", "### Duo S 小板")
    await click(s, "删除产品", "确定删除产品“Duo S 小板”的全部 1 份文档吗？")
    await click(s, "确认删除", "🗑️ 已删除产品“Duo S 小板”（1 份文档）。")
    assert catalog.documents() == [] and store.count() == 0
    await click(s, "查看知识库", "📚 知识库还是空的")


async def test_a_reader_sees_the_knowledge_base_but_cannot_change_it(own_data):
    run_import(DUOS)
    doc_id = catalog.documents()[0]["doc_id"]
    s = Session(user="rita", role="reader")
    await s.start()
    await command(s, knowledge.COMMAND)
    overview = await reply(s, "## 📚 知识库：1 个产品，1 份文档")
    assert under(s, overview) == ["管理：Milk-V Duo S"]  # no reindex
    product = await click(s, "管理：Milk-V Duo S", "### Milk-V Duo S")
    assert under(s, product) == ["《duos.md》"]  # no rename, no delete
    page = await click(s, "《duos.md》", "### 《duos.md》")
    assert "删除" not in under(s, page)
    for name, payload in ((knowledge.CONFIRM, {"op": "delete_doc", "doc": doc_id}),
                          (knowledge.RENAME, {"product": "Milk-V Duo S"}), (knowledge.REINDEX, {})):
        seen = len(s.replies())
        await s.click({"name": name, "payload": payload, "label": "x", "id": "forged", "forId": page["id"]})
        await reply(s, READER_REFUSED, seen)
    assert [d["doc_id"] for d in catalog.documents()] == [doc_id] and product_names() == ["Milk-V Duo S"]
    assert not [d for _, n, d in s.emitter.events if n == "ask"]
    await s.send("", [DUO])
    await reply(s, READER_REFUSED, len(s.replies()) - 1)
    assert [d["doc_id"] for d in catalog.documents()] == [doc_id]


async def test_refused_changes_say_why_and_change_nothing(own_data):
    run_import(DUOS)
    doc_id = catalog.documents()[0]["doc_id"]
    s = Session(replies=[{"output": "  "}, {"output": "Milk-V Duo S"}, {"output": "长" * 200}, None])
    await s.start()
    await command(s, knowledge.COMMAND)
    await reply(s, "## 📚 知识库")
    await click(s, "管理：Milk-V Duo S", "### Milk-V Duo S")
    await click(s, "改名", "没有收到新的产品名，保持原样。")
    await click(s, "改名", "产品名没有变化。")
    too_long = await click(s, "改名", "❌ 产品名太长")
    assert "请不要超过" in too_long["output"] and under(s, too_long) == ["查看知识库"]
    page = await click(s, "《duos.md》", "### 《duos.md》")
    chooser = await click(s, "移到别的产品", "把《duos.md》")
    assert under(s, chooser) == ["其他…"]  # no other product to offer
    await click(s, "其他…", "没有收到产品名，保持原样。")
    assert product_names() == ["Milk-V Duo S"]

    catalog.delete_document(doc_id)  # the page is stale now
    for label, message in (("重新导入", f"❌ 文档不存在：{doc_id}"), ("删除", f"❌ 文档不存在：{doc_id}")):
        [target] = [b for b in buttons(s, label) if b["forId"] == page["id"]]
        seen = len(s.replies())
        await s.click(target)
        await reply(s, message, seen)
    seen = len(s.replies())
    await s.click({"name": knowledge.CONFIRM, "payload": {"op": "drop-everything"}, "label": "x", "id": "odd",
                   "forId": page["id"]})
    await reply(s, "❌ 无法识别的操作。", seen)


async def test_a_storage_fault_during_a_change_is_said_and_loses_nothing(own_data, monkeypatch):
    from services.errors import MilvusError
    from services.vector_store import VectorStore

    run_import(DUOS)
    record = catalog.documents()[0]
    fault: list[Exception] = []
    original = VectorStore._call

    def failing(self, what, fn, *args, **kwargs):
        if what == "删除文档" and fault:
            raise fault[0]
        return original(self, what, fn, *args, **kwargs)
    monkeypatch.setattr(VectorStore, "_call", failing)
    s = Session()
    await s.start()
    delete = {"name": knowledge.CONFIRM, "payload": {"op": "delete_doc", "doc": record["doc_id"]}, "label": "确认删除",
              "id": "confirm", "forId": "nowhere"}
    for exc, said in ((MilvusError("删除文档失败（测试注入）"), "❌ 删除文档失败（测试注入）"),
                      (OSError(5, "Input/output error"), "❌ 知识库操作失败：[Errno 5] Input/output error")):
        fault[:] = [exc]
        seen = len(s.replies())
        await s.click(delete)
        await reply(s, said, seen)
        assert catalog.document(record["doc_id"])["chunks"] == record["chunks"]
        assert len(get_vector_store().doc_rows(record["doc_id"])) == record["chunks"]


async def test_a_set_with_a_refused_file_imports_the_rest(own_data, tmp_path, monkeypatch):
    notes = tmp_path / "notes.csv"
    notes.write_text("不是说明书", encoding="utf-8")
    s = Session()
    await s.start()
    await s.send("", [notes, DUOS])
    summary = await reply(s, "识别为")
    assert summary["output"].split("\n")[0] == "识别为 1 个产品：Milk-V Duo S（1 个文件）"
    messages = {m["output"].split("》")[0]: m["output"] for m in s.import_messages()}
    assert "不支持的文件类型" in messages["❌ 《notes.csv"] and "✅ 《duos.md" in messages
    assert [d["file_name"] for d in catalog.documents()] == ["duos.md"]

    def disk_full(*args, **kwargs):  # queueing the set breaks down
        raise OSError(28, "No space left on device")
    monkeypatch.setattr("ui.attachments.enqueue_set", disk_full)
    seen = len(s.replies())
    await s.send("", [DUO, DUOS])
    await s.wait_for(lambda: len([m for m in s.import_messages()[-2:] if m["output"].startswith("❌")]) == 2)
    assert all("导入出错：[Errno 28] No space left" in m["output"] for m in s.import_messages()[-2:])
    assert not [r for r in s.replies()[seen:] if r["output"].startswith("识别为")]  # nothing imported, no summary
    staged = sorted(p.name for p in (get_settings().data_dir / "uploads").rglob("*.md"))
    assert staged == ["duos.md"]  # the first set's file stays (its button may import it again), the broken set's went


async def test_a_queue_that_refuses_a_reimport_or_a_reindex_says_so_and_changes_nothing(own_data, env):
    run_import(DUOS)
    record = catalog.documents()[0]
    env(REDIS_URL=f"redis://127.0.0.1:{free_port()}/0")  # the queue: nothing listens there
    s = Session()
    await s.start()
    await s.click({"name": knowledge.REIMPORT, "payload": {"doc": record["doc_id"]}, "label": "重新导入", "id": "r",
                   "forId": "x"})
    failed = await reply(s, "❌ 《duos.md》无法重新导入：")
    assert "任务无法加入队列（Redis不可用）" in failed["output"]
    seen = len(s.replies())
    await s.click({"name": knowledge.CONFIRM, "payload": {"op": "reindex"}, "label": "开始重建", "id": "c", "forId": "x"})
    refused = await reply(s, "❌ 重建索引没有开始：", seen)
    assert "任务无法加入队列（Redis不可用）" in refused["output"] and under(s, refused) == ["查看知识库"]
    assert [t["status"] for t in get_task_store().list() if t.get("job")] == ["failed"] * 2
    assert catalog.document(record["doc_id"])["imported_at"] == record["imported_at"]
    assert len(get_vector_store().doc_rows(record["doc_id"])) == record["chunks"]


async def test_a_document_without_its_original_cannot_be_reimported(own_data):
    from services.documents import get_document_registry

    run_import(DUOS)
    doc_id = catalog.documents()[0]["doc_id"]
    get_document_registry().delete(doc_id)  # chunks left without a record: the repair recovers one, no original
    assert catalog.repair()["recovered"] == 1
    s = Session()
    await s.start()
    await s.click({"name": knowledge.REIMPORT, "payload": {"doc": doc_id}, "label": "重新导入", "id": "r", "forId": "x"})
    failed = await reply(s, "❌ 《duos")
    assert failed["output"] == "❌ 《duos》无法重新导入：这份文档没有保存原件，请重新上传。"
    assert catalog.document(doc_id)["chunks"] == len(get_vector_store().doc_rows(doc_id))


async def test_a_big_set_offers_to_move_only_its_unsure_files():
    items = [{"file": f"page{n}.md", "product": "Milk-V Mars", "how": "named", "doc_id": f"d{n}"} for n in range(11)]
    items[4] = {**items[4], "how": "weak"}
    s = Session()
    await s.run(knowledge.send_set_summary, items)
    summary = s.replies()[-1]
    assert summary["output"].split("\n")[0] == "识别为 1 个产品：Milk-V Mars（11 个文件）"
    assert under(s, summary) == ["接受", "改名：Milk-V Mars", "移动《page4.md》（Milk-V Mars）"]
    await s.run(knowledge.send_set_summary, items[:10])  # up to ten files, each has its button
    assert len([b for b in under(s, s.replies()[-1]) if b.startswith("移动")]) == 10


def manifest_products() -> dict[str, str]:
    """Page path under the corpus -> its product, from the corpus MANIFEST."""
    rows = re.findall(r"^\| `(milkv-docs/[^`]+)` \| ([^|]+) \|$", (CORPUS / "MANIFEST.md").read_text(encoding="utf-8"), re.M)
    return {path: product.strip() for path, product in rows}


async def test_a_documentation_site_dropped_into_the_chat_groups_by_what_pages_say(own_data):
    """Rule: with no folders to go by, a page whose product the set recognised is in its MANIFEST
    product; a page it is unsure of is listed in the summary to be confirmed; three products."""
    expected = manifest_products()
    pages = [CORPUS / path for path in sorted(expected)]
    assert len(pages) == 33
    s = Session()
    await s.start()
    await s.send("", pages)
    summary = await reply(s, "识别为")
    assert summary["output"].startswith("识别为 3 个产品：")
    assert sorted(product_names()) == ["Milk-V Jupiter", "Milk-V Mars", "Milk-V Mars CM"]
    unsure = set(re.findall(r"^- 《([^》]+)》未写明产品，暂归入 (.+)，请确认$", summary["output"], re.M))
    records = {d["content_hash"]: d for d in catalog.documents()}
    assert len(records) == 33
    wrong = []
    for path, product in expected.items():
        record = records[hashlib.sha256((CORPUS / path).read_bytes()).hexdigest()]  # the upload of this page
        if (record["file_name"], record["product"]) not in unsure and record["product"] != product:
            wrong.append((path, record["product"], product))
    assert not wrong, wrong
    assert unsure  # some pages never name their product: they are asked about, not decided
    assert len(unsure) < len(pages) / 2  # ... and most do


def test_the_chunk_view_shows_a_table_as_a_table_within_its_budget():
    from ui.format import CHUNK_CHARS, chunk_page

    record = {"file_name": "lz-hub7.md", "product": "澜舟 LZ-Hub7", "status": "ready"}
    table = "| 引脚 | 功能 |\n|---|---|\n" + "".join(f"| GP{i} | UART 第 {i} 路 |\n" for i in range(60))
    chunks = [{"title": "引脚分配", "content": f"下表是排针的定义。\n\n{table}\n接线前请断电。", "part": 1}]
    page = chunk_page(record, chunks, 0)
    # rows on lines of their own (the chat renders a table), the prose quoted around it
    assert "> 下表是排针的定义。\n\n| 引脚 | 功能 |\n|---|---|\n| GP0 | UART 第 0 路 |\n| GP1 |" in page
    shown = [line for line in page.split("\n") if line.startswith("| GP")]
    assert 3 < len(shown) < 60 and sum(map(len, shown)) <= CHUNK_CHARS  # cut within the budget, and said so
    assert page.split("\n")[-1] == "…" and "接线前请断电" not in page
