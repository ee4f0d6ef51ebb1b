"""A made-up documentation site, saved as Markdown pages with their pictures, and hostile archives.

Two products of the vendor 澜舟 (Lanzhou) in folders of their own; the pages reference their pictures
the ways exported sites do: relative, site-absolute (`/resource/...`), Windows backslashes, URL-encoded
names, and a name whose case differs from the file's.
"""
from __future__ import annotations

import io
import stat
import tarfile
import zipfile
from pathlib import Path

from PIL import Image

HUB, CAM = "澜舟 LZ-Hub7 网关", "澜舟 LZ-Cam3 摄像头"
FILLER = "按本页步骤操作，完成后指示灯常亮表示设置成功；如遇问题请先断电十秒再重试。" * 6
PAGES = {
    "lz-hub7/index.md": f"# {HUB} 快速上手\n\n## 接口说明\n\n{HUB} 背面有两个千兆网口和一个 USB-C 电源口。\n\n"
                        f"![背面接口](images/ports.png)\n\n{FILLER}\n",
    "lz-hub7/setup/wifi.md": f"# {HUB} 无线配网\n\n## 配网步骤\n\n长按配网键五秒，{HUB} 的蓝灯开始闪烁后打开手机应用。\n\n"
                             f"![配网按键](/resource/lz-hub7/pair-key.png)\n\n{FILLER}\n",
    "lz-cam3/index.md": f"# {CAM} 快速上手\n\n## 镜头与补光\n\n{CAM} 的镜头外圈是一圈红外补光灯，夜间自动开启。\n\n"
                        f"![镜头外观](..\\resource\\lz-cam3\\lens-ring.png)\n\n"
                        f"## 电源\n\n使用 5V 2A 电源适配器。\n\n![电源接口](images/%E7%94%B5%E6%BA%90.png)\n\n{FILLER}\n",
    "lz-cam3/reset.md": f"# {CAM} 恢复出厂设置\n\n## 复位孔\n\n用卡针按住底部复位孔十秒，{CAM} 会重启并恢复出厂设置。\n\n"
                        f"![复位孔](images/Reset-Hole.PNG)\n\n{FILLER}\n",
}
# where each picture really is, and what colour it is (every picture is different)
PICTURES = {
    "lz-hub7/images/ports.png": (200, 40, 40),
    "resource/lz-hub7/pair-key.png": (40, 200, 40),
    "resource/lz-cam3/lens-ring.png": (40, 40, 200),
    "lz-cam3/images/电源.png": (200, 200, 40),
    "lz-cam3/images/reset-hole.png": (40, 200, 200),  # referenced as Reset-Hole.PNG
}
# one picture per page, except the camera's index page with two
PICTURES_PER_PAGE = {"lz-hub7/index.md": 1, "lz-hub7/setup/wifi.md": 1, "lz-cam3/index.md": 2, "lz-cam3/reset.md": 1}
OTHER_FILES = {"assets/site.css": b"body { color: #333; }", "lz-hub7/app.js": b"console.log('hi');",
               "__MACOSX/lz-hub7/._index.md": b"\x00\x05\x16\x07", ".DS_Store": b"\x00\x00\x00\x01Bud1"}


def png(colour: tuple[int, int, int], size: int = 48) -> bytes:
    out = io.BytesIO()
    Image.new("RGB", (size, size), colour).save(out, format="PNG")
    return out.getvalue()


def site_members(top: str = "") -> dict[str, bytes]:
    members = {f"{top}{name}": text.encode("utf-8") for name, text in PAGES.items()}
    members.update({f"{top}{name}": png(colour) for name, colour in PICTURES.items()})
    members.update({f"{top}{name}" if not name.startswith("__") else name: data for name, data in OTHER_FILES.items()})
    return members


def site_zip(path: Path, top: str = "") -> Path:
    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as z:
        for name, data in site_members(top).items():
            z.writestr(name, data)
    return path


def site_tar(path: Path) -> Path:
    with tarfile.open(path, "w:gz") as t:
        for name, data in site_members().items():
            info = tarfile.TarInfo(name)
            info.size = len(data)
            t.addfile(info, io.BytesIO(data))
    return path


def zip_of(path: Path, members: dict[str, bytes], links: dict[str, str] | None = None) -> Path:
    """A zip with the given members, and symbolic links (name -> target) as Info-ZIP stores them."""
    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as z:
        for name, data in members.items():
            z.writestr(name, data)
        for name, target in (links or {}).items():
            info = zipfile.ZipInfo(name)
            info.external_attr = (stat.S_IFLNK | 0o777) << 16
            z.writestr(info, target)
    return path


def tar_of(path: Path, members: dict[str, bytes], links: dict[str, str] | None = None) -> Path:
    with tarfile.open(path, "w:gz") as t:
        for name, data in members.items():
            info = tarfile.TarInfo(name)
            info.size = len(data)
            t.addfile(info, io.BytesIO(data))
        for name, target in (links or {}).items():
            info = tarfile.TarInfo(name)
            info.type, info.linkname = tarfile.SYMTYPE, target
            t.addfile(info)
    return path


def zip_bomb(path: Path, mb: int) -> Path:
    """A small zip that unpacks to `mb` MB of zeros, beside one honest page."""
    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED, compresslevel=9) as z:
        z.writestr("manual.md", f"# {HUB}\n\n{FILLER}\n")
        with z.open("zeros.md", "w", force_zip64=True) as out:
            block = b"\0" * (1024 * 1024)
            for _ in range(mb):
                out.write(block)
    return path
