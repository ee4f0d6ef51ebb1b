"""Object storage for document images and uploaded originals, both private to the app.

Two backends with one interface:
- "minio": any S3 server through the `minio` SDK, used when settings.minio_endpoint is set; the
  bucket allows no anonymous reads;
- "local": plain files under {data_dir}/objects/{bucket}/.
Either way the app serves the images at LOCAL_URL_PREFIX, to signed-in users (api/images.py).

Nothing connects at import time; an unreachable server raises MinioError when used.
"""
from __future__ import annotations

import json
import mimetypes
import os
import shutil
import threading
import uuid
from pathlib import Path
from urllib.parse import quote, urlsplit

from services.errors import MinioError
from services.settings import Settings, get_settings

IMAGES_PREFIX = "upload-images"
ORIGINALS_PREFIX = "pdf_files"
LOCAL_URL_PREFIX = "/kb-files"


def _segments(value: str, what: str) -> list[str]:
    """Split a key into path segments, refusing anything that could leave its prefix."""
    if not isinstance(value, str) or not value.strip():
        raise MinioError(f"{what}不能为空")
    if "\x00" in value:
        raise MinioError(f"{what}包含非法字符：{value!r}")
    # Windows-style separators must become '/', never %5C in the URL
    normalised = value.replace("\\", "/")
    drive = normalised[:1].isascii() and normalised[:1].isalpha() and normalised[1:2] == ":"
    if normalised.startswith("/") or drive:
        raise MinioError(f"{what}不能是绝对路径：{value!r}")
    parts = normalised.split("/")
    if any(part in ("", ".", "..") for part in parts):
        raise MinioError(f"{what}包含非法路径片段：{value!r}")
    return parts


def _doc_prefix(doc_key: str) -> str:
    parts = _segments(doc_key, "文档标识")
    if len(parts) != 1:
        # one folder per document, so that clearing one document never touches another
        raise MinioError(f"文档标识不能包含路径分隔符：{doc_key!r}")
    return f"{IMAGES_PREFIX}/{parts[0]}/"


def _image_name(doc_key: str, local_path: Path) -> str:
    return _doc_prefix(doc_key) + "/".join(_segments(Path(local_path).name, "图片文件名"))


def _originals_prefix(doc_key: str) -> str:
    return ORIGINALS_PREFIX + _doc_prefix(doc_key)[len(IMAGES_PREFIX):]


def _original_name(local_path: Path, doc_key: str) -> str:
    # one folder per document: two uploads named `faq.md` never overwrite each other
    return _originals_prefix(doc_key) + "/".join(_segments(Path(local_path).name, "文件名"))


def content_type(name: str) -> str:
    return mimetypes.guess_type(name)[0] or "application/octet-stream"


def _require_file(local_path: Path) -> Path:
    path = Path(local_path)
    if not path.is_file():
        raise MinioError(f"待上传的文件不存在：{path}")
    return path


class ObjectStore:
    """Interface shared by both backends; URLs returned for images are the app's own (LOCAL_URL_PREFIX)."""

    backend: str = ""

    def upload_image(self, doc_key: str, local_path: Path) -> str:
        """Store an image under upload-images/{doc_key}/ and return the app's URL for it."""
        path = _require_file(local_path)
        name = _image_name(doc_key, path)
        self._put(name, path)
        return self.object_url(name)

    def upload_original(self, local_path: Path, doc_key: str) -> str:
        """Store a document's original privately as pdf_files/{doc_key}/{name}; return the object name.
        Earlier originals of the document go first: a renamed file must not leave its old copy."""
        path = _require_file(local_path)
        name = _original_name(path, doc_key)
        self._delete_prefix(_originals_prefix(doc_key))
        # an original is never written again where it was read from (a staged upload): it may share its bytes
        self._put(name, path, share=True)
        return name

    def open_original(self, object_name: str) -> bytes:
        if not object_name.startswith(f"{ORIGINALS_PREFIX}/"):
            raise MinioError(f"不是原件的对象名：{object_name!r}")
        return self._get("/".join(_segments(object_name, "对象名")))

    def delete_document(self, doc_key: str) -> int:
        """Remove a document's images and original; return how many objects went."""
        return self._delete_prefix(_doc_prefix(doc_key)) + self._delete_prefix(_originals_prefix(doc_key))

    def clear_images(self, doc_key: str) -> int:
        """Remove every image of one document (before re-upload, so stale images never mix); return the count."""
        return self._delete_prefix(_doc_prefix(doc_key))

    def open_image(self, object_name: str) -> bytes:
        return self._get("/".join(_segments(object_name, "对象名")))

    def object_url(self, object_name: str) -> str:
        return f"{LOCAL_URL_PREFIX}/{quote(object_name)}"

    def ping(self) -> bool:
        raise NotImplementedError

    def _put(self, name: str, path: Path, share: bool = False) -> None:
        raise NotImplementedError

    def _get(self, name: str) -> bytes:
        raise NotImplementedError

    def _delete_prefix(self, prefix: str) -> int:
        raise NotImplementedError


def local_objects_root(settings: Settings) -> Path:
    return settings.data_dir / "objects" / settings.minio_bucket_name


def local_images_root(settings: Settings) -> Path:
    """Folder the app mounts at {LOCAL_URL_PREFIX}/upload-images."""
    return local_objects_root(settings) / IMAGES_PREFIX


def _hard_link(source: Path, target: Path) -> bool:
    try:
        os.link(source, target)
    except OSError:  # another file system, or one without hard links
        return False
    return True


class LocalObjectStore(ObjectStore):
    backend = "local"

    def __init__(self, settings: Settings):
        self.root = local_objects_root(settings)

    def ping(self) -> bool:
        try:
            self.root.mkdir(parents=True, exist_ok=True)
            return os.access(self.root, os.W_OK)
        except OSError:
            return False

    def _path(self, name: str) -> Path:
        return self.root.joinpath(*name.split("/"))

    def _put(self, name: str, path: Path, share: bool = False) -> None:
        target = self._path(name)
        # a short temporary name: a 250-byte file name plus a suffix would pass the 255-byte limit
        tmp = target.with_name(f".{uuid.uuid4().hex}.part")
        try:
            target.parent.mkdir(parents=True, exist_ok=True)
            # `share`: a second name for the same bytes, so an upload's original costs no disk beside
            # its staged copy
            if not (share and _hard_link(path, tmp)):
                shutil.copyfile(path, tmp)
            # a reader never sees a half-written file
            os.replace(tmp, target)
        except OSError as exc:
            tmp.unlink(missing_ok=True)
            raise MinioError(f"保存文件到本地存储失败：{name}", cause=exc) from exc

    def _get(self, name: str) -> bytes:
        try:
            return self._path(name).read_bytes()
        except FileNotFoundError as exc:
            raise MinioError(f"对象不存在：{name}", cause=exc) from exc
        except OSError as exc:
            raise MinioError(f"读取本地存储失败：{name}", cause=exc) from exc

    def _delete_prefix(self, prefix: str) -> int:
        folder = self._path(prefix.rstrip("/"))
        if not folder.is_dir():
            return 0
        count = sum(1 for p in folder.rglob("*") if p.is_file())
        try:
            shutil.rmtree(folder)
        except OSError as exc:
            raise MinioError(f"清理本地图片目录失败：{prefix}", cause=exc) from exc
        return count


def _anonymous(statement: dict) -> bool:
    principal = statement.get("Principal")
    if isinstance(principal, dict):
        principal = principal.get("AWS")
    return principal == "*" or (isinstance(principal, list) and "*" in principal)


def _close_to_anonymous(client, bucket: str) -> None:
    """Take out of the bucket's policy every statement that lets anyone in without credentials (a
    public-read images prefix among them): pictures go through the app, to signed-in users only."""
    from minio.error import S3Error

    try:
        policy = json.loads(client.get_bucket_policy(bucket))
    except S3Error as exc:
        if exc.code == "NoSuchBucketPolicy":
            return
        raise
    statements = policy.get("Statement") or []
    statements = [statements] if isinstance(statements, dict) else statements
    kept = [s for s in statements if not _anonymous(s)]
    if len(kept) == len(statements):
        return
    if kept:
        client.set_bucket_policy(bucket, json.dumps({**policy, "Statement": kept}))
    else:
        client.delete_bucket_policy(bucket)


class MinioObjectStore(ObjectStore):
    backend = "minio"

    def __init__(self, settings: Settings):
        endpoint, secure = settings.minio_endpoint.strip(), settings.minio_secure
        if "://" in endpoint:
            parts = urlsplit(endpoint)
            endpoint, secure = parts.netloc, parts.scheme == "https"
        self.endpoint = endpoint.rstrip("/")
        self.secure = secure
        self.bucket = settings.minio_bucket_name
        self._access_key = settings.minio_access_key
        self._secret_key = settings.minio_secret_key
        self._client = None
        self._lock = threading.Lock()

    def _connect(self):
        """Client with a ready bucket and policy, created on first use."""
        with self._lock:
            if self._client is not None:
                return self._client
            import urllib3
            from minio import Minio

            # short timeouts and few retries: an unreachable server must fail fast, not hang an import
            http = urllib3.PoolManager(
                timeout=urllib3.Timeout(connect=3.0, read=60.0),
                retries=urllib3.Retry(total=2, backoff_factor=0.2, status_forcelist=[500, 502, 503, 504]),
            )
            client = Minio(self.endpoint, access_key=self._access_key, secret_key=self._secret_key,
                           secure=self.secure, http_client=http)
            try:
                if not client.bucket_exists(self.bucket):
                    client.make_bucket(self.bucket)
                _close_to_anonymous(client, self.bucket)
            except Exception as exc:
                raise MinioError(f"无法连接对象存储 {self.endpoint} 或初始化存储桶 {self.bucket}：{exc}",
                                 cause=exc) from exc
            self._client = client
            return client

    def ping(self) -> bool:
        try:
            return self._connect().bucket_exists(self.bucket)
        except Exception:
            return False

    def _put(self, name: str, path: Path, share: bool = False) -> None:
        client = self._connect()
        try:
            client.fput_object(self.bucket, name, str(path), content_type=content_type(name))
        except Exception as exc:
            raise MinioError(f"上传到对象存储失败：{name}：{exc}", cause=exc) from exc

    def _get(self, name: str) -> bytes:
        client = self._connect()
        try:
            response = client.get_object(self.bucket, name)
            try:
                return response.read()
            finally:
                response.close()
                response.release_conn()
        except Exception as exc:
            raise MinioError(f"读取对象存储失败：{name}：{exc}", cause=exc) from exc

    def _delete_prefix(self, prefix: str) -> int:
        from minio.deleteobjects import DeleteObject

        client = self._connect()
        try:
            names = [obj.object_name for obj in client.list_objects(self.bucket, prefix=prefix, recursive=True)]
            errors = list(client.remove_objects(self.bucket, (DeleteObject(n) for n in names)))
        except Exception as exc:
            raise MinioError(f"清理对象存储目录失败：{prefix}：{exc}", cause=exc) from exc
        if errors:
            raise MinioError(f"清理对象存储目录时有 {len(errors)} 个对象删除失败：{prefix}")
        return len(names)


_stores: dict[tuple, ObjectStore] = {}
_stores_lock = threading.Lock()


def get_object_store(settings: Settings | None = None) -> ObjectStore:
    """One store per distinct storage configuration (Settings itself is unhashable: it holds a dict)."""
    settings = settings or get_settings()
    key = (settings.minio_endpoint, settings.minio_access_key, settings.minio_secret_key,
           settings.minio_bucket_name, settings.minio_secure, str(settings.data_dir))
    with _stores_lock:
        store = _stores.get(key)
        if store is None:
            cls = MinioObjectStore if settings.minio_endpoint else LocalObjectStore
            store = _stores[key] = cls(settings)
        return store
