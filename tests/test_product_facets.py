"""Products by facets and aliases, on a made-up vendor unlike the sample corpora: Zorvex (佐维) makes
two versions of one CAN board, a bigger board, a tablet line and a car; confirmation reads what the
question names, however it is written."""
from __future__ import annotations

import pytest

from api_fixtures import api_client, api_server, wait_task  # noqa: F401 (fixtures)
from graphs.importing import catalog, run_import
from graphs.products import ProductAliases, document_aliases, parse_facets, short_forms
from graphs.query.configuration import QueryConfiguration
from graphs.query.contracts import ProductDecision
from graphs.query.product_match import evidence_products
from graphs.query.nodes.product_confirm import decide, product_aliases, refusal
from services.settings import get_settings
from ui.format import product_facts

CATALOGUE = ["Zorvex KX-9 CAN V1.0", "Zorvex KX-9 CAN V1.1", "Zorvex KX-12", "Zorvex Nimbus Tab 7",
             "Zorvex Nimbus Tab 7 Pro", "Quorra & Vale 03"]
ALIASES = ProductAliases({
    "Zorvex KX-12": [{"alias": "佐维", "of": "brand", "source": "document"}],
    "Zorvex Nimbus Tab 7 Pro": [{"alias": "NTP7", "of": "product", "source": "user", "by": "alice"}],
    "Quorra & Vale 03": [{"alias": "奎维", "of": "brand", "source": "user"}],
})


def ask(question: str) -> ProductDecision:
    return decide(QueryConfiguration(), question, CATALOGUE, [], "", ALIASES)


def test_a_name_splits_into_brand_model_variant_and_version():
    assert parse_facets("Zorvex KX-9 CAN V1.1").as_dict() == {"brand": "Zorvex", "model": "KX-9", "variant": "CAN",
                                                              "version": "V1.1"}
    assert parse_facets("Quorra & Vale 03").as_dict() == {"brand": "Quorra & Vale", "model": "03", "variant": "",
                                                          "version": ""}
    assert parse_facets("Zorvex Nimbus Tab 7 Pro").as_dict() == {"brand": "Zorvex", "model": "Nimbus Tab 7",
                                                                 "variant": "Pro", "version": ""}
    # a lower-case first word is a product line, not its maker
    assert parse_facets("kraftBot 90 Air").as_dict() == {"brand": "", "model": "kraftBot 90", "variant": "Air",
                                                         "version": ""}
    assert "NT7" in short_forms("Zorvex Nimbus Tab 7") and short_forms("kraftBot 90 Air") == []


def test_a_document_names_its_product_and_brand_beside_them():
    text = ("佐维（Zorvex）出品的 Nimbus Tab 7（以下简称“NTab7”）是一款平板。本页用 Python 写示例。\n"
            "Zorvex（佐维科技）的售后电话见背面。是为（Zorvex）")
    found = document_aliases("Zorvex Nimbus Tab 7", text)
    assert {a["alias"]: a["of"] for a in found} == {"NTab7": "product", "佐维科技": "brand", "佐维": "brand"}
    assert document_aliases("Zorvex Nimbus Tab 7", "Python 示例与 Linux 命令。") == []
    # a bracket after the name holds a chip, a version or a variant as often: no alias without "简称"
    assert document_aliases("Zorvex Nimbus Tab 7", "Nimbus Tab 7（ZV9000）与 Nimbus Tab 7（V2）（Pro）") == []


def test_model_and_version_confirm_however_written():
    for question in ("KX-9 V1.1 的主控是什么？", "kx9 can 1.1 版用的是哪颗主控", "Zorvex KX9 v1.1 主频多少"):
        d = ask(question)
        assert (d.branch, d.products) == ("confirmed", ["Zorvex KX-9 CAN V1.1"]), question
    # a short form the name's own words give, and one a person added
    assert ask("NT7 的屏幕多大？").products == ["Zorvex Nimbus Tab 7"]
    assert ask("NTP7 的屏幕多大？").products == ["Zorvex Nimbus Tab 7 Pro"]


def test_candidates_are_only_what_the_question_is_consistent_with():
    d = ask("KX-9 的 CAN 接口怎么接线？")
    assert d.branch == "ask" and sorted(d.candidates) == ["Zorvex KX-9 CAN V1.0", "Zorvex KX-9 CAN V1.1"]
    assert "Zorvex KX-12" not in d.candidates  # a KX-9 question never offers the KX-12


def test_one_consistent_product_is_confirmed_and_the_step_says_so():
    d = ask("奎维的车胎压多少？")  # the brand's only product
    assert (d.branch, d.products, d.candidates) == ("confirmed", ["Quorra & Vale 03"], [])
    assert "只有这一款" in d.why


def test_a_model_not_held_is_refused_naming_what_the_family_holds():
    d = ask("Zorvex KX-15 的主控是什么？")
    assert d.branch == "refuse" and d.candidates == [] and d.products == []
    assert "Zorvex KX-12" in d.held and "Zorvex KX-12" in refusal(CATALOGUE, d.held)
    assert ask("奎维 05 的胎压多少？").held == ["Quorra & Vale 03"]  # a Chinese brand, a model not held
    version = ask("KX-9 V2.0 的主控")  # a held model in a version not held
    assert version.branch == "refuse" and version.held == ["Zorvex KX-9 CAN V1.0", "Zorvex KX-9 CAN V1.1"]


@pytest.mark.parametrize("question", ["Zorvex KX-12 Max 的散热片怎么装？", "KX-12-EVB2 开发套件怎么供电？",
                                      "Nimbus Tab 7 Ultra 的屏幕多大？"])
def test_a_held_name_written_as_the_start_of_a_longer_model_is_refused(question):
    d = ask(question)  # a variant word or a glued-on code: another model of the line, in no document
    assert d.branch == "refuse" and d.products == [] and d.held, d


@pytest.fixture(scope="module")
def kx12_manual(tmp_path_factory):
    """A KX-12 manual that also describes its Max variant (a variant inside its base model's manual)."""
    root = tmp_path_factory.mktemp("kx12")
    settings = get_settings().replace(data_dir=root / "data")
    (root / "kx12.md").write_text(
        "# Zorvex KX-12 用户手册\n\n## 规格\n\nKX-12 使用 Python 脚本配置，支持 24V 供电。\n\n"
        "## 散热\n\nKX-12 Max 版加装了铝制散热片，用 4 颗 M3 螺丝固定在板背面。\n", encoding="utf-8")
    result = run_import(root / "kx12.md", product="Zorvex KX-12", config={"configurable": {"settings": settings}})
    assert result.status == "completed", result.error
    return QueryConfiguration(settings)


def test_a_longer_model_its_held_products_documents_describe_is_that_product(kx12_manual):
    d = decide(kx12_manual, "Zorvex KX-12 Max 的散热片怎么装？", CATALOGUE, [], "", ALIASES)
    assert (d.branch, d.products) == ("confirmed", ["Zorvex KX-12"]) and "文档写到了" in d.why, d
    d = decide(kx12_manual, "Zorvex KX-12 Ultra 的散热片怎么装？", CATALOGUE, [], "", ALIASES)
    assert d.branch == "refuse" and d.held == ["Zorvex KX-12"], d  # a variant its manual never writes


@pytest.mark.parametrize(("question", "product"), [("Zorvex KX-12 Python 示例怎么跑？", "Zorvex KX-12"),
                                                   ("Nimbus Tab 7 Pro 的屏幕多大？", "Zorvex Nimbus Tab 7 Pro"),
                                                   ("Zorvex KX-12-V2 的接口", "Zorvex KX-12")])
def test_a_word_after_a_held_name_that_is_no_model_keeps_it_confirmed(question, product):
    d = ask(question)  # a language, a held variant, a version glued on
    assert (d.branch, d.products) == ("confirmed", [product]), d


def test_a_brand_without_a_model_asks_among_its_products():
    d = ask("佐维的这款平板支持手写笔吗？")
    assert d.branch == "ask" and len(d.candidates) > 1
    assert all(c.startswith("Zorvex") for c in d.candidates)


def test_a_comparison_of_two_resolvable_products_confirms_both():
    d = ask("KX-9 V1.0 和 V1.1 的主控有什么区别？")
    assert d.branch == "confirmed" and sorted(d.products) == ["Zorvex KX-9 CAN V1.0", "Zorvex KX-9 CAN V1.1"]
    pair = ask("Nimbus Tab 7 Pro 和 KX-12 哪个更省电？")
    assert sorted(pair.products) == ["Zorvex KX-12", "Zorvex Nimbus Tab 7 Pro"]


MANUAL = ("# Zorvex KX-9 CAN V1.1 使用手册\n\n佐维（Zorvex）出品。KX-9 CAN V1.1（以下简称“KX9C”）是一块 CAN 扩展板。\n\n"
          "## 主控\n\n主控为 ZV32F4，主频 168MHz。示例代码用 Python 编写。\n")


def test_aliases_over_the_api_stick_through_a_reindex(api_server, env, tmp_path):
    env(DATA_DIR=str(tmp_path / "data"))
    manual = tmp_path / "kx9.md"
    manual.write_text(MANUAL, encoding="utf-8")
    with api_client(api_server.base_url, "alice") as alice, api_client(api_server.base_url, "rita") as rita:
        upload = alice.post("/api/upload", files=[("files", (manual.name, manual.read_bytes(), "text/markdown"))])
        assert wait_task(alice, upload.json()["task_ids"][0])["status"] == "completed"
        (product,) = alice.get("/api/products").json()
        name = product["product"]
        assert (product["brand"], product["model"], product["version"]) == ("Zorvex", "KX-9", "V1.1")
        # what the document writes beside the name and the brand
        assert {a["alias"]: (a["of"], a["source"]) for a in product["aliases"]} == {
            "KX9C": ("product", "document"), "佐维": ("brand", "document")}
        refused = rita.patch(f"/api/products/{name}", json={"aliases": ["小九"]})
        assert refused.status_code == 403
        changed = alice.patch(f"/api/products/{name}", json={"aliases": ["佐维", "小九"]})
        assert changed.status_code == 200, changed.text
        assert {a["alias"]: a["source"] for a in changed.json()["aliases"]} == {"佐维": "document", "小九": "user"}
        assert alice.patch("/api/products/nope", json={"aliases": ["x"]}).status_code == 404
        blank = alice.patch(f"/api/products/{name}", json={"aliases": [" "]})
        assert blank.status_code == 400 and "别名" in blank.json()["error"]
        assert alice.patch(f"/api/products/{name}", json={}).status_code == 422
        reindex = alice.post("/api/reindex")
        assert wait_task(alice, reindex.json()["task_id"])["status"] == "completed"
        (after,) = alice.get("/api/products").json()
        # the person's list stands: their alias stays, the one they removed does not come back
        assert {a["alias"]: a["source"] for a in after["aliases"]} == {"佐维": "document", "小九": "user"}
        renamed = alice.patch(f"/api/products/{name}", json={"new_name": "Zorvex KX-9 CAN 1.1"})
        assert {a["alias"] for a in renamed.json()["aliases"]} == {"佐维", "小九"}
        answer = alice.post("/api/query", json={"query": "小九的主控是什么？"})  # a person's alias names it
        assert answer.status_code == 200, answer.text
        body = answer.json()
        assert (body["branch"], body["products"]) == ("confirmed", ["Zorvex KX-9 CAN 1.1"])


@pytest.mark.parametrize("question", ["佐维 KX-9 CAN V1.0 的主控"])
def test_a_chinese_brand_with_the_model_confirms(question):
    assert ask(question).products == ["Zorvex KX-9 CAN V1.0"]


def test_siblings_told_apart_by_the_end_of_their_code():
    """Codes sharing a long beginning: the rest alone names one, the beginning alone names the family."""
    catalogue = ["Zorvex ZQ7A3", "Zorvex ZQ7B5", "Zorvex ZQ7B5 Max"]
    pick = lambda q: decide(QueryConfiguration(), q, catalogue, [], "", ProductAliases())  # noqa: E731
    assert pick("小号的 B5 续航多久？").products == ["Zorvex ZQ7B5"]
    assert pick("ZQ7-A3 的续航多久？").products == ["Zorvex ZQ7A3"]  # written out, hyphenated
    family = pick("Zorvex ZQ7 的续航多久？")
    assert family.branch == "ask" and len(family.candidates) == 3
    assert pick("Zorvex ZQ9 的续航多久？").branch == "refuse"
    assert pick("Zorvex 36 的续航多久？").branch == "refuse"  # a number after the brand is another model


def test_versions_the_question_does_not_name_are_asked_not_all_confirmed():
    """Two versions whose names are written differently ("PL7面板 V1", "PL7 面板 V2"): a question that
    names neither version asks between them; naming one confirms it; a comparison confirms both."""
    catalogue = ["Corvi PL7面板 V1", "Corvi PL7 面板 V2", "Corvi PL5 面板"]
    pick = lambda q: decide(QueryConfiguration(), q, catalogue, [], "", ProductAliases())  # noqa: E731
    unsure = pick("PL7 面板怎么升级固件？")
    assert unsure.branch == "ask" and sorted(unsure.candidates) == ["Corvi PL7 面板 V2", "Corvi PL7面板 V1"]
    assert pick("PL7 面板 V2 怎么升级固件？").products == ["Corvi PL7 面板 V2"]
    both = pick("PL7 面板 V1 和 V2 有什么区别？")
    assert both.branch == "confirmed" and sorted(both.products) == ["Corvi PL7 面板 V2", "Corvi PL7面板 V1"]


@pytest.mark.parametrize("question", ["树莓派 5 的 GPIO 引脚图在哪里看？", "Raspberry Pi 5 怎么装系统？"])
def test_a_maker_the_catalogue_holds_nothing_of_is_refused(question):
    """A maker of the reviewed brand list, in Latin or Chinese, none of whose products is held: another
    maker's product, refused before any chunk could be taken for evidence."""
    d = ask(question)
    assert d.branch == "refuse" and d.products == [] and "Raspberry Pi" in d.why


def test_a_comparison_of_a_model_and_its_longer_sibling_confirms_both():
    """"PL7 和 PL7 S": read whole, the longer name swallows the shorter; each side names its product."""
    catalogue = ["Corvi PL7", "Corvi PL7 S", "Corvi PL7 Max"]
    d = decide(QueryConfiguration(), "Corvi PL7 和 PL7 S 的内存有什么区别？", catalogue, [], "", ProductAliases())
    assert d.branch == "confirmed" and sorted(d.products) == ["Corvi PL7", "Corvi PL7 S"]


def test_a_category_noun_is_no_facet_however_it_is_glued_on():
    assert parse_facets("HX3控制器 V1").as_dict() == {"brand": "", "model": "HX3", "variant": "", "version": "V1"}
    assert parse_facets("Corvi HX3 控制器 V2").as_dict() == {"brand": "Corvi", "model": "HX3", "variant": "",
                                                             "version": "V2"}
    assert parse_facets("Corvi HX3 Max 控制器").variant == "Max"  # a variant word stays one


HX3_LINE = {  # a controller line as a maker's site leaves it: the old manual and two versioned quick guides
    "Corvi HX3 控制器": "# HX3 控制器说明书\n\n> 注意：本文为旧版说明书，新版内容请见 V1 / V2 快速指南。\n\n"
                      "## 参数\n\n急停输入接 J4 端子，控制器最多保存 500 条运行日志。\n",
    "HX3控制器 V1": "# HX3 控制器 V1 快速指南\n\n## 复位\n\n按住 RST 键 3 秒复位。旧版说明书里的接线图已作废。\n",
    "Corvi HX3 控制器 V2": "# HX3 控制器 V2 快速指南\n\n## 复位\n\n在 App 里点“恢复出厂”复位，Python 脚本也可以。\n",
}


def test_a_manual_that_calls_itself_the_old_edition_says_so_and_one_that_mentions_it_does_not():
    old, v1 = (document_aliases(n, HX3_LINE[n]) for n in ("Corvi HX3 控制器", "HX3控制器 V1"))
    assert {"alias": "旧版", "of": "edition"} in old and not [a for a in v1 if a["of"] == "edition"]
    assert [a["of"] for a in document_aliases("MF1", "# MF1 模块用户手册\n\n！！！ 旧版文档 待更新\n")] == ["edition"]
    assert not document_aliases("Corvi HX3 控制器", "## 旧版手册下载\n\n见官网。")
    late = "# HX3 控制器说明书\n\n" + "急停输入接 J4。\n" * 40 + "本文为旧版说明书。\n"
    assert not document_aliases("Corvi HX3 控制器", late)  # said only at the top


def knowledge_base(root, manuals: dict[str, str]) -> QueryConfiguration:
    """Each product's Markdown manual imported into a knowledge base of its own under `root`."""
    settings = get_settings().replace(data_dir=root / "data")
    for i, (product, text) in enumerate(manuals.items()):
        (root / f"manual{i}.md").write_text(text, encoding="utf-8")
        result = run_import(root / f"manual{i}.md", product=product, config={"configurable": {"settings": settings}})
        assert result.status == "completed", result.error
    return QueryConfiguration(settings)


@pytest.fixture(scope="module")
def hx3_line(tmp_path_factory):
    return knowledge_base(tmp_path_factory.mktemp("hx3"), HX3_LINE)


def test_the_line_named_without_a_version_asks_and_the_old_manual_asked_for_confirms(hx3_line):
    """The name without a version ("HX3 控制器") names the line beside its versions; a category noun in the
    question tells none apart; the old manual the question asks for is the one whose top says it is."""
    catalogue = list(HX3_LINE)
    pick = lambda q: decide(hx3_line, q, catalogue, [], "", product_aliases(hx3_line))  # noqa: E731
    unsure = pick("HX3 控制器怎么复位？")
    assert unsure.branch == "ask" and sorted(unsure.candidates) == sorted(catalogue), unsure
    old = pick("按 HX3 旧版说明书，急停接哪个端子？")
    assert (old.branch, old.products) == ("confirmed", ["Corvi HX3 控制器"]), old
    assert pick("HX3 控制器 V2 怎么复位？").products == ["Corvi HX3 控制器 V2"]
    assert pick("HX3 V1 怎么复位？").products == ["HX3控制器 V1"]
    # the knowledge-base view says what the old manual calls itself
    shown = {p["product"]: product_facts(p) for p in catalog.products(config={"configurable": {"settings": hx3_line.settings}})}
    assert "别名：旧版（文档，文档自称的版次）" in shown["Corvi HX3 控制器"] and "型号：HX3" in shown["HX3控制器 V1"][0]
    # without the documents' own word, "旧版" is no guess at a product
    blind = decide(QueryConfiguration(), "按 HX3 旧版说明书，急停接哪个端子？", catalogue, [], "", ProductAliases())
    assert blind.branch == "ask", blind


def vacuum_manual(model: str, minutes: int, last: str) -> str:
    """Sections long enough to be chunks of their own: the introductions of both models say the same."""
    features = "\n".join(f"{i}. {line}。" for i, line in enumerate([
        "激光导航，扫地时自动建图，可保存三层地图，每层地图可单独设置清扫模式", "App 远程启动清扫、设置禁区与清扫顺序，清扫记录保存 30 天",
        f"电池续航 {minutes} 分钟，电量低于 15% 时自动回充，充满后回到断点继续清扫", "边刷与滚刷可拆洗，滚刷采用防缠绕设计，长发不易缠绕",
        "越障高度 2 厘米，门槛与地毯边缘可直接越过，遇到楼梯自动停下", "支持定时清扫与勿扰时段，勿扰时段内不播放语音",
        "吸力分四档：静音、标准、强力、最大，地毯上自动升到最大档", "语音提示支持中文与英文，音量可在 App 里调节",
        "机身高度 9.5 厘米，可以进入大多数床底与沙发底清扫", "建议每天清扫一次，宠物家庭可每天两次"], 1))
    care = "\n".join(f"- {line}。" for line in [
        "每次清扫后检查边刷是否缠绕头发，必要时用附带的清洁刀割断", "滤网每周用清水冲洗一次，完全晾干后再装回，潮湿的滤网会降低吸力",
        "传感器窗口与回充电极每月用干布擦拭，不要使用酒精或清洁剂", "滚刷轴承处的头发请用镊子取出，取出后顺时针转动检查是否顺畅",
        "长期不用时请充满电后关机存放，每三个月充一次电", "机器放在阴凉干燥处，避免阳光直射与高温环境",
        "边刷变形或磨损后请更换，建议每三到六个月更换一次", "轮子上的毛发与污渍可以用湿布擦掉，擦完后晾干"])
    return (f"# 一、产品介绍\n\nPelvo {model} 是一款扫地机器人，适合 150 平方米以内的家庭使用。\n\n{features}\n\n"
            f"# 二、日常保养\n\n{care}\n\n" + last)


STATION = "\n".join(f"- {line}。" for line in [
    "回充时集尘座自动抽空尘盒，约 10 秒完成，期间请勿抬起机器", "集尘袋装满后集尘座指示灯变红，请打开上盖更换新的集尘袋",
    "集尘袋为一次性耗材，请勿水洗后重复使用，否则会堵塞风道", "一个集尘袋约可使用 60 天，视家庭面积与灰尘多少而定",
    "更换集尘袋时请捏住把手向上提出，新袋的卡片对准卡槽推到底", "集尘座的风道每月检查一次，如有堵塞请用软毛刷清理",
    "集尘座需要放在靠墙处，左右各留 0.5 米、前方留 1.5 米空间", "集尘座的电源线请整理到座体背面的卡槽里，以免被机器卷入"])
DUSTBIN = "\n".join(f"- {line}。" for line in [
    "每次清扫后取出尘盒倒空，按下尘盒上的按钮即可打开盖子", "尘盒可以用清水冲洗，冲洗后完全晾干再装回机器",
    "尘盒里的初效滤网每周清理一次，可轻轻拍打去除灰尘", "尘盒装回时请听到咔哒一声，确认装到位后再开始清扫",
    "尘盒容量 450 毫升，清扫大户型时中途可能需要倒一次", "尘盒与滤网建议每六个月更换一次，可在官方商城购买",
    "清扫细小粉末后请立即倒空尘盒，以免堵塞滤网", "尘盒的密封条如有破损请及时更换，否则会漏灰"])
VACUUMS = {  # two robot vacuums whose introductions say the same; only the RV7 has a dust station
    "Pelvo RV5": vacuum_manual("RV5", 150, f"# 三、尘盒\n\n{DUSTBIN}\n"),
    "Pelvo RV7": vacuum_manual("RV7", 180, f"# 三、集尘座\n\n{STATION}\n"),
}


@pytest.fixture(scope="module")
def vacuums(tmp_path_factory):
    return knowledge_base(tmp_path_factory.mktemp("vacuums"), VACUUMS)


def test_products_tied_on_what_their_introductions_share_are_told_apart_by_what_only_one_holds(vacuums):
    """A question naming no product: both introductions answer its App words alike and best; only one
    manual holds its other word (集尘), so it is that product. Where both hold every word, they stay tied."""
    pick = lambda q: decide(vacuums, q, list(VACUUMS), [], "", ProductAliases())  # noqa: E731
    station = pick("扫地机器人用 App 远程启动清扫和设置禁区时，集尘袋满了会怎样？")
    top = station.evidence[:2]  # the introductions tie at the top
    assert {e["product"] for e in top} == set(VACUUMS) and top[0]["score"] == top[1]["score"], station
    assert (station.branch, station.products, station.method) == ("confirmed", ["Pelvo RV7"], "evidence"), station
    both = pick("扫地机器人能用 App 设置禁区吗？")
    assert both.branch == "ask" and sorted(both.candidates) == ["Pelvo RV5", "Pelvo RV7"], both


def test_tied_products_stay_tied_unless_one_holds_every_word_the_others_do_and_more():
    def entry(product, score, *words):
        return {"product": product, "score": score, "words": list(words)}
    more = [entry("A", 0.6, "主板", "散热"), entry("B", 0.58, "主板", "散热"), entry("A", 0.4, "整机")]
    assert evidence_products(more, 0.5, 0.08) == ["A"]
    different = [entry("A", 0.6, "主板", "散热"), entry("B", 0.58, "主板", "风扇")]
    assert evidence_products(different, 0.5, 0.08) == ["A", "B"]
    apart = [entry("A", 0.6, "主板"), entry("B", 0.4, "主板", "散热")]  # not tied: the score decides
    assert evidence_products(apart, 0.5, 0.08) == ["A"]
