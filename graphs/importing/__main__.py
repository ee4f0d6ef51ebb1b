"""python -m graphs.importing PATH... [--product NAME] [--json]"""
from __future__ import annotations

import argparse
import json
import logging
import sys

from graphs.importing import iter_import_files, run_import


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m graphs.importing", description="导入说明书（PDF / Markdown）到知识库")
    parser.add_argument("paths", nargs="+", help="文件或文件夹（递归查找 .pdf / .md）")
    parser.add_argument("--product", help="指定商品名（覆盖自动识别）")
    parser.add_argument("--json", action="store_true", help="每个文件输出一行 JSON")
    parser.add_argument("-v", "--verbose", action="store_true")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO if args.verbose else logging.WARNING,
                        format="%(asctime)s %(name)s %(levelname)s %(message)s")
    files = iter_import_files(args.paths)
    if not files:
        print("没有找到可导入的 .pdf / .md 文件", file=sys.stderr)
        return 2
    failed = 0
    for path in files:
        result = run_import(path, product=args.product)
        failed += result.status != "completed"
        if args.json:
            print(json.dumps(result.to_dict(), ensure_ascii=False), flush=True)
        elif result.status == "completed":
            print(f"✅ {path}  商品：{result.item_name}  切片：{result.chunks}  "
                  f"图片：{result.images_uploaded} 已解析 / {result.images_missing} 缺失  {result.seconds:.2f}s", flush=True)
        else:
            print(f"❌ {path}  {result.error}", flush=True)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
