"""Where `shared/` (sample corpus, conformance cases) lies: beside the checkout, or beside the
repository this checkout was cloned from (a clone in a temporary folder has none beside it)."""
from __future__ import annotations

import os
import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def _origin_dir() -> Path | None:
    try:
        url = subprocess.run(["git", "-C", str(ROOT), "config", "--get", "remote.origin.url"],
                             capture_output=True, text=True, timeout=5).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return None
    return Path(url).resolve() if url and "://" not in url and ":" not in url.split("/")[0] else None


def find_shared() -> Path:
    candidates = [Path(os.environ["ZGZK_SHARED_DIR"])] if os.environ.get("ZGZK_SHARED_DIR") else []
    candidates.append(ROOT.parent / "shared")
    origin = _origin_dir()
    if origin is not None:
        candidates.append(origin.parent / "shared")
    return next((c for c in candidates if (c / "corpus").is_dir()), candidates[0])


SHARED = find_shared()
CORPUS = SHARED / "corpus"
