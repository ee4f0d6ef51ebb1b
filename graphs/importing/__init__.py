"""Import graph: a manual file becomes chunks in Milvus, with a record in the document registry.

The public front door: the CLI, the chat, the HTTP API and the benchmarks import through these names
and never reach into node modules. `import_set` / `run_import` import in the calling thread;
`enqueue_set` / `enqueue_reimport` / `enqueue_reindex` put the work on the task queue (see jobs.py) and
return task ids.
"""
from graphs.importing.chunking import PATH_SEP
from graphs.importing.files import (
    MAX_FILES, SUPPORTED, StagedBatch, StagedFile, UploadRejected, UploadStager, discard, display_filename, doc_identity, iter_import_files, safe_filename,
    stage_uploads, validate_file,
)
from graphs.importing import catalog
from graphs.importing.filetypes import accepted_extensions, accepted_labels, picker_accept
from graphs.importing.runner import ImportResult, import_set, run_import
from graphs.importing.jobs import (
    enqueue_reimport, enqueue_reindex, enqueue_set, hand_on_expired, queued_part, run_worker, start_in_app_worker,
    stop_in_app_workers,
)

__all__ = [
    "catalog", "accepted_extensions", "accepted_labels", "picker_accept",
    "MAX_FILES", "PATH_SEP", "SUPPORTED", "ImportResult", "StagedBatch", "StagedFile", "UploadRejected", "UploadStager", "discard", "display_filename", "doc_identity",
    "import_set", "iter_import_files", "run_import", "safe_filename", "stage_uploads", "validate_file",
    "enqueue_reimport", "enqueue_reindex", "enqueue_set", "queued_part", "hand_on_expired", "run_worker",
    "start_in_app_worker", "stop_in_app_workers",
]
