"""Run the import graph for one file, persisting task state and forwarding progress events.

Used by the CLI, the Chainlit app and the HTTP API alike.
"""
from __future__ import annotations

import logging
import shutil
import time
import uuid
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Callable, TypedDict

from langchain_core.runnables import RunnableConfig

from graphs.base import NodeEventFields
from graphs.importing.configuration import ImportConfiguration
from graphs.importing.files import StagedFile, discard, doc_identity
from graphs.importing.graph import build_import_graph
from graphs.importing.recognition import plan_set
from graphs.importing.state import ImportGraphState
from services.errors import ImportProcessError, is_transient
from services.task_store import get_task_store
from services.vector_store import eq_filter

log = logging.getLogger("import.runner")


class ImportEvent(NodeEventFields, total=False):
    """What `on_event` receives: the graph's node events, then `import_done` or `import_failed`."""
    type: str                  # "node_start" | "node_end" | "node_error" | "node_progress" | "import_done" | "import_failed"
    task_id: str
    result: dict[str, object]  # import_done: ImportResult.to_dict()


class PlannedProduct(TypedDict):
    """What a set's recognition decided for one of its files."""
    product: str | None        # None: the file's own recognition decides
    product_source: str        # "user" | "set"
    product_evidence: str
    how: str                   # see naming.Proposal.how
    backed: bool               # a title, front matter or folder names it


@dataclass
class ImportResult:
    task_id: str
    file: str
    status: str                      # "completed" | "failed"
    product: str = ""
    chunks: int = 0
    pages: int = 0
    images_uploaded: int = 0
    images_missing: int = 0
    missing_images: list[str] = field(default_factory=list)
    case_images: list[str] = field(default_factory=list)  # found only by ignoring case: fix the site
    images_remote: int = 0                # linked from the web and not imported (see node_md_img)
    remote_images: list[str] = field(default_factory=list)
    seconds: float = 0.0
    node_seconds: dict[str, float] = field(default_factory=dict)  # node id -> seconds it ran
    error: str = ""
    failed_node: str = ""
    doc_id: str = ""                 # the document's stable identity in the vector store
    doc_key: str = ""                # its folder in the object store and under DATA_DIR/work
    product_how: str = ""            # how the product was decided (see naming.Proposal.how)
    product_evidence: str = ""
    product_confirm: bool = False    # the name is not backed by a title, front matter or folder: ask
    transient: bool = False          # failed in a way that may pass on a later attempt

    def to_dict(self) -> dict[str, object]:
        """The result as the task store keeps it and the events carry it (JSON)."""
        return asdict(self)


def discard_failed(result: ImportResult, staged: StagedFile | None, cfg: ImportConfiguration) -> None:
    """After a failure: an upload's staged copy goes. A document with no stored version also loses
    its pictures, its original and its work folder (nothing refers to them); an earlier good version
    keeps its own. The vector store rolls its own writes back."""
    if staged is not None:
        discard([staged])
    doc_id, doc_key = result.doc_id, result.doc_key
    if not doc_key and staged is not None:  # it failed before the entry node named the document
        doc_id, doc_key = doc_identity(staged.path, staged.doc_key)
    if not doc_key:
        return
    try:
        if not cfg.vector_store.count(expr=eq_filter("doc_id", doc_id)):
            cfg.object_store.delete_document(doc_key)
            shutil.rmtree(cfg.settings.data_dir / "work" / doc_key, ignore_errors=True)
    except Exception as exc:  # the failure is already reported; log what could not be undone
        log.warning("clean-up after the failed import of %s failed: %s", result.file, exc)


def run_import(path: str | Path, *, product: str | None = None, staged: StagedFile | None = None,
               task_id: str | None = None, on_event: Callable[[ImportEvent], None] | None = None,
               product_source: str = "user", product_evidence: str = "", product_how: str = "",
               product_backed: bool = False, set_id: str = "",
               updated_by: str = "", identity: str | None = None, original_key: str | None = None,
               source: str = "path", file_name: str = "", may_retry: bool = False,
               config: RunnableConfig | None = None) -> ImportResult:
    """Import one file. `product` (given by a person, or by set recognition with
    product_source="set") overrides recognition; `staged` is an upload received by stage_uploads.
    With `may_retry` a transient failure leaves the task to the caller (a queue worker retries it).
    `config` carries the graph's configuration (`{"configurable": {"settings": ...}}`, see
    configuration.py)."""
    task_id = task_id or uuid.uuid4().hex
    cfg = ImportConfiguration.from_runnable_config(config)
    tasks = get_task_store(cfg.settings)
    lease_s = cfg.settings.task_lease_s
    if tasks.get(task_id) is None:
        tasks.create(task_id, staged.name if staged else Path(path).name, product=product, by=updated_by)
    tasks.start(task_id, lease_s)
    state: ImportGraphState = {"task_id": task_id, "import_file_path": str(path), "set_id": set_id, "updated_by": updated_by,
             "source": source, "file_name": file_name or Path(path).name}
    if product:
        state.update(requested_product=product, product_source=product_source, product_evidence=product_evidence,
                     product_how=product_how, product_backed=product_backed)
    if identity:  # the same document again (reindexing from its original)
        state["doc_key"] = identity
    if original_key:
        state["original_key"] = original_key
    if staged is not None:
        state.update(staged=True, doc_key=staged.doc_key, file_name=staged.display_name, source="upload",
                     content_hash=staged.content_hash, original_key=staged.original_key)
    started = time.perf_counter()
    result = ImportResult(task_id=task_id, file=str(path), status="failed")
    final: ImportGraphState = {}

    def forward(event: ImportEvent) -> None:
        kind, node, label = event["type"], event.get("node", ""), event.get("label", "")
        if kind == "node_start":
            tasks.node_started(task_id, node, label)
        elif kind == "node_end":
            tasks.node_finished(task_id, node, label, event.get("summary", ""), float(event.get("seconds") or 0))
        elif kind == "node_error":
            tasks.node_failed(task_id, node, label, event.get("error", ""))
        if on_event is not None:
            try:
                on_event({**event, "task_id": task_id})
            except Exception:  # a broken listener must not break the import
                log.exception("progress listener failed")

    try:
        with tasks.leased(task_id, lease_s):
            for mode, payload in build_import_graph().stream(state, config, stream_mode=["custom", "values"]):
                if mode == "custom":
                    forward(payload)
                else:
                    final = payload
    except ImportProcessError as exc:
        result.error, result.failed_node, result.transient = exc.message, exc.node or "", is_transient(exc)
    except Exception as exc:  # keep the CLI and the app alive whatever a library raises
        log.exception("import crashed")
        result.error, result.transient = f"导入失败：{exc}", is_transient(exc)
    result.seconds = round(time.perf_counter() - started, 3)
    images = final.get("images") or []
    result.product = final.get("product", "")
    result.product_evidence = final.get("product_evidence", product_evidence)
    result.product_how = final.get("product_how", product_how)
    result.product_confirm = bool(final.get("product_confirm"))
    result.doc_id, result.doc_key = final.get("doc_id", ""), final.get("doc_key", "")
    result.pages = int(final.get("pages") or 0)
    result.images_uploaded = sum(1 for i in images if i["status"] == "uploaded")
    result.missing_images = [i["src"] for i in images if i["status"] == "missing"]
    result.images_missing = len(result.missing_images)
    result.case_images = [i["src"] for i in images if i.get("case")]
    result.remote_images = [i["src"] for i in images if i["status"] == "remote"]
    result.images_remote = len(result.remote_images)
    result.node_seconds = {e["node"]: e["seconds"] for e in final.get("node_log") or []}
    if result.error:
        if may_retry and result.transient:  # the next attempt needs what this one staged and stored
            return result
        discard_failed(result, staged, cfg)
        tasks.fail(task_id, result.error)
        forward({"type": "import_failed", "error": result.error, "node": result.failed_node})
        return result
    result.status = "completed"
    result.chunks = len(final.get("chunk_ids") or [])
    tasks.complete(task_id, {k: v for k, v in result.to_dict().items() if k not in ("node_seconds",)})
    forward({"type": "import_done", "result": result.to_dict()})
    return result


def decide_products(paths: list[Path], root: Path | None = None, product: str | None = None,
                    products: dict[str, str] | None = None, staged: list[StagedFile] | None = None) -> list[PlannedProduct]:
    """Per file of a set: the product to import it under (None: its own recognition decides), with
    product_source, product_evidence and how it was decided. `product` names one product for all,
    `products` one per file (by path or file name); the rest is recognised across the set (uploads
    by the folders their client names carried)."""
    carried = {str(f.path): f.folders for f in staged or [] if f.folders}
    plan = plan_set(paths, root, carried or None) if not product else []
    by_path = {str(p.path): p for p in plan}
    out: list[PlannedProduct] = []
    for path in paths:
        given = product or (products or {}).get(str(path)) or (products or {}).get(path.name)
        planned = by_path.get(str(path))
        if given:
            name, source, how, evidence, backed = given, "user", "user", "由用户指定", True
        elif planned and planned.product:
            name, source, how, evidence, backed = planned.product, "set", planned.how, planned.evidence, planned.backed
        else:
            name, source, how, evidence, backed = None, "user", "file", planned.evidence if planned else "", False
        out.append({"product": name, "product_source": source, "product_evidence": evidence, "how": how,
                    "backed": backed})
    return out


def import_set(paths: list[Path], *, root: Path | None = None, product: str | None = None,
               staged: list[StagedFile] | None = None, products: dict[str, str] | None = None,
               on_event: Callable[[ImportEvent], None] | None = None, updated_by: str = "") -> list[ImportResult]:
    """Import files that arrived together, in this thread, their products decided across the set first."""
    set_id = uuid.uuid4().hex
    results = []
    for i, (path, decided) in enumerate(zip(paths, decide_products(paths, root, product, products, staged))):
        result = run_import(path, product=decided["product"], product_source=decided["product_source"],
                            product_evidence=decided["product_evidence"], product_how=decided["how"],
                            product_backed=decided["backed"],
                            staged=staged[i] if staged else None, task_id=staged[i].task_id if staged else None,
                            on_event=on_event, set_id=set_id, updated_by=updated_by)
        results.append(result)
    return results
