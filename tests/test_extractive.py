"""The offline answer's sentence extraction, the thin-chunk rule and the calibration table, without the corpus."""
from __future__ import annotations

from graphs.query.calibration import CALIBRATIONS, calibration
from graphs.query.extractive import NOTHING_FOUND, OFFLINE_NOTE, extractive_answer, units
from graphs.query.retrieval import is_thin, rerank_order
from services.reranker import OfflineReranker
from services.settings import get_settings

PINS = ("接口 > 摄像头接口\n\n摄像头接口使用 16 PIN 连接器。\n\n| J1 | 说明 |\n|:--:|:---|\n| 1 | GND |\n"
        "| 13 | I2C1_SCL (1.8V) |\n| 14 | I2C1_SDA (1.8V) |\n| 15 | NC |\n| 16 | NC |\n| 17 | 3V3 |")
STEPS = ("烧录 > 烧录步骤\n\n准备一张 TF 卡。烧录前请备份数据。\n\n1. 下载镜像文件；\n2. 用烧录工具写入 TF 卡；\n"
         "3. 插卡上电，\n等待指示灯闪烁。\n\n完成后即可登录。")


def doc(content: str, title: str, **extra) -> dict:
    return {"source": "local", "content": content, "title": title, "product": "产品甲", **extra}


def test_a_table_row_is_quoted_under_its_header_with_its_neighbours_only():
    answer, cited = extractive_answer("摄像头接口的 I2C 是哪一路？", [doc(PINS, "接口 > 摄像头接口")])
    assert answer.startswith(OFFLINE_NOTE) and "**[1] 接口 > 摄像头接口**（产品甲）" in answer
    assert "> | J1 | 说明 |" in answer and "> | 13 | I2C1_SCL (1.8V) |" in answer
    assert "3V3" not in answer and len(cited) == 1


def test_numbered_steps_stay_whole_with_their_wrapped_lines():
    assert [u.text for u in units(STEPS, "烧录 > 烧录步骤")] == [
        "准备一张 TF 卡。", "烧录前请备份数据。", "1. 下载镜像文件；\n2. 用烧录工具写入 TF 卡；\n3. 插卡上电，\n等待指示灯闪烁。",
        "完成后即可登录。"]
    answer, _ = extractive_answer("怎么烧录镜像到 TF 卡？", [doc(STEPS, "烧录 > 烧录步骤")])
    assert "> 3. 插卡上电，\n> 等待指示灯闪烁。" in answer


def test_a_long_code_block_is_cut_inside_its_fences_and_the_announcing_line_brings_it():
    log = "\n".join(f"INFO: adding partition {i}" for i in range(60))
    content = (f"编译 > 输出\n\n编译 Linux 内核后可以看到：\n\n```\n{log}\nImages successfully packed into k1_v2.zip\n"
               f"{log}\n```\n\n完成。")
    answer, _ = extractive_answer("内核编译后的 images 打包进哪个 zip？", [doc(content, "编译 > 输出")])
    quoted = [line[2:] for line in answer.splitlines() if line.startswith("> ")]
    assert quoted[0] == "编译 Linux 内核后可以看到：" and quoted[1] == "```"
    assert "Images successfully packed into k1_v2.zip" in quoted and quoted.count("```") == 2
    assert len("\n".join(quoted)) < len(content)


def test_web_results_thin_chunks_and_weak_further_sources_are_not_quoted():
    docs = [{"source": "web", "title": "网页", "content": "网页里的 I2C 说明"},
            doc("封面\n\n# 产品甲\n\n![封面](/kb-files/a.png)", "封面"),
            doc(PINS, "接口 > 摄像头接口"),
            doc("其他 > 供电\n\n供电电压为 5V。", "其他 > 供电")]
    answer, cited = extractive_answer("摄像头接口的 I2C 是哪一路？", docs)
    assert "**[3] 接口 > 摄像头接口**" in answer and "[2]" not in answer and "[4]" not in answer
    assert "网页" not in answer and [q.doc for q in cited] == [docs[2]]
    assert extractive_answer("问题", []) == (f"{OFFLINE_NOTE}\n\n{NOTHING_FOUND}", [])


def test_cover_pages_and_lone_headings_are_thin():
    assert is_thin(doc("BTT 手册\n\n# **BIGTREETECH**\n\n## 主板使用说明书\n\n![插图](/kb-files/x.jpg)", "BTT 手册"))
    assert is_thin(doc("A > B\n\n## B\n\n见 [下一节](#c)。", "A > B"))
    assert not is_thin(doc(PINS, "接口 > 摄像头接口"))


def test_a_cover_page_goes_after_every_chunk_with_text_whatever_its_scores():
    cover = doc("LED 手册\n\n# LED GPIO 说明书\n\n![封面](/kb-files/cover.png)", "LED 手册", chunk_id="1")
    text = doc("引脚 > LED\n\n板载 LED 接在 GPIO 上。", "引脚 > LED", chunk_id="2")
    other = doc("供电 > 电源\n\n供电电压为 5V，电流至少 2A，接在 Type-C 口上。", "供电 > 电源", chunk_id="3")
    ranked, scorer = rerank_order(OfflineReranker(get_settings()), "LED GPIO 说明书", [cover, text, other], None,
                                  CALIBRATIONS[("use-m3", "offline")])
    assert scorer == "offline:lexical" and [d["chunk_id"] for _, d in ranked] == ["2", "3", "1"]
    assert ranked[-1][0] > ranked[1][0]  # the cover scored higher and still went last


def test_offline_scorer_is_lexical_and_prefers_the_passage_holding_the_terms_together():
    scorer = OfflineReranker(get_settings())
    together = {"content": "Duo 的 LED 接在 XGPIOC[24] 上。"}
    apart = {"content": "LED 说明见下文。\n\n很多引脚。\n\nGPIO 列表。"}
    neither = {"content": "供电电压为 5V。"}
    scores = scorer.score("LED 接哪个 GPIO？", [apart, together, neither])
    assert scores[1] > scores[0] > scores[2] == 0.0 and all(0.0 <= s <= 1.0 for s in scores)


def test_every_scorer_combination_has_a_calibration_saying_how_it_was_chosen():
    assert {k for k in CALIBRATIONS} == {(e, r) for e in ("use-m3", "bge-m3", "server") for r in ("offline", "cross-encoder")}
    assert all(c.measured for c in CALIBRATIONS.values())
    offline = calibration()
    assert offline is CALIBRATIONS[("use-m3", "offline")]


def test_a_configured_rerank_server_gets_the_cross_encoder_calibration(env):
    env(RERANK_URL="http://127.0.0.1:9")
    chosen = calibration()
    assert chosen is CALIBRATIONS[("use-m3", "cross-encoder")] and chosen.measured.startswith("not measured")
    assert (chosen.input_weight, chosen.rerank_weight, chosen.strip_products) == (0.0, 1.0, False)


# A made-up espresso machine's care page: the first sentence restates what is asked, the fact comes
# after four sentences that hold none of the question's words.
DESCALING = ("保养 > 日常维护\n\n请使用原装电源线。首次使用前请通读本手册。本机的自动除垢提醒功能可以在设置菜单里开启或关闭。\n\n机器出厂时已经做过出水测试。"
             "包装内附有一包试用咖啡豆。清洗滤网请用软毛刷。接水盘满时请及时倒掉。\n\n"
             "除垢提醒灯亮起后，请在 48 小时内用柠檬酸溶液完成除垢。")


def test_the_fact_some_sentences_after_the_restated_question_is_quoted():
    answer, _ = extractive_answer("自动除垢提醒亮了以后多久之内要除垢？", [doc(DESCALING, "保养 > 日常维护")])
    assert "48 小时内用柠檬酸溶液完成除垢" in answer
    assert "清洗滤网请用软毛刷" not in answer and "接水盘满时" not in answer  # nor what lies between


def test_the_source_the_ranking_put_first_is_quoted_even_when_a_later_one_holds_more_words():
    # a ranking that reads meaning (a cross-encoder) puts the capacity first: it shares no word
    ranked = [doc("规格 > 参数\n\n容量：1.8 L，可拆下清洗，位于机身背面。", "规格 > 参数"),
              doc("使用 > 加水\n\n加水前请先取下水箱，水箱加满后装回，水箱的水位不要超过 MAX 线。", "使用 > 加水")]
    answer, cited = extractive_answer("水箱能装多少水，加满时要注意什么？", ranked)
    assert "容量：1.8 L" in answer and [q.index for q in cited] == [1, 2]
