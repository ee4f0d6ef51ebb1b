"""Product confirmation over ~1,000 products: the token index decides exactly as matching every name."""
from __future__ import annotations

import json

from bench.speed import synthetic_name
from graphs.query.product_match import match_product, normalize, product_index, rank_products
from query_fixtures import QA_FILE, products  # noqa: F401  (fixture)

PRODUCTS = 1000


def catalogue(real: list[str]) -> list[str]:
    return sorted(real + [synthetic_name(p) for p in range(PRODUCTS)])


def questions() -> list[str]:
    qa = [json.loads(line)["question"] for line in QA_FILE.read_text(encoding="utf-8").splitlines() if line.strip()]
    # synthetic names written as users write them: spaced, glued, hyphenated, lower case, brand only,
    # an unknown model of a known brand
    made = []
    for p in range(0, PRODUCTS, 41):
        brand, model, kind = synthetic_name(p).split()
        made += [f"{brand} {model} {kind}怎么接线？", f"{brand}{model.lower()}的固件在哪下载",
                 f"{model[:2]}-{model[2:]} 的供电电压", f"{brand}的{kind}支持哪些接口", f"{brand} ZZ{p} 怎么用"]
    return qa + made


def test_index_decides_exactly_as_matching_every_product(products):
    names = catalogue(list(products))
    index = product_index(tuple(names))
    checked = 0
    for q in questions():
        present = index.present(normalize(q))
        hit = {i for t in present for i in index.by_token[t]}
        for i, name in enumerate(names):
            every = match_product(q, name, index.all_tokens)
            if i in hit:
                assert match_product(q, name, index.all_tokens, present) == every, (q, name)
            else:  # a product sharing no token with the question matches nothing
                assert (every.kind, every.score) == ("none", 0.0), (q, name)
            checked += every.kind != "none"
    assert checked > 100  # the questions did name products


def test_confirmation_among_a_thousand_products_matches_only_names_sharing_a_token(products):
    # Work counted, not timed (the machine's load varies); `python -m bench.speed` prints the time.
    names = catalogue(list(products))
    qs = questions()
    ranked = [rank_products(q, names) for q in qs]
    index = product_index(tuple(names))
    examined = [len({i for t in index.present(normalize(q)) for i in index.by_token[t]}) for q in qs]
    # a brand or a category word alone ("Acme 的开发板") still names a whole line of products
    assert len(names) > 1000 and sum(examined) / len(qs) * 5 < len(names), sum(examined) / len(qs)
    name = synthetic_name(41)
    brand, model, kind = name.split()
    top = ranked[qs.index(f"{brand} {model} {kind}怎么接线？")][0]
    assert (top.name, top.kind) == (name, "full")
    assert product_index(tuple(names)) is product_index(tuple(names))


def test_a_family_mention_asks_among_its_models_and_a_written_out_unknown_model_is_noticed():
    from graphs.query.product_match import names_unknown_model, rank_products

    catalogue = ["Radxa E20C", "Radxa E20C Lite", "Radxa E52C"]
    family = {m.name: m.kind for m in rank_products("E20C 系列怎么刷机？", catalogue)}
    assert family == {"Radxa E20C": "family", "Radxa E20C Lite": "partial"}
    # with no other model of the family the family is that one product
    assert [(m.name, m.kind) for m in rank_products("E52C 系列怎么刷机？", catalogue)] == [("Radxa E52C", "full")]
    assert [m.kind for m in rank_products("Radxa E20C Lite 怎么刷机？", catalogue) if m.name == "Radxa E20C Lite"] == ["full"]
    assert names_unknown_model("Orange Pi 5 Plus 怎么装系统？", catalogue)
    assert names_unknown_model("StarFive VisionFive 2 怎么更新固件？", catalogue)
    assert not names_unknown_model("USB Type-C 3.0 接口在哪？", catalogue)
    assert not names_unknown_model("Wi-Fi 6 怎么连接？", catalogue)
    assert not names_unknown_model("Radxa E20C 2.5G 网口", catalogue)
    assert not names_unknown_model("StarFive JH7110 的板子串口怎么接？", catalogue)  # a chip, written by the manuals


def test_decisions_for_an_unknown_product_and_a_family():
    from graphs.query.configuration import QueryConfiguration
    from graphs.query.nodes.product_confirm import decide

    cfg = QueryConfiguration()
    catalogue = ["Radxa E20C", "Radxa E52C", "AITO M9"]
    assert decide(cfg, "Orange Pi 5 Plus 怎么装系统？", catalogue, [], "").branch == "refuse"
    asked = decide(cfg, "E20C 系列和别的有什么不同？", ["Radxa E20C", "Radxa E20C Lite"], [], "")
    assert asked.branch == "ask" and set(asked.candidates) == {"Radxa E20C", "Radxa E20C Lite"}
