"""Archives (.zip / .tar.gz) of a documentation site: staged with their folders, pictures resolved as a
browser would, and hostile archives refused with nothing left behind.

The site is made up (tests/site_files.py): two products of one vendor, pages with relative,
site-absolute, backslash, URL-encoded and wrongly-cased picture references.
"""
from __future__ import annotations

import json
from pathlib import Path
from urllib.parse import unquote

import pytest

from api_fixtures import api, api_server, wait_task  # noqa: F401 (fixtures)
from graphs.importing import UploadRejected, stage_uploads
from graphs.importing.__main__ import build_parser
from graphs.importing.filetypes import (
    accepted_extensions, accepted_labels, file_type, markdown_table, picker_accept, refusal,
)
from graphs.importing.images import locate_image
from graphs.importing.runner import run_import
from services.object_store import local_images_root
from services.settings import get_settings
from services.vector_store import get_vector_store
from site_files import (
    CAM, FILLER, HUB, PAGES, PICTURES, PICTURES_PER_PAGE, png, site_tar, site_zip, tar_of, zip_bomb, zip_of,
)

ROOT = Path(__file__).resolve().parent.parent


@pytest.fixture
def data(env, tmp_path):
    return env(DATA_DIR=str(tmp_path / "data"))


def stage(path: Path):
    with open(path, "rb") as stream:
        return stage_uploads([(path.name, stream)], get_settings())


def left_behind() -> list[Path]:
    """Every file or folder under the uploads folder and the object store."""
    settings = get_settings()
    roots = [settings.data_dir / "uploads", settings.data_dir / "objects"]
    return [p for root in roots if root.exists() for p in root.rglob("*") if p.is_file()]


# -- the one list of accepted types ----------------------------------------------------------------
def test_every_reader_of_the_accepted_types_reads_the_one_list():
    assert file_type("站点.tar.gz").kind == "archive" and file_type("a.TGZ").kind == "archive"
    assert file_type("page.HTM").converter == "node_doc_to_md" and file_type("x.csv") is None
    accept = picker_accept()
    assert ".zip" in accept["application/zip"] and ".tar.gz" in accept["application/octet-stream"]
    assert ".png" not in accept["application/octet-stream"]  # pictures travel inside archives
    assert accepted_extensions() == accept["application/octet-stream"]
    assert "压缩包" in accepted_labels() and "Word" in accepted_labels()
    assert refusal("notes.csv") == f"不支持的文件类型“.csv”：目前只能导入 {accepted_labels()} 文件。"
    assert "打包成 .zip" in refusal("ports.png")
    # the README's table and the CLI's help are made from it too
    assert markdown_table() in (ROOT / "README.md").read_text(encoding="utf-8")
    helped = " ".join(build_parser().format_help().split())
    assert accepted_labels() in helped and ".tar.gz" in helped


# -- pictures as a browser finds them --------------------------------------------------------------
def test_pictures_are_found_as_a_browser_would(tmp_path):
    site = tmp_path / "site"
    page = site / "docs" / "guide" / "page.md"
    page.parent.mkdir(parents=True)
    page.write_text("x", encoding="utf-8")
    for rel in ("docs/guide/img/a b.png", "static/shots/wiring.png", "docs/res/Wiring_2.png", "docs/guide/img/x_y.png"):
        (site / rel).parent.mkdir(parents=True, exist_ok=True)
        (site / rel).write_bytes(png((1, 2, 3)))
    found = lambda src: locate_image(src, page, site)  # noqa: E731
    assert found("img/a%20b.png") == ((site / "docs/guide/img/a b.png").resolve(), False)
    assert found("/shots/wiring.png") == ((site / "static/shots/wiring.png").resolve(), False)
    assert found("..\\res\\Wiring_2.png") == ((site / "docs/res/Wiring_2.png").resolve(), False)
    assert found("img/x\\_y.png") == ((site / "docs/guide/img/x_y.png").resolve(), False)  # a Markdown escape
    assert found("../RES/wiring_2.PNG") == ((site / "docs/res/Wiring_2.png").resolve(), True)  # case reported
    assert found("../../../etc/passwd") == (None, False)
    assert found("img/none.png") == (None, False)


def test_a_missing_picture_is_reported_never_written_into_the_text(data, tmp_path):
    page = tmp_path / "manual.md"
    page.write_text(f"# {HUB} 说明书\n\n## 指示灯\n\n指示灯常亮表示联网成功。\n\n![指示灯](../../resource/led.png)\n\n{FILLER}\n",
                    encoding="utf-8")
    result = run_import(page)
    assert result.status == "completed", result.error
    assert result.images_missing == 1 and result.missing_images == ["../../resource/led.png"]
    store = get_vector_store()
    text = "".join(r["content"] for r in store.query(store.chunks, f'doc_id == "{result.doc_id}"', ["content"]))
    assert "图片缺失" not in text and "resource/led.png" not in text and "指示灯常亮" in text


# -- a site archive --------------------------------------------------------------------------------
@pytest.mark.parametrize("make", [site_zip, site_tar], ids=["zip", "tar.gz"])
def test_a_site_archive_stages_its_pages_with_their_folders(data, tmp_path, make):
    archive = make(tmp_path / ("site.zip" if make is site_zip else "site.tar.gz"))
    staged = stage(archive)
    assert sorted(s.display_name for s in staged) == sorted(PAGES)
    by_name = {s.display_name: s for s in staged}
    assert by_name["lz-hub7/setup/wifi.md"].folders == ("lz-hub7", "setup")
    assert by_name["lz-cam3/index.md"].folders == ("lz-cam3",)
    assert len({s.task_id for s in staged}) == len(PAGES) and len({s.doc_key for s in staged}) == len(PAGES)
    folder = Path(staged[0].archive)
    assert all(Path(s.archive) == folder and folder in s.path.parents for s in staged)
    assert all((folder / rel).is_file() for rel in PICTURES)  # the pictures stay beside their pages
    assert not (folder / "assets" / "site.css").exists() and not (folder / "__MACOSX").exists()
    assert not list(folder.parent.glob("*-site.*"))  # the archive itself is gone once unpacked
    [note] = staged.notes
    assert note.startswith(f"📦 《{archive.name}》：4 份文档、5 张图片") and "不支持的类型" in note
    assert "assets/site.css" in note and "lz-hub7/app.js" in note and "__MACOSX" not in note


def test_a_site_zip_imports_through_the_api_with_every_picture_resolved(api, data, tmp_path):
    archive = site_zip(tmp_path / "lanzhou-site.zip", top="lanzhou-docs/")
    reply = api.post("/api/upload", files=[("files", (archive.name, archive.read_bytes(), "application/zip"))])
    assert reply.status_code == 200, reply.text
    body = reply.json()
    assert sorted(body["files"]) == sorted(f"lanzhou-docs/{p}" for p in PAGES)
    assert len(body["task_ids"]) == len(PAGES) and "不支持的类型" in body["notes"][0]
    results = {name: wait_task(api, task_id) for name, task_id in zip(body["files"], body["task_ids"])}
    assert all(r["status"] == "completed" for r in results.values()), results
    products = {name.split("/", 1)[1]: r["product"] for name, r in results.items()}
    # one product per folder (how it is spelt is recognition's business)
    hub, cam = products["lz-hub7/index.md"], products["lz-cam3/index.md"]
    assert "LZ-Hub7" in hub and "LZ-Cam3" in cam
    assert products == {"lz-hub7/index.md": hub, "lz-hub7/setup/wifi.md": hub, "lz-cam3/index.md": cam,
                        "lz-cam3/reset.md": cam}
    tasks = {name.split("/", 1)[1]: api.get(f"/api/status/{r['task_id']}").json() for name, r in results.items()}
    from services.task_store import get_task_store
    for page, expected in PICTURES_PER_PAGE.items():
        result = get_task_store().get(tasks[page]["task_id"])["result"]
        assert (result["images_uploaded"], result["images_missing"]) == (expected, 0), (page, result)
    reset = get_task_store().get(tasks["lz-cam3/reset.md"]["task_id"])["result"]
    assert reset["case_images"] == ["images/Reset-Hole.PNG"]  # found, and the case difference reported
    # the question is answered with the camera's own picture, served by the local store
    answer = api.post("/api/query", json={"query": f"{cam} 的镜头外圈是什么？"}).json()
    assert answer["products"] == [cam] and answer["image_urls"], answer
    stored = local_images_root(get_settings())
    colours = {png(c) for c in PICTURES.values()}
    shown = [stored / unquote(url.split("/upload-images/", 1)[1]) for url in answer["image_urls"]]
    assert shown and all(p.read_bytes() in colours for p in shown)


# -- hostile archives --------------------------------------------------------------------------------
def test_a_zip_bomb_is_refused_before_it_is_unpacked(data, env, tmp_path):
    env(ARCHIVE_MAX_MB=5)
    bomb = zip_bomb(tmp_path / "bomb.zip", mb=64)
    assert bomb.stat().st_size < 200 * 1024  # small on the wire
    with pytest.raises(UploadRejected) as refused:
        stage(bomb)
    assert refused.value.status == 400
    assert refused.value.message == "压缩包“bomb.zip”没有导入：解压后超过 5 MB（疑似压缩炸弹，或内容太多）。请分成几个压缩包上传。"
    assert left_behind() == []


def test_too_many_entries_are_refused(data, env, tmp_path):
    env(ARCHIVE_MAX_FILES=10)
    many = zip_of(tmp_path / "many.zip", {f"p{i}.md": f"# 第 {i} 页\n\n{FILLER}".encode() for i in range(11)})
    with pytest.raises(UploadRejected, match="文件超过 10 个"):
        stage(many)
    assert left_behind() == []


@pytest.mark.parametrize("name, why", [("../evil.md", "含有“..”"), ("docs/../../evil.md", "含有“..”"),
                                       ("/etc/cron.d/evil.md", "是绝对路径"), ("C:\\Windows\\evil.md", "是绝对路径"),
                                       ("docs\\..\\..\\evil.md", "含有“..”")])
@pytest.mark.parametrize("kind", ["zip", "tar.gz"])
def test_an_entry_that_leaves_the_archive_refuses_all_of_it(data, tmp_path, name, why, kind):
    members = {"good/index.md": f"# {HUB}\n\n{FILLER}".encode(), name: b"# evil\n\npwned"}
    archive = (zip_of if kind == "zip" else tar_of)(tmp_path / f"escape.{kind}", members)
    with pytest.raises(UploadRejected) as refused:
        stage(archive)
    assert refused.value.message.startswith(f"压缩包“escape.{kind}”没有导入：") and why in refused.value.message
    assert left_behind() == [] and not (tmp_path / "evil.md").exists()
    assert not list(get_settings().data_dir.rglob("evil.md"))


@pytest.mark.parametrize("kind", ["zip", "tar.gz"])
def test_symbolic_links_are_ignored(data, tmp_path, kind):
    secret = tmp_path / "secret.md"
    secret.write_text("# 机密\n\n服务器密码 hunter2", encoding="utf-8")
    make = zip_of if kind == "zip" else tar_of
    # beside a page, a link is skipped and said so; the page imports
    mixed = make(tmp_path / f"mixed.{kind}", {"docs/index.md": f"# {HUB}\n\n{FILLER}".encode()},
                 {"docs/secret.md": str(secret), "docs/images/ports.png": "/etc/passwd"})
    staged = stage(mixed)
    assert [s.display_name for s in staged] == ["docs/index.md"]
    assert "符号链接或硬链接，已忽略" in staged.notes[0] and "docs/secret.md" in staged.notes[0]
    folder = Path(staged[0].archive)
    assert not any(p.is_symlink() for p in folder.rglob("*")) and not (folder / "docs" / "secret.md").exists()
    # links alone: nothing to import, so the archive is refused and nothing stays
    only = make(tmp_path / f"only.{kind}", {}, {"manual.md": str(secret)})
    before = set(left_behind())
    with pytest.raises(UploadRejected, match="里面没有可导入的说明书"):
        stage(only)
    assert set(left_behind()) == before


def test_a_file_and_a_folder_of_one_name_keep_the_first(data, tmp_path):
    clash = zip_of(tmp_path / "clash.zip", {"hub.md": f"# {HUB}\n\n{FILLER}".encode(), "hub.md/index.md": b"# x",
                                            "Guide.md": f"# {CAM}\n\n{FILLER}".encode(), "guide.md": b"# again"})
    staged = stage(clash)
    assert [s.display_name for s in staged] == ["hub.md", "Guide.md"]
    assert "与另一个文件或文件夹重名）：hub.md/index.md" in staged.notes[0]
    assert "（只差大小写或特殊字符））：guide.md" in staged.notes[0]


def test_a_damaged_or_empty_archive_is_refused(data, tmp_path):
    broken = tmp_path / "broken.zip"
    broken.write_bytes(site_zip(tmp_path / "whole.zip").read_bytes()[:400])
    with pytest.raises(UploadRejected, match="文件已损坏"):
        stage(broken)
    pictures = zip_of(tmp_path / "pictures.zip", {"a.png": png((1, 1, 1)), "b.css": b"x"})
    with pytest.raises(UploadRejected, match=r"里面没有可导入的说明书（PDF"):
        stage(pictures)
    empty_page = zip_of(tmp_path / "empty.zip", {"empty.md": b""})
    with pytest.raises(UploadRejected, match="未导入（是空的（0 字节））：empty.md"):
        stage(empty_page)
    assert left_behind() == []


def test_the_api_refuses_a_hostile_archive_with_nothing_left(api, data, tmp_path):
    members = {"good/index.md": f"# {HUB}\n\n{FILLER}".encode(), "../../evil.md": b"# evil"}
    archive = zip_of(tmp_path / "escape.zip", members)
    reply = api.post("/api/upload", files=[("files", ("escape.zip", archive.read_bytes(), "application/zip")),
                                           ("files", ("ok.md", f"# {CAM}\n\n{FILLER}".encode(), "text/markdown"))])
    assert reply.status_code == 400 and "含有“..”" in reply.json()["error"]
    assert left_behind() == [] and get_vector_store().count() == 0


BIDI = "\u202a\u202b\u202c\u202d\u202e\u2066\u2067\u2068\u2069\u200e\u200f"


def _hidden(text: str) -> list[str]:
    """The control and bidi characters in `text`."""
    return [ch for ch in text if ch in BIDI or ord(ch) < 0x20 or 0x7f <= ord(ch) < 0xa0]


def test_entry_and_archive_names_are_shown_without_bidi_or_control_characters(api, data, tmp_path):
    members = {"docs/说明\u202etxt.md": f"# {HUB}\n\n{FILLER}".encode(),
               "docs/\u2067发票\u2069\u200f.exe": b"MZ", "docs/a\x85b\x1b.css": b"x"}
    archive = zip_of(tmp_path / "site.zip", members)
    reply = api.post("/api/upload", files=[("files", ("站点\u202egpj.zip", archive.read_bytes(), "application/zip"))])
    assert reply.status_code == 200, reply.text
    body = reply.json()
    assert body["files"] == ["docs/说明txt.md"]
    assert body["notes"][0].startswith("📦 《站点gpj.zip》：1 份文档")
    assert "docs/发票.exe" in body["notes"][0] and "docs/ab.css" in body["notes"][0], body["notes"]
    assert _hidden(json.dumps(body, ensure_ascii=False)) == []
    assert wait_task(api, body["task_ids"][0])["status"] == "completed"
    assert [d["file_name"] for d in api.get("/api/documents").json()] == ["docs/说明txt.md"]
    # a refusal names the entry it refuses the same way
    before = left_behind()
    hostile = zip_of(tmp_path / "hostile.zip", {"ok.md": f"# {HUB}\n\n{FILLER}".encode(), "\u202e../../x.md": b"# x"})
    refused = api.post("/api/upload", files=[("files", ("hostile.zip", hostile.read_bytes(), "application/zip"))])
    assert refused.status_code == 400 and "“../../x.md”含有“..”" in refused.json()["error"], refused.text
    assert left_behind() == before


def test_the_openapi_schema_documents_archives(api):
    upload = api.get("/openapi.json").json()["paths"]["/api/upload"]["post"]
    assert "压缩包" in upload["summary"] and "ARCHIVE_MAX_MB" in upload["description"]
    schema = api.get("/openapi.json").json()["components"]["schemas"]["UploadResponse"]["properties"]
    assert {"task_ids", "files", "notes"} <= set(schema)


def test_the_cli_imports_an_archive_and_a_second_run_replaces_it(data, tmp_path, capsys):
    from graphs.importing.__main__ import main

    archive = site_zip(tmp_path / "site.zip")
    assert main([str(archive), "--json"]) == 0
    first = capsys.readouterr()
    assert first.err.startswith("📦 《site.zip》：4 份文档、5 张图片")
    results = [json.loads(line) for line in first.out.splitlines()]
    assert len(results) == len(PAGES) and all(r["images_missing"] == 0 for r in results)
    store = get_vector_store()
    chunks = store.count()
    assert main([str(archive), "--json"]) == 0  # the same archive again: the same documents, replaced
    assert store.count() == chunks and len(store.product_names()) == 2
    escape = zip_of(tmp_path / "escape.zip", {"../evil.md": b"# evil"})
    assert main([str(escape)]) == 1 and "含有“..”" in capsys.readouterr().out
