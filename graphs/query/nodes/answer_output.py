"""node_answer_output: the answer, streamed, with pictures recovered from the sources.

Image URLs come from the reranked local sources only (their `url` when it is an image, and the
Markdown images in their content), never from the model's text (pitfall 14).
"""
from __future__ import annotations

import logging
import re

from graphs.base import emit, graph_node
from services.chat_model import get_chat_model, messages
from services.errors import LLMError
from services.history_store import get_history_store
from services.prompts import load_prompt
from services.settings import get_settings

log = logging.getLogger("query.node_answer_output")

IMAGE_SUFFIX = re.compile(r"\.(png|jpe?g|gif|webp|bmp|svg)(\?.*)?$", re.IGNORECASE)
MD_IMAGE = re.compile(r"!\[[^\]\n]*\]\(\s*<?([^)\s>]+)>?[^)]*\)")
IMAGE_MARK = "【图片】"
IMAGE_BLOCK = re.compile(r"\n*【图片】[\s\S]*$")
OFFLINE_NOTE = "（未配置大语言模型，以下是从说明书中直接摘录的相关内容。）"
EXCERPT_CHARS = 400


def image_urls(docs: list[dict]) -> list[str]:
    urls: list[str] = []
    for doc in docs:
        if doc.get("source", "local") != "local":
            continue
        if IMAGE_SUFFIX.search(doc.get("url") or ""):
            urls.append(doc["url"])
        urls.extend(MD_IMAGE.findall(doc.get("content") or ""))
    return list(dict.fromkeys(urls))


def format_source(i: int, doc: dict) -> str:
    return (f"[{i}][source={doc.get('source', 'local')}][chunk_id={doc.get('chunk_id', '')}]"
            f"[url={doc.get('url', '')}][title={doc.get('title', '')}][score={doc.get('score', 0.0):.4f}] "
            f"{doc.get('content', '')}")


def build_context(docs: list[dict], history: list[dict], budget: int) -> tuple[str, str, int]:
    """(sources, history) within one shared character budget: sources first and never cut in the
    middle; history gets what is left, newest turns kept (pitfall 13)."""
    used, parts, n_sources = 0, [], 0
    for i, doc in enumerate(docs, 1):
        block = format_source(i, doc)
        if used + len(block) > budget:
            break
        parts.append(block)
        used += len(block) + 2
        n_sources += 1
    turns: list[str] = []
    for msg in reversed(history):
        line = f"{'用户' if msg.get('role') == 'user' else '助手'}：{msg.get('text', '')}"
        if used + len(line) > budget:
            break
        turns.insert(0, line)
        used += len(line) + 1
    return "\n\n".join(parts), "\n".join(turns) or "（无）", n_sources


def strip_image_block(text: str) -> str:
    return IMAGE_BLOCK.sub("", text).rstrip()


def extractive_answer(docs: list[dict]) -> str:
    local = [d for d in docs if d.get("source", "local") == "local"][:3]
    if not local:
        return OFFLINE_NOTE + "\n\n没有找到相关内容。"
    lines = [OFFLINE_NOTE, ""]
    for i, doc in enumerate(local, 1):
        body = MD_IMAGE.sub("", doc.get("content", ""))
        body = re.sub(r"\n{2,}", "\n", body).strip()
        excerpt = body[:EXCERPT_CHARS] + ("……" if len(body) > EXCERPT_CHARS else "")
        quoted = "\n".join(f"> {line}" for line in excerpt.splitlines())
        lines += [f"**[{i}] {doc.get('title', '')}**（{doc.get('item_name', '')}）", quoted, ""]
    return "\n".join(lines).rstrip()


def visible_part(text: str) -> str:
    """What may be shown while streaming: never the model's own image block, nor the start of it."""
    cut = text.find(IMAGE_MARK)
    if cut >= 0:
        return text[:cut]
    for k in range(len(IMAGE_MARK) - 1, 0, -1):
        if text.endswith(IMAGE_MARK[:k]):
            return text[:-k]
    return text


def stream_answer(prompt_user: str) -> str:
    llm = get_chat_model()
    text, shown = "", 0
    try:
        for chunk in llm.stream(messages(load_prompt("answer_system"), prompt_user)):
            text += str(chunk.content or "")
            visible = visible_part(text)
            if len(visible) > shown:
                emit({"type": "delta", "delta": visible[shown:]})
                shown = len(visible)
    except Exception as exc:
        raise LLMError(f"回答生成中断：{exc}", cause=exc) from exc
    return text


def sources_of(docs: list[dict]) -> list[dict]:
    return [{"index": i, "source": d.get("source", "local"), "chunk_id": d.get("chunk_id", ""),
             "title": d.get("title", ""), "file_title": d.get("file_title", ""),
             "item_name": d.get("item_name", ""), "url": d.get("url", ""),
             "score": round(float(d.get("score", 0.0)), 4), "content": d.get("content", "")}
            for i, d in enumerate(docs, 1)]


def save_answer(state: dict, answer: str, urls: list[str], warnings: list[str]) -> None:
    try:
        get_history_store().add_message(state["session_id"], "assistant", answer,
                                        rewritten_query=state.get("rewritten_query", ""),
                                        item_names=state.get("item_names") or [], image_urls=urls)
    except Exception as exc:  # the answer is already with the user; losing the log is not fatal
        log.warning("saving the answer failed: %s", exc)
        warnings.append("回答未能保存到对话历史。")


@graph_node("query", "node_answer_output", "生成回答")
def node_answer_output(state: dict) -> dict:
    warnings = list(state.get("warnings") or [])
    if state.get("answer"):  # branch B / C: the clarification or refusal is the answer
        emit({"type": "delta", "delta": state["answer"]})
        save_answer(state, state["answer"], [], warnings)
        return {"image_urls": [], "sources": [], "warnings": warnings, "_summary": "直接回复（澄清/拒答）"}
    docs = state.get("reranked_docs") or []
    urls = image_urls(docs)
    settings = get_settings()
    context, history, n = build_context(docs, state.get("history") or [], settings.max_context_chars)
    prompt = load_prompt("answer_user", context=context or "（无）", history=history,
                         item_names="、".join(state.get("item_names") or []), question=state["rewritten_query"])
    if get_chat_model() is None:
        answer = extractive_answer(docs)
        emit({"type": "delta", "delta": answer})
        how = "摘录式回答（未配置大模型）"
    else:
        answer = strip_image_block(stream_answer(prompt))
        how = "大模型流式回答"
    save_answer(state, answer, urls, warnings)
    return {"answer": answer, "prompt": prompt, "image_urls": urls, "sources": sources_of(docs[:n] if n else docs),
            "warnings": warnings, "_summary": f"{how}，{len(answer)} 字，{len(urls)} 张图片，引用 {n} 条资料"}
