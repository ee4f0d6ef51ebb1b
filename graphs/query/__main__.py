"""python -m graphs.query "问题" [--session ID] [--product NAME] [--json]"""
from __future__ import annotations

import argparse
import json
import logging
import sys

from graphs.query import answer_of, run_query
from graphs.query.contracts import Event, FinalEvent, QueryRun


def summary(result: QueryRun) -> dict[str, object]:
    """The final state as --json prints it: the decision, both ranked lists, timings."""
    if result.get("type") == "error":
        return {"status": "failed", "session_id": result.get("session_id"), "error": result["error"],
                "node": result.get("node", "")}
    final = answer_of(result)
    info = result.get("rerank_info") or {}
    rerank = [{k: s[k] for k in ("index", "source", "chunk_id", "title", "product", "url", "score")}
              for s in final["sources"]]
    return {
        "status": final["status"], "session_id": final["session_id"], "branch": final["branch"],
        "original_query": final["original_query"], "rewritten_query": result.get("rewritten_query"),
        "products": final["products"], "candidates": final["candidates"],
        "decision": result.get("decision"), "answer": final["answer"],
        "rrf": result.get("rrf") or [], "rerank": rerank, "rerank_scorer": info.get("scorer"),
        "rerank_scores": info.get("scores") or [], "cutoff": info.get("cutoff"),
        "plan": result.get("plan"), "sub_questions": result.get("sub_questions") or [],
        "grade": result.get("grade"), "rewrite": result.get("rewrite"), "sources": rerank,
        "image_urls": final["image_urls"], "warnings": final["warnings"],
        "node_seconds": {e["node"]: e["seconds"] for e in result.get("node_log") or []},
        "node_status": {e["node"]: {"status": e["status"], "summary": e["summary"]}
                        for e in result.get("node_log") or []},
        "seconds": result.get("seconds"),
    }


def print_delta(event: Event) -> None:
    if event["type"] == "delta":
        sys.stdout.write(event["delta"])
        sys.stdout.flush()


def print_tail(result: FinalEvent) -> None:
    """After the streamed answer: what to choose from, the sources, the pictures."""
    result = answer_of(result)
    if result["branch"] == "ask":
        print("\n\n可选产品：" + "、".join(result["candidates"]))
    sources = result["sources"]
    if sources:
        print("\n\n来源：")
        for s in sources:
            where = s["url"] if s["source"] == "web" else f"{s['product']} · {s['file_title']}"
            print(f"[{s['index']}] {s['title']}（{where}）相关度 {s['score']:.4f}")
    if result["image_urls"]:
        print("\n图片：")
        for url in result["image_urls"]:
            print(url)
    for warning in result["warnings"]:
        print(f"\n⚠️ {warning}")
    print()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m graphs.query", description="向知识库提问")
    parser.add_argument("query", help="问题")
    parser.add_argument("--session", help="会话 ID（同一会话可以追问）")
    parser.add_argument("--product", help="指定商品（跳过商品识别）")
    parser.add_argument("--json", action="store_true", help="输出最终状态摘要（JSON）")
    parser.add_argument("--no-web", action="store_true", help="不做联网搜索")
    parser.add_argument("--no-hyde", action="store_true", help="不做 HyDE 检索")
    parser.add_argument("-v", "--verbose", action="store_true")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO if args.verbose else logging.WARNING,
                        format="%(asctime)s %(name)s %(levelname)s %(message)s")
    result = run_query(args.query, session_id=args.session, product=args.product,
                       options={"web_search": not args.no_web, "hyde": not args.no_hyde},
                       on_event=None if args.json else print_delta)
    if args.json:
        print(json.dumps(summary(result), ensure_ascii=False, indent=2))
    elif result.get("type") == "error":
        print(f"\n❌ 出错了（{result.get('node') or '查询'}）：{result['error']}", file=sys.stderr)
    else:
        print_tail(result)
    return 1 if result.get("type") == "error" else 0


if __name__ == "__main__":
    sys.exit(main())
