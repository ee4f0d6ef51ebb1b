"""graphs/importing/chunking.py: plain rule, smart mode, HTML clean-up, the real corpus, conformance."""
import importlib.util
import re
import subprocess
import sys
from pathlib import Path

import pytest

from bench.shared import SHARED
from graphs.importing.chunking import (NO_TITLE, conformance_split, html_to_markdown,
                                       normalize_newlines, split_markdown)

ROOT = Path(__file__).resolve().parents[1]
CHECKER = SHARED / "conformance" / "md_split_check.py"
CORPUS_FILES = sorted((SHARED / "corpus" / "milkv-duo").glob("*.md")) + sorted(
    (SHARED / "corpus" / "sipeed-mf" / "zh_CN").glob("*.md"))
needs_shared = pytest.mark.skipif(not CHECKER.exists() or not CORPUS_FILES,
                                  reason="shared corpus/conformance checker not present")


def titles(chunks):
    return [c["title"] for c in chunks]


def squeeze(text):
    return "".join(text.split())


def sentences(n, tag="句"):
    return "".join(f"第{i}{tag}：检查电源适配器输出是否为 5V 并确认接线牢固。" for i in range(n))


# --- plain rule --------------------------------------------------------------------------------

def test_normalize_newlines():
    assert normalize_newlines("a\r\nb\rc\n") == "a\nb\nc\n"


@pytest.mark.parametrize("eol", ["\r\n", "\r"])
def test_crlf_and_cr_split_like_lf(eol):
    text = eol.join(["# 电源", "输入 5V", "", "## 接口", "USB-C"])
    chunks = split_markdown(text, "手册", mode="plain")
    assert titles(chunks) == ["电源", "接口"]
    assert chunks[0]["content"] == "电源\n\n输入 5V"
    assert not any("\r" in c["content"] for c in chunks)


@pytest.mark.parametrize("text", [
    "# A\n```bash\n# not a heading\n```\n# B\nx",
    "# A\n~~~\n# not a heading\n~~~\n# B\nx",
    "# A\n````md\n```\n# not a heading\n```\n````\n# B\nx",      # shorter inner fence stays inside
    "# A\n```\n~~~\n# not a heading\n~~~\n```\n# B\nx",           # ~~~ never closes ```
    "# A\n```\n``` python\n# not a heading\n```\n# B\nx",         # an info string does not close
    "# A\n   ```\n# not a heading\n   ```\n# B\nx",               # indented 3 spaces
], ids=["backtick", "tilde", "four-backtick", "tilde-in-backtick", "info-string", "indented"])
@pytest.mark.parametrize("mode", ["plain", "smart"])
def test_hash_lines_inside_fences_are_not_headings(text, mode):
    chunks = split_markdown(text, "doc", mode=mode)
    assert not any("not a heading" in c["title"] for c in chunks)
    assert any("# not a heading" in c["content"] for c in chunks)
    if mode == "plain":
        assert titles(chunks) == ["A", "B"]


def test_unclosed_fence_runs_to_end():
    chunks = split_markdown("# Intro\n```\n# a\n# b\n", "doc", mode="plain")
    assert titles(chunks) == ["Intro"]


@pytest.mark.parametrize("mode", ["plain", "smart"])
def test_no_heading_is_one_section_titled_wu_biaoti(mode):
    chunks = split_markdown("只有正文，没有标题。\n\n第二段。", "说明书", mode=mode)
    assert chunks == [{"title": NO_TITLE, "content": f"{NO_TITLE}\n\n只有正文，没有标题。\n\n第二段。",
                       "parent_title": NO_TITLE, "part": 1, "page_start": 0, "page_end": 0}]
    assert titles(split_markdown("", "说明书", mode=mode)) == [NO_TITLE]


def test_text_before_first_heading_is_a_section_titled_by_file():
    chunks = split_markdown("前言一句。\n\n# 第一章\n正文", "Duo 手册", mode="plain")
    assert titles(chunks) == ["Duo 手册", "第一章"]
    assert chunks[0]["content"] == "Duo 手册\n\n前言一句。"


def test_long_section_split_into_titled_parts():
    body = "\n\n".join(sentences(20, f"段{p}句") for p in range(10))  # ~6000 chars
    chunks = split_markdown(f"# 串口调试\n\n{body}", "doc", mode="plain")
    assert len(chunks) >= 3
    assert titles(chunks) == [f"串口调试-{i}" for i in range(1, len(chunks) + 1)]
    assert [c["part"] for c in chunks] == list(range(1, len(chunks) + 1))
    assert all(c["parent_title"] == "串口调试" for c in chunks)
    assert all(c["content"].startswith("串口调试\n\n") and len(c["content"]) <= 2000 for c in chunks)
    # Cuts fall on sentence/paragraph ends: every sentence survives whole in exactly one chunk.
    for sentence in body.replace("\n\n", "").split("。")[:-1]:
        assert sum(sentence + "。" in c["content"] for c in chunks) == 1


def test_short_pieces_of_one_section_are_merged_without_repeating_the_prefix():
    table = "\n".join(f"| GP{i} | PWR_GPIO[{i}] | 3.3V 逻辑电平 |" for i in range(65))  # one block over the cap
    text = f"# 引脚\n\n引脚说明。\n\n{table}\n\n以上引脚均为 3.3V。"
    unmerged = split_markdown(text, "doc", min_len=1, mode="plain")
    merged = split_markdown(text, "doc", mode="plain")
    assert len(merged) < len(unmerged)
    last = merged[-1]
    assert "以上引脚均为 3.3V。" in last["content"] and last["content"].count("引脚\n\n") == 1
    assert all(len(c["content"]) <= 2000 for c in merged)
    assert squeeze("".join(c["content"] for c in merged)) .count("GP64|") == 1


def test_merge_never_exceeds_max_len():
    short, long_ = sentences(8), sentences(66)  # a short paragraph then one just under the cap
    chunks = split_markdown(f"# 串口调试\n\n{short}\n\n{long_}", "doc", mode="plain")
    assert len(chunks) == 2 and all(len(c["content"]) <= 2000 for c in chunks)


@pytest.mark.parametrize("mode", ["plain", "smart"])
def test_size_limit_holds_for_hostile_input(mode):
    text = ("# " + "超长标题" * 200 + "\n" + "无标点长串" * 900 + "\n## x\n" + "a" * 5000
            + "\n```\n" + "代码行\n" * 1500 + "```\n")
    chunks = split_markdown(text, "doc", mode=mode)
    assert all(len(c["content"]) <= 2000 for c in chunks)
    assert all(len(c["content"].encode("utf-8")) < 65535 for c in chunks)
    assert sum(c["content"].count("无") for c in chunks) == 900  # hard cuts lose nothing


@pytest.mark.parametrize("kwargs", [{"mode": "fast"}, {"max_len": 20000}, {"min_len": 2000},
                                    {"max_len": 50, "min_len": 10}])
def test_bad_parameters_rejected(kwargs):
    with pytest.raises(ValueError):
        split_markdown("# a\nb", "doc", **kwargs)


# --- smart mode ---------------------------------------------------------------------------------

PARA = sentences(20)  # ~560 chars: a section this long is never merged into its neighbour


def test_smart_titles_carry_the_heading_path():
    text = (f"# Duo 快速上手\n{PARA}\n## 烧录镜像\n{PARA}\n### 使用 Windows\n{PARA}\n## **引脚**：\n{PARA}"
            f"\n# 附录\n{PARA}")
    chunks = split_markdown(text, "duo", mode="smart")
    assert titles(chunks) == ["Duo 快速上手", "Duo 快速上手 > 烧录镜像",
                              "Duo 快速上手 > 烧录镜像 > 使用 Windows", "Duo 快速上手 > 引脚", "附录"]
    assert [c["parent_title"] for c in chunks] == ["duo", "Duo 快速上手", "Duo 快速上手 > 烧录镜像",
                                                  "Duo 快速上手", "duo"]
    assert all(c["content"].startswith(c["title"] + "\n\n") for c in chunks)


@pytest.mark.parametrize("label", ["注意", "说明：", "Warning!", "**提示**", "Note"])
def test_smart_keeps_callout_headings_inline(label):
    text = f"# 安装\n{PARA}\n### {label}\n不要带电插拔模块。\n## 接线\n{PARA}\n# 维护\n{PARA}"
    smart = split_markdown(text, "doc", mode="smart")
    assert titles(smart) == ["安装", "安装 > 接线", "维护"]
    assert f"### {label}\n不要带电插拔模块。" in smart[0]["content"]
    assert len(split_markdown(text, "doc", mode="plain")) == 4  # the plain rule breaks there


def test_smart_merges_tiny_children_into_their_parent_heading():
    text = (f"# Duo\n{PARA}\n## 上手指南\n### 安装系统\n请参考：启动章节。\n### USB 网络的使用\n"
            f"请参考：设置章节。\n## 引脚分配\n{sentences(68)}\n# 附录\n{PARA}")  # 引脚分配 fills a chunk alone
    chunks = split_markdown(text, "duo", mode="smart")
    assert titles(chunks) == ["Duo", "Duo > 上手指南", "Duo > 引脚分配", "附录"]
    guide = chunks[1]["content"]
    assert guide.startswith("Duo > 上手指南\n\n### 安装系统\n\n请参考：启动章节。")
    assert "### USB 网络的使用\n\n请参考：设置章节。" in guide
    assert chunks[1]["parent_title"] == "Duo" and chunks[1]["part"] == 1


def test_smart_does_not_merge_into_another_branch():
    text = f"# T\n{PARA}\n## A\n### A1\n短。\n# B\n## B1\n短。"
    chunks = split_markdown(text, "doc", mode="smart")
    # "T > A" stays short, yet B is not under T: a chunk only absorbs its own heading's branch.
    assert titles(chunks) == ["T", "T > A", "B"]
    assert chunks[1]["content"] == "T > A\n\n### A1\n\n短。"
    assert chunks[2]["content"] == "B\n\n## B1\n\n短。"


# --- HTML / MDX clean-up ------------------------------------------------------------------------

def test_html_table_becomes_text_rows():
    text = ('<table border="1">\n  <tr><th colspan=2>MF1 版</th></tr>\n  <tr>\n    <td width="100">描述</td>'
            '\n    <td>正面<br/>视图</td>\n  </tr>\n  <tr><td>1.3寸屏</td><td>\n'
            '    <img src="../assets/mf1 (nand).png" width="600" alt="MF1 正面"></td></tr>\n</table>')
    assert html_to_markdown(text).strip() == (
        "MF1 版\n描述 | 正面 视图\n1.3寸屏 | ![MF1 正面](../assets/mf1%20%28nand%29.png)")


def test_html_inline_tags_entities_br_and_images():
    text = ("<p>电压 &lt; 5V &amp; 电流&nbsp;1A</p>\n第一行<br>第二行<br/>第三行\n"
            "<center class=\"half\">\n<img src=\"../a.png\" height = 50% />\n</center>\n"
            " <Image src='/docs/duo/duo-v1.2.png' maxWidth='60%' align='center' />\n"
            "| 1 | <div className='green'>GP0</div> |\n"
            '<a href="https://dl.sipeed.com/MF1(V1.2)">原理图下载</a>\n'
            "ssh root@<ip> 然后输入 <文件名>")
    assert html_to_markdown(text).split("\n") == [
        " 电压 < 5V & 电流 1A", "第一行", "第二行", "第三行", "", "![](../a.png)", "",
        " ![](/docs/duo/duo-v1.2.png)", "| 1 | GP0 |",
        "[原理图下载](https://dl.sipeed.com/MF1%28V1.2%29)", "ssh root@<ip> 然后输入 <文件名>"]


def test_html_left_alone_inside_fences_and_inline_code():
    fenced = '```html\n<table border="1">\n<tr><td>A &amp; B</td></tr>\n</table>\n<br>\n```'
    tilde = "~~~\n<!-- keep -->\nimport X from 'y';\n:::tip\n~~~"
    text = f"{fenced}\n写 `<br>` 或 `&amp;` 换行\n{tilde}"
    assert html_to_markdown(text) == f"{fenced}\n写 `<br>` 或 `&amp;` 换行\n{tilde}"


def test_mdx_noise_removed_keeping_inner_text():
    text = ("---\nsidebar_label: 'Duo'\n---\nimport Tabs from '@theme/Tabs';\n# Duo\n<!-- 隐藏\n的注释 -->\n"
            ":::tip\n**替换命令中的 MAC 地址**\n:::\n:::note 小心\n正文\n:::\n"
            "<Tabs>\n<TabItem value=\"win\" label=\"Windows\">\nWindows 步骤\n</TabItem>\n</Tabs>")
    lines = [l for l in html_to_markdown(text).split("\n") if l.strip()]
    assert lines == ["# Duo", "**替换命令中的 MAC 地址**", "小心", "正文", "Windows 步骤"]


# --- the real corpus ----------------------------------------------------------------------------

def _load_checker():
    spec = importlib.util.spec_from_file_location("md_split_check", CHECKER)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@needs_shared
@pytest.mark.parametrize("mode", ["plain", "smart"])
@pytest.mark.parametrize("path", CORPUS_FILES, ids=lambda p: p.name)
def test_corpus_files(path, mode):
    checker = _load_checker()  # an independent reading of the same fence/heading spec
    md = html_to_markdown(path.read_text(encoding="utf-8"))
    chunks = split_markdown(md, path.stem, mode=mode)

    assert chunks
    for c in chunks:
        assert set(c) == {"title", "content", "parent_title", "part", "page_start", "page_end"}
        assert c["page_start"] == c["page_end"] == 0  # Markdown has no pages
        assert isinstance(c["part"], int) and c["part"] >= 1 and c["title"] and c["parent_title"]
        assert c["content"].split("\n\n", 1)[0] == re.sub(r"-\d+$", "", c["title"])  # title prefix
        assert len(c["content"]) <= 2000

    classified = checker.classify(md)
    fenced_titles = {checker.heading_title(line) for kind, line in classified
                     if kind == "fenced" and checker.HEADING_RE.match(line)}
    chunk_titles = {part for c in chunks for part in c["title"].split(" > ")}
    assert not fenced_titles & chunk_titles

    cov = checker.Coverage(chunks)
    lost = [line for line, s in checker.checked_lines(classified) if not cov.covers(s)]
    assert lost == []
    assert sum(len(squeeze(c["content"])) for c in chunks) >= 0.95 * len(squeeze(md))


@needs_shared
def test_corpus_smart_mode_leaves_fewer_short_chunks():
    short = {"plain": 0, "smart": 0}
    for path in CORPUS_FILES:
        md = html_to_markdown(path.read_text(encoding="utf-8"))
        for mode in short:
            short[mode] += sum(len(c["content"]) < 500 for c in split_markdown(md, path.stem, mode=mode))
    assert short["smart"] * 3 < short["plain"]


@needs_shared
def test_conformance_checker_passes():
    proc = subprocess.run([sys.executable, str(CHECKER), "graphs.importing.chunking:conformance_split"],
                          cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "71 passed, 0 failed" in proc.stdout


def test_conformance_adapter_is_the_plain_rule():
    text = "前言\n# A\n## B\nx"
    assert conformance_split(text, "f") == split_markdown(text, "f", mode="plain")


# --- pages, heading levels, titles that say nothing -------------------------------

def page(n):
    return f"<!-- kb-page: {n} -->"


def test_chunks_carry_the_pages_their_text_lies_on():
    long_ = [sentences(25, f"页{n}句") for n in range(5)]  # a section this long is never merged
    text = (f"{page(1)}\n\n# 一、安装\n\n{long_[1]}\n\n{page(2)}\n\n{long_[2]}\n\n{page(3)}\n\n# 二、使用\n\n"
            f"{long_[3]}\n\n{page(4)}\n\n# 三、维护\n\n{long_[4]}")
    chunks = split_markdown(html_to_markdown(text), "手册")
    assert titles(chunks) == ["一、安装", "二、使用", "三、维护"]
    assert [(c["page_start"], c["page_end"]) for c in chunks] == [(1, 2), (3, 3), (4, 4)]
    assert not any("kb-page" in c["content"] for c in chunks)
    assert chunks[0]["content"] == f"一、安装\n\n{long_[1]}\n\n{long_[2]}"


def test_a_chunk_starting_mid_page_takes_that_page():
    body = "\n\n".join(sentences(20, f"段{p}句") for p in range(6))  # ~3400 chars: cut in two
    chunks = split_markdown(f"{page(5)}\n\n# 参数\n\n{body}\n\n{page(6)}\n\n尾段。", "手册")
    assert [c["part"] for c in chunks] == [1, 2]
    assert [(c["page_start"], c["page_end"]) for c in chunks] == [(5, 5), (5, 6)]


def test_numbered_siblings_share_a_level_though_their_marks_differ():
    text = (f"# 一、简介\n{PARA}\n## 1. 特点\n{PARA}\n## 2. 参数\n{PARA}\n# 二、接口\n{PARA}\n"
            f"## 三、固件\n{PARA}\n### 1. 获取\n{PARA}\n### 2. 更新\n{PARA}\n### 四、注意事项\n{PARA}")
    assert titles(split_markdown(text, "doc")) == [
        "一、简介", "一、简介 > 1. 特点", "一、简介 > 2. 参数", "二、接口", "三、固件", "三、固件 > 1. 获取",
        "三、固件 > 2. 更新", "四、注意事项"]


def test_a_restarted_numbering_still_nests():
    text = f"# 2. 安装\n{PARA}\n## 1. 下载\n{PARA}\n## 2. 解压\n{PARA}\n# 3. 使用\n{PARA}"
    assert titles(split_markdown(text, "doc")) == ["2. 安装", "2. 安装 > 1. 下载", "2. 安装 > 2. 解压", "3. 使用"]


def test_a_cover_title_block_folds_into_the_first_chapter():
    text = (f"# **BIGTREETECH**\n## **SKR MINI E3 V3.0**\n![](images/cover.jpg)\n### 主板使用说明书\n\n"
            f"#### 一、主板简介\n{PARA}\n#### 二、指示灯\n{PARA}")
    chunks = split_markdown(text, "SKR 手册")
    assert titles(chunks) == ["一、主板简介", "二、指示灯"]
    assert chunks[0]["content"].startswith(
        "一、主板简介\n\nBIGTREETECH\nSKR MINI E3 V3.0\n![](images/cover.jpg)\n主板使用说明书\n\n")
    assert {c["parent_title"] for c in chunks} == {"SKR 手册"}


def test_a_lone_top_heading_heads_only_its_own_text():
    text = f"# 前言\n本手册介绍产品。\n## 安全\n{PARA}\n## 安装\n{PARA}\n### 接线\n{PARA}"
    chunks = split_markdown(text, "手册", min_len=10)
    assert titles(chunks) == ["前言", "安全", "安装", "安装 > 接线"]
    assert chunks[0]["content"] == "前言\n\n本手册介绍产品。"
    assert titles(split_markdown(text, "手册", min_len=10, mode="plain")) == ["前言", "安全", "安装", "接线"]


def test_two_top_headings_keep_their_children():
    text = f"# 前言\n{PARA}\n## 约定\n{PARA}\n# 安装\n{PARA}\n## 接线\n{PARA}"
    assert titles(split_markdown(text, "手册")) == ["前言", "前言 > 约定", "安装", "安装 > 接线"]


@pytest.mark.parametrize("heading", ["## 1.", "## （二）", "## ***", "## 3.2"])
def test_a_heading_of_bare_numbers_is_text_of_its_section(heading):
    text = f"# 安装\n{PARA}\n{heading}\n步骤说明。\n# 使用\n{PARA}"
    chunks = split_markdown(text, "手册")
    assert titles(chunks) == ["安装", "使用"]
    assert f"{heading}\n步骤说明。" in chunks[0]["content"]


def test_a_manual_shorter_than_a_chunk_keeps_its_title_over_all_of_it():
    text = "# 电水壶说明\n## 加热\n按下加热键。\n## 除垢\n加入白醋煮沸。"
    (chunk,) = split_markdown(text, "kettle")
    assert chunk["title"] == "电水壶说明"
    assert chunk["content"] == "电水壶说明\n\n## 加热\n\n按下加热键。\n\n## 除垢\n\n加入白醋煮沸。"


# --- front matter and tables of contents ----------------------------------------------------

# A made-up car maker's manual shaped like a converted Word/PDF manual: a cover line, a preface
# that is the only heading of its rank, a table of contents with page numbers, numbered chapters.
CAR_MANUAL = f"""# 星河 QX7 纯电轿车用户手册

# 前言

感谢您选择星河汽车。{PARA}

## 目　录

1. 安全须知 .......... 3
2. 驾驶 .......... 8
2.1 起步 .......... 9
2.2 制动 .......... 12
3. 保养 .......... 20

## 1. 安全须知

{PARA}

## 2. 驾驶

### 2.1 起步

{PARA}

### 2.2 制动

{PARA}

## 3. 保养

### 轮胎气压

前轮 250 kPa，后轮 260 kPa。{PARA}
"""


def test_car_manual_preface_and_contents_head_no_chapter():
    chunks = split_markdown(CAR_MANUAL, "QX7 手册")
    # an empty chapter heading and its first short subsection are one chunk under the chapter's name
    assert titles(chunks) == ["前言", "QX7 手册", "1. 安全须知", "2. 驾驶", "2. 驾驶 > 2.2 制动", "3. 保养"]
    assert "### 2.1 起步" in chunks[3]["content"]
    preface, contents = chunks[0], chunks[1]
    assert "星河 QX7 纯电轿车用户手册" in preface["content"] and "感谢您选择" in preface["content"]
    # the table of contents is kept as text, on its own, under the document's name
    assert "2.2 制动 .......... 12" in contents["content"] and "安全须知\n\n" not in contents["content"]
    assert all(not c["title"].startswith("前言 >") for c in chunks)
    tyre = chunks[-1]
    assert "### 轮胎气压" in tyre["content"] and "250 kPa" in tyre["content"]


def test_a_preface_with_a_later_heading_of_its_rank_keeps_its_own_subsections():
    text = f"# 前言\n{PARA}\n## 符号说明\n{PARA}\n# 1 驾驶\n{PARA}\n## 1.1 起步\n{PARA}"
    assert titles(split_markdown(text, "手册")) == ["前言", "前言 > 符号说明", "1 驾驶", "1 驾驶 > 1.1 起步"]


def test_revision_history_and_copyright_head_nothing_after_them():
    text = f"# 修订历史\nV1.1 修正接线图。{PARA}\n## 产品简介\n{PARA}\n## 规格\n{PARA}"
    chunks = split_markdown(text, "Acme RT20 手册")
    assert titles(chunks) == ["修订历史", "产品简介", "规格"]
    text = f"# 手册\n## 版权声明\n{PARA}\n### 安装\n{PARA}\n### 接线\n{PARA}"
    assert titles(split_markdown(text, "手册")) == ["版权声明", "安装", "接线"]


def test_anchor_link_list_is_a_table_of_contents_not_a_section():
    links = "\n".join(f"- [{t}](#{t})" for t in ("简介", "安装", "接线", "调试"))
    text = f"# Nova KZ3 控制器\n\n{links}\n\n开箱后先检查配件。\n\n## 简介\n{PARA}\n## 安装\n{PARA}"
    chunks = split_markdown(text, "KZ3")
    assert titles(chunks)[-2:] == ["简介", "安装"]
    toc = next(c for c in chunks if "- [接线](#接线)" in c["content"])
    assert "开箱后先检查配件" in toc["content"] and toc["title"] in ("KZ3", "Nova KZ3 控制器")
    assert all("[简介](#简介)" not in c["content"] for c in chunks[-2:])


def test_numbered_steps_ending_in_numbers_are_no_table_of_contents():
    steps = "1. 设置波特率 9600\n2. 设置数据位 8\n3. 设置停止位 1\n4. 打开串口 1"
    text = f"# 串口\n## 参数\n{steps}\n\n{PARA}\n## 调试\n{PARA}"
    chunks = split_markdown(text, "手册")
    assert titles(chunks) == ["串口 > 参数", "串口 > 调试"] or titles(chunks) == ["参数", "调试"]
    assert steps in chunks[0]["content"]
    # under a 目录 heading the same shape is one
    toc = "1. 简介 3\n2. 安装 5\n3. 接线 9"
    chunks = split_markdown(f"# 目录\n{toc}\n# 1. 简介\n{PARA}\n# 2. 安装\n{PARA}", "手册")
    assert titles(chunks) == ["手册", "1. 简介", "2. 安装"] and toc in chunks[0]["content"]


def test_contents_entries_set_as_headings_are_no_headings():
    text = f"# 目录\n## 1. 简介 ........ 2\n## 2. 接线 ........ 4\n## 3. 调试 ........ 7\n# 1. 简介\n{PARA}\n# 2. 接线\n{PARA}"
    chunks = split_markdown(text, "手册")
    assert titles(chunks) == ["手册", "1. 简介", "2. 接线"]


def test_dotted_subsections_set_as_large_as_their_chapter_nest_inside_it():
    text = f"# 1. 概述\n{PARA}\n# 1.1 包装清单\n{PARA}\n# 1.2 规格\n{PARA}\n# 2. 安装\n{PARA}\n## 2.1 接线\n{PARA}"
    assert titles(split_markdown(text, "手册")) == [
        "1. 概述", "1. 概述 > 1.1 包装清单", "1. 概述 > 1.2 规格", "2. 安装", "2. 安装 > 2.1 接线"]
