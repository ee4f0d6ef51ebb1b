"""State of the import graph: the file, what it became on the way, and its registry fields.

Nodes return new values (new chunk dicts, never the state's own edited in place); `node_log` has a
reducer, every other key is written by one node at a time and replaced.
"""
from __future__ import annotations

from typing import Literal, TypedDict

from graphs.base import NodeLog, StepReport
from services.embeddings import SparseVector


class ImageRef(TypedDict, total=False):
    """One picture the Markdown references, and what became of it."""
    src: str                   # as the Markdown writes it (inline data: its first 40 characters)
    status: Literal["uploaded", "remote", "missing", "inline"]
    url: str                   # uploaded: where it is served ("" otherwise)
    caption: str
    reason: str                # remote: why it was not imported
    case: str                  # uploaded: the file's own name, found only by ignoring the case of `src`


class Chunk(TypedDict, total=False):
    """One chunk on its way to the vector store; each node adds its fields to new copies."""
    title: str                 # heading path
    parent_title: str
    part: int                  # 1-based piece of its section
    content: str
    page_start: int            # PDF pages it spans (0: not from a PDF)
    page_end: int
    product: str               # node_product_recognition
    dense: list[float]         # node_bge_embedding
    sparse: SparseVector | None  # None: Milvus's BM25 makes it
    file_title: str            # node_import_milvus, as written
    doc_id: str
    chunk_id: str


class ImportGraphState(TypedDict, total=False):
    task_id: str
    import_file_path: str      # the file given by the user (never modified)
    requested_product: str     # product name given by the user; overrides recognition
    identity: str              # what the document id is made from (a resolved path, an upload's name + hash)
    doc_id: str                # stable identity: same file -> same id, same name elsewhere -> other id
    doc_key: str               # readable, storage-safe key (object store prefix, work folder)
    file_title: str            # the stem, for display
    file_type: str             # "pdf" | "md" | "docx" | "html" | "txt"
    work_dir: str              # everything the import writes lives here, under DATA_DIR
    pdf_path: str
    doc_path: str              # a .docx / .html / .txt to convert to Markdown
    md_path: str               # Markdown being processed (converted from another format, or the original .md)
    md_content: str            # Markdown with images captioned and uploaded
    new_md_path: str
    images: list[ImageRef]     # every picture referenced, with its status
    caption_mode: str          # "vision-model" | "offline"
    chunks: list[Chunk]
    product: str
    product_source: str        # one of naming.ORDER: "user" | "remembered" | "set" | "known" | "llm" | "offline" | "page"
    chunk_ids: list[str]
    pages: int
    # registry: what the document record says about where the file came from
    staged: bool               # an upload checked and stored when it was received
    file_name: str             # the name shown to people (an upload keeps the user's name)
    source: str                # "path" | "upload"
    content_hash: str
    original_key: str          # the original in the object store (uploads: stored on receipt)
    set_id: str                # documents recognised together (a folder import, a multi-file upload)
    product_evidence: str      # why this product (set recognition), shown in the catalogue
    product_how: str           # how it was decided, as the import summary says it (see naming.Proposal)
    product_backed: bool       # a set's name backed by a title, front matter or a folder named after it
    product_confirm: bool      # the summary asks the person to confirm the name
    updated_by: str
    node_log: NodeLog


class ImportUpdate(ImportGraphState, StepReport, total=False):
    """What a node returns: the keys it writes, and its step's report."""
