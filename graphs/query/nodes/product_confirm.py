"""node_product_confirm: which product is the question about?

Branch A: confirmed products -> retrieval. Branch B: candidates -> ask with buttons.
Branch C: nothing relevant -> polite refusal listing what the knowledge base covers.
"""
from __future__ import annotations

import logging
import re
from datetime import datetime

from langchain_core.runnables import RunnableConfig

from graphs.base import graph_node
from graphs.query.calibration import EVIDENCE_MARGIN, EVIDENCE_THRESHOLD
from graphs.query.configuration import QueryConfiguration
from graphs.query.planning import compared_versions
from graphs.query.product_match import CANDIDATE_THRESHOLD, CONFIRM_THRESHOLD, names_unknown_model, rank_products
from graphs.query.retrieval import search_chunks
from graphs.query.state import QueryGraphState
from services.chat_model import invoke_text, parse_json_reply
from services.prompts import load_prompt

log = logging.getLogger("query.node_product_confirm")

MAX_CANDIDATES = 3


def format_history(history: list[dict]) -> str:
    lines = []
    for msg in history:
        when = datetime.fromtimestamp(float(msg.get("ts") or 0)).strftime("%Y-%m-%d %H:%M")
        role = "用户" if msg.get("role") == "user" else "助手"
        names = "、".join(msg.get("products") or []) or "无"
        lines.append(f"[{when}] {role}：{msg.get('text', '')[:300]}（关联商品：{names}）")
    return "\n".join(lines) or "（无）"


def extract_with_llm(cfg: QueryConfiguration, query: str, history: list[dict]) -> tuple[list[str], str] | None:
    """One JSON-mode call: product names and a standalone rewritten question (None offline)."""
    llm = cfg.chat_model(json_mode=True)
    if llm is None:
        return None
    user = load_prompt("query_rewrite_user", history=format_history(history), query=query)
    try:
        data = parse_json_reply(invoke_text(llm, load_prompt("query_rewrite_system"), user))
    except Exception as exc:  # the offline path still decides
        log.warning("rewrite failed: %s", exc)
        return None
    names = data.get("products")
    names = [names] if isinstance(names, str) else names if isinstance(names, list) else []
    names = list(dict.fromkeys(re.sub(r"\s+", " ", str(n)).strip() for n in names if str(n).strip()))
    rewritten = str(data.get("rewritten_query") or "").strip() or query
    return names, rewritten


def vector_scores(cfg: QueryConfiguration, names: list[str]) -> dict[str, float]:
    """Name scoring: hybrid search of each extracted name in kb_item_names (only meaningful with
    BGE-M3 vectors, whose name-to-name scores separate; offline the lexical match decides)."""
    embedder = cfg.embedder
    if embedder.sparse_mode == "bm25":
        return {}
    store = cfg.vector_store
    scores: dict[str, float] = {}
    for name in names:
        for hit in store.hybrid_search(store.items, embedder.embed_query(name), name, limit=5):
            scores[hit["product"]] = max(scores.get(hit["product"], 0.0), hit["score"])
    return scores


def evidence_products(cfg: QueryConfiguration, query: str) -> tuple[list[str], list[dict]]:
    """A question naming no product: which products do its strong chunk matches belong to?"""
    hits = search_chunks(cfg, query, None, limit=10)
    if not hits:
        return [], []
    try:
        scores = cfg.reranker.score(query, hits)
    except Exception as exc:  # the offline scorer, which the thresholds were calibrated on, stands in
        log.warning("reranker failed, judging evidence offline: %s", exc)
        scores = cfg.offline_reranker.score(query, hits)
    ranked = sorted(zip(scores, hits), key=lambda p: -p[0])
    top = ranked[0][0]
    if top < EVIDENCE_THRESHOLD:
        return [], [{"product": h["product"], "score": s} for s, h in ranked[:3]]
    strong = [h["product"] for s, h in ranked if s >= top - EVIDENCE_MARGIN]
    return list(dict.fromkeys(strong)), [{"product": h["product"], "score": s} for s, h in ranked[:5]]


def history_products(history: list[dict]) -> list[str]:
    for msg in reversed(history):
        if msg.get("products"):
            return list(msg["products"])
    return []


def decide(cfg: QueryConfiguration, query: str, products: list[str], history: list[dict], pinned: str) -> dict:
    """{branch, products, candidates, rewritten_query, method, scores}"""
    if pinned:
        name = pinned if pinned in products else next(
            (m.name for m in rank_products(pinned, products) if m.kind == "full"), "")
        if name:
            return {"branch": "confirmed", "products": [name], "candidates": [], "rewritten_query": query,
                    "method": "pinned", "scores": {name: 1.0}}
    extracted = extract_with_llm(cfg, query, history)
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
    for name, score in vector_scores(cfg, names).items():
        scores[name] = max(scores.get(name, 0.0), score)
    confirmed = [n for n, s in scores.items() if s > CONFIRM_THRESHOLD]
    candidates = sorted((n for n, s in scores.items() if CANDIDATE_THRESHOLD <= s <= CONFIRM_THRESHOLD),
                        key=lambda n: -scores[n])[:MAX_CANDIDATES]
    method = "llm+lexical" if extracted else "lexical"
    confirmed = confirmed or compared_versions(query, candidates)
    if confirmed:
        return {"branch": "confirmed", "products": confirmed, "candidates": [], "rewritten_query": rewritten,
                "method": method, "scores": scores}
    if candidates:
        return {"branch": "ask", "products": [], "candidates": candidates, "rewritten_query": rewritten,
                "method": method, "scores": scores}
    if not names and not other_model:
        # No product named: a follow-up ("它") inherits the conversation's product...
        previous = [n for n in history_products(history) if n in products]
        if previous:
            return {"branch": "confirmed", "products": previous, "candidates": [],
                    "rewritten_query": rewritten if extracted else f"{' '.join(previous)} {query}",
                    "method": "history", "scores": {n: 1.0 for n in previous}}
        # ...otherwise the chunks themselves say which product it is about.
        found, evidence = evidence_products(cfg, rewritten)
        if len(found) == 1:
            return {"branch": "confirmed", "products": found, "candidates": [], "rewritten_query": rewritten,
                    "method": "evidence", "scores": {e["product"]: e["score"] for e in evidence}}
        if found:
            return {"branch": "ask", "products": [], "candidates": found[:MAX_CANDIDATES],
                    "rewritten_query": rewritten, "method": "evidence",
                    "scores": {e["product"]: e["score"] for e in evidence}}
    return {"branch": "refuse", "products": [], "candidates": [], "rewritten_query": rewritten,
            "method": method, "scores": scores}


def clarification(candidates: list[str]) -> str:
    options = "、".join(f"“{c}”" for c in candidates)
    return f"您问的是哪一款产品呢？知识库里有这几款相近的产品：{options}。请点击下面的按钮选择，或直接告诉我产品型号。"


def refusal(products: list[str]) -> str:
    if not products:
        return "抱歉，知识库里还没有任何说明书。请先上传产品的 PDF 或 Markdown 说明书，再来提问。"
    shown = "、".join(products[:12]) + ("等" if len(products) > 12 else "")
    return f"抱歉，知识库中没有找到与您的问题相关的产品资料。目前可以回答这些产品的问题：{shown}。"


@graph_node("query", "node_product_confirm", "产品确认")
def node_product_confirm(state: QueryGraphState, config: RunnableConfig) -> dict:
    cfg = QueryConfiguration.from_runnable_config(config)
    products = cfg.vector_store.product_names()
    query = state["original_query"]
    d = decide(cfg, query, products, state.get("history") or [], (state.get("pinned_product") or "").strip())
    out = {
        "branch": d["branch"], "rewritten_query": d["rewritten_query"], "products": d["products"],
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
        out["_summary"] = f"已确认：{'、'.join(d['products'])}；检索问题：{d['rewritten_query']}"
    out["_detail"] = {"branch": d["branch"], **out["decision"], "candidates": out["candidates"]}
    return out
