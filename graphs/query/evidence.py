"""Judging the evidence of one retrieval: scored and cut, graded, the better of two sets chosen.

A grade is a `Grade` (graphs.query.contracts), held in the state as its `as_dict()`. With a chat
model the judgement is one JSON-mode call; its reply is validated and any fault falls back to the
offline rule over the scorer's relevance scores.
"""
from __future__ import annotations

import logging
from dataclasses import replace
from itertools import zip_longest

from graphs.query.configuration import QueryConfiguration
from graphs.query.contracts import Grade, Hit, Route, SubResult
from graphs.query.product_match import normalize, rank_products
from services.chat_model import JsonObject, invoke_text, parse_json_reply
from services.prompts import load_prompt

log = logging.getLogger("query.evidence")

ROUTES = ("answer", "rewrite", "clarify", "no_knowledge")
BOOL_FIELDS = ("relevant", "answerable", "ambiguous")
TEXT_FIELDS = ("reason", "missing", "follow_up")
GRADE_PASSAGES = 6
GRADE_PASSAGE_CHARS = 600


def strip_products(question: str, products: list[str]) -> str:
    """The question without its mentions of these products: what grading scores. Every passage of a
    manual names its product, and the offline scorer's word coverage is dominated by those words
    (measured: a pinned question prefixed with a catalogue name outscored every answerable one), so
    they are left out and the score says how well a passage covers what is asked."""
    text = normalize(question)
    for a, b in sorted((m.span for m in rank_products(question, products) if m.score > 0), reverse=True):
        text = text[:a] + " " + text[b:]
    return " ".join(text.split()) or question


def topic_scores(cfg: QueryConfiguration, question: str, products: list[str],
                 docs: list[Hit]) -> tuple[list[float] | None, str]:
    """(scores of the docs against the question without its products, the scorer's name); None when
    no scorer works."""
    text = strip_products(question, products)
    try:
        reranker = cfg.reranker
        return reranker.score(text, docs), reranker.name
    except Exception as exc:  # the offline scorer, which the threshold was calibrated on, stands in
        log.warning("reranker failed, grading with the offline scorer: %s", exc)
    offline = cfg.offline_reranker
    try:
        return offline.score(text, docs), offline.name
    except Exception as exc:
        log.warning("offline scorer failed too, grading unscored: %s", exc)
        return None, ""


def unscored_grade() -> Grade:
    """No scorer works: nothing to judge by, so the fused order is answered, as rerank keeps it."""
    return Grade(relevant=True, answerable=True, ambiguous=False, confidence=0.0, route="answer",
                 reason="评分器不可用，无法评估证据，按检索顺序作答", method="unscored")


def offline_grade(top: float, threshold: float, floor: float | None) -> Grade:
    """The rule over calibrated scores: the best passage's score against the threshold and the
    refusal floor calibrated on the scale of the scorer that ran. Passages of the confirmed product
    came back, so they count as relevant; scores say nothing about ambiguity, so the offline rule
    never asks back. Under the threshold the evidence is `weak`: after the one rewrite it is
    answered with a caution instead of "not known" - unless a refusal floor is in use (`floor`,
    None when off) and the score is under it."""
    answerable = top >= threshold
    reason = f"最相关资料得分 {top:.3f}，{'达到' if answerable else '低于'}作答阈值 {threshold:.3f}"
    if not answerable and floor is not None:
        reason += f"，{'不低于' if top >= floor else '低于'}拒答下限 {floor:.3f}"
    return Grade(relevant=True, answerable=answerable, ambiguous=False, confidence=round(top, 4),
                 route="answer" if answerable else "rewrite", reason=reason, method="offline",
                 weak=not answerable and (floor is None or top >= floor))


def validate_grade(data: JsonObject) -> Grade:
    """The model's reply as a grade, or ValueError naming the first broken field."""
    for key in BOOL_FIELDS:
        if not isinstance(data.get(key), bool):
            raise ValueError(f"字段 {key} 应为布尔值")
    confidence = data.get("confidence")
    if isinstance(confidence, bool) or not isinstance(confidence, (int, float)) or not 0 <= confidence <= 1:
        raise ValueError("字段 confidence 应为 0 到 1 之间的数")
    if data.get("route") not in ROUTES:
        raise ValueError(f"字段 route 应为 {'/'.join(ROUTES)} 之一")
    return Grade(**{key: data[key] for key in BOOL_FIELDS},
                 **{key: str(data.get(key) or "").strip() for key in TEXT_FIELDS},
                 confidence=round(float(confidence), 4), route=data["route"], method="model")


def grade_context(docs: list[Hit]) -> str:
    return "\n\n".join(f"[{i}] {d.get('title', '')}\n{(d.get('content') or '')[:GRADE_PASSAGE_CHARS]}"
                       for i, d in enumerate(docs[:GRADE_PASSAGES], 1))


def model_grade(cfg: QueryConfiguration, question: str, products: list[str], docs: list[Hit],
                fallback: Grade) -> Grade | None:
    """One JSON-mode call (None offline); a failed call or an invalid reply falls back to the rule."""
    llm = cfg.chat_model(json_mode=True)
    if llm is None:
        return None
    user = load_prompt("grade_user", products="、".join(products) or "（未指定）", question=question,
                       context=grade_context(docs))
    try:
        return validate_grade(parse_json_reply(invoke_text(llm, load_prompt("grade_system"), user)))
    except Exception as exc:
        log.warning("grading reply unusable, using the offline rule: %s", exc)
        return replace(fallback, method=f"fallback（{exc}）")


def resolve_route(grade: Grade, has_evidence: bool, *, sub_question: bool, rewrites_left: int) -> Route:
    """Deterministic corrections of the judged route."""
    if not has_evidence or not grade.relevant:
        return "no_knowledge"
    route = grade.route
    if route == "answer" and not grade.answerable:
        route = "rewrite"  # a contradiction: the judged facts win over the judged route
    if route == "rewrite" and (sub_question or rewrites_left <= 0):
        # no second try left: ask back when the question was ambiguous, answer with caution what
        # is weak but above the refusal floor, otherwise say so
        if grade.ambiguous and not sub_question:
            route = "clarify"
        else:
            route = "answer" if grade.weak and not sub_question else "no_knowledge"
    if route == "clarify" and sub_question:
        route = "no_knowledge"  # a sub-question cannot ask the user; the synthesis reports the gap
    return route


def grade_evidence(cfg: QueryConfiguration, question: str, products: list[str], docs: list[Hit], *,
                   sub_question: bool = False, rewrites_left: int = 0) -> Grade:
    scores, scorer = topic_scores(cfg, question, products, docs) if docs else ([], "")
    top = max(scores or [], default=0.0)
    if not docs:
        grade = Grade(relevant=False, answerable=False, ambiguous=False, confidence=0.0,
                      route="no_knowledge", reason="没有检索到任何资料", method="no_evidence")
    else:
        cal = cfg.calibration(scorer)
        floor = cal.refuse_threshold if cfg.settings.offline_refusal else None
        fallback = offline_grade(top, cal.answer_threshold, floor) if scores is not None else unscored_grade()
        grade = model_grade(cfg, question, products, docs, fallback) or fallback
    judged = grade.route
    grade.route = resolve_route(grade, bool(docs), sub_question=sub_question, rewrites_left=rewrites_left)
    if grade.route != judged:
        grade.corrected_from = judged
    grade.top_score = round(top, 4)
    return grade


def interleave(lists: list[list[Hit]]) -> list[Hit]:
    """Passages taken in turns from each list, deduplicated (the higher score kept)."""
    merged: dict[str, Hit] = {}
    for row in zip_longest(*lists):
        for doc in row:
            if doc is None:
                continue
            key = doc.get("chunk_id") or doc.get("url") or doc.get("content", "")
            seen = merged.get(key)
            merged[key] = doc if seen is None else {**seen, "score": max(seen["score"], doc["score"])}
    return list(merged.values())


def merge_evidence(results: list[SubResult]) -> list[Hit]:
    """The kept passages of a split question's branches as one list: the whole question's own list
    first, in its order (what the question unsplit would answer from), then the sub-questions'
    passages in turns, so no sub-question's sources crowd out another's."""
    whole = [d for r in results if r.get("whole") for d in r["docs"]]
    parts = interleave([r["docs"] for r in results if not r.get("whole")])
    return interleave([whole + parts])  # one list: a passage keeps its first place


def keep_found(rewritten: list[Hit], first: list[Hit]) -> list[Hit]:
    """The rewritten retrieval's passages with the first one's taken in turns: a rewrite may find
    more, never drop what the user's own words found."""
    return interleave([rewritten, first])


def strength(grade: Grade) -> int:
    """What the evidence supports: 2 an answer, 1 a cautious answer (weak, above the refusal floor),
    0 none. Only a better decision makes the rewritten set replace the first one: scores a few
    thousandths apart say nothing, and the first set was found with the user's own words."""
    if grade.route == "answer" and not grade.weak:
        return 2
    return 1 if grade.weak else 0


def weak_warning(grade: Grade) -> str:
    """The caution shown with an answer built on weak evidence ("" otherwise)."""
    if grade.route != "answer" or not grade.weak:
        return ""
    return f"资料相关度较低（{grade.confidence:.2f}），说明书里可能没有直接的答案，回答请对照来源核实。"


def no_knowledge_text(products: list[str]) -> str:
    where = f"《{'》《'.join(products)}》的说明书" if products else "知识库"
    return f"抱歉，我在{where}里没有找到能回答这个问题的内容，不想凭猜测回答。可以换个说法，或补充更具体的型号、接口或功能名称再问。"


def clarify_text(grade: Grade) -> str:
    if grade.follow_up:
        return grade.follow_up
    missing = grade.missing or "具体的型号、接口或使用场景"
    return f"为了准确回答，请先补充：{missing}。"
