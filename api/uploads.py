"""POST /api/upload: the body limits (staging is the import package's, the imports run on its queue)."""
from __future__ import annotations

from graphs.importing import MAX_FILES
from services.settings import get_settings


def upload_body_limit() -> int:
    """Whole multipart body: every file at its maximum, plus room for the form framing."""
    return MAX_FILES * get_settings().max_upload_mb * 1024 * 1024 + 1024 * 1024


def upload_part_limit() -> int:
    """One file: cut off at MAX_UPLOAD_MB while it arrives (validation afterwards gives the exact size)."""
    return get_settings().max_upload_mb * 1024 * 1024
