"""What the query graph's nodes use besides their state: settings and services.

A caller passes any of them in `config["configurable"]` (`run_query(..., config=...)`); the rest are
the process's own for the given settings. Nodes read them here, never through module-level look-ups.
"""
from __future__ import annotations

from dataclasses import replace
from typing import TYPE_CHECKING

from graphs.base import Configuration, Service
from graphs.query.calibration import Calibration, calibration_of
from services.chat_model import get_chat_model
from services.documents import DocumentRegistry, get_document_registry
from services.embeddings import Embedder, get_embedder
from services.history_store import HistoryStore, get_history_store
from services.reranker import OfflineReranker, Reranker, get_reranker
from services.vector_store import VectorStore, get_vector_store

if TYPE_CHECKING:  # the chat client is loaded only when a chat model is configured
    from langchain_openai import ChatOpenAI


class QueryConfiguration(Configuration):
    # getters looked up when called, so a test can replace one to simulate an outage
    vector_store = Service[VectorStore](lambda s: get_vector_store(s))
    embedder = Service[Embedder](lambda s: get_embedder(s))
    reranker = Service[Reranker](lambda s: get_reranker(s))
    history_store = Service[HistoryStore](lambda s: get_history_store(s))
    registry = Service[DocumentRegistry](lambda s: get_document_registry(s))  # the products' aliases
    # Calibration fields replaced for this run (a benchmark choosing them on other corpora): {} = none
    calibration_overrides = Service[dict](lambda s: {})

    @property
    def offline_reranker(self) -> Reranker:
        """The lexical scorer the offline thresholds were calibrated on: it stands in when the
        configured reranker fails."""
        return OfflineReranker(self.settings)

    def chat_model(self, json_mode: bool = False) -> ChatOpenAI | None:
        """The configured chat model, or None offline."""
        return get_chat_model(self.settings, json_mode=json_mode)

    def calibration(self, scorer: str | None = None) -> Calibration:
        """The constants of the scorer that ran (`scorer`), else of the reranker handed in, else of
        the configured one: an injected reranker never gets another scorer's thresholds. Fields in
        `calibration_overrides` replace the found ones."""
        given = self.given.get("reranker")
        found = calibration_of(self.settings, self.embedder.name, scorer or (given.name if given is not None else None))
        return replace(found, **self.calibration_overrides) if self.calibration_overrides else found
