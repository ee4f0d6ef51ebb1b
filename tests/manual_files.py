"""Word and web-page manuals written by the tests: headings, a table, pictures, site chrome.

The pictures are real PNGs of the sample corpus, so the image step uploads real files.
"""
from __future__ import annotations

import base64
from pathlib import Path

import docx
from docx.enum.style import WD_STYLE_TYPE
from docx.shared import Inches
from msoffcrypto.format.ooxml import OOXMLFile

from conftest import CORPUS

PICTURES = CORPUS / "sipeed-mf" / "assets" / "mf_module"
PANEL_PNG = PICTURES / "mf0_front.png"
BACK_PNG = PICTURES / "mf0_buttom.png"
WORD_PRODUCT = "苏伯尓 C21 电磁炉"
WEB_PRODUCT = "苏伯尓 C22 电磁炉"
# Long enough that each section is a chunk of its own: a question has to find the right one.
FILLER = "使用前请阅读本节全部内容，按说明操作可以延长电磁炉的使用寿命，避免烫伤和触电。" * 12
SITE_CHROME = ["首页导航", "电饭煲系列", "版权所有", "分享到微博", "热门推荐"]


def word_manual(path: Path, picture: Path = PANEL_PNG) -> Path:
    """Title, Heading 1/2 (one under a WPS-style Chinese name), a picture with a Word caption,
    a fault-code table with a picture in a cell, and lists."""
    doc = docx.Document()
    doc.add_heading(f"{WORD_PRODUCT}使用说明书", 0)
    doc.add_paragraph(f"{WORD_PRODUCT} 是一款 2100W 的家用电磁炉，支持 8 档火力调节。")
    doc.add_heading("产品外观", 1)
    doc.add_paragraph("控制面板位于炉面前方，包括电源键、火力加减键和定时键。" + FILLER)
    doc.add_picture(str(picture), width=Inches(2))
    doc.add_paragraph("图 1 控制面板", style="Caption")
    doc.add_heading("故障代码", 1)
    doc.add_paragraph("显示屏出现以下代码时，请按表格处理。" + FILLER)
    table = doc.add_table(rows=3, cols=3)
    for r, row in enumerate([("代码", "含义", "处理"), ("E1", "锅具不合适", "换用铁锅"),
                             ("E2", "炉面过热", "断电冷却后再用")]):
        for c, text in enumerate(row):
            table.cell(r, c).text = text
    table.cell(1, 2).paragraphs[0].add_run().add_picture(str(BACK_PNG), width=Inches(0.5))
    wps_heading = doc.styles.add_style("标题 2", WD_STYLE_TYPE.PARAGRAPH)
    doc.add_paragraph("安全须知", style=wps_heading)
    doc.add_paragraph("插座额定电流不低于 10A。", style="List Bullet")
    doc.add_paragraph("不要空锅加热。", style="List Bullet")
    doc.add_paragraph(FILLER)
    path.parent.mkdir(parents=True, exist_ok=True)
    doc.save(path)
    return path


def encrypted(path: Path, source: Path, password: str = "secret") -> Path:
    """`source` (a .docx) encrypted with a password, as Word's "Encrypt with Password" writes it."""
    with source.open("rb") as plain, path.open("wb") as out:
        OOXMLFile(plain).encrypt(password, out)
    return path


def data_uri(picture: Path) -> str:
    return "data:image/png;base64," + base64.b64encode(picture.read_bytes()).decode("ascii")


def web_manual(path: Path, local_picture: str = "panel.png") -> Path:
    """A product page: header, nav, sidebar, share buttons and footer around a <main> with headings,
    a table, a figure naming a local picture and a picture embedded as a data: URI."""
    html = f"""<!DOCTYPE html>
<html lang="zh-CN"><head><meta charset="utf-8"><title>{WEB_PRODUCT} - 苏伯尓官网</title>
<style>body {{ font-family: sans-serif; }}</style><script>window.track = function () {{}};</script></head>
<body>
<header class="site-header"><a href="/">首页导航</a> <a href="/cookers">电磁炉系列</a> <a href="/rice">电饭煲系列</a></header>
<nav><ul><li><a href="/a">电磁炉</a></li><li><a href="/b">电饭煲系列</a></li><li><a href="/c">配件</a></li></ul></nav>
<div class="layout">
<aside class="sidebar"><h3>热门推荐</h3><p>苏伯尓 C30 电磁炉限时优惠</p></aside>
<main>
<h1>{WEB_PRODUCT}</h1>
<p>{WEB_PRODUCT} 是一款 2200W 的电磁炉，支持 10 档火力和预约定时。</p>
<h2>控制面板</h2>
<p>控制面板采用触摸按键，从左到右依次是电源、火力、定时和锁定键。{FILLER}</p>
<figure><img src="{local_picture}"><figcaption>C22 控制面板</figcaption></figure>
<h2>背面接口</h2>
<p>电源线从背面引出，散热孔不能堵住。{FILLER}</p>
<p><img alt="C22 背面散热孔" src="{data_uri(BACK_PNG)}"></p>
<h2>规格参数</h2>
<table><thead><tr><th>项目</th><th>参数</th></tr></thead>
<tbody><tr><td>额定功率</td><td>2200W</td></tr><tr><td>额定电压</td><td>220V~ 50Hz</td></tr>
<tr><td>定时范围</td><td>1-180 分钟</td></tr></tbody></table>
<p>外链示意图：<img alt="官网示意图" src="https://img.example/c22 front.png"></p>
<div class="share-buttons"><a href="#">分享到微博</a> <a href="#">分享到微信</a> <a href="#">复制链接</a></div>
</main>
</div>
<footer><p>版权所有 © 2026 苏伯尓电器</p></footer>
</body></html>
"""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(html, encoding="utf-8")
    return path
