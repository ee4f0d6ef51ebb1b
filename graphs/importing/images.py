"""Where a document's pictures may come from: read by both conversion nodes (Markdown, and the
Word / web pages converted to it), so a crafted link is refused the same way in every format."""
from __future__ import annotations

from pathlib import Path
from urllib.parse import unquote


def image_root(md_file: Path, data_dir: Path) -> Path:
    """The folder images may come from. An uploaded file, and Markdown the import converted itself,
    may only use its own folder, so a crafted `../../` link can never publish a server file; a
    local import may reach its site root."""
    md = md_file.resolve()
    if any((data_dir / own).resolve() in md.parents for own in ("uploads", "work")):
        return md.parent
    return ([md.parent, *md.parent.parents][:6])[-1]


def resolve_image(src: str, md_file: Path, root: Path) -> Path | None:
    """Local file for an image reference: relative to the Markdown file, or a site-absolute
    path (`/docs/...`) resolved against the document's own folders (`static/`, `public/`)."""
    clean = unquote(src.split("#")[0].split("?")[0]).strip()
    if not clean:
        return None
    root = root.resolve()

    def inside(candidate: Path) -> Path | None:
        candidate = candidate.resolve()
        return candidate if candidate.is_file() and (candidate.parent == root or root in candidate.parents) else None

    if not clean.startswith("/"):
        return inside(md_file.parent / clean)
    rel = clean.lstrip("/")
    for folder in [md_file.parent, *md_file.parent.parents][:6]:
        for base in (folder, folder / "static", folder / "public"):
            found = inside(base / rel)
            if found:
                return found
    return None
