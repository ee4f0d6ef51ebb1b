"""State of the import graph: the file, what it became on the way, and its registry fields.

Nodes return new values (new chunk dicts, never the state's own edited in place); `node_log` has a
reducer, every other key is written by one node at a time and replaced.
"""
from __future__ import annotations

from typing import TypedDict

from graphs.base import NodeLog


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
    images: list[dict]         # {src, status: uploaded|remote|missing, url, caption}
    caption_mode: str          # "vision-model" | "offline"
    chunks: list[dict]         # {title, parent_title, part, content, product, dense, sparse}
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
