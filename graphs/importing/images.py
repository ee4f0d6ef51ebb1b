"""Where a document's pictures may come from: read by both conversion nodes (Markdown, and the
Word / web pages converted to it), so a crafted link is refused the same way in every format."""
from __future__ import annotations

import re
from pathlib import Path
from urllib.parse import unquote


def image_root(md_file: Path, data_dir: Path) -> Path:
    """The folder images may come from. An upload may only use its own task folder (an archive's
    pages share theirs), and Markdown the import converted itself its own folder, so a crafted
    `../../` link can never publish a server file; a local import may reach its site root."""
    md = md_file.resolve()
    uploads, work = (data_dir / "uploads").resolve(), (data_dir / "work").resolve()
    if uploads in md.parents:
        day, task = md.relative_to(uploads).parts[:2]
        return uploads / day / task
    if work in md.parents:
        return md.parent
    return ([md.parent, *md.parent.parents][:6])[-1]


# A Markdown backslash escape (`image\_1.png` is `image_1.png` once rendered)
ESCAPED = re.compile(r"\\([!-/:-@\[-`{-~])")


def _spellings(clean: str) -> list[str]:
    """How a browser could read the reference: Windows separators as slashes (`resource\\a.png`), or
    Markdown escapes removed (`a\\_b.png`)."""
    out = [clean.replace("\\", "/")]
    if "\\" in clean:
        out.append(ESCAPED.sub(r"\1", clean).replace("\\", "/"))
    return list(dict.fromkeys(out))


def _ignoring_case(base: Path, rel: str, root: Path) -> Path | None:
    """`rel` under `base`, each segment matched without regard to case (a site written on a
    case-insensitive disk), never leaving `root`."""
    current = base
    for segment in [s for s in rel.split("/") if s not in ("", ".")]:
        if segment == "..":
            current = current.parent
            continue
        try:
            match = next((c for c in current.iterdir() if c.name.lower() == segment.lower()), None)
        except OSError:
            return None
        if match is None:
            return None
        current = match
    current = current.resolve()
    return current if current.is_file() and root in current.parents else None


def locate_image(src: str, md_file: Path, root: Path) -> tuple[Path | None, bool]:
    """(local file, whether only a case-insensitive match found it) for an image reference: relative to
    the Markdown file, or a site-absolute path (`/docs/...`) resolved against the folders from the
    document's own up to `root` (and their `static/`, `public/`), as the site's browser would."""
    clean = unquote(src.split("#")[0].split("?")[0]).strip()
    if not clean:
        return None, False
    root = root.resolve()
    folders = [f for f in [md_file.parent.resolve(), *md_file.parent.resolve().parents] if f == root or root in f.parents]

    def inside(candidate: Path) -> Path | None:
        candidate = candidate.resolve()
        return candidate if candidate.is_file() and (candidate.parent == root or root in candidate.parents) else None

    for spelling in _spellings(clean):
        if spelling.startswith("/"):
            rel = spelling.lstrip("/")
            bases = [b for f in folders for b in (f, f / "static", f / "public")]
        else:
            rel, bases = spelling, [md_file.parent]
        for base in bases:
            if found := inside(base / rel):
                return found, False
        for base in bases:
            if found := _ignoring_case(base, rel, root):
                return found, True
    return None, False


def resolve_image(src: str, md_file: Path, root: Path) -> Path | None:
    return locate_image(src, md_file, root)[0]
