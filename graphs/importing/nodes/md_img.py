"""node_md_img: find the images a Markdown file really references, caption, upload, relink.

Pictures linked from the web are fetched once here from trusted hosts and served like the local
ones, or dropped with a notice: an answer never makes the reader's browser ask another site.

Writes `{doc_id}_new.md` in the work folder (never named from the user's file name, which may be
long enough to break the file system's limit); the original file is never touched.
"""
from __future__ import annotations

import logging
import re
from pathlib import Path

from langchain_core.runnables import RunnableConfig

from graphs.base import emit, graph_node
from graphs.importing.configuration import ImportConfiguration
from graphs.importing.images import image_root, locate_image
from graphs.importing.state import ImageRef, ImportGraphState, ImportUpdate
from services.errors import ImageProcessingError, ValidationError
from services.prompts import load_prompt
from services.remote_images import RemoteImageRefused, fetch_image, is_remote
from services.text_files import read_text, sanitize_text
from services.vision_model import caption_image

log = logging.getLogger("import.node_md_img")

IMAGE_SUFFIXES = {".png", ".jpg", ".jpeg", ".gif", ".webp", ".bmp", ".svg"}
CONTEXT_CHARS = 100
# ![alt](src "title")  |  <img ... src="x" ...>  |  <Image src='x' .../> (Docusaurus/MDX)
MD_IMAGE = re.compile(r"!\[(?P<alt>[^\]\n]*)\]\(\s*<?(?P<src>[^)\s>]+)>?(?:\s+\"[^\"]*\")?\s*\)")
TAG_IMAGE = re.compile(r"<(?:img|image)\b[^>]*?\bsrc\s*=\s*(?:(?P<q>[\"'])(?P<src>.+?)(?P=q)|(?P<bare>[^\s\"'>]+))[^>]*?/?>",
                       re.IGNORECASE)
TAG_ALT = re.compile(r"\balt\s*=\s*([\"'])(.*?)\1", re.IGNORECASE)
HEADING = re.compile(r"^\s*#{1,6}\s+(.+)$", re.MULTILINE)


def plain(line: str) -> str:
    """A Markdown line as bare words: no links' targets, tags or markup characters."""
    line = re.sub(r"^\s*(?:[-+*]|\d+\.)\s+|\]\([^)]*\)|<[^>]*>|https?://\S+|[-=~:]{3,}", " ", line)
    return re.sub(r"\s+", " ", re.sub(r"[#>*`|!\[\]()]", " ", line)).strip()


def offline_caption(alt: str, text: str, start: int) -> str:
    """Without a vision model: the author's alt text, else the section heading and the sentence
    that leads to the image (never text from an earlier section or the front matter)."""
    alt = alt.strip()
    if alt and not re.fullmatch(r"[\w.-]*\.(png|jpe?g|gif|webp|svg)|image|img|图片|pic", alt, re.IGNORECASE):
        return alt[:50]
    heading, section_start = "", 0
    for m in HEADING.finditer(text, 0, start):
        heading, section_start = plain(m.group(1)), m.end()
    lead = next((plain(line) for line in reversed(text[section_start:start].splitlines()) if plain(line)), "")
    lead = [s for s in re.split(r"(?<=[。！？；.!?;])\s*", lead) if s][-1] if lead else ""
    parts = [p for p in (heading, lead[-30:]) if p]
    return ("插图：" + " - ".join(parts))[:50] if parts else "插图"


def find_images(text: str) -> list[tuple[int, int, str, str]]:
    """(start, end, src, alt) for every image reference, in document order."""
    found = [(m.start(), m.end(), m.group("src"), m.group("alt")) for m in MD_IMAGE.finditer(text)]
    for m in TAG_IMAGE.finditer(text):
        alt = TAG_ALT.search(m.group(0))
        found.append((m.start(), m.end(), m.group("src") or m.group("bare"), alt.group(2) if alt else ""))
    return sorted(found)


def has_text(text: str) -> bool:
    """Whether anything readable is left once image references, HTML tags and Markdown marks go."""
    pieces, last = [], 0
    for start, end, _src, _alt in find_images(text):
        pieces.append(text[last:start])
        last = max(last, end)
    pieces.append(text[last:])
    return bool(re.search(r"\w", re.sub(r"<[^>]*>", " ", "".join(pieces))))


def safe_caption(caption: str) -> str:
    return re.sub(r"[\[\]\n\r]+", " ", caption).strip()


@graph_node("import", "node_md_img", "图片处理", ImageProcessingError)
def node_md_img(state: ImportGraphState, config: RunnableConfig) -> ImportUpdate:
    cfg = ImportConfiguration.from_runnable_config(config)
    settings = cfg.settings
    md_file = Path(state["md_path"])
    text = sanitize_text(read_text(md_file))
    if not has_text(text):  # checked before any upload, so a refused file leaves nothing behind
        name = Path(state.get("import_file_path") or md_file).name
        raise ValidationError(f"文档“{name}”没有任何文字内容（空白或只有图片），无法导入。")
    store = cfg.object_store
    doc_key = state["doc_key"]
    use_model = settings.llm_enabled
    images: list[ImageRef] = []
    replacements: dict[tuple[int, int], str] = {}
    cleared = False
    root = image_root(md_file, settings.data_dir)
    found = find_images(text)
    for n, (start, end, src, alt) in enumerate(found, 1):
        if src.lower().startswith("data:"):  # inline bytes: nothing is fetched from anywhere
            images.append({"src": src[:40], "status": "inline", "url": "", "caption": alt})
            replacements[(start, end)] = f"![{safe_caption(alt) or '图片'}]({src})"
            continue
        if is_remote(src):
            try:
                local = fetch_image(src, settings, Path(state["work_dir"]) / "remote-images", f"remote-{n}")
            except RemoteImageRefused as exc:
                log.warning("remote image not imported: %s (%s)", src, exc.message)
                images.append({"src": src, "status": "remote", "url": "", "caption": alt, "reason": exc.message})
                replacements[(start, end)] = f"（网络图片未导入：{safe_caption(alt) or '图片'}）"
                continue
            case_differs = False
        else:
            local, case_differs = locate_image(src, md_file, root)
        if local is None or local.suffix.lower() not in IMAGE_SUFFIXES:
            # reported in the import summary and the source view; an answer never shows the reference
            log.warning("image not found: %s (in %s)", src, md_file)
            images.append({"src": src, "status": "missing", "url": "", "caption": alt})
            replacements[(start, end)] = ""
            continue
        emit({"type": "node_progress", "node": "node_md_img", "text": f"处理图片 {n}/{len(found)}：{local.name}"})
        if not cleared:  # stale images of an earlier import must never mix with these
            store.clear_images(doc_key)
            cleared = True
        caption = None
        if use_model:
            prompt = load_prompt(
                "image_summary", file_title=state["file_title"],
                before=text[max(0, start - CONTEXT_CHARS):start], after=text[end:end + CONTEXT_CHARS],
            )
            try:
                caption = caption_image(local, prompt, settings)
            except Exception as exc:  # one bad caption must not fail the import
                log.warning("caption failed for %s: %s", local.name, exc)
        caption = safe_caption(caption or offline_caption(alt, text, start))
        url = store.upload_image(doc_key, local)
        images.append({"src": src, "status": "uploaded", "url": url, "caption": caption,
                       **({"case": local.name} if case_differs else {})})
        replacements[(start, end)] = f"![{caption}]({url})"
    # Rebuild by slicing, never re.sub with a replacement string: captions may hold `\` and `$`.
    pieces, last = [], 0
    for (start, end), new in sorted(replacements.items()):
        pieces.append(text[last:start])
        pieces.append(new)
        last = end
    pieces.append(text[last:])
    new_text = "".join(pieces)
    new_md = Path(state["work_dir"]) / f"{state['doc_id']}_new.md"
    new_md.write_text(new_text, encoding="utf-8")
    counts = {s: sum(1 for i in images if i["status"] == s) for s in ("uploaded", "remote", "missing")}
    counts["case"] = sum(1 for i in images if i.get("case"))
    return {
        "md_content": new_text, "new_md_path": str(new_md), "images": images,
        "caption_mode": "vision-model" if use_model else "offline",
        "_summary": f"图片 {counts['uploaded']} 张已上传，{counts['missing']} 张缺失，{counts['remote']} 张网络图片未导入"
                    + (f"（{counts['case']} 张的文件名大小写与引用不同，在区分大小写的服务器上会显示不出来）" if counts["case"] else "")
                    + ("" if use_model else "（未配置视觉模型，使用原有说明文字作为标题）"),
        "_detail": counts,
    }
