"""ObjectStore against both backends, local files and a real S3 (radosgw), its pictures read through the
app's own route as the app serves them."""
from __future__ import annotations

import json
import socket
import time
import uuid
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import quote, unquote

import httpx
import pytest
from starlette.applications import Starlette

from api.images import images_mount
from conftest import auth_header
from fakes._http import UvicornThread
from fakes.s3_server import INSTALL_HINT, S3ServerError, missing_binaries, start_radosgw
from services.errors import MinioError, StorageError
from services.object_store import get_object_store
from services.settings import Settings

PNG_A = b"\x89PNG\r\n\x1a\n" + b"A" * 64
PNG_B = b"\x89PNG\r\n\x1a\n" + b"B" * 64
TRICKY_DOC_KEY = "洗衣机 \"X1\" 说明书 it's v2 (终版)"


@dataclass
class Harness:
    store: object
    base_url: str  # the app's pictures route (api/images.py), served on a real port
    s3_url: str = ""  # the bucket's own address on the S3 server ("" for the local backend)

    def get(self, url: str, signed_in: bool = True) -> httpx.Response:
        return httpx.get(self.base_url + url, headers=auth_header() if signed_in else {}, timeout=10)

    def get_from_s3(self, object_name: str) -> httpx.Response:
        """What anyone could read of the bucket without credentials, bypassing the app."""
        return httpx.get(f"{self.s3_url}/{quote(object_name)}", timeout=10)


@pytest.fixture(scope="module")
def s3_server(tmp_path_factory):
    if missing_binaries():
        pytest.skip(f"radosgw not installed; run: {INSTALL_HINT}")
    started = time.monotonic()
    try:
        endpoint, access_key, secret_key, stop = start_radosgw(tmp_path_factory.mktemp("ceph"))
    except S3ServerError as exc:
        pytest.fail(f"radosgw did not start: {exc}")
    print(f"radosgw started in {time.monotonic() - started:.1f}s at {endpoint}")
    yield endpoint, access_key, secret_key
    stop()


def _minio_settings(settings: Settings, s3_server) -> Settings:
    endpoint, access_key, secret_key = s3_server
    return settings.replace(minio_endpoint=endpoint, minio_access_key=access_key, minio_secret_key=secret_key,
                            minio_bucket_name=f"kb-{uuid.uuid4().hex[:12]}")


@pytest.fixture(params=["local", "minio"])
def harness(request, tmp_path):
    settings = Settings(data_dir=tmp_path / "data")
    if request.param == "minio":
        settings = _minio_settings(settings, request.getfixturevalue("s3_server"))
    server = UvicornThread(Starlette(routes=[images_mount(settings)]), "images")
    base_url = f"http://127.0.0.1:{server.start()}"
    s3_url = f"http://{settings.minio_endpoint}/{settings.minio_bucket_name}" if settings.minio_endpoint else ""
    yield Harness(get_object_store(settings), base_url, s3_url)
    server.stop()


def _file(folder: Path, name: str, data: bytes) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / name
    path.write_bytes(data)
    return path


def test_backend_is_chosen_by_settings(harness):
    assert harness.store.backend == ("minio" if harness.s3_url else "local")
    assert harness.store.ping() is True


def test_images_are_for_signed_in_users_and_replaced_on_reimport(harness, tmp_path):
    store = harness.store
    old_urls = [store.upload_image(TRICKY_DOC_KEY, _file(tmp_path, "图 1.png", PNG_A)),
                store.upload_image(TRICKY_DOC_KEY, _file(tmp_path, "p2.png", PNG_B))]
    for url, data in zip(old_urls, (PNG_A, PNG_B)):
        assert url.startswith("/kb-files/upload-images/")  # the app's route, whichever the backend
        assert "%5C" not in url and " " not in url and '"' not in url
        resp = harness.get(url)
        assert resp.status_code == 200, (url, resp.text[:200])
        assert resp.content == data
        assert resp.headers["content-type"].startswith("image/png")
        anonymous = harness.get(url, signed_in=False)
        assert anonymous.status_code == 401 and data not in anonymous.content
        if harness.s3_url:  # nor straight from the bucket
            assert harness.get_from_s3(unquote(url.removeprefix("/kb-files/"))).status_code == 403

    assert store.clear_images(TRICKY_DOC_KEY) == 2
    assert all(harness.get(url).status_code == 404 for url in old_urls)
    assert store.clear_images(TRICKY_DOC_KEY) == 0

    new_url = store.upload_image(TRICKY_DOC_KEY, _file(tmp_path, "p2.png", PNG_A))
    assert harness.get(new_url).content == PNG_A
    assert store.open_image(f"upload-images/{TRICKY_DOC_KEY}/p2.png") == PNG_A


def test_a_bucket_left_public_read_is_closed(s3_server, tmp_path):
    """A policy letting anyone read the pictures (as the app once set) goes; other statements stay."""
    from minio import Minio

    settings = _minio_settings(Settings(data_dir=tmp_path / "data"), s3_server)
    bucket = settings.minio_bucket_name
    client = Minio(settings.minio_endpoint, access_key=settings.minio_access_key,
                   secret_key=settings.minio_secret_key, secure=False)
    client.make_bucket(bucket)
    picture = _file(tmp_path, "a.png", PNG_A)
    client.fput_object(bucket, "upload-images/doc/a.png", str(picture))
    kept = {"Effect": "Allow", "Principal": {"AWS": ["arn:aws:iam:::user/kbtest"]}, "Action": ["s3:GetObject"],
            "Resource": [f"arn:aws:s3:::{bucket}/pdf_files/*"]}
    public = {"Effect": "Allow", "Principal": {"AWS": ["*"]}, "Action": ["s3:GetObject"],
              "Resource": [f"arn:aws:s3:::{bucket}/upload-images/*"]}
    client.set_bucket_policy(bucket, json.dumps({"Version": "2012-10-17", "Statement": [public, kept]}))
    direct = f"http://{settings.minio_endpoint}/{bucket}/upload-images/doc/a.png"
    assert httpx.get(direct, timeout=10).content == PNG_A  # open to anyone

    store = get_object_store(settings)
    assert store.ping() is True
    assert httpx.get(direct, timeout=10).status_code == 403
    assert [s["Principal"] for s in json.loads(client.get_bucket_policy(bucket))["Statement"]] == [kept["Principal"]]
    assert store.open_image("upload-images/doc/a.png") == PNG_A  # the app itself still reads it


def test_clear_images_touches_only_one_document(harness, tmp_path):
    store = harness.store
    keep = store.upload_image("doc-b", _file(tmp_path, "a.png", PNG_B))
    store.upload_image("doc", _file(tmp_path, "a.png", PNG_A))
    assert store.clear_images("doc") == 1
    assert harness.get(keep).content == PNG_B


def test_backslash_in_file_name_becomes_slash(harness, tmp_path):
    url = harness.store.upload_image("doc", _file(tmp_path, "images\\pic.png", PNG_A))
    assert "%5C" not in url and url.endswith("/upload-images/doc/images/pic.png")
    assert harness.get(url).content == PNG_A


def test_original_is_private(harness, tmp_path):
    store = harness.store
    name = store.upload_original(_file(tmp_path, "手册 A.pdf", b"%PDF-1.7 test"), "doc-a")
    assert name == "pdf_files/doc-a/手册 A.pdf"
    assert store.open_original(name) == b"%PDF-1.7 test"
    assert harness.get(store.object_url(name)).status_code == 404  # the app serves pictures only
    if harness.s3_url:
        assert harness.get_from_s3(name).status_code == 403


def test_same_named_originals_of_two_documents_both_stay(harness, tmp_path):
    store = harness.store
    first = store.upload_original(_file(tmp_path / "1", "faq.md", b"# one"), "faq-1111")
    second = store.upload_original(_file(tmp_path / "2", "faq.md", b"# two"), "faq-2222")
    assert first != second
    assert (store.open_original(first), store.open_original(second)) == (b"# one", b"# two")
    # deleting one document takes its objects only
    store.upload_image("faq-1111", _file(tmp_path, "a.png", PNG_A))
    assert store.delete_document("faq-1111") == 2
    assert store.open_original(second) == b"# two"
    with pytest.raises(MinioError):
        store.open_original(first)


@pytest.mark.parametrize("doc_key", ["", "..", "../x", "/etc", "a/b", "a\\..\\b", "a\x00b", "C:\\x"])
def test_doc_key_cannot_escape(harness, tmp_path, doc_key):
    with pytest.raises(StorageError):
        harness.store.upload_image(doc_key, _file(tmp_path, "a.png", PNG_A))
    with pytest.raises(StorageError):
        harness.store.clear_images(doc_key)


def test_file_names_and_object_names_cannot_escape(harness, tmp_path):
    store = harness.store
    with pytest.raises(MinioError):
        store.upload_image("doc", _file(tmp_path, "..\\..\\evil.png", PNG_A))
    with pytest.raises(MinioError):
        store.upload_original(_file(tmp_path, "..\\x.pdf", b"x"), "doc")
    with pytest.raises(MinioError):
        store.upload_original(_file(tmp_path, "ok.pdf", b"x"), "../2024")
    with pytest.raises(MinioError):
        store.open_original("upload-images/doc/a.png")
    with pytest.raises(MinioError):
        store.open_image("upload-images/../../secret")
    with pytest.raises(MinioError):
        store.upload_image("doc", tmp_path / "missing.png")
    assert not list((tmp_path / "data").rglob("evil.png"))


def unreachable_s3(tmp_path) -> Settings:
    """Settings naming an S3 endpoint on a port nobody listens on."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    return Settings(data_dir=tmp_path, minio_endpoint=f"127.0.0.1:{port}", minio_access_key="k", minio_secret_key="s")


def test_unreachable_s3_fails_fast_with_chinese_message(tmp_path):
    settings = unreachable_s3(tmp_path)
    store = get_object_store(settings)
    assert store.backend == "minio" and store is get_object_store(settings)
    started = time.monotonic()
    with pytest.raises(MinioError, match="无法连接对象存储"):
        store.upload_image("doc", _file(tmp_path, "a.png", PNG_A))
    assert store.ping() is False
    assert time.monotonic() - started < 15


def test_a_local_original_shares_the_uploaded_file_s_disk_blocks(tmp_path):
    """An upload kept as its staged copy and as its original takes the disk of one file, not two."""
    from graphs.importing import discard, stage_uploads

    settings = Settings(data_dir=tmp_path / "data")
    body = b"# Lumora K1\n\n" + b"x" * (4 * 1024 * 1024)
    source = tmp_path / "lumora.md"
    source.write_bytes(body)
    with source.open("rb") as stream:
        staged = stage_uploads([("lumora.md", stream)], settings)[0]
    original = settings.data_dir / "objects" / settings.minio_bucket_name / staged.original_key
    assert original.read_bytes() == body
    assert original.stat().st_ino == staged.path.stat().st_ino and original.stat().st_nlink == 2
    discard([staged])  # the staged copy goes after the import; the original stays whole
    assert not staged.path.exists() and original.read_bytes() == body
    assert get_object_store(settings).open_original(staged.original_key) == body


def test_pictures_of_an_unreachable_s3_are_503_not_404(tmp_path):
    settings = unreachable_s3(tmp_path)
    server = UvicornThread(Starlette(routes=[images_mount(settings)]), "images")
    url = f"http://127.0.0.1:{server.start()}/kb-files/upload-images/doc/a.png"
    try:
        reply = httpx.get(url, headers=auth_header(), timeout=30)
        assert reply.status_code == 503 and "图片暂时无法读取" in reply.json()["error"], reply.text
        assert httpx.get(url, timeout=30).status_code == 401
    finally:
        server.stop()
