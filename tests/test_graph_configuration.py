"""Both graphs take their settings and services from LangGraph's configuration (`config["configurable"]`):
a knowledge base in another data folder is built and asked without touching the environment, and
service objects handed in are the ones the nodes use."""
from __future__ import annotations

import os

import pytest

from graphs.importing import run_import
from graphs.query.calibration import CALIBRATIONS, OFFLINE
from graphs.query.configuration import QueryConfiguration
from graphs.query.runner import run_query
from services.documents import get_document_registry
from services.history_store import get_history_store
from services.reranker import OfflineReranker
from services.settings import get_settings
from services.vector_store import get_vector_store

OFF = {"web_search": False, "hyde": False}
PRODUCT = "GAMMA G7 电水壶"
MANUAL = f"""# {PRODUCT} 使用说明

## 除垢

水壶内壁出现白色水垢时，倒入白醋与清水各半，煮沸后静置三十分钟，再用清水冲洗两遍。

## 保温

按住保温键三秒，指示灯变为橙色，水温保持在六十摄氏度。
"""


@pytest.fixture(scope="module")
def other_kb(tmp_path_factory, product_of):  # product_of: the process's own knowledge base exists too
    root = tmp_path_factory.mktemp("other-kb")
    (root / "gamma.md").write_text(MANUAL, encoding="utf-8")
    settings = get_settings().replace(data_dir=root / "data")
    environ = dict(os.environ)
    result = run_import(root / "gamma.md", product=PRODUCT, config={"configurable": {"settings": settings}})
    assert result.status == "completed", result.error
    assert dict(os.environ) == environ and get_settings().data_dir != settings.data_dir
    return settings, result


def test_an_import_given_other_settings_writes_only_there(other_kb, product_of):
    settings, result = other_kb
    assert get_vector_store(settings).product_names() == [PRODUCT]
    assert get_document_registry(settings).get(result.doc_id)["status"] == "ready"
    assert PRODUCT not in get_vector_store().product_names()
    assert get_document_registry().get(result.doc_id) is None
    assert set(product_of.values()) <= set(get_vector_store().product_names())


def test_a_question_given_other_settings_is_answered_and_saved_there(other_kb):
    settings, _ = other_kb
    result = run_query("GAMMA G7 电水壶怎么除垢？", options=OFF, config={"configurable": {"settings": settings}})
    assert result["type"] == "final" and result["branch"] == "confirmed", result
    assert result["products"] == [PRODUCT] and "白醋" in result["answer"]
    assert {s["product"] for s in result["sources"]} == {PRODUCT}
    saved = get_history_store(settings).recent(result["session_id"], 10)
    assert [m["role"] for m in saved] == ["user", "assistant"] and saved[0]["products"] == [PRODUCT]
    assert get_history_store().recent(result["session_id"], 10) == []
    # the process's own knowledge base does not know the product
    assert run_query("GAMMA G7 电水壶怎么除垢？", options=OFF)["branch"] == "refuse"


def test_service_objects_handed_in_are_the_ones_used(other_kb):
    settings, _ = other_kb
    given = {"vector_store": get_vector_store(settings), "history_store": get_history_store(settings),
             "reranker": OfflineReranker(settings)}
    result = run_query("GAMMA G7 电水壶怎么保温？", options=OFF, config={"configurable": given})
    assert result["products"] == [PRODUCT] and "六十摄氏度" in result["answer"]
    assert len(get_history_store(settings).recent(result["session_id"], 10)) == 2


def test_calibration_follows_the_reranker_in_use(tmp_path):
    """Settings that name a rerank server, with the offline scorer handed in: its weights and its
    thresholds both come from the offline entry; the scorer that actually ran decides over both."""
    settings = get_settings().replace(rerank_url="http://127.0.0.1:9", data_dir=tmp_path)
    configured = QueryConfiguration(settings)
    assert configured.calibration() == CALIBRATIONS[("use-m3", "cross-encoder")]
    injected = QueryConfiguration(settings, reranker=OfflineReranker(settings))
    assert injected.calibration() == OFFLINE
    assert configured.calibration(scorer="offline:lexical") == OFFLINE
    assert injected.calibration(scorer="rerank-server:m") == CALIBRATIONS[("use-m3", "cross-encoder")]


def test_unknown_services_are_refused():
    with pytest.raises(TypeError, match="unknown services"):
        QueryConfiguration(vector_sotre=object())
    # LangGraph's own keys (thread ids, callbacks) are not services and are left alone
    assert QueryConfiguration.from_runnable_config({"configurable": {"thread_id": "t1"}}).settings is get_settings()
