"""Products recognised across a set of documents: documentation-site pages, flat uploads, and a
site shaped differently from the sample one."""
from __future__ import annotations

import re
from pathlib import Path

import markdown
import pytest

from conftest import CORPUS
from import_fixtures import fresh_data  # noqa: F401 (fixture)
from graphs.importing import iter_import_files
from graphs.importing.recognition import is_valid_name, plan_set, with_maker

DOCS = CORPUS / "milkv-docs"


def manifest() -> dict[str, str]:
    """page path (relative to milkv-docs) -> its true product, from the corpus MANIFEST."""
    rows = re.findall(r"^\| `milkv-docs/([^`]+)` \| ([^|]+?) \|$", (CORPUS / "MANIFEST.md").read_text(encoding="utf-8"),
                      re.MULTILINE)
    return dict(rows)


def names_of(plan, root: Path) -> dict[str, str]:
    return {str(p.path.relative_to(root)): p.product for p in plan}


def test_a_documentation_site_folder_gives_exactly_its_three_products():
    truth = manifest()
    assert len(truth) == 33
    got = names_of(plan_set(iter_import_files([DOCS]), DOCS), DOCS)
    # The rule: every page carries its MANIFEST product, written brand first as the site does.
    assert got == truth
    assert sorted(set(got.values())) == ["Milk-V Jupiter", "Milk-V Mars", "Milk-V Mars CM"]


def test_the_same_pages_as_flat_attachments_group_where_they_name_their_product():
    truth = manifest()
    plan = plan_set(iter_import_files([DOCS]), None)  # uploads carry no folders
    named = {str(p.path.relative_to(DOCS)): p for p in plan if p.how == "named"}
    assert len(named) >= 24
    assert all(p.product == truth[k] for k, p in named.items()), {k: p.product for k, p in named.items()}
    # pages that never say which product stay provisional and are asked about, never silently named
    others = [p for p in plan if p.how != "named"]
    assert others and all(p.how == "weak" and "请确认" in p.evidence for p in others)
    assert {p.product for p in plan} <= set(truth.values())


def _write(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text, encoding="utf-8")


@pytest.fixture(scope="module")
def mini_pc_site(tmp_path_factory) -> Path:
    """Two network mini-PCs in another site's shape: `title` front matter, pages named alike in both
    folders, model codes with digits, a hash-named page, a page that never names its model."""
    root = tmp_path_factory.mktemp("site")
    for model, port in (("E20C", "2.5G"), ("E52C", "双 2.5G")):
        folder = root / model.lower()
        _write(folder / "introduction.md", f"---\ntitle: 产品简介\nsidebar_position: 1\n---\n\n# 产品主要特性\n\n"
               f"Radxa {model} 是一款紧凑的网络小主机，提供 {port} 网口。\n\n## 规格\n\n{model} 支持 Wi-Fi。\n")
        _write(folder / "quick-start.md", f"---\nsidebar_label: 快速上手\n---\n\n# 快速上手\n\n"
               f"准备一根 USB Type-C 线，给 {model} 上电。\n\n## 登录\n\n{model} 默认地址为 192.168.100.1。\n")
        _write(folder / "interface-usage.md", "# 接口使用\n\n## 网口\n\n靠近电源的网口为 WAN 口。\n")
        _write(folder / "power-supply.md", f"# 供电\n\n{model} 使用 12V DC 供电，{model} 的功耗小于 10W。\n")
        _write(folder / "faq.md", f"# US {model} 常见问题\n\n## 怎么恢复出厂设置？\n\n长按 RESET 键 10 秒。\n")
        _write(folder / "0f3b9c2a7d1e4b5f8a6c9d0e1f2a3b4c.md", f"# 快速上手\n\n将 Radxa {model} 接入路由器。\n")
    return root


def test_a_differently_shaped_site_gets_its_model_names(mini_pc_site):
    got = names_of(plan_set(iter_import_files([mini_pc_site]), mini_pc_site), mini_pc_site)
    assert len(got) == 12
    for page, name in got.items():
        assert name == ("Radxa E20C" if page.startswith("e20c/") else "Radxa E52C"), (page, name)
    flat = plan_set(iter_import_files([mini_pc_site]), None)
    named = [p for p in flat if p.how == "named"]
    assert len(named) == 10 and all(p.product.endswith(p.path.parent.name.upper()) for p in named)


def test_no_recognised_name_is_a_stem_a_heading_a_generic_noun_or_a_hash(mini_pc_site):
    generic = {"汽车", "产品", "常见问题", "使用手册", "产品主要特性", "快速上手"}
    for root in (DOCS, mini_pc_site, CORPUS / "milkv-duo", CORPUS / "sipeed-mf"):
        files = iter_import_files([root])
        for p in plan_set(files, root) + plan_set(files, None):
            if not p.product:
                continue
            stems = {f.stem.lower() for f in files}
            headings = {h.strip().lower() for f in files if f.suffix == ".md"
                        for h in re.findall(r"^##+\s+(.+)$", f.read_text(encoding="utf-8"), re.MULTILINE)}
            assert p.product.lower() not in stems | headings | generic, p
            assert not re.fullmatch(r"[0-9a-f]{12,}", p.product.replace(" ", ""), re.IGNORECASE), p
            assert re.search(r"[A-Za-z]+\d|\d+[A-Za-z]|[A-Z][a-z]+", p.product), p


def test_a_proposed_name_must_be_one_the_documents_use():
    from graphs.importing.recognition import read_page

    page = read_page("x.md", "# 华为 AX3 Pro 路由器\n\n## 复位\n\nAX3 Pro 路由器长按复位键。\n")
    assert is_valid_name("华为 AX3 Pro", [page])
    assert not is_valid_name("TP-Link AX3000", [page])            # words the document never writes
    assert not is_valid_name("复位", [page])                       # no model word at all
    assert not is_valid_name("quick-start", [page], {"quick-start"})  # the file stem
    assert not is_valid_name("0f3b9c2a7d1e4b5f8a6c", [page])       # a hash


@pytest.mark.parametrize("text, expected", [
    ("# 华为 AX3 Pro 路由器\n## 复位\n\n长按 RESET 键 5 秒，AX3 Pro 恢复出厂设置。\n", "华为 AX3 Pro 路由器"),
    ("# HEAD-10K 控制器\n## 标题 0\n\nHEAD-10K 控制器接线如下。HEAD-10K 支持 24V。\n", "HEAD-10K 控制器"),
    ("# BIGTREETECH\n## SKR MINI E3 V2.0\n### 主板使用说明书\n\nSKR MINI E3 V2.0 主板参数。\n",
     "BIGTREETECH SKR MINI E3 V2.0 主板"),
])
def test_a_single_manual_is_named_by_its_title_block_not_its_sections(tmp_path, text, expected):
    from graphs.importing.naming import offline_product

    path = tmp_path / "manual.md"
    path.write_text(text, encoding="utf-8")
    assert offline_product(text, [], path.stem, path) == expected


def test_a_manual_titled_with_a_generic_noun_is_named_by_the_model_it_writes(fresh_data, tmp_path):
    from graphs.importing import run_import

    doc = tmp_path / "owner-manual.md"
    doc.write_text("# 汽车使用手册\n\n欢迎您选择 AITO M9。本手册介绍 M9 汽车的驾驶与保养。\n\n## 蓝牙电话\n\n"
                   "M9 的中控屏可以连接蓝牙电话：打开蓝牙，选择车辆名称配对。\n\n## 充电\n\nM9 支持快充。\n",
                   encoding="utf-8")
    result = run_import(doc)
    assert result.status == "completed", result.error
    assert result.product == "AITO M9", result.product


def test_the_same_site_saved_as_web_pages_gives_the_same_products(tmp_path):
    """The documentation site as a browser saves it: each page HTML with the site's menu around it,
    its front-matter label as the page title, in the same folders."""
    truth = manifest()
    site = tmp_path / "site"
    menu = "".join(f'<li><a href="/docs/{Path(k).with_suffix(".html")}">{Path(k).stem}</a></li>' for k in truth)
    for key in truth:
        text = (DOCS / key).read_text(encoding="utf-8")
        label = re.search(r"^sidebar_label:\s*['\"]?(.+?)['\"]?\s*$", text, re.MULTILINE)
        body = markdown.markdown(re.sub(r"\A---\n.*?\n---\n", "", text, flags=re.DOTALL),
                                 extensions=["tables", "fenced_code"])
        page = site / Path(key).with_suffix(".html")
        page.parent.mkdir(parents=True, exist_ok=True)
        page.write_text(f"<html><head><title>{label.group(1) if label else Path(key).stem} | Milk-V</title></head>"
                        f"<body><nav><ul>{menu}</ul></nav><main><article>{body}</article></main>"
                        "<footer>Copyright © 2026 Milk-V</footer></body></html>", encoding="utf-8")
    got = names_of(plan_set(iter_import_files([site]), site), site)
    assert got == {str(Path(k).with_suffix(".html")): v for k, v in truth.items()}
    # as flat attachments, a third of them web pages, they are read as their Markdown would be
    keys = sorted(truth)
    mixed = [site / Path(k).with_suffix(".html") for k in keys[:11]] + [DOCS / k for k in keys[11:]]
    as_markdown = [(p.product, p.how) for p in plan_set([DOCS / k for k in keys], None)]
    assert [(p.product, p.how) for p in plan_set(mixed, None)] == as_markdown



def test_a_name_the_set_also_writes_after_its_makers_words_is_that_product():
    names = {"Nova Labs ORB K7", "Nova Labs ORB K9", "ORB K7", "Mars", "Mars CM", "CM", "Duo", "Zorvex Duo", "Ace Duo"}
    # "Nova Labs" stands before two names; "Mars" is a model's word; "Duo" has two makers' names
    assert with_maker(names) == {"ORB K7": "Nova Labs ORB K7"}
    assert with_maker({"Zero 2 W", "Raspberry Pi Zero 2 W"}) == {"Zero 2 W": "Raspberry Pi Zero 2 W"}  # a reviewed maker
    assert with_maker({"Duo", "Zorvex Duo"}) == {}  # one name after an unknown word: no evidence of a maker


def test_a_wiki_whose_folders_and_titles_write_the_maker_differently_gives_one_name_per_board():
    """Folder `SeeedStudio_XIAO_ESP32C3` names "XIAO ESP32C3", a page's title "Seeed Studio XIAO
    ESP32C3": the MANIFEST's true product for every page."""
    root = CORPUS / "seeed-xiao"
    truth = dict(re.findall(r"^\| `([^`]+\.md)` \|.*\| ([^|]+?) \|$", (root / "MANIFEST.md").read_text(encoding="utf-8"),
                            re.MULTILINE))
    got = names_of(plan_set([p for p in iter_import_files([root]) if p.name != "MANIFEST.md"], root), root)
    # the S3 pages' truth names the series they cover; the documents write the series "XIAO ESP32-S3"
    expected = {page: "Seeed Studio XIAO ESP32-S3" if "ESP32S3" in page else truth[page] for page in truth}
    assert got == expected, got
