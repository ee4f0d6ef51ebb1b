"""Parent sections on demand, as a measured variant (kept out of the query graph: it did not win).

When two or more kept passages share a parent heading, the whole section under it replaces them,
at the best one's place, if it fits; `bench.retrieval` and `bench.grading` measure the effect.
"""
from __future__ import annotations

from collections import defaultdict

from services.vector_store import eq_filter, get_vector_store

SECTION_MIN_HITS = 2
SECTION_FIELDS = ["chunk_id", "content", "title", "parent_title", "doc_id", "product"]


def with_sections(docs: list[dict], max_chars: int) -> list[dict]:
    """Kept passages with every group of SECTION_MIN_HITS+ sharing (document, parent heading)
    replaced, at its best passage's place, by the whole section (its heading's own passage and every
    passage under it, in document order) when that fits in `max_chars`."""
    groups: dict[tuple, list[dict]] = defaultdict(list)
    for d in docs:
        if d.get("doc_id") and d.get("parent_title"):
            groups[(d["doc_id"], d["parent_title"])].append(d)
    store = get_vector_store()
    out, done = [], set()
    for d in docs:
        key = (d.get("doc_id"), d.get("parent_title"))
        if len(groups.get(key, [])) < SECTION_MIN_HITS:
            out.append(d)
            continue
        if key in done:
            continue
        done.add(key)
        rows = [r for r in store.query(store.chunks, eq_filter("doc_id", key[0]), SECTION_FIELDS)
                if r["parent_title"] == key[1] or r["title"] == key[1]]
        text = "\n\n".join(r["content"] for r in sorted(rows, key=lambda r: int(r["chunk_id"])))
        if len(text) > max_chars:
            out.extend(groups[key])
        else:
            out.append({**d, "title": key[1], "content": text})
    return out
