"""Word, HTML and text manuals: converted to Markdown first, imported like any manual, answered with
their pictures; every bad input refused in Chinese with nothing written; text sanitised on the way in."""
from __future__ import annotations

import io
import json
import os
import re
import shutil
import subprocess
import sys
import unicodedata
import zipfile
from pathlib import Path

import docx
import markdown
import pytest
from docx.enum.style import WD_STYLE_TYPE
from docx.oxml import parse_xml

from api_fixtures import api, api_server, wait_task  # noqa: F401  (fixtures)
from conftest import CORPUS, ROOT
from graphs.importing.images import image_root, resolve_image
from graphs.importing.nodes.md_img import find_images
from graphs.importing import run_import, stage_uploads
from graphs.query.runner import run_query
from import_fixtures import (  # noqa: F401  (fixtures)
    assert_consistent, assert_refused, doc_chunks, fresh_data, refusal_data, refusal_dir, write_md,
)
from manual_files import (
    BACK_PNG, PANEL_PNG, SITE_CHROME, WEB_PRODUCT, WORD_PRODUCT, data_uri, encrypted, web_manual, word_manual,
)
from services.doc_converter import convert_to_markdown
from services.settings import get_settings
from services.task_store import get_task_store
from services.text_files import sanitize_text

OFF = {"web_search": False, "hyde": False}
NO_IMAGES = lambda src: None  # noqa: E731 - a resolver that finds nothing
MF0_MD = CORPUS / "sipeed-mf" / "zh_CN" / "mf0_get_started.md"


def both_manuals(folder: Path) -> tuple[Path, Path]:
    shutil.copyfile(PANEL_PNG, folder / "panel.png")  # beside the page, as a saved web page keeps it
    return word_manual(folder / "c21.docx"), web_manual(folder / "c22.html")


def ask(question: str) -> dict:
    result = run_query(question, options=OFF)
    assert result["type"] == "final", result
    return result


def assert_answered_with_pictures(word_doc_key: str, web_doc_key: str) -> None:
    panel = ask(f"{WORD_PRODUCT}的控制面板是什么样的？")
    assert panel["products"] == [WORD_PRODUCT]
    assert f"/kb-files/upload-images/{word_doc_key}/image-001.png" in panel["image_urls"]
    codes = ask(f"{WORD_PRODUCT} 显示 E2 是什么意思？")
    assert "E2 | 炉面过热" in codes["sources"][0]["content"]  # the table's row, found as the first source
    back = ask(f"{WEB_PRODUCT}的背面散热孔在哪里？")
    assert back["products"] == [WEB_PRODUCT]
    assert any(u.startswith(f"/kb-files/upload-images/{web_doc_key}/") for u in back["image_urls"]), back["image_urls"]


# --- converters ----------------------------------------------------------------------------------

def test_word_headings_tables_pictures_and_lists(tmp_path):
    out = tmp_path / "out"
    converted = convert_to_markdown(word_manual(tmp_path / "c21.docx"), "docx", out, max_bytes=10 << 20,
                                    resolve_image=NO_IMAGES)
    md = converted.md_path.read_text(encoding="utf-8")
    headings = re.findall(r"^(#+) (.+)$", md, re.MULTILINE)
    assert headings == [("#", f"{WORD_PRODUCT}使用说明书"), ("##", "产品外观"), ("##", "故障代码"), ("###", "安全须知")]
    assert (converted.headings, converted.tables, converted.images) == (4, 1, 2)
    assert "| 代码 | 含义 | 处理 |\n| --- | --- | --- |\n| E1 | 锅具不合适 | 换用铁锅 ![](images/image-002.png) |" in md
    assert "![图 1 控制面板](images/image-001.png)" in md  # Word's caption paragraph names the picture
    assert md.index("控制面板位于炉面前方") < md.index("image-001.png") < md.index("## 故障代码")
    assert "- 插座额定电流不低于 10A。\n- 不要空锅加热。" in md
    assert (out / "images" / "image-001.png").read_bytes() == PANEL_PNG.read_bytes()
    assert (out / "images" / "image-002.png").read_bytes() == BACK_PNG.read_bytes()


def test_word_table_of_contents_is_left_out_content_controls_are_kept(tmp_path):
    """Word's generated table of contents (a gallery content control, or paragraphs in TOC styles)
    repeats the headings; a cover page inside a plain content control is the manual's text."""
    doc = docx.Document()
    toc_style = doc.styles.add_style("toc 1", WD_STYLE_TYPE.PARAGRAPH)
    w = 'xmlns:w="http://schemas.openxmlformats.org/wordprocessingml/2006/main"'

    def control(gallery: str, text: str):
        part = f'<w:docPartObj><w:docPartGallery w:val="{gallery}"/></w:docPartObj>' if gallery else ""
        return parse_xml(f'<w:sdt {w}><w:sdtPr>{part}</w:sdtPr><w:sdtContent><w:p><w:r><w:t>{text}</w:t></w:r></w:p>'
                         '</w:sdtContent></w:sdt>')

    body = doc.element.body
    body.insert(0, control("Cover Pages", f"{WORD_PRODUCT} 封面"))
    body.insert(1, control("Table of Contents", "目录：产品外观 ........ 3"))
    doc.add_paragraph("产品外观 ........ 3", style=toc_style)
    doc.add_heading("产品外观", 1)
    doc.add_paragraph("控制面板位于炉面前方。")
    doc.save(tmp_path / "toc.docx")
    converted = convert_to_markdown(tmp_path / "toc.docx", "docx", tmp_path / "out", max_bytes=10 << 20,
                                    resolve_image=NO_IMAGES)
    md = converted.md_path.read_text(encoding="utf-8")
    assert md == f"{WORD_PRODUCT} 封面\n\n# 产品外观\n\n控制面板位于炉面前方。\n"


def test_web_page_keeps_the_content_and_drops_the_site_chrome(tmp_path):
    page = web_manual(tmp_path / "site" / "c22.html")
    shutil.copyfile(PANEL_PNG, page.parent / "panel.png")
    out = tmp_path / "out"
    converted = convert_to_markdown(page, "html", out, max_bytes=10 << 20,
                                    resolve_image=lambda src: resolve_image(src, page, page.parent))
    md = converted.md_path.read_text(encoding="utf-8")
    assert re.findall(r"^#+ .+$", md, re.MULTILINE) == [f"# {WEB_PRODUCT}", "## 控制面板", "## 背面接口", "## 规格参数"]
    assert "| 额定功率 | 2200W |" in md and converted.tables == 1
    for chrome in SITE_CHROME + ["window.track", "font-family", "苏伯尓官网"]:
        assert chrome not in md
    # the local picture and the embedded one are files beside the Markdown; the remote one stays a link
    assert "![C22 控制面板](images/image-001.png)" in md and "![C22 背面散热孔](images/image-002.png)" in md
    assert (out / "images" / "image-001.png").read_bytes() == PANEL_PNG.read_bytes()
    assert (out / "images" / "image-002.png").read_bytes() == BACK_PNG.read_bytes()
    assert "![官网示意图](https://img.example/c22%20front.png)" in md and converted.images == 2


def test_web_page_shaped_differently_a_rendered_corpus_manual(tmp_path):
    """A real manual rendered to HTML the way a documentation site serves it: no <main>, no <nav>,
    the site menu a plain list of links in an unnamed column, the page's own table of contents
    a list of anchors, its pictures in a raw HTML table."""
    source = MF0_MD.read_text(encoding="utf-8")
    body = markdown.markdown(source, extensions=["tables", "fenced_code"])
    menu = "".join(f'<li><a href="/hardware/zh/maix/{n}.html">Maix 模块 {n}</a></li>' for n in range(8))
    page = tmp_path / "mf0.html"
    page.write_text(f"""<html><head><title>MF0 模块简明用户手册 - Sipeed Wiki</title></head><body>
<div class="wrapper"><div class="col-left"><ul>{menu}</ul></div>
<div class="col-main">{body}</div></div><p>Copyright © 2026 Sipeed</p></body></html>""", encoding="utf-8")
    root = image_root(MF0_MD, get_settings().data_dir)
    converted = convert_to_markdown(page, "html", tmp_path / "out", max_bytes=10 << 20,
                                    resolve_image=lambda src: resolve_image(src, MF0_MD, root))
    md = converted.md_path.read_text(encoding="utf-8")

    def plain(heading: str) -> str:
        return re.sub(r"[*`\s]", "", heading)

    fenced = re.sub(r"^ *```.*?^ *```", "", source, flags=re.MULTILINE | re.DOTALL)
    expected = [plain(h) for h in re.findall(r"^#+ (.+)$", fenced, re.MULTILINE)]
    assert [plain(h) for h in re.findall(r"^#+ (.+)$", md, re.MULTILINE)] == expected
    assert len(expected) >= 10
    assert "Maix 模块" not in md  # the site menu
    assert "(#产品简介)" not in md and "(#更新固件)" not in md  # the page's own table of contents
    assert "[硬件连接](#硬件连接)" in md  # while a link inside a sentence stays
    assert converted.tables == body.count("<table") >= 3
    local = [src for _s, _e, src, _a in find_images(source) if resolve_image(src, MF0_MD, root)]
    assert converted.images == len(local) >= 5
    assert "IO24" in md and "人脸识别" in md


def test_web_page_in_a_declared_charset_with_a_big_menu_around_short_content(tmp_path):
    """A Big5 page (not guessable: GB18030 decodes it too, wrongly) whose one wrapper holds a long
    menu and a short text: the menu goes, the text stays."""
    menu = "".join(f'<li><a href="/p/{n}">產品分類 {n}</a></li>' for n in range(30))
    page = tmp_path / "big5.html"
    page.write_bytes(f"""<html><head><meta http-equiv="Content-Type" content="text/html; charset=big5"></head>
<body><div class="wrap"><ul>{menu}</ul><h1>蘇伯爾 C25 電磁爐</h1><p>額定功率 2500W。</p></div></body></html>
""".encode("big5"))
    converted = convert_to_markdown(page, "html", tmp_path / "out", max_bytes=10 << 20, resolve_image=NO_IMAGES)
    assert converted.md_path.read_text(encoding="utf-8") == "# 蘇伯爾 C25 電磁爐\n\n額定功率 2500W。\n"


def test_sanitize_text():
    decomposed = unicodedata.normalize("NFD", "café 电磁炉")
    raw = (f"{decomposed}\u200b\u00ad\u202e|\ue000\U000f0001\x07\x1b[0m|\ufeff\r\n"
           "第二行\u2028第三行\r第四行\t制表\u3000全角空格 😀")
    assert sanitize_text(raw) == "café 电磁炉|[0m|\n第二行\n第三行\n第四行\t制表\u3000全角空格 😀"
    assert sanitize_text("普通文字 plain") == "普通文字 plain"


# --- the whole import ----------------------------------------------------------------------------

def test_cli_imports_word_and_web_manuals_answered_with_their_pictures(env, tmp_path):
    docx, html = both_manuals(tmp_path)
    data = tmp_path / "data"
    proc = subprocess.run([sys.executable, "-m", "graphs.importing", str(docx), str(html), "--json"],
                          cwd=ROOT, env={**os.environ, "DATA_DIR": str(data), "PYTHONPATH": str(ROOT)},
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-2000:]
    word, web = [json.loads(line) for line in proc.stdout.splitlines() if line.startswith("{")]
    assert (word["status"], word["product"], word["images_uploaded"]) == ("completed", WORD_PRODUCT, 2)
    assert (web["status"], web["product"], web["images_uploaded"]) == ("completed", WEB_PRODUCT, 2)
    assert word["chunks"] >= 3 and web["chunks"] >= 3 and "node_doc_to_md" in word["node_seconds"]

    env(DATA_DIR=str(data))
    chunks = doc_chunks(word["doc_id"]) + doc_chunks(web["doc_id"])
    titles = {c["title"] for c in chunks}
    # Word styles give the heading path; the document's lone title folds into its first section
    # instead of heading every chunk (so no two source chips read alike)
    assert {f"{WORD_PRODUCT}使用说明书", "故障代码", "故障代码 > 安全须知", "规格参数"} <= titles, titles
    text = "\n".join(c["content"] for c in chunks)
    assert "E2 | 炉面过热 | 断电冷却后再用" in text and "额定功率 | 2200W" in text
    assert len(re.findall(r"/kb-files/upload-images/[^)\s]+\.png", text)) == 4
    assert not any(chrome in text for chrome in SITE_CHROME)
    assert_consistent()
    assert_answered_with_pictures(word["doc_key"], web["doc_key"])


def test_api_upload_of_word_and_web_manuals(api, env, tmp_path):  # noqa: F811
    env(DATA_DIR=str(tmp_path / "data"))
    docx, html = both_manuals(tmp_path)
    files = [("files", (p.name, p.read_bytes(), "application/octet-stream")) for p in (docx, html)]
    reply = api.post("/api/upload", files=files)
    assert reply.status_code == 200, reply.text
    task_ids = reply.json()["task_ids"]
    assert [(s["status"], s["product"]) for s in (wait_task(api, t) for t in task_ids)] == [
        ("completed", WORD_PRODUCT), ("completed", WEB_PRODUCT)]
    word, web = [get_task_store().get(t)["result"] for t in task_ids]
    assert word["images_uploaded"] == 2
    # an upload may not use files beside it: the page's panel.png is missing, its embedded picture is not
    assert (web["images_uploaded"], web["missing_images"]) == (1, ["panel.png"])
    answer = api.post("/api/query", json={"query": f"{WORD_PRODUCT}的控制面板是什么样的？"}).json()
    assert answer["status"] == "completed" and answer["products"] == [WORD_PRODUCT]
    assert any(u.endswith("/image-001.png") for u in answer["image_urls"]), answer["image_urls"]
    back = api.post("/api/query", json={"query": f"{WEB_PRODUCT}的背面散热孔在哪里？"}).json()
    assert back["products"] == [WEB_PRODUCT] and back["image_urls"]


def test_text_manual_is_decoded_and_sanitised(fresh_data, tmp_path):
    text = (f"{WORD_PRODUCT}快速指南\n\n电磁\u200b炉的面板\u00ad有 8 个按键\ue000。\r\n"
            + unicodedata.normalize("NFD", "清洁时请用湿布擦拭，不要用钢丝球。") + "\n")
    manual = tmp_path / "指南.txt"
    manual.write_bytes(text.encode("utf-16"))
    result = run_import(manual)
    assert result.status == "completed", result.error
    content = "\n".join(c["content"] for c in doc_chunks(result.doc_id))
    assert "电磁炉的面板有 8 个按键。" in content and "不要用钢丝球" in content
    assert unicodedata.is_normalized("NFC", content)
    assert not re.search("[\u200b\u00ad\ue000\r]", content)


def test_every_format_is_sanitised(fresh_data, tmp_path):
    """The same invisible characters in a Markdown file and a Word heading are gone from the chunks."""
    md = write_md(tmp_path / "c23.md", "# 苏伯尓 C23\u200b 电磁炉\n\n额定\ufeff功率 2300W\u202e。\n")
    word = docx.Document()
    word.add_heading("苏伯尓 C24\u200b 电磁炉", 1)
    word.add_paragraph("额定\u00ad功率 2400W\ue000，" + unicodedata.normalize("NFD", "适合 café 使用。"))
    doc = tmp_path / "c24.docx"
    word.save(doc)
    chunks = []
    for path in (md, doc):
        result = run_import(path)
        assert result.status == "completed", result.error
        chunks += doc_chunks(result.doc_id)
    joined = "".join(c["content"] + c["title"] + c["product"] for c in chunks)
    assert not re.search("[\u200b\ufeff\u202e\u00ad\ue000]", joined) and unicodedata.is_normalized("NFC", joined)
    assert "额定功率 2300W" in joined and "苏伯尓 C23 电磁炉" in joined
    assert "额定功率 2400W，适合 café 使用。" in joined and "苏伯尓 C24 电磁炉" in joined


# --- bad input -----------------------------------------------------------------------------------

PNG_BYTES = PANEL_PNG.read_bytes()
ONLY_CHROME = f"""<html><head><title>苏伯尓</title></head><body><nav><a href="/">首页导航</a></nav>
<div class="sidebar"><p>热门推荐</p></div><footer>版权所有</footer></body></html>""".encode()


@pytest.mark.parametrize("name, data, node, phrases", [
    ("空文件.docx", b"", "node_entry", ["空的", "0 字节"]),
    ("空文件.html", b"", "node_entry", ["空的", "0 字节"]),
    ("空文件.txt", b"", "node_entry", ["空的", "0 字节"]),
    ("坏文件.docx", os.urandom(4096), "node_doc_to_md", ["Word 文件已损坏", "坏文件.docx"]),
    ("二进制.html", PNG_BYTES, "node_doc_to_md", ["不是文本文件"]),
    ("二进制.txt", PNG_BYTES, "node_doc_to_md", ["不是文本文件"]),
    ("空白.txt", b" \n\t\r\n ", "node_md_img", ["空白.txt", "没有任何文字内容"]),
    ("空网页.htm", b"<html><body>  </body></html>", "node_md_img", ["没有任何文字内容"]),
    ("只有导航.html", ONLY_CHROME, "node_doc_to_md", ["没有找到正文", "只有导航"]),
])
def test_refused_files(refusal_data, tmp_path, name, data, node, phrases):
    path = tmp_path / name
    path.write_bytes(data)
    assert_refused(path, node, *phrases)


def test_broken_word_files(refusal_data, tmp_path):
    good = word_manual(tmp_path / "good.docx").read_bytes()
    truncated = tmp_path / "截断.docx"
    truncated.write_bytes(good[: len(good) // 2])
    other_zip = tmp_path / "表格改名.docx"
    with zipfile.ZipFile(other_zip, "w") as z:
        z.writestr("[Content_Types].xml", "<Types/>")
        z.writestr("xl/workbook.xml", "<workbook/>")
    for path in (truncated, other_zip):
        assert_refused(path, "node_doc_to_md", "Word 文件已损坏", path.name)


def test_encrypted_word_file(refusal_data, tmp_path):
    locked = encrypted(tmp_path / "加密.docx", word_manual(tmp_path / "plain.docx"))
    assert_refused(locked, "node_doc_to_md", "已加密", "需要密码")
    # another OLE container (the old .doc format is one) under a .docx name
    other = tmp_path / "旧格式.docx"
    other.write_bytes(locked.read_bytes().replace("EncryptionInfo".encode("utf-16-le"),
                                                  "EncryptionInfX".encode("utf-16-le")))
    assert_refused(other, "node_doc_to_md", "不是 .docx 格式", "另存为 .docx")


def test_word_file_with_only_a_picture_uploads_nothing(refusal_data, tmp_path):
    doc = docx.Document()
    doc.add_picture(str(PANEL_PNG))
    doc.save(tmp_path / "只有图片.docx")
    assert_refused(tmp_path / "只有图片.docx", "node_md_img", "只有图片.docx", "没有任何文字内容")


def test_too_big_word_file_and_page(refusal_data, env, tmp_path):
    env(MAX_UPLOAD_MB=1)
    bomb = word_manual(tmp_path / "解压炸弹.docx")
    with zipfile.ZipFile(bomb, "a", compression=zipfile.ZIP_DEFLATED) as z:
        z.writestr("word/media/padding.bin", b"\0" * (6 * 1024 * 1024))  # a few KB packed
    assert bomb.stat().st_size < 1024 * 1024
    assert_refused(bomb, "node_doc_to_md", "解压后有", "超过了 5 MB 的上限")
    page = tmp_path / "大网页.html"
    page.write_text("<html><body>" + "<p>很长的说明文字。</p>" * 80000 + "</body></html>", encoding="utf-8")
    assert_refused(page, "node_entry", "超过了 1 MB 的上限", "大网页.html")


def test_uploaded_page_and_text_cannot_publish_files_outside_their_folder(env, tmp_path):
    """Crafted `../` picture paths in an uploaded page, or written as Markdown inside a text file,
    reach neither server files nor the work folder's neighbours."""
    settings = env(DATA_DIR=str(tmp_path / "data"))
    secret = settings.data_dir / "secret.png"
    secret.parent.mkdir(parents=True, exist_ok=True)
    secret.write_bytes(PNG_BYTES)
    page = (f'<html><body><h1>{WEB_PRODUCT}</h1><p>说明文字足够长，用来导入。</p>'
            f'<img src="../../../secret.png" alt="偷图"><img src="{data_uri(BACK_PNG)}" alt="背面"></body></html>')
    # the converted text lands in {DATA_DIR}/work/{key}/txt/: three levels up is the data dir
    text = f"{WORD_PRODUCT} 说明\n\n正文足够长，用来导入。\n\n![偷图](../../../secret.png)\n"
    html_staged, text_staged = stage_uploads([("page.html", io.BytesIO(page.encode("utf-8"))),
                                              ("note.txt", io.BytesIO(text.encode("utf-8")))], settings)
    assert html_staged.path.parent.parent.parent == settings.data_dir / "uploads"  # the link reaches data/
    html_result = run_import(html_staged.path, staged=html_staged)
    assert html_result.status == "completed", html_result.error
    assert (html_result.images_uploaded, html_result.missing_images) == (1, ["../../../secret.png"])
    text_result = run_import(text_staged.path, staged=text_staged)
    assert text_result.status == "completed", text_result.error
    assert (text_result.images_uploaded, text_result.missing_images) == (0, ["../../../secret.png"])
