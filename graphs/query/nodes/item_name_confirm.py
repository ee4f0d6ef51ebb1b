"""node_item_name_confirm: which product is the question about?

Branch A: confirmed products -> retrieval. Branch B: candidates -> ask with buttons.
Branch C: nothing relevant -> polite refusal listing what the knowledge base covers.
"""
from __future__ import annotations

import logging
import re
from datetime import datetime

from graphs.base import graph_node
from graphs.query.calibration import EVIDENCE_MARGIN, EVIDENCE_THRESHOLD
from graphs.query.product_match import CANDIDATE_THRESHOLD, CONFIRM_THRESHOLD, names_unknown_model, rank_products
from graphs.query.retrieval import search_chunks
from services.chat_model import get_chat_model, invoke_text, parse_json_reply
from services.embeddings import get_embedder
from services.errors import StateFieldError
from services.history_store import get_history_store
from services.prompts import load_prompt
from services.reranker import OfflineReranker, get_reranker
from services.settings import get_settings
from services.vector_store import get_vector_store

log = logging.getLogger("query.node_item_name_confirm")

HISTORY_LIMIT = 10
MAX_CANDIDATES = 3
MAX_QUERY_CHARS = 2000


def format_history(history: list[dict]) -> str:
    lines = []
    for msg in history:
        when = datetime.fromtimestamp(float(msg.get("ts") or 0)).strftime("%Y-%m-%d %H:%M")
        role = "用户" if msg.get("role") == "user" else "助手"
        names = "、".join(msg.get("item_names") or []) or "无"
        lines.append(f"[{when}] {role}：{msg.get('text', '')[:300]}（关联商品：{names}）")
    return "\n".join(lines) or "（无）"


def extract_with_llm(query: str, history: list[dict]) -> tuple[list[str], str] | None:
    """One JSON-mode call: product names and a standalone rewritten question (None offline)."""
    llm = get_chat_model(json_mode=True)
    if llm is None:
        return None
    user = load_prompt("query_rewrite_user", history=format_history(history), query=query)
    try:
        data = parse_json_reply(invoke_text(llm, load_prompt("query_rewrite_system"), user))
    except Exception as exc:  # the offline path still decides
        log.warning("rewrite failed: %s", exc)
        return None
    names = data.get("item_names")
    names = [names] if isinstance(names, str) else names if isinstance(names, list) else []
    names = list(dict.fromkeys(re.sub(r"\s+", " ", str(n)).strip() for n in names if str(n).strip()))
    rewritten = str(data.get("rewritten_query") or "").strip() or query
    return names, rewritten


def vector_scores(names: list[str]) -> dict[str, float]:
    """Seed scoring: hybrid search of each extracted name in kb_item_names (only meaningful with
    BGE-M3 vectors, whose name-to-name scores separate; offline the lexical match decides)."""
    settings = get_settings()
    embedder = get_embedder(settings)
    if embedder.sparse_mode == "bm25":
        return {}
    store = get_vector_store(settings)
    scores: dict[str, float] = {}
    for name in names:
        for hit in store.hybrid_search(store.items, embedder.embed_query(name), name, limit=5):
            scores[hit["item_name"]] = max(scores.get(hit["item_name"], 0.0), hit["score"])
    return scores


def evidence_products(query: str) -> tuple[list[str], list[dict]]:
    """A question naming no product: which products do its strong chunk matches belong to?"""
    hits = search_chunks(query, None, limit=10)
    if not hits:
        return [], []
    try:
        scores = get_reranker().score(query, hits)
    except Exception as exc:  # the offline scorer, which the thresholds were calibrated on, stands in
        log.warning("reranker failed, judging evidence offline: %s", exc)
        scores = OfflineReranker(get_settings()).score(query, hits)
    ranked = sorted(zip(scores, hits), key=lambda p: -p[0])
    top = ranked[0][0]
    if top < EVIDENCE_THRESHOLD:
        return [], [{"item_name": h["item_name"], "score": s} for s, h in ranked[:3]]
    strong = [h["item_name"] for s, h in ranked if s >= top - EVIDENCE_MARGIN]
    return list(dict.fromkeys(strong)), [{"item_name": h["item_name"], "score": s} for s, h in ranked[:5]]


def history_products(history: list[dict]) -> list[str]:
    for msg in reversed(history):
        if msg.get("item_names"):
            return list(msg["item_names"])
    return []


def decide(query: str, products: list[str], history: list[dict], pinned: str) -> dict:
    """{branch, item_names, candidates, rewritten_query, method, scores}"""
    if pinned:
        name = pinned if pinned in products else next(
            (m.name for m in rank_products(pinned, products) if m.kind == "full"), "")
        if name:
            return {"branch": "confirmed", "item_names": [name], "candidates": [], "rewritten_query": query,
                    "method": "pinned", "scores": {name: 1.0}}
    extracted = extract_with_llm(query, history)
    names, rewritten = extracted if extracted else ([], query)
    scores: dict[str, float] = {}
    other_model = False  # "Milk-V Mars" when only Duo boards are known: another product, not ours
    brand_only: set[str] = set()
    for text in [query, *names]:  # the question itself, and every name the model extracted
        for m in rank_products(text, products):
            scores[m.name] = max(scores.get(m.name, 0.0), m.score)
            other_model |= m.kind == "other-model"
            if m.kind == "brand":
                brand_only.add(m.name)
    if other_model:  # "Milk-V Mars Pro": the brand's other models are no candidates for it
        scores = {n: s for n, s in scores.items() if n not in brand_only}
    other_model |= not scores and names_unknown_model(query, products)
    for name, score in vector_scores(names).items():
        scores[name] = max(scores.get(name, 0.0), score)
    confirmed = [n for n, s in scores.items() if s > CONFIRM_THRESHOLD]
    candidates = sorted((n for n, s in scores.items() if CANDIDATE_THRESHOLD <= s <= CONFIRM_THRESHOLD),
                        key=lambda n: -scores[n])[:MAX_CANDIDATES]
    method = "llm+lexical" if extracted else "lexical"
    if confirmed:
        return {"branch": "confirmed", "item_names": confirmed, "candidates": [], "rewritten_query": rewritten,
                "method": method, "scores": scores}
    if candidates:
        return {"branch": "ask", "item_names": [], "candidates": candidates, "rewritten_query": rewritten,
                "method": method, "scores": scores}
    if not names and not other_model:
        # No product named: a follow-up ("它") inherits the conversation's product...
        previous = [n for n in history_products(history) if n in products]
        if previous:
            return {"branch": "confirmed", "item_names": previous, "candidates": [],
                    "rewritten_query": rewritten if extracted else f"{' '.join(previous)} {query}",
                    "method": "history", "scores": {n: 1.0 for n in previous}}
        # ...otherwise the chunks themselves say which product it is about.
        found, evidence = evidence_products(rewritten)
        if len(found) == 1:
            return {"branch": "confirmed", "item_names": found, "candidates": [], "rewritten_query": rewritten,
                    "method": "evidence", "scores": {e["item_name"]: e["score"] for e in evidence}}
        if found:
            return {"branch": "ask", "item_names": [], "candidates": found[:MAX_CANDIDATES],
                    "rewritten_query": rewritten, "method": "evidence",
                    "scores": {e["item_name"]: e["score"] for e in evidence}}
    return {"branch": "refuse", "item_names": [], "candidates": [], "rewritten_query": rewritten,
            "method": method, "scores": scores}


def clarification(candidates: list[str]) -> str:
    options = "、".join(f"“{c}”" for c in candidates)
    return f"您问的是哪一款产品呢？知识库里有这几款相近的产品：{options}。请点击下面的按钮选择，或直接告诉我产品型号。"


def refusal(products: list[str]) -> str:
    if not products:
        return "抱歉，知识库里还没有任何说明书。请先上传产品的 PDF 或 Markdown 说明书，再来提问。"
    shown = "、".join(products[:12]) + ("等" if len(products) > 12 else "")
    return f"抱歉，知识库中没有找到与您的问题相关的产品资料。目前可以回答这些产品的问题：{shown}。"


@graph_node("query", "node_item_name_confirm", "产品确认")
def node_item_name_confirm(state: dict) -> dict:
    session_id = (state.get("session_id") or "").strip()
    query = (state.get("original_query") or "").strip()
    if not session_id:
        raise StateFieldError("缺少会话 ID。")
    if not query:
        raise StateFieldError("问题不能为空。")
    warnings = list(state.get("warnings") or [])
    if len(query) > MAX_QUERY_CHARS:
        query = query[:MAX_QUERY_CHARS]
        warnings.append(f"问题过长，只使用了前 {MAX_QUERY_CHARS} 个字。")
    history_store = get_history_store()
    history, message_id = [], ""
    try:
        history = history_store.recent(session_id, HISTORY_LIMIT)
        message_id = history_store.add_message(session_id, "user", state["original_query"])
    except Exception as exc:  # history is a convenience; the answer must still come
        log.warning("history unavailable: %s", exc)
        warnings.append("对话历史暂时不可用，本次回答不会结合上文，也不会被保存。")
    products = get_vector_store().product_names()
    d = decide(query, products, history, (state.get("pinned_product") or "").strip())
    out = {
        "original_query": query, "history": history, "message_id": message_id, "branch": d["branch"],
        "rewritten_query": d["rewritten_query"], "item_names": d["item_names"], "warnings": warnings,
        "decision": {"method": d["method"], "scores": {k: round(v, 4) for k, v in d["scores"].items()}},
    }
    if d["branch"] == "ask":
        out.update(candidates=d["candidates"], answer=clarification(d["candidates"]))
        out["_summary"] = f"需要确认产品：{'、'.join(d['candidates'])}"
    elif d["branch"] == "refuse":
        out.update(candidates=products, answer=refusal(products))
        out["_summary"] = "没有找到相关产品"
    else:
        out.update(candidates=[], answer="")
        out["_summary"] = f"已确认：{'、'.join(d['item_names'])}；检索问题：{d['rewritten_query']}"
    if message_id:
        try:
            history_store.update_message(message_id, rewritten_query=d["rewritten_query"],
                                         item_names=d["item_names"])
            # earlier turns without a product (a clarification) get it; a session whose recent
            # turns all have one has nothing to fill, and the write scans the embedded store
            if any(not m.get("item_names") for m in history):
                history_store.backfill_item_names(session_id, d["item_names"])
        except Exception as exc:
            log.warning("history update failed: %s", exc)
    out["_detail"] = {"branch": d["branch"], **out["decision"], "candidates": out["candidates"]}
    return out
