"""What the import graph's nodes use besides their state: settings and services.

A caller passes any of them in `config["configurable"]` (`run_import(..., config=...)`); the rest are
the process's own for the given settings. Nodes read them here, never through module-level look-ups.
"""
from __future__ import annotations

from typing import TYPE_CHECKING

from graphs.base import Configuration, Service
from services.chat_model import get_chat_model
from services.documents import DocumentRegistry, get_document_registry
from services.embeddings import Embedder, get_embedder
from services.object_store import ObjectStore, get_object_store
from services.task_queue import TaskQueue, get_task_queue
from services.task_store import TaskStore, get_task_store
from services.vector_store import VectorStore, get_vector_store

if TYPE_CHECKING:
    from langchain_openai import ChatOpenAI


class ImportConfiguration(Configuration):
    # getters looked up when called, so a test can replace one to simulate an outage
    vector_store = Service[VectorStore](lambda s: get_vector_store(s))
    embedder = Service[Embedder](lambda s: get_embedder(s))
    object_store = Service[ObjectStore](lambda s: get_object_store(s))
    registry = Service[DocumentRegistry](lambda s: get_document_registry(s))
    task_store = Service[TaskStore](lambda s: get_task_store(s))
    task_queue = Service[TaskQueue](lambda s: get_task_queue(s))

    def chat_model(self) -> ChatOpenAI | None:
        """The configured chat model (product names), or None offline."""
        return get_chat_model(self.settings)
