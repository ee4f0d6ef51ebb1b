"""python -m graphs.importing PATH... [--product NAME] [--group folder|content] [--json]"""
from __future__ import annotations

import argparse
import json
import logging
import sys
from pathlib import Path

from graphs.importing import import_set, iter_import_files
from graphs.importing.files import is_folder

HOW = {"named": "文中写明", "folder": "按文件夹", "set": "按整组文档", "weak": "推测，请确认", "file": "单文件识别",
       "user": "用户指定"}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m graphs.importing", description="导入说明书（PDF / Word / 网页 / 文本 / Markdown）到知识库")
    parser.add_argument("paths", nargs="+", help="文件或文件夹（递归查找 .pdf / .docx / .html / .txt / .md）")
    parser.add_argument("--product", help="指定商品名（覆盖自动识别，所有文件同一个产品）")
    parser.add_argument("--group", choices=["folder", "content"], default="folder",
                        help="一组文档的产品识别：folder 参考文件夹结构（默认），content 只看文档内容")
    parser.add_argument("--json", action="store_true", help="每个文件输出一行 JSON")
    parser.add_argument("-v", "--verbose", action="store_true")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO if args.verbose else logging.WARNING,
                        format="%(asctime)s %(name)s %(levelname)s %(message)s")
    # each folder is a set of its own; the files named directly form one more
    sets = [(iter_import_files([p]), Path(p) if args.group == "folder" else None) for p in args.paths if is_folder(Path(p))]
    loose = [Path(p) for p in args.paths if not is_folder(Path(p))]
    if loose:
        sets.append((loose, None))
    if not any(files for files, _ in sets):
        print("没有找到可导入的 .pdf / .docx / .html / .txt / .md 文件", file=sys.stderr)
        return 2
    failed = 0
    for files, root in sets:
        for result in import_set(files, root=root, product=args.product):
            failed += result.status != "completed"
            if args.json:
                print(json.dumps(result.to_dict(), ensure_ascii=False), flush=True)
            elif result.status == "completed":
                print(f"✅ {result.file}  商品：{result.product}（{HOW.get(result.product_how, '')}）  切片：{result.chunks}  "
                      f"图片：{result.images_uploaded} 已解析 / {result.images_missing} 缺失  {result.seconds:.2f}s", flush=True)
            else:
                print(f"❌ {result.file}  {result.error}", flush=True)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
