"""python -m graphs.importing PATH... [--product NAME] [--group folder|content] [--json]"""
from __future__ import annotations

import argparse
import json
import logging
import shutil
import sys
from pathlib import Path

from graphs.importing import doc_identity, import_set, iter_import_files, safe_filename
from graphs.importing.archives import is_archive, unpack
from graphs.importing.files import is_folder
from graphs.importing.filetypes import accepted_extensions, accepted_labels
from services.errors import ImportProcessError
from services.settings import get_settings

HOW = {"named": "文中写明", "folder": "按文件夹", "set": "按整组文档", "weak": "推测，请确认", "file": "单文件识别",
       "user": "用户指定", "remembered": "沿用用户此前的决定", "known": "归入知识库已有产品"}


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m graphs.importing", description=f"导入说明书（{accepted_labels()}）到知识库")
    parser.add_argument("paths", nargs="+", help=f"文件、文件夹（递归查找）或压缩包：{' / '.join(accepted_extensions())}")
    parser.add_argument("--product", help="指定商品名（覆盖自动识别，所有文件同一个产品）")
    parser.add_argument("--group", choices=["folder", "content"], default="folder",
                        help="一组文档的产品识别：folder 参考文件夹结构（默认），content 只看文档内容")
    parser.add_argument("--json", action="store_true", help="每个文件输出一行 JSON")
    parser.add_argument("-v", "--verbose", action="store_true")
    return parser


def unpacked(archive: Path) -> Path:
    """An archive named on the command line, unpacked where an upload's would be (so its pages may
    use only its own pictures); the same archive again replaces its earlier unpacking and documents."""
    settings = get_settings()
    folder = settings.data_dir / "uploads" / "cli" / doc_identity(archive)[1]
    shutil.rmtree(folder, ignore_errors=True)
    result = unpack(archive, folder, display_name=archive.name, max_files=settings.archive_max_files,
                    max_mb=settings.archive_max_mb, clean_name=safe_filename)
    print(result.note(archive.name, len(result.documents)), file=sys.stderr, flush=True)
    return folder


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    logging.basicConfig(level=logging.INFO if args.verbose else logging.WARNING,
                        format="%(asctime)s %(name)s %(levelname)s %(message)s")
    folders, loose = [], []
    for raw in map(Path, args.paths):
        if is_archive(raw.name) and raw.is_file():
            try:
                folders.append(unpacked(raw))
            except ImportProcessError as exc:
                print(f"❌ {raw}  {exc.message}", flush=True)
                return 1
        elif is_folder(raw):
            folders.append(raw)
        else:
            loose.append(raw)
    # each folder (or archive) is a set of its own; the files named directly form one more
    sets = [(iter_import_files([p]), p if args.group == "folder" else None) for p in folders]
    if loose:
        sets.append((loose, None))
    if not any(files for files, _ in sets):
        print(f"没有找到可导入的文件（{accepted_labels()}）", file=sys.stderr)
        return 2
    failed = 0
    for files, root in sets:
        for result in import_set(files, root=root, product=args.product):
            failed += result.status != "completed"
            if args.json:
                print(json.dumps(result.to_dict(), ensure_ascii=False), flush=True)
            elif result.status == "completed":
                print(f"✅ {result.file}  商品：{result.product}（{HOW.get(result.product_how, '')}{'，请确认' if result.product_confirm else ''}）  切片：{result.chunks}  "
                      f"图片：{result.images_uploaded} 已解析 / {result.images_missing} 缺失  {result.seconds:.2f}s", flush=True)
            else:
                print(f"❌ {result.file}  {result.error}", flush=True)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
