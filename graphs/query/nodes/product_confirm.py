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
from graphs.query.configuration import QueryConfiguration
from graphs.query.contracts import ProductDecision, ProductScore, Scores, Turn
from graphs.products import ProductAliases, VERSION_WORD, brand_aliases, parse_facets, version_key
from graphs.query.planning import COMPARE, EACH, compared_versions
from graphs.query.product_match import (
    CANDIDATE_THRESHOLD, CONFIRM_THRESHOLD, Resolution, evidence_products, names_unknown_model, rank_products,
    resolve, squashed_name, tokens,
)
from graphs.query.retrieval import search_chunks
from graphs.query.state import QueryGraphState, QueryUpdate
from services.chat_model import invoke_text, parse_json_reply
from services.prompts import load_prompt
from services.reranker import words_held

log = logging.getLogger("query.node_product_confirm")
DOCUMENTING_HITS = 10  # passages read for a longer model the question writes (it is rare, and exact)
EVIDENCE_HITS = 10     # passages read for a question naming no product

MAX_CANDIDATES = 3


def format_history(history: list[Turn]) -> str:
    lines = []
    for msg in history:
        when = datetime.fromtimestamp(float(msg.get("ts") or 0)).strftime("%Y-%m-%d %H:%M")
        role = "用户" if msg.get("role") == "user" else "助手"
        names = "、".join(msg.get("products") or []) or "无"
        lines.append(f"[{when}] {role}：{msg.get('text', '')[:300]}（关联商品：{names}）")
    return "\n".join(lines) or "（无）"


def extract_with_llm(cfg: QueryConfiguration, query: str, history: list[Turn]) -> tuple[list[str], str] | None:
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


def vector_scores(cfg: QueryConfiguration, names: list[str]) -> Scores:
    """Name scoring: hybrid search of each extracted name in kb_item_names (only meaningful with
    BGE-M3 vectors, whose name-to-name scores separate; offline the lexical match decides)."""
    embedder = cfg.embedder
    if embedder.sparse_mode == "bm25":
        return {}
    store = cfg.vector_store
    scores: Scores = {}
    for name in names:
        for hit in store.hybrid_search(store.items, embedder.embed_query(name), name, limit=5):
            scores[hit["product"]] = max(scores.get(hit["product"], 0.0), hit["score"])
    return scores


def evidence_ranking(cfg: QueryConfiguration, query: str) -> tuple[list[ProductScore], list[str]]:
    """A question naming no product: its chunk matches' products and scores, best first, and the
    products its strong matches belong to (by the thresholds of the scorer that scored them)."""
    hits = search_chunks(cfg, query, None, limit=EVIDENCE_HITS)
    if not hits:
        return [], []
    try:
        scores, cal = cfg.reranker.score(query, hits), cfg.calibration()
    except Exception as exc:  # the offline scorer stands in, with its own thresholds
        log.warning("reranker failed, judging evidence offline: %s", exc)
        scorer = cfg.offline_reranker
        scores, cal = scorer.score(query, hits), cfg.calibration(scorer.name)
    held = words_held(query, [h["content"] for h in hits])
    ranking: list[ProductScore] = [{"product": h["product"], "score": s, "words": w}
                                   for s, h, w in sorted(zip(scores, hits, held), key=lambda p: -p[0])]
    return ranking, evidence_products(ranking, cal.evidence_threshold, cal.evidence_margin)


def documenting(cfg: QueryConfiguration, models: list[str], held: list[str]) -> list[str]:
    """Which held products' documents write one of these longer models ("Mars CM Lite" inside the
    Mars CM manual): such a variant is that product's, not one the catalogue lacks."""
    found: list[str] = []
    for model in models:
        written = squashed_name(model)
        try:
            hits = search_chunks(cfg, model, held, limit=DOCUMENTING_HITS)
        except Exception as exc:  # no evidence either way: the catalogue's names decide
            log.warning("could not look for %r in the documents: %s", model, exc)
            return []
        for hit in hits:
            # a manual writes its own models without their maker ("KX-12 Max" for "Zorvex KX-12 Max")
            brand = squashed_name(parse_facets(hit["product"]).brand)
            forms = {written, written.removeprefix(brand)} if brand else {written}
            content = squashed_name(hit.get("content") or "")
            found += [hit["product"]] if any(f and f in content for f in forms) else []
    return list(dict.fromkeys(found))


def history_products(history: list[Turn]) -> list[str]:
    for msg in reversed(history):
        if msg.get("products"):
            return list(msg["products"])
    return []


def product_aliases(cfg: QueryConfiguration) -> ProductAliases:
    """The catalogue's aliases; without them (the registry down) names and short forms still match."""
    try:
        return ProductAliases(cfg.registry.aliases())
    except Exception as exc:
        log.warning("aliases unavailable: %s", exc)
        return ProductAliases()


def read_products(query: str, names: list[str], products: list[str], aliases: ProductAliases) -> Resolution:
    """The question's own words decide; the model's extracted names only when they name nothing."""
    for text in [query, *names]:
        found = resolve(text, products, aliases)
        if found.kind != "none":
            return found
    return Resolution("none")


def unsettled_versions(query: str, confirmed: list[str]) -> bool:
    """Several products, versions of one another, none of whose versions the question names, and no
    comparison asked: the question does not say which of them it means."""
    versions = {version_key(parse_facets(p).version) for p in confirmed} - {""}
    if len(confirmed) < 2 or len(versions) < 2 or COMPARE.search(query) or EACH in query:
        return False
    named = {version_key(v) for v in VERSION_WORD.findall(query)}
    return not named & versions


JOINERS = re.compile(r"和|与|跟|及|、|还是|vs\.?|对比|比较", re.IGNORECASE)


def compared_parts(query: str, products: list[str], aliases: ProductAliases) -> list[str]:
    """A comparison's sides read one by one ("Duo 和 Duo S 的区别"): the longer name swallows the
    shorter one when the question is read whole, so each side that names one product adds it."""
    if not (COMPARE.search(query) or EACH in query):
        return []
    found = []
    for part in JOINERS.split(query):
        side = resolve(part, products, aliases) if part.strip() else None
        if side is not None and side.kind == "confirm" and len(side.products) == 1:
            found += side.products
    return found if len(set(found)) >= 2 else []


def foreign_brand(query: str, products: list[str], aliases: ProductAliases) -> str:
    """A maker of the reviewed brand list that the question names (in Latin or Chinese) and that
    makes none of the products held: the question is about another maker's product."""
    held = {parse_facets(p).brand.lower() for p in products} | {p.lower() for p in products}
    lowered = query.lower()
    for brand, names in brand_aliases().items():
        if not any(n.lower() in lowered for n in (brand, *names)):
            continue
        if not any(brand.lower() in h for h in held):
            return brand
    return ""


def decide(cfg: QueryConfiguration, query: str, products: list[str], history: list[Turn], pinned: str,
           aliases: ProductAliases | None = None) -> ProductDecision:
    aliases = aliases or ProductAliases()
    if pinned:
        name = pinned if pinned in products else next(
            (m.name for m in rank_products(pinned, products) if m.kind == "full"), "")
        if name:
            return ProductDecision("confirmed", query, "pinned", {name: 1.0}, products=[name])
    extracted = extract_with_llm(cfg, query, history)
    names, rewritten = extracted if extracted else ([], query)
    method = "llm+lexical" if extracted else "lexical"
    found = read_products(query, names, products, aliases)
    if found.kind == "confirm" and unsettled_versions(query, found.products):
        return ProductDecision("ask", rewritten, method, found.scores, candidates=found.products[:MAX_CANDIDATES],
                               why="问题没有写明版本")
    if found.kind == "confirm":
        # a comparison of versions: every version it writes of the confirmed products' models, not
        # only the last one named
        model = lambda name: {t for t in tokens(name) if not VERSION_WORD.fullmatch(t)}  # noqa: E731
        models = [model(p) for p in found.products]
        compared = compared_versions(query, [p for p in products if model(p) in models])
        compared += compared_parts(query, products, aliases)
        return ProductDecision("confirmed", rewritten, method, found.scores,
                               products=sorted(set(found.products) | set(compared)), why=found.why)
    if found.kind == "ask":
        return ProductDecision("ask", rewritten, method, found.scores, candidates=found.products[:MAX_CANDIDATES],
                               why=found.why)
    if found.kind == "unknown-model":
        documented = documenting(cfg, found.longer, found.held)
        if len(documented) == 1:
            return ProductDecision("confirmed", rewritten, method, {documented[0]: CONFIRM_THRESHOLD},
                                   products=documented, why=f"{documented[0]} 的文档写到了问题里的型号")
        if documented:
            return ProductDecision("ask", rewritten, method, found.scores, candidates=documented[:MAX_CANDIDATES],
                                   why="问题里的型号写在几款产品的文档里")
        return ProductDecision("refuse", rewritten, method, found.scores, held=found.held, why=found.why)
    maker = foreign_brand(query, products, aliases)
    if found.kind == "none" and maker:
        return ProductDecision("refuse", rewritten, method, {}, why=f"知识库里没有 {maker} 的产品")
    # Nothing named lexically: the names' vectors, then the conversation, then the chunks decide.
    other_model = names_unknown_model(query, products)
    scores = {} if other_model else vector_scores(cfg, names)
    confirmed = [n for n, s in scores.items() if s > CONFIRM_THRESHOLD]
    candidates = sorted((n for n, s in scores.items() if CANDIDATE_THRESHOLD <= s <= CONFIRM_THRESHOLD),
                        key=lambda n: -scores[n])[:MAX_CANDIDATES]
    confirmed = confirmed or compared_versions(query, candidates)
    if confirmed or len(candidates) == 1:  # one consistent product is that product, never one button
        return ProductDecision("confirmed", rewritten, method, scores, products=confirmed or candidates)
    if candidates:
        return ProductDecision("ask", rewritten, method, scores, candidates=candidates)
    if not names and not other_model:
        # No product named: a follow-up ("它") inherits the conversation's product...
        previous = [n for n in history_products(history) if n in products]
        if previous:
            return ProductDecision("confirmed", rewritten if extracted else f"{' '.join(previous)} {query}",
                                   "history", {n: 1.0 for n in previous}, products=previous)
        # ...otherwise the chunks themselves say which product it is about.
        ranking, found_in = evidence_ranking(cfg, rewritten)
        scores = {}
        for e in reversed(ranking):  # each product's best match
            scores[e["product"]] = e["score"]
        if len(found_in) == 1:
            return ProductDecision("confirmed", rewritten, "evidence", scores, products=found_in, evidence=ranking)
        if found_in:
            return ProductDecision("ask", rewritten, "evidence", scores, candidates=found_in[:MAX_CANDIDATES],
                                   evidence=ranking)
        return ProductDecision("refuse", rewritten, method, scores, evidence=ranking)
    return ProductDecision("refuse", rewritten, method, scores)


def clarification(candidates: list[str]) -> str:
    options = "、".join(f"“{c}”" for c in candidates)
    return f"您问的是哪一款产品呢？知识库里有这几款相近的产品：{options}。请点击下面的按钮选择，或直接告诉我产品型号。"


def refusal(products: list[str], held: list[str] | None = None) -> str:
    if held:
        return (f"抱歉，知识库里没有您问的这个型号的资料。同一系列目前收录的是：{'、'.join(held)}。"
                "如果您问的是其中一款，请写明型号和版本。")
    if not products:
        return "抱歉，知识库里还没有任何说明书。请先上传产品的 PDF 或 Markdown 说明书，再来提问。"
    shown = "、".join(products[:12]) + ("等" if len(products) > 12 else "")
    return f"抱歉，知识库中没有找到与您的问题相关的产品资料。目前可以回答这些产品的问题：{shown}。"


@graph_node("query", "node_product_confirm", "产品确认")
def node_product_confirm(state: QueryGraphState, config: RunnableConfig) -> QueryUpdate:
    cfg = QueryConfiguration.from_runnable_config(config)
    products = cfg.vector_store.product_names()
    query = state["original_query"]
    d = decide(cfg, query, products, state.get("history") or [], (state.get("pinned_product") or "").strip(),
               product_aliases(cfg))
    out: QueryUpdate = {"branch": d.branch, "rewritten_query": d.rewritten_query, "products": d.products,
                        "decision": d.as_decision()}
    if d.branch == "ask":
        out.update(candidates=d.candidates, answer=clarification(d.candidates))
        out["_summary"] = f"需要确认产品：{'、'.join(d.candidates)}"
    elif d.branch == "refuse":
        # a model not held is refused outright: its family's buttons would offer another product for it
        out.update(candidates=[] if d.held else products, answer=refusal(products, d.held))
        out["_summary"] = f"知识库里没有这个型号（收录的是：{'、'.join(d.held)}）" if d.held else "没有找到相关产品"
    else:
        out.update(candidates=[], answer="")
        why = f"（{d.why}）" if d.why else ""
        out["_summary"] = f"已确认：{'、'.join(d.products)}{why}；检索问题：{d.rewritten_query}"
    out["_detail"] = {"branch": d.branch, **out["decision"], "candidates": out["candidates"]}
    return out
