"""Pictures a Markdown manual links from the web: never hot-linked into answers.

A stranger's site (a real HTTP server on 127.0.0.1 that counts requests) serves the pictures and
traps; the import is the real one, the answer is the real offline query graph.
"""
from __future__ import annotations

import pytest

from fakes.image_server import FakeImageSite
from graphs.importing.runner import run_import
from graphs.query.runner import run_query
from import_fixtures import doc_chunks, fresh_data, write_md  # noqa: F401 (fixture)
from services import remote_images
from services.remote_images import RemoteImageRefused, fetch_image


@pytest.fixture()
def site():
    with FakeImageSite() as server:
        yield server


def manual(site: FakeImageSite, *paths: str) -> str:
    links = "\n\n".join(f"![图{i}]({site.url(p)})" for i, p in enumerate(paths, 1))
    return ("# 星云 S1 扫地机 使用说明书\n\n## 清理滚刷\n\n关机后取下滚刷盖板，剪断缠绕的毛发再装回。\n\n"
            f"{links}\n\n<img src=x>\n\n<img src={site.url('/bare.png')} width=20>\n")


def all_text(result) -> str:
    return "\n".join(c["content"] for c in doc_chunks(result.doc_id))


def test_remote_pictures_of_an_untrusted_host_are_dropped_and_never_fetched(fresh_data, site, tmp_path):
    result = run_import(write_md(tmp_path / "星云S1.md", manual(site, "/track.png", "/track.png?again")))
    assert result.status == "completed", result.error
    assert site.requests == []  # the import asked the stranger nothing
    assert result.images_remote == 3 and result.images_uploaded == 0
    text = all_text(result)
    assert "127.0.0.1" not in text and "（网络图片未导入：图1）" in text
    # an unquoted src is an image reference too: recorded as missing, never written into the text
    assert "src=x" not in text and "图片缺失" not in text and result.missing_images == ["x"]
    answer = run_query("星云 S1 扫地机 怎么清理滚刷？")
    assert answer["image_urls"] == [] and answer["sources"]
    shown = answer["answer"] + "".join(s["content"] for s in answer["sources"])
    assert "127.0.0.1" not in shown and site.requests == []  # what the browser is given links nowhere


def test_an_allow_listed_host_on_a_private_address_is_still_refused(fresh_data, env, site, tmp_path):
    env(REMOTE_IMAGE_HOSTS="127.0.0.1,localhost")
    result = run_import(write_md(tmp_path / "星云S1.md", manual(site, "/track.png")))
    assert result.status == "completed" and result.images_remote == 2 and site.requests == []
    with pytest.raises(RemoteImageRefused, match="内网或本机"):
        fetch_image(site.url("/track.png").replace("127.0.0.1", "localhost"), env(), tmp_path, "x")


def test_a_trusted_host_is_fetched_once_at_import_and_served_locally(fresh_data, env, site, tmp_path, monkeypatch):
    port = site.base_url.rsplit(":", 1)[1]
    # img.example "resolves" to the test site; everything after the DNS answer is real
    monkeypatch.setattr(remote_images, "public_addresses", lambda host, p: ["127.0.0.1"])
    env(REMOTE_IMAGE_HOSTS="img.example")
    text = manual(site, "/track.png").replace("127.0.0.1", "img.example")
    result = run_import(write_md(tmp_path / "星云S1.md", text))
    assert result.status == "completed", result.error
    # each picture once, to the checked address, under the host's own name
    assert site.requests == [("GET", "/track.png", f"img.example:{port}"), ("GET", "/bare.png", f"img.example:{port}")]
    assert result.images_uploaded == 2 and result.images_remote == 0 and result.images_missing == 1  # x
    stored = all_text(result)
    assert "img.example" not in stored and "/kb-files/upload-images/" in stored
    answer = run_query("星云 S1 扫地机 怎么清理滚刷？")
    assert answer["image_urls"] and all(u.startswith("/kb-files/upload-images/") for u in answer["image_urls"])
    assert len(site.requests) == 2  # answering fetched nothing


@pytest.mark.parametrize("path, reason", [
    ("/big.png", "上限"), ("/page.png", "text/html"), ("/fake.png", "不符"), ("/moved.png", "HTTP 302"),
    ("/slow.png", "秒没有下载完"),
])
def test_what_a_trusted_host_may_not_send(env, site, tmp_path, monkeypatch, path, reason):
    monkeypatch.setattr(remote_images, "public_addresses", lambda host, p: ["127.0.0.1"])
    settings = env(REMOTE_IMAGE_HOSTS="img.example", REMOTE_IMAGE_MAX_MB=0.05, REMOTE_IMAGE_TIMEOUT_S=1)
    with pytest.raises(RemoteImageRefused, match=reason):
        fetch_image(site.url(path).replace("127.0.0.1", "img.example"), settings, tmp_path / "out", "x")
    assert not (tmp_path / "out").exists() or not list((tmp_path / "out").iterdir())  # nothing kept
