"""Simple or complex? A comparison of products or a multi-part question becomes sub-questions.

Offline the classifier is rules: two or more confirmed products plus a comparison word
(区别 / 对比 / 比较 / 哪个 ...) or 分别 -> one sub-question per product; "A 和 B 分别…" about one
product -> one sub-question per part; several question sentences -> one each. With a model, a question carrying any such marker is planned
by one JSON-mode call, validated, the rules standing in when the reply is unusable.
"""
from __future__ import annotations

import logging
import re
import unicodedata
from typing import TYPE_CHECKING, Literal


from graphs.query.contracts import Branch, QuestionPlan, SubQuestion
from graphs.query.product_match import VERSION_TOKEN, normalize, rank_products, tokens
from services.chat_model import JsonObject, invoke_text, parse_json_reply
from services.prompts import load_prompt

if TYPE_CHECKING:  # the chat client is loaded only when a chat model is configured
    from langchain_openai import ChatOpenAI

log = logging.getLogger("query.planning")

MAX_SUB_QUESTIONS = 4
COMPARE = re.compile(r"区别|差别|差异|不同|异同|对比|比较|相比|哪个|哪款|哪一款|哪种|还是|vs\.?", re.IGNORECASE)
EACH = "分别"
MARKERS = re.compile(rf"{COMPARE.pattern}|{EACH}|和|与|及|、|跟|[？?].+[？?]", re.IGNORECASE)
MIN_SENTENCE_CHARS = 4
JOINERS = r"以及|和|与|及|跟|、|,|，"
COMPARE_TAIL = re.compile(r"(有什么|有啥|有哪些|有何|是否有|的)?(区别|差别|差异|不同|异同)(吗|呢)?\s*[？?。!！]*\s*$")
LEAD = re.compile(r"^(\s|的|之间|在|分别|都|相比|对比|比较|哪个|哪款|哪一款)+")
TRAIL = re.compile(r"(\s|的|上|方面|之间|在)+$")
ZERO_MINOR = re.compile(r"(?<=\d)\.0(?![0-9])")  # what normalize() drops: "V3.0" == "V3"


def simple(reason: str, method: Literal["rules", "model"] = "rules") -> QuestionPlan:
    return {"complexity": "simple", "reason": reason, "sub_questions": [], "method": method}


def named_products(question: str, confirmed: list[str], products: list[str]) -> list[str]:
    """The confirmed products, plus siblings named by a bare version ("SKR MINI E3 V2.0 和 V3.0"):
    the longer mention swallows the shorter one, so each version is tried with the others removed."""
    found = list(confirmed)
    q = normalize(question)
    versions = list(VERSION_TOKEN.finditer(q))
    if len(versions) < 2:
        return found
    found = []
    for keep in versions:
        variant = "".join(" " if any(v is not keep and v.start() <= i < v.end() for v in versions) else ch
                          for i, ch in enumerate(q))
        found += [m.name for m in rank_products(variant, products) if m.kind == "full"]
    return sorted(set(found) | set(confirmed))


def user_span(question: str, span: tuple[int, int]) -> tuple[int, int]:
    """A span of `normalize(question)` in the user's own text. normalize() drops a version's ".0"
    ("V2.0" == "V2"), so positions after one shift; the mention keeps the ".0" that ends it, so a
    sub-question names the product exactly as the user did."""
    folded = unicodedata.normalize("NFKC", question).lower()
    if len(folded) != len(question):  # a character NFKC expands: positions cannot be mapped, keep them
        return span
    dropped = [m.span() for m in ZERO_MINOR.finditer(folded)]
    kept = [i for i in range(len(question)) if not any(a <= i < b for a, b in dropped)]
    a, b = span
    if b <= a or b > len(kept):
        return span
    end = kept[b - 1] + 1
    end = next((d_end for d_start, d_end in dropped if d_start == end), end)
    return kept[a], end


def compared_versions(question: str, candidates: list[str]) -> list[str]:
    """A comparison that writes two or more versions ("KX-9 V1.0 和 V1.1 有什么区别"), each the version
    of exactly one candidate: those products, the ones being compared (asking which one is meant
    would ask the user to drop half of the question). [] otherwise."""
    if not COMPARE.search(question):
        return []
    versions = {m.group(0) for m in VERSION_TOKEN.finditer(normalize(question))}
    owners = [[c for c in candidates if v in tokens(c)] for v in versions]
    if len(versions) < 2 or any(len(o) != 1 for o in owners):
        return []
    picked = sorted({o[0] for o in owners})
    return picked if len(picked) >= 2 else []


def aspect_of(question: str, products: list[str]) -> tuple[str, bool]:
    """What is compared: the text after the last product mention, without the comparison words;
    and whether a trailing "有什么区别" was dropped (the sub-question then asks "是什么")."""
    spans = [user_span(question, m.span) for m in rank_products(question, products) if m.score > 0]
    text = question[max((b for _, b in spans), default=0):]
    text = LEAD.sub("", text)
    dropped = bool(COMPARE_TAIL.search(text))
    text = TRAIL.sub("", COMPARE_TAIL.sub("", text))
    text = re.sub(r"哪个|哪款|哪一款|哪种", "", text).strip()
    return text, dropped


def product_sub_questions(question: str, products: list[str]) -> list[SubQuestion]:
    aspect, dropped = aspect_of(question, products)
    subs = []
    for name in products[:MAX_SUB_QUESTIONS]:
        if not aspect:
            asked = "主要参数和特点是什么？"
        elif dropped:
            asked = f"{aspect}是什么？"
        else:
            asked = aspect
        subs.append({"question": f"{name} 的{asked}", "products": [name]})
    return subs


def part_sub_questions(question: str, confirmed: list[str]) -> list[SubQuestion]:
    """"Duo 的 LED 和按键分别对应哪个 GPIO？" -> one question per enumerated part."""
    at = question.find(EACH)
    if at < 0:
        return []
    before, after = question[:at], question[at + len(EACH):]
    cut = max(before.rfind("的"), *(before.rfind(p) for p in "，,。；;？?"))
    head, enumeration = before[:cut + 1], before[cut + 1:]
    parts = [p.strip() for p in re.split(JOINERS, enumeration) if p.strip()]
    if len(parts) < 2:
        return []
    return [{"question": f"{head}{p}{after}".strip(), "products": list(confirmed)}
            for p in parts[:MAX_SUB_QUESTIONS]]


def sentence_sub_questions(question: str, confirmed: list[str], known: list[str]) -> list[SubQuestion]:
    """"Duo S 有多大内存？带不带 WiFi？" -> one question per question sentence; a sentence naming no
    product carries the product as the user wrote it in the question."""
    parts = [p.strip() for p in re.split(r"(?<=[？?])", question) if len(p.strip()) >= MIN_SENTENCE_CHARS]
    if len(parts) < 2:
        return []
    full = [m for m in rank_products(question, known) if m.kind == "full"]
    a, b = user_span(question, full[0].span) if full else (0, 0)
    mention = question[a:b].strip()
    subs = []
    for part in parts[:MAX_SUB_QUESTIONS]:
        named = any(m.kind == "full" for m in rank_products(part, known))
        subs.append({"question": part if named or not mention else f"{mention} {part}",
                     "products": list(confirmed)})
    return subs


def rule_plan(question: str, products: list[str], confirmed: list[str], known: list[str]) -> QuestionPlan:
    if len(products) >= 2 and (COMPARE.search(question) or EACH in question):
        return {"complexity": "complex", "reason": f"比较 {len(products)} 款产品",
                "sub_questions": product_sub_questions(question, products), "method": "rules"}
    for subs, reason in ((part_sub_questions(question, confirmed), "分项提问"),
                         (sentence_sub_questions(question, confirmed, known), "一次问了几件事")):
        if subs:
            return {"complexity": "complex", "reason": f"{reason}：{len(subs)} 项", "sub_questions": subs,
                    "method": "rules"}
    return simple("一个产品、一个问题")


def validate_plan(data: JsonObject, products: list[str]) -> QuestionPlan:
    if data.get("complexity") not in ("simple", "complex"):
        raise ValueError("字段 complexity 应为 simple 或 complex")
    reason = str(data.get("reason") or "").strip()
    if data["complexity"] == "simple":
        return simple(reason, "model")
    raw = data.get("sub_questions")
    if not isinstance(raw, list) or not 2 <= len(raw) <= MAX_SUB_QUESTIONS:
        raise ValueError(f"复杂问题应有 2 到 {MAX_SUB_QUESTIONS} 个子问题")
    subs = []
    for item in raw:
        text = str(item.get("question") or "").strip() if isinstance(item, dict) else ""
        if not text:
            raise ValueError("子问题不能为空")
        name = str(item.get("product") or "").strip()
        if name and name not in products:
            raise ValueError(f"子问题的产品“{name}”不在已确认的产品中")
        subs.append({"question": text, "products": [name] if name else list(products)})
    return {"complexity": "complex", "reason": reason, "sub_questions": subs, "method": "model"}


def model_plan(llm: ChatOpenAI, question: str, products: list[str]) -> QuestionPlan | None:
    user = load_prompt("plan_user", products="、".join(products), question=question)
    try:
        return validate_plan(parse_json_reply(invoke_text(llm, load_prompt("plan_system"), user)), products)
    except Exception as exc:
        log.warning("planning reply unusable, using the rules: %s", exc)
        return None


def evidence_branches(question: str, confirmed: list[str], subs: list[SubQuestion]) -> list[Branch]:
    """What fans out: every sub-question (index 1..n) and, when no sub-question narrows the products
    (parts or sentences of one question, not one product each), the whole question as well (index
    0, `whole`): its retrieval is what the question would get unsplit, so the parts can only add
    passages to it, never lose the one passage that answers several parts at once."""
    branches: list[Branch] = [{**sub, "index": i} for i, sub in enumerate(subs, 1)]
    if subs and all(sorted(sub["products"]) == sorted(confirmed) for sub in subs):
        branches.insert(0, {"question": question, "products": list(confirmed), "index": 0, "whole": True})
    return branches


def plan_question(question: str, confirmed: list[str], known: list[str], llm: ChatOpenAI | None = None) -> QuestionPlan:
    """The plan, its sub-questions and the products they name; with a JSON-mode chat model the
    model plans, offline (or when its reply is unusable) the rules do."""
    products = named_products(question, confirmed, known)
    if not MARKERS.search(question):
        plan = simple("没有比较或分项的提法")
    else:
        plan = (llm and model_plan(llm, question, products)) or rule_plan(question, products, confirmed, known)
    return {**plan, "products": products}
