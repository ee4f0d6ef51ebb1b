"""Product names weighed on evidence, on documents written here (shaped unlike the sample corpus): three
near-twin robot arms whose folders hold pages named alike and whose pages all speak of Python, a brand
joined by "&", a board's peripheral page, a page uploaded alone beside its siblings, and a person's
rename that survives the same file uploaded again."""
from __future__ import annotations

from pathlib import Path

import pytest

from import_fixtures import fresh_data  # noqa: F401 (fixture)
from graphs.importing import catalog, import_set, iter_import_files, run_import, stage_uploads
from graphs.importing.naming import Proposal, decide, offline_product
from graphs.importing.recognition import plan_set
from services.settings import get_settings
from ui.format import set_summary

# folder -> (how its introduction writes the model, how its other pages write it, its controller)
ARMS = {"mykite-450-pi": ("Veltro myKite 450 Pi", "450 Pi", "树莓派 4B"),
        "mykite-450-m5": ("Veltro myKite 450 M5", "450 M5", "M5Stack Basic"),
        "mykite-450-uno": ("Veltro myKite 450 Uno 版", "Uno 版", "Arduino Uno")}
ARM_NAMES = {"mykite-450-pi": "Veltro myKite 450 Pi", "mykite-450-m5": "Veltro myKite 450 M5",
             "mykite-450-uno": "Veltro myKite 450 Uno"}
CAR = ("# 车主手册\n\n欢迎您选择 Kestrel & Co Model 7。\n\n## 远程控制\n\n下载 Kestrel & Co App 后可以远程解锁 Model 7。"
       "Kestrel & Co App 也能查看电量。\n\n## 充电\n\nModel 7 支持 11 kW 交流充电。\n")


def write(path: Path, text: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text, encoding="utf-8")
    return path


@pytest.fixture(scope="module")
def arm_site(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("arms")
    for folder, (full, short, board) in ARMS.items():
        write(root / folder / "1-ProductIntroduction.md", f"# 产品介绍\n\n{full} 是一款六轴桌面机械臂，主控为 {board}。\n\n"
              f"## 参数\n\n{short} 的臂展 450 mm，负载 250 g。可以用 Python 编程控制 {short}。\n")
        write(root / folder / "2-python-api.md", f"# Python API\n\n安装 Python 库 pyveltro：`pip install pyveltro`。\n\n"
              f"## 连接\n\n用 Python 打开串口后，{short} 的 LED 变绿。Python 3.8 以上可用。\n")
        write(root / folder / "3-faq.md", f"# 常见问题\n\n## Python 连接不上怎么办？\n\n"
              f"检查 {short} 的 USB 线；Python 程序需要串口权限。\n")
    return root


@pytest.fixture(scope="module")
def board_site(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("board")
    write(root / "orbit" / "introduction.md", "# Tamsin Orbit S2 开发板\n\nTamsin Orbit S2 是一款带麦克风和扬声器的开发板。"
          "\n\n## 规格\n\nOrbit S2 的主频 240 MHz。\n")
    write(root / "orbit" / "pinout.md", "# 引脚说明\n\nOrbit S2 的 D0~D10 可作 GPIO。\n")
    write(root / "orbit" / "record_audio.md", "# Record Audio\n\n用板载麦克风录音。Record Audio 示例会把声音存到 SD 卡。\n\n"
          "## 运行 Record Audio 示例\n\n在 Arduino IDE 打开 Record Audio 示例，上传后按下按键开始录音。"
          "Record Audio 模块需要 16 kHz 采样率。\n")
    return root


def test_near_twin_folders_are_named_by_the_model_code_not_by_what_they_share(arm_site):
    plan = plan_set(iter_import_files([arm_site]), arm_site)
    assert len(plan) == 9
    for p in plan:
        folder = p.path.parent.name
        assert (p.product, p.how, p.backed) == (ARM_NAMES[folder], "folder", True), (p.path, p.product)


def test_near_twins_uploaded_flat_keep_their_model_codes_and_ask_where_unsure(arm_site):
    plan = plan_set(iter_import_files([arm_site]), None)  # uploads carry no folders
    shared = {"python", "python api", "m5", "pi", "uno", "arduino", "m5stack"}
    for p in plan:
        assert p.product.lower() not in shared, p
        assert "450" in p.product, p  # the words that tell the siblings apart
    for p in plan:
        code = p.path.parent.name.split("-")[-1]
        if p.how == "named":
            assert p.product.lower().endswith(code), (p.path, p.product)
        else:  # a page whose own words name no model is a guess, and asked
            assert p.how == "weak" and "请确认" in p.evidence, p
    assert not any(p.backed for p in plan)  # no title names a model: every name is to be confirmed


def test_a_peripheral_page_of_a_board_joins_the_board(board_site):
    for root in (board_site, None):
        plan = {p.path.name: p for p in plan_set(iter_import_files([board_site]), root)}
        assert {p.product for p in plan.values()} == {"Tamsin Orbit S2"}, plan
        assert plan["introduction.md"].backed
        assert not plan["record_audio.md"].backed  # the section's heading backs nothing: asked


@pytest.mark.parametrize("text, expected", [
    ("# Model 7 车主手册\n\n欢迎您选择 Kestrel & Co Model 7。Model 7 支持快充。\n", "Kestrel & Co Model 7"),
    ("# HL-2 说明书\n\nGrove-Tech HL-2 是一款扫描枪。HL-2 支持蓝牙。\n", "Grove-Tech HL-2"),
    ("# Pad 3 使用指南\n\nA.B.Tek Pad 3 是一款平板。Pad 3 支持手写笔。\n", "A.B.Tek Pad 3"),
])
def test_a_brand_written_with_ampersand_hyphen_or_dots_stays_whole(tmp_path, text, expected):
    path = write(tmp_path / "manual.md", text)
    assert offline_product(text, [], path.stem, path) == expected


def test_a_manual_whose_title_names_nothing_keeps_its_brand_whole_and_asks(fresh_data, tmp_path):
    result = run_import(write(tmp_path / "owner-manual.md", CAR))
    assert result.status == "completed", result.error
    assert result.product == "Kestrel & Co Model 7"
    assert "Co App" not in result.product
    # nothing but the body names it: the summary asks, saying what it went by
    assert result.product_confirm and "Kestrel & Co Model 7" in result.product_evidence
    lines = set_summary([{"file": "owner-manual.md", "product": result.product, "how": result.product_how,
                          "confirm": result.product_confirm, "evidence": result.product_evidence}]).split("\n")
    assert f"- 《owner-manual.md》归入 Kestrel & Co Model 7（依据：{result.product_evidence}；" \
           "没有标题、front matter 或同名文件夹佐证），请确认" in lines


def test_a_titled_manual_is_not_asked(fresh_data, tmp_path):
    result = run_import(write(tmp_path / "hl2.md", "# Grove-Tech HL-2 扫描枪说明书\n\n## 配对\n\nHL-2 长按按键配对。\n"))
    assert (result.product, result.product_confirm) == ("Grove-Tech HL-2 扫描枪", False)
    assert "标题" in result.product_evidence


def upload(path: Path, name: str | None = None):
    with path.open("rb") as stream:
        return stage_uploads([(name or path.name, stream)], get_settings())


def test_a_page_uploaded_alone_joins_its_siblings_never_its_stem(fresh_data, arm_site):
    results = import_set(iter_import_files([arm_site]), root=arm_site)
    assert sorted({r.product for r in results}) == sorted(ARM_NAMES.values())
    for page in ("1-ProductIntroduction.md", "2-python-api.md"):
        staged = upload(arm_site / "mykite-450-m5" / page)
        [alone] = import_set([staged[0].path], staged=staged)
        assert alone.status == "completed", alone.error
        assert alone.product == "Veltro myKite 450 M5", (page, alone.product)
        assert alone.product_how == "known" and alone.product_confirm  # the body, not a title, says so
        assert "知识库已有" in alone.product_evidence
    assert sorted(p["product"] for p in catalog.products()) == sorted(ARM_NAMES.values())
    # a new sibling whose title writes its own model is that model, though it speaks of a held one
    newer = write(arm_site.parent / "pro" / "intro.md", "# Veltro myKite 450 Pro 快速上手\n\n比 450 M5 更快；"
                  "450 M5 的配件通用。\n")
    assert run_import(newer).product == "Veltro myKite 450 Pro"


def test_a_page_naming_no_held_product_is_asked_not_named_by_its_stem(fresh_data, tmp_path):
    page = write(tmp_path / "1-ProductIntroduction.md", "# 产品介绍\n\n本页介绍外观与包装清单。\n")
    result = run_import(page)
    assert result.status == "completed", result.error
    assert result.product_confirm and "请确认" in result.product_evidence


def test_a_rename_move_or_merge_sticks_when_the_same_file_comes_again(fresh_data, tmp_path):
    manual = write(tmp_path / "owner-manual.md", CAR)
    first = upload(manual)
    [done] = import_set([first[0].path], staged=first)
    assert done.product == "Kestrel & Co Model 7"
    catalog.rename_product("Kestrel & Co Model 7", "Kestrel Model 7 旅行版", updated_by="tester")

    again = upload(manual)  # the same bytes under the same name
    [second] = import_set([again[0].path], staged=again)
    assert (second.product, second.product_how, second.product_confirm) == ("Kestrel Model 7 旅行版", "remembered", False)
    record = catalog.document(second.doc_id)
    assert (record["product"], record["product_source"]) == ("Kestrel Model 7 旅行版", "remembered")

    # the same content under another file name carries the decision too, and so does it a third time
    renamed = upload(manual, "车主手册-副本.md")
    [third] = import_set([renamed[0].path], staged=renamed)
    assert third.product == "Kestrel Model 7 旅行版" and third.doc_id != second.doc_id
    catalog.move_document(third.doc_id, "Kestrel Model 7", updated_by="tester")
    copy = upload(manual, "车主手册-副本.md")
    [fourth] = import_set([copy[0].path], staged=copy)
    assert (fourth.product, fourth.doc_id) == ("Kestrel Model 7", third.doc_id)


def test_a_changed_file_under_the_same_name_is_recognised_afresh(fresh_data, tmp_path):
    manual = write(tmp_path / "owner-manual.md", CAR)
    first = upload(manual)
    import_set([first[0].path], staged=first)
    catalog.rename_product("Kestrel & Co Model 7", "别的名字", updated_by="tester")
    write(manual, CAR.replace("Model 7", "Model 9"))  # a new edition: other content, other document
    second = upload(manual)
    [result] = import_set([second[0].path], staged=second)
    assert result.product == "Kestrel & Co Model 9"


def test_the_order_in_which_name_sources_win():
    valid = {"Orvan X3", "Orvan X3 路由器"}
    asked: list[str] = []

    def source(name: str, key: str, backed: bool = True):
        def make():
            asked.append(key)
            return Proposal(key, name, key, f"{key} 的依据", backed)
        return make

    everyone = {"user": source("我起的名字", "user"), "remembered": source("以前的名字", "remembered"),
                "set": source("Orvan X3", "set"), "llm": source("Orvan X3 路由器", "llm"),
                "offline": source("Orvan X3", "offline")}
    accept = valid.__contains__
    assert decide(everyone, accept).product == "我起的名字" and asked == ["user"]  # nothing else is asked
    assert decide({k: v for k, v in everyone.items() if k != "user"}, accept).product == "以前的名字"
    assert decide({"llm": source("手册", "llm"), "offline": source("Orvan X3", "offline", False)}, accept).product == "Orvan X3"
    nothing = decide({"llm": source("1-ProductIntroduction", "llm")}, accept)
    assert (nothing.product, nothing.confirm) == ("", True) and "请确认" in nothing.evidence
    assert decide({"offline": source("Orvan X3", "offline", False)}, accept).confirm


def test_two_siblings_uploaded_together_keep_their_own_titles(tmp_path):
    """A board titled by its bare model word ("# Wren") beside its bigger sibling ("# Wren512M"): with
    no third sibling the bare word is no product line's brand, yet the page's own title, written after
    its brand in the text, names it; it never takes its sibling's name."""
    small = write(tmp_path / "wren.md", "---\nsidebar_label: 'Wren (RK-7)'\n---\n\n# Wren\n\n"
                  "Kestrel Wren 是一款基于 RK-7 芯片的开发板，运行 Linux。\n\n## 供电\n\nWren 用 USB 供电。\n\n"
                  "## 引脚\n\nWren 有 26 个引脚。\n")
    big = write(tmp_path / "wren512m.md", "# Wren512M\n\nKestrel Wren512M 在 Wren 的基础上把内存加到 512M。\n\n"
                "## 供电\n\nWren512M 用 USB 供电。\n\n## 内存\n\nKestrel Wren 512M 带 512M 内存。\n")
    plan = {p.path.name: p for p in plan_set([small, big])}
    assert (plan["wren.md"].product, plan["wren512m.md"].product) == ("Kestrel Wren", "Kestrel Wren512M")
