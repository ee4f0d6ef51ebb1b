"""Chat attachments: kept like API uploads, identified by name and content."""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from api.uploads import stage_uploads
from services.settings import Settings, get_settings


@dataclass(frozen=True)
class StagedUpload:
    name: str          # the name the user gave the file
    path: Path         # {DATA_DIR}/uploads/YYYYMMDD/{task_id}/{safe name}
    task_id: str
    doc_key: str       # file name + content hash: the same file uploaded again replaces itself


def stage_attachment(src: Path, name: str, settings: Settings | None = None) -> StagedUpload:
    """Keep a chat attachment the way the HTTP API keeps uploads (safe name, checks, original stored).

    Raises api.uploads.UploadRejected with a Chinese message, keeping nothing, when the file cannot
    be imported (type, size, empty)."""
    with open(src, "rb") as stream:
        staged = stage_uploads([(name, stream)], settings or get_settings())[0]
    return StagedUpload(name=name, path=staged.path, task_id=staged.task_id,
                        doc_key=staged.doc_key)
