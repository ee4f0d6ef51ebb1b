"""Chinese Markdown for what the UI shows: one step per graph node, one progress message per import.

Pure functions of the graph events, so they are tested without Chainlit.
"""
from __future__ import annotations

import re
import time

from graphs.importing import PATH_SEP

# Step type per query node (Chainlit / Literal step types).
STEP_TYPES = {
    "node_product_confirm": "tool",
    "node_search_embedding": "retrieval",
    "node_search_embedding_hyde": "retrieval",
    "node_web_search_mcp": "tool",
    "node_rrf": "retrieval",
    "node_rerank": "rerank",
    "node_answer_output": "llm",
    "node_plan": "tool",
    "node_sub_question": "retrieval",
    "node_synthesis": "retrieval",
    "node_grade": "tool",
    "node_rewrite_query": "llm",
    "node_search_rewritten": "retrieval",
}
ROUTE_NAMES = {"answer": "作答", "rewrite": "改写后再检索", "clarify": "向用户追问", "no_knowledge": "回答“不知道”"}
BRANCH_NAMES = {"confirmed": "已确认产品", "ask": "需要用户选择产品", "refuse": "知识库中没有相关产品"}
HIT_ROWS = 10
SOURCE_FILE_CHARS = 30
SOURCE_SECTION_CHARS = 30


DIRECTIVE = re.compile(r":(?=[A-Za-z])")
IMAGE_MARK = re.compile(r"!\[[^\]]*\]\([^)]*\)")


def plain(text: str) -> str:
    """Text shown as written: the UI's Markdown would hide `:name` as a directive (`offline:use-m3`)."""
    return DIRECTIVE.sub(r"\\:", text)


def cell(value) -> str:
    """A table cell that cannot break the table."""
    return plain(str(value if value is not None else "").replace("|", "\\|").replace("\n", " ").strip())


def hits_table(hits: list[dict]) -> str:
    rows = ["| # | 标题 | 产品 | 分数 |", "|---|---|---|---|"]
    rows += [f"| {i} | {cell(h.get('title')) or '（无标题）'} | {cell(h.get('product'))} | {float(h.get('score') or 0):.4f} |"
             for i, h in enumerate(hits[:HIT_ROWS], 1)]
    return "\n".join(rows)


def confirm_lines(detail: dict) -> list[str]:
    lines = [f"- 结果：{BRANCH_NAMES.get(detail.get('branch'), detail.get('branch', ''))}",
             f"- 判定方式：`{detail.get('method', '')}`"]
    scores = detail.get("scores") or {}
    if scores:
        ranked = sorted(scores.items(), key=lambda kv: -kv[1])[:5]
        lines.append("- 匹配得分：" + "，".join(f"{name} {score:.2f}" for name, score in ranked))
    if detail.get("branch") == "ask" and detail.get("candidates"):
        lines.append("- 候选产品：" + "、".join(detail["candidates"]))
    return lines


def rerank_lines(detail: dict) -> list[str]:
    scores = detail.get("scores") or []
    cutoff = int(detail.get("cutoff") or 0)
    lines = [f"- 评分器：`{detail.get('scorer', '')}`",
             f"- 共 {detail.get('total', len(scores))} 条，截断位置：第 {cutoff} 条之后"]
    if scores:
        shown = [f"**{s:.3f}**" if i < cutoff else f"{s:.3f}" for i, s in enumerate(scores[:HIT_ROWS + 2])]
        lines.append("- 分数（加粗为保留）：" + "，".join(shown))
    kept = detail.get("kept") or []
    if kept:
        lines += ["", hits_table([{**k, "product": k.get("product") or ("网页" if k.get("source") == "web" else "")}
                                  for k in kept])]
    return lines


def grade_lines(detail: dict) -> list[str]:
    lines = [f"- 路线：{ROUTE_NAMES.get(detail.get('route'), detail.get('route', ''))}"
             + (f"（原判定：{ROUTE_NAMES.get(detail['corrected_from'], detail['corrected_from'])}，按规则校正）"
                if detail.get("corrected_from") else ""),
             f"- 相关：{'是' if detail.get('relevant') else '否'}　可回答：{'是' if detail.get('answerable') else '否'}"
             f"　有歧义：{'是' if detail.get('ambiguous') else '否'}",
             f"- 置信度：{float(detail.get('confidence') or 0):.2f}　评估方式：`{plain(str(detail.get('method', '')))}`"]
    if detail.get("reason"):
        lines.append(f"- 理由：{plain(detail['reason'])}")
    if detail.get("missing"):
        lines.append(f"- 缺少：{plain(detail['missing'])}")
    return lines


def plan_lines(detail: dict) -> list[str]:
    lines = [f"- 判定方式：`{detail.get('method', '')}`"]
    lines += [f"{i}. {plain(s['question'])}（{'、'.join(s.get('products') or [])}）"
              for i, s in enumerate(detail.get("sub_questions") or [], 1)]
    return lines


def sub_question_output(event: dict) -> str:
    """A sub-question's nested step: what it found and how it was graded."""
    lines = [plain(event.get("summary") or "")]
    if event.get("grade"):
        lines += grade_lines(event["grade"])
    if event.get("hits"):
        lines += ["", hits_table(event["hits"])]
    return "\n".join(lines)


def step_output(event: dict) -> str:
    """Readable Markdown for a node_end / node_error event of the query graph."""
    if event["type"] == "node_error":
        return f"❌ 出错：{event.get('error', '')}"
    summary = plain(event.get("summary") or "")
    if event.get("status") == "skipped":
        return f"⏭️ 已跳过：{summary}"
    detail = event.get("detail")
    node = event.get("node")
    lines = [summary] if summary else []
    if node == "node_product_confirm" and isinstance(detail, dict):
        lines += confirm_lines(detail)
    elif node == "node_rerank" and isinstance(detail, dict):
        lines += rerank_lines(detail)
    elif node == "node_grade" and isinstance(detail, dict):
        lines += grade_lines(detail)
    elif node == "node_plan" and isinstance(detail, dict):
        lines += plan_lines(detail)
    elif node == "node_rewrite_query" and isinstance(detail, dict):
        lines += [f"- 方法：`{detail.get('method', '')}`", f"- 检索用语：{plain(detail.get('query', ''))}"]
    elif node == "node_sub_question" and isinstance(detail, dict):
        lines += grade_lines(detail.get("grade") or {})
    elif node == "node_synthesis" and isinstance(detail, list):
        lines += [f"{d['index']}. {plain(d['question'])}：{ROUTE_NAMES.get(d['route'], d['route'])}，{d['kept']} 个切片"
                  for d in detail]
    elif node == "node_web_search_mcp" and isinstance(detail, list):
        lines += [f"{i}. [{cell(d.get('title')) or d.get('url')}]({d.get('url')})" for i, d in enumerate(detail, 1)]
    elif isinstance(detail, list) and detail:
        lines += ["", hits_table(detail)]
    lines.append(f"\n用时 {float(event.get('seconds') or 0):.2f} 秒")
    return "\n".join(lines)


def pages_text(source: dict) -> str:
    """"第 3 页" / "第 3–4 页", or "" for a source that is not from a PDF."""
    start, end = int(source.get("page_start") or 0), int(source.get("page_end") or 0)
    if start <= 0:
        return ""
    return f"第 {start} 页" if end <= start else f"第 {start}–{end} 页"


def section_text(source: dict) -> str:
    """The source's place in its document: the last two headings of its path, without a part number."""
    path = re.sub(r"-\d+$", "", (source.get("title") or "").replace("\n", " ").strip()).split(PATH_SEP)
    return PATH_SEP.join(p.strip() for p in path[-2:] if p.strip())


def clip(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[:limit - 1] + "…"


def source_label(source: dict) -> str:
    """What a source chip says, `[n] 文件 · 第 N 页 · 标题`: the number the answer cites, and enough
    to tell two chips apart (file and page, or file and section)."""
    file_title = (source.get("file_title") or "资料").strip()
    parts = [clip(file_title, SOURCE_FILE_CHARS)]
    section = section_text(source)
    parts += [p for p in (pages_text(source), clip(section, SOURCE_SECTION_CHARS)) if p and p != file_title]
    return f"[{source['index']}] " + " · ".join(parts)


def source_text(source: dict, content: str) -> str:
    """A Markdown source as the side panel shows it: where it is, then its section's text."""
    meta = [f"**文件**：{source.get('file_title') or '—'}", f"**章节**：{section_text(source) or '—'}",
            f"**产品**：{source.get('product') or '—'}"]
    return "\n\n".join(meta) + "\n\n---\n\n" + content


def sources_line(sources: list[dict]) -> str:
    """The answer's source line: local sources are the chips under it, web sources link out."""
    if not sources:
        return ""
    web = [f"[{s['index']}] [{cell(s.get('title')) or s.get('url')}]({s.get('url')})"
           for s in sources if s.get("source") == "web"]
    chips = ["点击下方按钮查看原文"] if any(s.get("source") != "web" for s in sources) else []
    return "**来源**：" + "　".join(chips + web)


def footer_text(llm_enabled: bool, model: str) -> str:
    """The line under the input box: says who writes the answers, as configured."""
    if llm_enabled:
        return f"回答由大模型 {plain(model)} 依据已导入的说明书生成，可能有误，请点开来源核对原文。"
    return "回答直接摘录自已导入的说明书，点开来源可查看原文。"


class ImportProgress:
    """One upload's progress message: a line per import node, then the result."""

    def __init__(self, file_name: str):
        self.file_name = file_name
        self.nodes: dict[str, dict] = {}

    def apply(self, event: dict) -> None:
        kind = event.get("type")
        if kind == "node_start":
            self.nodes[event["node"]] = {"label": event.get("label", event["node"]), "state": "running", "text": ""}
        elif kind in ("node_end", "node_error"):
            entry = self.nodes.setdefault(event["node"], {"label": event.get("label", event["node"])})
            if kind == "node_error":
                entry.update(state="failed", text=event.get("error", ""))
            else:
                entry.update(state="done", text=f"{plain(event.get('summary', ''))}（{float(event.get('seconds') or 0):.2f} 秒）")

    def node_lines(self) -> list[str]:
        icon = {"running": "⏳", "done": "✅", "failed": "❌"}
        return [f"{icon[n['state']]} {n['label']}　{n.get('text', '')}".rstrip() for n in self.nodes.values()]

    def render_running(self) -> str:
        return "\n".join([f"⏳ 正在导入《{self.file_name}》……", "", *self.node_lines()])

    def render_done(self, result: dict, rename_hint: bool = True) -> str:
        missing, remote = int(result.get("images_missing") or 0), int(result.get("images_remote") or 0)
        cased = result.get("case_images") or []
        images = (f"{result.get('images_uploaded', 0)} 张" + (f"（另有 {missing} 张图片文件缺失，未能显示：{'、'.join(plain(m) for m in (result.get('missing_images') or [])[:3])}）"
                     if missing else "")
                  + (f"（{remote} 张网络图片来自未允许的网站，未导入）" if remote else "")
                  + (f"（{len(cased)} 张只在忽略大小写时找到：{'、'.join(plain(c) for c in cased[:3])}）" if cased else ""))
        return "\n".join([
            f"✅ 《{self.file_name}》导入完成", "",
            f"- 商品名：**{result.get('product', '')}**",
            f"- 切片：{result.get('chunks', 0)} 个",
            f"- 图片：{images}",
            f"- 用时：{float(result.get('seconds') or 0):.1f} 秒",
            *(["", "商品名不对？点击下方“修改商品名”按钮重新导入。"] if rename_hint else []),
        ])

    def render_failed(self, error: str) -> str:
        return "\n".join([f"❌ 《{self.file_name}》导入失败：{error}", "", *self.node_lines(), "",
                          "这份文件没有写入知识库，可以修改后重新上传。"])


# -- the knowledge base as the chat shows it ------------------------------------------------
STATUS_NAMES = {"ready": "✅ 可用", "importing": "⏳ 导入中", "damaged": "⚠️ 需重新导入"}
SOURCE_NAMES = {"upload": "上传", "path": "本地文件", "recovered": "修复时找回"}
NO_PRODUCT = "（未归类）"
CHUNK_PAGE = 5
CHUNK_CHARS = 400


def unsure(item: dict) -> bool:
    """A file whose product is a guess, or a name no title, front matter or folder backs."""
    return item["how"] == "weak" or bool(item.get("confirm"))


def set_summary(items: list[dict]) -> str:
    """One upload set: its products with their file counts, and the files whose product is to be
    confirmed, each with the evidence it had. `items`: {"file", "product", "how", and optionally
    "confirm", "evidence"} for every file that was imported."""
    counts: dict[str, int] = {}
    for item in items:
        counts[item["product"]] = counts.get(item["product"], 0) + 1
    ranked = sorted(counts.items(), key=lambda kv: (-kv[1], kv[0]))
    lines = [f"识别为 {len(ranked)} 个产品：" + "、".join(f"{cell(p)}（{n} 个文件）" for p, n in ranked)]
    asked = [i for i in items if unsure(i)]
    if asked:
        lines += [""] + [f"- 《{cell(i['file'])}》未写明产品，暂归入 {cell(i['product'])}，请确认" if i["how"] == "weak"
                         else f"- 《{cell(i['file'])}》归入 {cell(i['product'])}（依据：{cell(i.get('evidence') or '无')}；"
                              "没有标题、front matter 或同名文件夹佐证），请确认" for i in asked]
    lines += ["", "识别正确请点“接受”；也可以给产品改名，或把文件移到别的产品。"]
    return "\n".join(lines)


def when(ts) -> str:
    if not ts:
        return "—"
    return time.strftime("%Y-%m-%d %H:%M", time.localtime(float(ts)))


def images_cell(record: dict) -> str:
    missing = int(record.get("images_missing") or 0)
    found = int(record.get("images_resolved") or 0)
    return f"{found}（缺 {missing}）" if missing else str(found)


def source_name_of(record: dict) -> str:
    return SOURCE_NAMES.get(record.get("source") or "", "—")


def file_label(record: dict, docs: list[dict]) -> str:
    """A document's button label; where a name repeats (`boot.md` of two products) the origin tells them apart."""
    name = record.get("file_name") or record["doc_id"]
    twins = [d for d in docs if d.get("file_name") == record.get("file_name")]
    if len(twins) < 2:
        return f"《{name}》"
    same_origin = [d for d in twins if d.get("source") == record.get("source")]
    tag = source_name_of(record) + (f" {same_origin.index(record) + 1}" if len(same_origin) > 1 else "")
    return f"《{name}》（{tag}）"


def queued_text(name: str, ahead: int, typical_s: float) -> str:
    """A queued import as its user sees it: what is happening and how long it may take."""
    line = f"⏳ 《{name}》已收到并保存，正在排队等待导入"
    line += f"（前面还有 {ahead} 个文件）。" if ahead else "。"
    if typical_s:
        wait = typical_s * (ahead + 1)
        line += f"最近每个文件的导入约需 {typical_s:.0f} 秒，预计 {max(1, round(wait / 60))} 分钟内开始显示进度。"
    else:
        line += "导入通常每个文件需要几秒到几分钟（PDF 和图片多的文档更久）。"
    return line + "可以先继续提问；如果很久没有开始，请联系管理员。"


def queue_hint(stuck: int, waited_s: float) -> str:
    """For admins in the knowledge-base view: which process the queued imports wait for."""
    return (f"> 🛠️ 管理员提示：有 {stuck} 个导入任务已排队 {waited_s / 60:.0f} 分钟以上仍未开始。"
            "如果没有导入进程在运行，请在服务器上启动 `bash scripts/worker.sh`（或让网页进程自己导入：`IMPORT_IN_APP=true`）。")


def import_help(labels: str, max_mb: int, max_files: int, may_import: bool) -> str:
    """How to bring manuals in, shown at once (the empty knowledge base's first question)."""
    lines = ["## 📎 怎么导入说明书", "",
             "1. 点击输入框左侧的 📎（回形针）按钮，选择说明书文件；",
             "2. 或者把文件直接拖进对话框；",
             "3. 整个网站或文件夹（含图片）：先打包成 .zip 或 .tar.gz 再上传，文件夹结构会用来识别产品，页面里的图片会随答案显示。",
             "", f"可导入：{labels}。单个文件不超过 {max_mb} MB，一条消息最多 {max_files} 个文件。",
             "可以在同一条消息里附上文件并写下问题：导入完成后马上回答。"]
    if not may_import:
        lines += ["", "⚠️ 你的账号是只读角色，不能导入；请联系管理员导入说明书。"]
    return "\n".join(lines)


def documents_table(docs: list[dict]) -> str:
    rows = ["| 文件 | 状态 | 页数 | 切片 | 图片 | 导入时间 | 来源 |", "|---|---|---|---|---|---|---|"]
    rows += [f"| {cell(d.get('file_name')) or d['doc_id']} | {STATUS_NAMES.get(d.get('status'), cell(d.get('status')))} "
             f"| {int(d.get('pages') or 0) or '—'} | {int(d.get('chunks') or 0)} | {images_cell(d)} "
             f"| {when(d.get('imported_at'))} | {source_name_of(d)} |" for d in docs]
    return "\n".join(rows)


def by_product(docs: list[dict]) -> dict[str, list[dict]]:
    grouped: dict[str, list[dict]] = {}
    for d in docs:
        grouped.setdefault(d.get("product") or NO_PRODUCT, []).append(d)
    return dict(sorted(grouped.items()))


def kb_overview(docs: list[dict]) -> str:
    """Every product with its documents."""
    if not docs:
        return "📚 知识库还是空的：点击输入框左侧的 📎 或把说明书拖进对话框即可导入（整个网站请打包成 .zip）。"
    grouped = by_product(docs)
    lines = [f"## 📚 知识库：{len(grouped)} 个产品，{len(docs)} 份文档"]
    for product, group in grouped.items():
        chunks = sum(int(d.get("chunks") or 0) for d in group)
        lines += ["", f"### {cell(product)}（{len(group)} 份文档，{chunks} 个切片）", "", documents_table(group)]
    lines += ["", "点击“管理”查看某个产品的文档和切片，或修改、删除。"]
    return "\n".join(lines)


FACET_NAMES = (("brand", "品牌"), ("model", "型号"), ("variant", "变体"), ("version", "版本"))
ALIAS_SOURCES = {"document": "文档", "user": "用户添加"}


def product_facts(facts: dict) -> list[str]:
    """Brand / model / variant / version, then every alias with where it came from."""
    facets = "　".join(f"{label}：{cell(facts[key])}" for key, label in FACET_NAMES if facts.get(key))
    aliases = "、".join(f"{cell(a['alias'])}（{ALIAS_SOURCES.get(a.get('source'), '—')}"
                       + {"brand": "，指品牌", "edition": "，文档自称的版次"}.get(a.get("of"), "") + "）"
                       for a in facts.get("aliases") or [])
    return [facets, "", f"别名：{aliases or '（无）'}", ""]


def product_view(product: str, docs: list[dict], facts: dict | None = None) -> str:
    return "\n".join([f"### {cell(product)}", "", *(product_facts(facts) if facts else []), documents_table(docs), "",
                      "点击文件名查看它的切片，或重新导入、删除。"])


TABLE_ROW = re.compile(r"^\s*\|.*\|\s*$")


def chunk_excerpt(content: str, budget: int = CHUNK_CHARS) -> list[str]:
    """A chunk's text as the chunk view shows it, within `budget` characters: prose on one quoted
    line per run of text (a picture marked where it was), a Markdown table kept a table (its rows on
    lines of their own, so the chat renders it rather than showing its pipes)."""
    blocks: list[tuple[bool, list[str]]] = []
    for line in content.splitlines():
        is_row = bool(TABLE_ROW.match(line))
        if not line.strip() and not is_row:
            if blocks and blocks[-1][0]:
                blocks.append((False, []))  # a blank line ends a table
            continue
        if not blocks or blocks[-1][0] != is_row:
            blocks.append((is_row, []))
        blocks[-1][1].append(line.strip())
    out: list[str] = []
    left = budget
    for is_table, rows in blocks:
        if left <= 0:
            break
        if not rows:
            continue
        if is_table:
            kept = rows[:2]  # the header and its separator always go together
            for row in rows[2:]:
                if sum(map(len, kept)) + len(row) > left:
                    break
                kept.append(row)
            cut = len(kept) < len(rows)
            left = 0 if cut else left - sum(map(len, kept))
            out += ["", *(plain(r) for r in kept), *(["", "…"] if cut else []), ""]
        else:
            text = IMAGE_MARK.sub("🖼", " ".join(" ".join(rows).split()))
            text, left = (text[:left] + "…", 0) if len(text) > left else (text, left - len(text))
            out += [f"> {plain(text)}", ""]
    tidy = [line for i, line in enumerate(out) if line or (i and out[i - 1])]  # one blank line between blocks
    return "\n".join(tidy).strip("\n").split("\n")


def chunk_page(record: dict, chunks: list[dict], start: int) -> str:
    """A page of a document's chunks: heading path, text (shortened), its pictures are shown below."""
    shown = chunks[start:start + CHUNK_PAGE]
    lines = [f"### 《{cell(record.get('file_name'))}》", "",
             f"产品：{cell(record.get('product')) or NO_PRODUCT}　状态：{STATUS_NAMES.get(record.get('status'), '—')}"
             f"　切片：{len(chunks)} 个　图片：{images_cell(record)}　导入时间：{when(record.get('imported_at'))}"]
    if record.get("error"):
        lines.append(f"\n> ⚠️ {plain(record['error'])}")
    if not shown:
        lines.append("\n没有切片。")
    for n, chunk in enumerate(shown, start + 1):
        parent, title = chunk.get("parent_title") or "", chunk.get("title") or ""
        # a title often holds its whole heading path already ("Duo S > GPIO > 排针 J3")
        path = (f"{parent} › {title}" if parent and title and not title.startswith(parent) else title or parent) \
            or "（无标题）"
        part = f"（第 {chunk['part']} 段）" if int(chunk.get("part") or 1) > 1 else ""
        lines += ["", f"**{n}. {cell(path)}**{part}", "", *chunk_excerpt(chunk.get("content") or "")]
    if start + CHUNK_PAGE < len(chunks):
        lines.append(f"\n第 {start + 1}–{start + len(shown)} 个，共 {len(chunks)} 个。")
    return "\n".join(lines)
