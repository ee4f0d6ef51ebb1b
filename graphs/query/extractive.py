"""The answer without a chat model: the sentences of the top sources that answer the question.

A source is cut into units: a sentence, a numbered or bulleted list or a code block (kept whole), a
table row (shown under its table's header); a unit ending in a colon brings the one it announces.
Units are scored by the share of the question's vocabulary they hold (synonyms included) and, for a
question asking a value, by whether they state it under a name the question uses. The answer leads
with the best line of all, cited; then the best unit of each quoted source with its neighbours and
the few further units that hold nearly as much, the source named above it. The source the ranking
put first is always quoted. Pictures are those of the quoted passages near the quoted lines.
"""
from __future__ import annotations

import re
from dataclasses import dataclass

from graphs.query.contracts import Hit, Source
from graphs.query.retrieval import is_thin
from services.reranker import coverage, query_terms, sentence_coverage, sentences, squashed, value_asked

OFFLINE_NOTE = "（未配置大语言模型，以下是从说明书中直接摘录的相关内容。）"
NOTHING_FOUND = "没有找到相关内容。"
# Chosen on the calibration halves of the QA sets (answer@evidence, bench.retrieval): 2 neighbours
# 0.917 / 0.800 against 1 neighbour 0.917 / 0.733; 3, 4 or 5 sources and a further-source share of
# 0.3 or 0.5 made no difference there (4 sources: the fact of a chunk ranked 4th can still show).
SOURCES = 4
MAX_CITED = 5            # sources an answer may cite (and so chips under it)
PICTURE_LINES = 3        # a picture this many lines or fewer from a quoted line belongs to it
NEIGHBOURS = 2           # units shown on each side of the best one
FURTHER_UNITS = 2        # units quoted from one source outside the best one's neighbours
MAX_UNIT_CHARS = 600     # a longer list or sentence is cut (with an ellipsis)
MAX_SOURCE_CHARS = 700   # what one source may add to the answer
# A further source is quoted only when its best unit holds at least this share of what the best
# source's best unit holds (else it would add noise, not the fact).
FURTHER_SOURCE_SHARE = 0.5
MD_IMAGE = re.compile(r"!\[[^\]\n]*\]\([^)\n]*\)")
CITATION = re.compile(r"\[(\d+)\]")
LIST_ITEM = re.compile(r"^\s*(\d+[.、)）]|[-*+•]\s|[（(]\d+[)）]|第[一二三四五六七八九十\d]+步)")
TABLE_ROW = re.compile(r"^\s*\|")
TABLE_RULE = re.compile(r"^\s*\|?\s*:?-{2,}")
WORD = re.compile(r"[\w\u4e00-\u9fff]")
FENCE = re.compile(r"^\s*(```|~~~)")
INTRO_END = ("：", ":")  # "run this:" - the unit after it is what it announces


@dataclass
class Quote:
    index: int           # the source's number, [n] in the answer
    doc: Hit
    text: str            # what is quoted of it
    lead: str            # its best line, as the answer's first line would show it
    score: float
    near: str            # the lines of its content around the quoted ones (their pictures)


@dataclass
class Unit:
    text: str
    header: str = ""     # a table row's header rows
    heading: str = ""    # the heading above it inside the chunk: says what the unit is about


def units(content: str, title: str = "") -> list[Unit]:
    """The content's units in order; headings (the heading-path prefix line included) and pictures
    are left out. A line after a list item belongs to it until a blank line (Markdown's lazy
    continuation, which is also how PDF text wraps)."""
    lines = [MD_IMAGE.sub("", line).rstrip() for line in content.splitlines()]
    first = lines[0].strip() if lines else ""
    if first and title and title.strip().startswith(first.rstrip("…")):
        lines = lines[1:]
    out: list[Unit] = []
    header: list[str] = []
    listing: list[str] = []

    heading = ""

    def flush_list():
        if listing:
            out.append(Unit("\n".join(listing), heading=heading))
            listing.clear()

    fence: list[str] = []
    for i, line in enumerate(lines):
        if fence or FENCE.match(line):  # a code block is one unit, fences kept so that it shows as code
            flush_list()
            fence.append(line)
            if len(fence) > 1 and FENCE.match(line):
                out.append(Unit("\n".join(fence), heading=heading))
                fence = []
            continue
        if line.lstrip().startswith("#"):
            flush_list()
            heading = line.strip().lstrip("#").strip()
            continue
        if not line.strip():
            flush_list()
            continue
        if TABLE_ROW.match(line):
            flush_list()
            rule_next = i + 1 < len(lines) and TABLE_RULE.match(lines[i + 1])
            if rule_next or TABLE_RULE.match(line):
                header = header + [line] if TABLE_RULE.match(line) else [line]
                continue
            out.append(Unit(line, "\n".join(header), heading))
            continue
        header = []
        if LIST_ITEM.match(line) or listing:
            listing.append(line)
            continue
        out += [Unit(s.strip(), heading=heading) for s in sentences(line) if WORD.search(s)]
    flush_list()
    if fence:
        out.append(Unit("\n".join(fence), heading=heading))
    return out


def focus(terms: list[str], text: str, limit: int) -> str:
    """A long unit: its best line with the lines around it, within `limit` characters."""
    if len(text) <= limit:
        return text
    lines = text.splitlines()
    if FENCE.match(lines[0]):  # cut inside the fences, so that the code block stays closed
        closing = lines[-1] if len(lines) > 1 and FENCE.match(lines[-1]) else lines[0].strip()[:3]
        body = lines[1:-1] if closing == lines[-1] else lines[1:]
        inner = focus(terms, "\n".join(body), limit - len(lines[0]) - len(closing) - 2) if body else ""
        return f"{lines[0]}\n{inner}\n{closing}"
    best = max(range(len(lines)), key=lambda i: (coverage(terms, lines[i]), -i))
    lo = hi = best
    while True:
        grown = False
        for j in (hi + 1, lo - 1):
            if 0 <= j < len(lines) and sum(len(x) + 1 for x in lines[min(lo, j):max(hi, j) + 1]) <= limit:
                lo, hi, grown = min(lo, j), max(hi, j), True
        if not grown:
            break
    shown = "\n".join(lines[lo:hi + 1])
    return shown[:limit] + ("……" if hi < len(lines) - 1 or len(shown) > limit else "")


def lead_line(terms: list[str], unit: Unit, value: bool) -> str:
    """The unit's line that answers: a table row read with its header ("列：值，…"), else the
    unit's best line (a list's item, a sentence); nothing from a code block."""
    if FENCE.match(unit.text):
        return ""
    if unit.header and TABLE_ROW.match(unit.text):
        names = [c.strip() for c in unit.header.splitlines()[0].strip().strip("|").split("|")]
        cells = [c.strip() for c in unit.text.strip().strip("|").split("|")]
        return "，".join(f"{n}：{c}" if n else c for n, c in zip(names, cells) if WORD.search(c))
    lines = [line.strip() for line in unit.text.splitlines() if WORD.search(line)]
    return max(lines, key=lambda line: sentence_coverage(terms, line, value), default="")


def excerpt(terms: list[str], doc: Hit, value: bool = False) -> tuple[float, str, str]:
    """(how much of the question the heading and the best unit hold, quoted text, the best unit's
    answering line): the best unit with its neighbours, and the other units scoring nearly as well,
    in document order; a table row under its table's header."""
    found = units(doc.get("content") or "", doc.get("title") or "")
    if not found:
        return 0.0, "", ""
    # The product's name is in every chunk of its manual, the heading path in every sentence of this
    # one: their words tell no sentence apart (but the heading says how relevant the chunk is).
    name, title = squashed(doc.get("product") or ""), doc.get("title") or ""
    topic = [t for t in terms if t.replace(" ", "") not in name] or terms
    inner = [t for t in topic if t.replace(" ", "") not in squashed(title)] or topic
    scores = [sentence_coverage(inner, u.text, value, u.header, u.heading) for u in found]
    best = max(range(len(found)), key=lambda i: (scores[i], -i))
    # The best unit with its neighbours, and the few units further away that hold nearly as much of
    # the question (the fact is often some sentences after the one that restates the question).
    near = sorted((i for i in range(best - NEIGHBOURS, best + NEIGHBOURS + 1) if 0 <= i < len(found)),
                  key=lambda i: abs(i - best))
    strong = [i for i in sorted(range(len(found)), key=lambda i: (-scores[i], i))
              if i not in near and scores[i] and scores[i] >= FURTHER_SOURCE_SHARE * scores[best]]
    order = list(dict.fromkeys([best, *strong[:FURTHER_UNITS], *near]))
    announced = best + 1 if best + 1 < len(found) and found[best].text.endswith(INTRO_END) else best
    order += [i + 1 for i in order if i + 1 < len(found) and found[i].text.endswith(INTRO_END)]
    order = list(dict.fromkeys([best, announced, *order]))
    texts = {i: focus(inner, found[i].text, MAX_UNIT_CHARS) for i in order}
    used = 0
    # within the source's share of the answer: the best unit and what it announces, then the strong
    # units, then the nearest
    for i in order:
        if i not in (best, announced) and used + len(texts[i]) > MAX_SOURCE_CHARS:
            del texts[i]
            continue
        used += len(texts[i])
    parts, shown_header, last = [], "", None
    for i in sorted(texts):
        unit = found[i]
        if last is not None and i > last + 1:
            parts.append("……")
        text = texts[i]
        if unit.header and unit.header != shown_header:
            text = unit.header + "\n" + text
        shown_header = unit.header
        parts.append(text)
        last = i
    score = sentence_coverage(topic, found[best].text, value, found[best].header, title)
    return score, "\n".join(parts), lead_line(inner, found[best], value)


def heading(i: int, doc: Hit) -> str:
    return f"**[{i}] {doc.get('title', '')}**（{doc.get('product', '')}）"


def near_quote(content: str, quoted: str) -> str:
    """The content's lines within a few lines of a quoted one: where the pictures of the quoted text are."""
    lines = content.splitlines()
    # a long quoted line is shown shortened ("…"): its start still finds its line
    shown = {squashed(MD_IMAGE.sub("", q)).rstrip("…").rstrip(".") for q in quoted.splitlines()} - {""}
    hits = [i for i, line in enumerate(lines)
            if (text := squashed(MD_IMAGE.sub("", line))) and any(text == q or text.startswith(q) for q in shown)]
    keep = {j for i in hits for j in range(i - PICTURE_LINES, i + PICTURE_LINES + 1)}
    return "\n".join(line for j, line in enumerate(lines) if j in keep)


def cited(answer: str, sources: list[Source]) -> list[Source]:
    """The sources (numbered by `index`) that the answer's text cites as [n], in their order, at
    most MAX_CITED: the chips under an answer. A quoted line ("> ...") is the manual's text, and a
    "[3]" in it no citation."""
    own = "\n".join(line for line in answer.splitlines() if not line.lstrip().startswith(">"))
    numbers = {int(n) for n in CITATION.findall(own)}
    return [s for s in sources if s.get("index") in numbers][:MAX_CITED]


def extractive_answer(question: str, docs: list[Hit]) -> tuple[str, list[Quote]]:
    """Offline answer from the ranked sources (their [n] kept) and what it quotes of each: it leads
    with the best answering line of all quoted sources, cited, then quotes each source."""
    terms, value = query_terms(question), value_asked(question)
    local = [(i, d) for i, d in enumerate(docs, 1) if d.get("source", "local") == "local" and not is_thin(d)]
    found = []
    for i, doc in local[:SOURCES]:
        score, text, lead = excerpt(terms, doc, value)
        if text:
            found.append(Quote(i, doc, text, lead, score, near_quote(doc.get("content") or "", text)))
    if not found:
        return f"{OFFLINE_NOTE}\n\n{NOTHING_FOUND}", []
    # The first source is the one the ranking put first, and always quoted; a further source only
    # when it holds nearly as much of the question as the best one.
    top = max(q.score for q in found)
    quoted = [q for j, q in enumerate(found) if not j or q.score >= FURTHER_SOURCE_SHARE * top][:MAX_CITED]
    leader = max(quoted, key=lambda q: (q.score, -q.index))
    lines = [OFFLINE_NOTE, ""]
    if leader.lead:
        lines += [f"{leader.lead} [{leader.index}]", ""]
    for q in quoted:
        lines += [heading(q.index, q.doc), "\n".join(f"> {line}" for line in q.text.splitlines()), ""]
    return "\n".join(lines).rstrip(), quoted
