"""Customer words against a manual's words, and answers led by the line that holds the asked value,
end to end offline (real embedding model, Milvus Lite) over a made-up manual written here."""
from __future__ import annotations

import re
import shutil

import pytest

from graphs.query.extractive import cited, near_quote
from graphs.query.runner import run_query
from import_fixtures import fresh_data  # noqa: F401  (fixture)
from manual_files import BACK_PNG, PANEL_PNG
from services.reranker import OfflineReranker, query_terms, synonym_index, synonyms

PRODUCT = "Zorvex KX-9"
FILLER = "安装前请确认电源已断开，按本节说明操作可以避免损坏控制板和外接设备，并延长使用寿命。" * 6
MANUAL = f"""# Zorvex KX-9 挤出头控制板使用手册

## 产品简介

Zorvex KX-9 是一款用于 3D 打印机挤出头的小型控制板，通过 CAN 总线与主板通信，减少挤出头到主板的走线。
{FILLER}

## 注意事项

板载防反接保护电路，避免电源正负极接反导致主控芯片烧毁。接线前务必断电，热插拔可能损坏电机驱动。

![防反接示意](back.png)

{FILLER}

## 产品参数

- 微处理器：ARM Cortex-M3 GX32F105 72MHz
- 输入电压：DC 12V–24V
- 逻辑电压：DC 3.3V
- 外观尺寸：41.5mm × 36mm
- 净重：18g

{FILLER}

## 接口电流

各接口的最大输出电流如下，超过会触发保护。

| 接口 | 最大电流 |
|---|---|
| HE0 加热棒 | 5A |
| FAN1 模型风扇 | 1A |
| FAN2 散热风扇 | 0.5A |

![接口位置图](panel.png)

{FILLER}

## 固件更新

用 USB 数据线连接电脑，按住 BOOT 按键再上电，控制板进入 DFU 模式后即可写入固件。
{FILLER}
"""
OFF = {"web_search": False, "hyde": False}


@pytest.fixture
def manual(fresh_data, tmp_path):
    from graphs.importing.runner import run_import

    folder = tmp_path / "manual"
    folder.mkdir()
    shutil.copy(PANEL_PNG, folder / "panel.png")
    shutil.copy(BACK_PNG, folder / "back.png")
    path = folder / "zorvex_kx9.md"
    path.write_text(MANUAL, encoding="utf-8")
    result = run_import(path)
    assert result.status == "completed" and result.product.startswith(PRODUCT), (result.status, result.error)
    return result.product  # naming the product is the import's business, not what is tested here


def ask(question: str, product: str) -> dict:
    """The question with its product given, as after the product is confirmed."""
    result = run_query(question, product=product, options=OFF)
    assert result["type"] == "final" and result["products"] == [product], result
    return result


def quoted_lines(answer: str) -> list[str]:
    return [line[2:] for line in answer.splitlines() if line.startswith("> ")]


def lead(answer: str) -> str:
    """The answer's first line after the offline note."""
    return [line for line in answer.splitlines()[1:] if line.strip()][0]


def test_the_vocabulary_is_reviewed_data_with_a_source_for_every_group():
    import json

    from services.reranker import SYNONYMS_FILE

    data = json.loads(SYNONYMS_FILE.read_text(encoding="utf-8"))
    assert data["reviewed"] and all(g["source"].strip() and len(g["terms"]) >= 2 for g in data["groups"])
    assert "微处理器" in synonyms("主控") and "mcu" in synonyms("处理器") and "净重" in synonyms("重量")
    assert all(w == w.lower() for w in synonym_index())
    # neighbouring words that make a vocabulary word count as that word too
    assert "主控芯片" in query_terms("用的是什么主控芯片？")


def test_an_english_synonym_matches_whole_words_only():
    scorer = OfflineReranker(None)
    program, spec = {"content": "用 program 命令写入程序。"}, {"content": "板载 RAM：512KB"}
    low, high = scorer.score("内存多大？", [program, spec])
    assert low == 0.0 and high > 0.4
    # nor inside an identifier: BUTTON_PIN_BITMASK holds no 引脚 ("pin"), and "_" is no question word
    code, pins = {"content": "#define BUTTON_PIN_BITMASK 0x200000000"}, {"content": "唤醒用的 PIN：D0~D3"}
    low, high = scorer.score("唤醒用哪些引脚？", [code, pins])
    assert high > low and not OfflineReranker(None).score("引脚", [code])[0]
    assert "_" not in query_terms("用 kflash_gui 烧录")


@pytest.mark.parametrize("question, answer, other", [
    # a router's quick guide: the customer's 电脑 is the manual's PC
    ("接电脑要装驱动吗？", "路由器通过网线与 PC 相连，即插即用，无需安装任何程序。",
     "路由器通过网线与交换机相连，即插即用，无需安装任何程序。"),
    # a camera module's data sheet: 算力 / 计算能力, 主频 / 最高运行频率
    ("NPU 的算力是多少？", "内置 NPU，计算能力 4 TOPS@INT8。", "NPU 支持 INT8 与 INT16 量化模型。"),
    ("芯片最高主频多少？", "双核处理器，最高运行频率 1.2 GHz。", "芯片采用 22 nm 工艺。"),
    # a smart door lock's feature list: 防住 / 防护, 照片 / 图片
    ("门锁能防住拿照片来开锁吗？", "3D 结构光活体检测，可防护打印图片、面具攻击。", "指纹模组支持 100 组指纹，开锁约 0.3 秒。"),
])
def test_customer_words_find_the_manual_line(question, answer, other):
    low, high = OfflineReranker(None).score(question, [{"content": other}, {"content": answer}])
    assert high > low, (high, low)


@pytest.mark.parametrize("question, line", [
    ("Zorvex KX-9 用的是什么主控芯片？", "微处理器：ARM Cortex-M3 GX32F105 72MHz"),
    ("Zorvex KX-9 的 MCU 是哪款？", "微处理器：ARM Cortex-M3 GX32F105 72MHz"),
    ("Zorvex KX-9 的重量是多少？", "净重：18g"),
    ("Zorvex KX-9 供电要多少伏？", "输入电压：DC 12V–24V"),
])
def test_a_question_in_customer_words_finds_and_leads_with_the_specification_line(manual, question, line):
    """The manual says 微处理器 / 净重 / 输入电压; the questions say 主控芯片 / MCU / 重量 / 供电, and the
    safety notes mention 主控芯片 too."""
    result = ask(question, manual)
    first = result["sources"][0]
    assert line in first["content"], [s["title"] for s in result["sources"]]
    assert lead(result["answer"]) == f"- {line} [1]"
    scores = result["rerank_info"]["scores"]
    assert scores[0] >= 0.5 and scores[0] == max(scores), scores  # above the absolute cliff


def test_the_passage_with_the_customer_word_scores_too_lower_than_the_one_with_the_value(manual):
    scores = ask("Zorvex KX-9 用的是什么主控芯片？", manual)["rerank_info"]["scores"]
    assert scores[0] > scores[1] > 0.3, scores


def test_an_answer_about_a_value_leads_with_the_table_row_and_shows_only_pictures_near_it(manual):
    result = ask("Zorvex KX-9 的模型风扇接口最大电流是多少？", manual)
    assert lead(result["answer"]) == "接口：FAN1 模型风扇，最大电流：1A [1]", result["answer"]
    assert "| FAN1 模型风扇 | 1A |" in quoted_lines(result["answer"])
    # chips: the sources the text cites, at most five
    numbers = {int(n) for n in re.findall(r"\[(\d+)\]", result["answer"])}
    chips = cited(result["answer"], result["sources"])
    assert {s["index"] for s in chips} == numbers and 1 <= len(chips) <= 5
    # only the picture beside the table, though a quoted passage may carry others
    table = next(s for s in result["sources"] if s["index"] == 1)
    assert len(result["image_urls"]) == 1 and result["image_urls"][0] in table["content"]


def test_chips_are_the_cited_sources_only_and_at_most_five():
    sources = [{"index": i, "title": f"第 {i} 节"} for i in range(1, 11)]
    answer = "见 [2]，另见 [9] 与 [2]。[4][5][6][7][8] 都提到。[12] 不存在。"
    assert [s["index"] for s in cited(answer, sources)] == [2, 4, 5, 6, 7]
    assert cited("没有引用。", sources) == []
    assert [s["index"] for s in cited("**[3] 引脚**\n> 见手册第 [7] 条", sources)] == [3]  # quoted text cites nothing


def test_pictures_are_those_beside_the_quoted_lines():
    content = ("## 接线\n\n![总图](/kb-files/a/all.png)\n\n" + "无关的说明。\n" * 8 +
               "\n风扇接在 FAN1。\n\n![风扇](/kb-files/a/fan.png)\n\n" + "其他内容。\n" * 8 + "![尾图](/kb-files/a/end.png)")
    near = near_quote(content, "风扇接在 FAN1。")
    assert "fan.png" in near and "all.png" not in near and "end.png" not in near
