"""node_answer_output: the answer, streamed, with pictures recovered from the sources.

Image URLs come from the local sources the answer cites (their `url` when it is an image, and the
Markdown images in their content; offline, only those near the quoted lines), never from the
model's text: the model's `【图片】` block, its Markdown images and image URLs no source carries are
not shown. `sources` are all the sources the answer was built from, numbered as given; the ones
its text cites are `cited(answer, sources)`.
"""
from __future__ import annotations

import re
from typing import TYPE_CHECKING

import httpx
from langchain_core.runnables import RunnableConfig

from graphs.base import emit, graph_node
from graphs.query.configuration import QueryConfiguration
from graphs.query.contracts import Hit, Source, Turn
from graphs.query.extractive import cited, extractive_answer
from graphs.query.state import QueryGraphState, QueryUpdate
from services.chat_model import messages
from services.errors import LLMError
from services.prompts import load_prompt

if TYPE_CHECKING:  # the chat client is loaded only when a chat model is configured
    from langchain_openai import ChatOpenAI


IMAGE_SUFFIX = re.compile(r"\.(png|jpe?g|gif|webp|bmp|svg)(\?.*)?$", re.IGNORECASE)
MD_IMAGE = re.compile(r"!\[[^\]\n]*\]\(\s*<?([^)\s>]+)>?[^)\n]*\)")
URL_CHAR = r"[A-Za-z0-9\-._~:/?#@$&*+=%]"
# ASCII only, so a URL ends where Chinese text starts; a trailing "." is the sentence's, not the URL's.
BARE_IMAGE_URL = re.compile(rf"https?://{URL_CHAR}+?\.(?:png|jpe?g|gif|webp|bmp|svg)(?:\?{URL_CHAR}*)?"
                            r"(?![A-Za-z0-9/_\-])", re.IGNORECASE)
IMAGE_MARK = "【图片】"


def image_urls(docs: list[Hit]) -> list[str]:
    urls: list[str] = []
    for doc in docs:
        if doc.get("source", "local") != "local":
            continue
        if IMAGE_SUFFIX.search(doc.get("url") or ""):
            urls.append(doc["url"])
        urls.extend(MD_IMAGE.findall(doc.get("content") or ""))
    return list(dict.fromkeys(urls))


def format_source(i: int, doc: Hit) -> str:
    return (f"[{i}][source={doc.get('source', 'local')}][chunk_id={doc.get('chunk_id', '')}]"
            f"[url={doc.get('url', '')}][title={doc.get('title', '')}][score={doc.get('score', 0.0):.4f}] "
            f"{doc.get('content', '')}")


def build_context(docs: list[Hit], history: list[Turn], budget: int) -> tuple[str, str, int]:
    """(sources, history, number of sources) within one shared character budget: sources first and
    never cut in the middle; history gets what is left, newest turns kept (an over-long prompt would lose the sources, not the chat)."""
    used, parts = 0, []
    for i, doc in enumerate(docs, 1):
        block = format_source(i, doc)
        if used + len(block) > budget:
            break
        parts.append(block)
        used += len(block) + 2
    turns: list[str] = []
    for msg in reversed(history):
        line = f"{'用户' if msg.get('role') == 'user' else '助手'}：{msg.get('text', '')}"
        if used + len(line) > budget:
            break
        turns.insert(0, line)
        used += len(line) + 1
    return "\n\n".join(parts), "\n".join(turns) or "（无）", len(parts)


def shown_text(text: str, allowed_urls: set[str]) -> str:
    """The model's text as the user sees it: no image block, no Markdown image, no image URL that
    no source carries."""
    cut = text.find(IMAGE_MARK)
    text = text[:cut] if cut >= 0 else text
    text = MD_IMAGE.sub("", text)
    text = BARE_IMAGE_URL.sub(lambda m: m.group(0) if m.group(0) in allowed_urls else "", text)
    return text.rstrip()


def settled_part(text: str) -> str:
    """The prefix of a growing answer that later tokens cannot turn into an image block, a Markdown
    image or an image URL (trailing spaces may still turn out to precede the image block)."""
    cut = text.find(IMAGE_MARK)
    if cut >= 0:
        return text[:cut]
    for k in range(len(IMAGE_MARK) - 1, 0, -1):
        if text.endswith(IMAGE_MARK[:k]):
            text = text[:-k]
            break
    start = text.rfind("![")
    if start >= 0 and not MD_IMAGE.match(text, start):
        text = text[:start]
    elif text.endswith("!"):
        text = text[:-1]
    tail = re.search(rf"{URL_CHAR}*\Z", text).group(0)
    pending = re.search(r"(?i)http.*\Z|ht?t?\Z", tail)  # a URL still being written
    if pending:
        text = text[:len(text) - len(tail) + pending.start()]
    return text


def stream_answer(llm: ChatOpenAI, prompt_user: str, allowed_urls: set[str], timeout_s: float) -> str:
    """Stream the model's answer as deltas of what the user may see; return the shown answer."""
    import openai  # loaded with the chat client, which a configured model has brought in already

    text, shown = "", ""
    try:
        for chunk in llm.stream(messages(load_prompt("answer_system"), prompt_user)):
            text += str(chunk.content or "")
            visible = shown_text(settled_part(text), allowed_urls)
            if len(visible) > len(shown) and visible.startswith(shown):
                emit({"type": "delta", "delta": visible[len(shown):]})
                shown = visible
    except (openai.APITimeoutError, httpx.TimeoutException) as exc:
        raise LLMError(f"回答生成超时：大模型超过 {timeout_s:g} 秒没有响应。", cause=exc) from exc
    except Exception as exc:
        raise LLMError(f"回答生成中断：{exc}", cause=exc) from exc
    answer = shown_text(text, allowed_urls)
    if len(answer) > len(shown) and answer.startswith(shown):
        emit({"type": "delta", "delta": answer[len(shown):]})
    return answer


def sources_of(docs: list[Hit]) -> list[Source]:
    """The answer's sources, numbered as the model saw them ([n] in its text is source n); a PDF
    source names its pages (0: not from a PDF) and its document, whose original can be opened."""
    return [{"index": i, "source": d.get("source", "local"), "chunk_id": d.get("chunk_id", ""),
             "doc_id": d.get("doc_id", ""), "title": d.get("title", ""), "file_title": d.get("file_title", ""),
             "product": d.get("product", ""), "url": d.get("url", ""),
             "page_start": int(d.get("page_start") or 0), "page_end": int(d.get("page_end") or 0),
             "score": round(float(d.get("score", 0.0)), 4), "content": d.get("content", "")}
            for i, d in enumerate(docs, 1)]


@graph_node("query", "node_answer_output", "生成回答")
def node_answer_output(state: QueryGraphState, config: RunnableConfig) -> QueryUpdate:
    cfg = QueryConfiguration.from_runnable_config(config)
    if state.get("answer"):  # branch B / C: the clarification or refusal is the answer
        emit({"type": "delta", "delta": state["answer"]})
        return {"image_urls": [], "sources": [], "_summary": "直接回复（澄清/拒答）"}
    docs = state.get("reranked_docs") or []
    context, history, n = build_context(docs, state.get("history") or [], cfg.settings.max_context_chars)
    prompt = load_prompt("answer_user", context=context or "（无）", history=history,
                         products="、".join(state.get("products") or []), question=state["rewritten_query"])
    llm = cfg.chat_model()
    sources = sources_of(docs[:n])
    if llm is None:
        answer, quotes = extractive_answer(state["rewritten_query"], docs)
        urls = image_urls([{**q.doc, "content": q.near} for q in quotes])  # those beside the quoted lines
        emit({"type": "delta", "delta": answer})
        how = "摘录式回答（未配置大模型）"
    else:
        # the model may show pictures of any source it was given; the answer keeps its cited ones'
        answer = stream_answer(llm, prompt, set(image_urls(docs[:n])), cfg.settings.llm_timeout_s)
        urls = image_urls([docs[s["index"] - 1] for s in cited(answer, sources)])
        how = "大模型流式回答"
    return {"answer": answer, "prompt": prompt, "image_urls": urls, "sources": sources,
            "_summary": f"{how}，{len(answer)} 字，{len(urls)} 张图片，给出 {n} 条资料，引用 {len(cited(answer, sources))} 条"}
