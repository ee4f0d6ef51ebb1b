"""Chat model: any OpenAI-compatible endpoint (DashScope compatible-mode by default).

Without an API key there is no model: `get_chat_model()` returns None and every caller has an
offline behaviour of its own.
"""
from __future__ import annotations

import json
import re
from functools import lru_cache
from typing import TYPE_CHECKING, Any

from services.errors import LLMError
from services.settings import Settings, get_settings

if TYPE_CHECKING:  # the client library costs a second at every start; loaded when a model is configured
    from langchain_openai import ChatOpenAI

# A model's JSON reply: an object whose fields the caller checks before it uses one.
JsonObject = dict[str, Any]
_FENCE = re.compile(r"^\s*```(?:json)?\s*|\s*```\s*$", re.IGNORECASE)


@lru_cache(maxsize=8)
def _model(base: str, key: str, model: str, timeout: float, json_mode: bool) -> ChatOpenAI:
    from langchain_openai import ChatOpenAI

    kwargs = {"response_format": {"type": "json_object"}} if json_mode else {}
    return ChatOpenAI(
        base_url=base, api_key=key, model=model, temperature=0.1, timeout=timeout, max_retries=1,
        # Qwen's thinking chain doubles latency and tokens; this task needs none.
        extra_body={"enable_thinking": False}, model_kwargs=kwargs,
    )


def get_chat_model(settings: Settings | None = None, *, json_mode: bool = False,
                   model: str | None = None) -> ChatOpenAI | None:
    s = settings or get_settings()
    if not s.llm_enabled:
        return None
    return _model(s.openai_api_base, s.openai_api_key, model or s.llm_default_model, s.llm_timeout_s, json_mode)


def messages(system: str, user: str) -> list[tuple[str, str]]:
    return [("system", system), ("user", user)] if system else [("user", user)]


def invoke_text(llm: ChatOpenAI, system: str, user: str) -> str:
    try:
        return str(llm.invoke(messages(system, user)).content).strip()
    except Exception as exc:
        raise LLMError(f"大模型调用失败：{exc}", cause=exc) from exc


def parse_json_reply(text: str) -> JsonObject:
    """Models wrap JSON in ```json fences or add prose around it; take the object inside."""
    cleaned = _FENCE.sub("", text.strip())
    try:
        value = json.loads(cleaned)
    except json.JSONDecodeError:
        start, end = cleaned.find("{"), cleaned.rfind("}")
        if start < 0 or end <= start:
            raise LLMError(f"大模型没有返回 JSON：{text[:200]}")
        try:
            value = json.loads(cleaned[start:end + 1])
        except json.JSONDecodeError as exc:
            raise LLMError(f"大模型返回的 JSON 无法解析：{text[:200]}", cause=exc) from exc
    if not isinstance(value, dict):
        raise LLMError(f"大模型返回的不是 JSON 对象：{text[:200]}")
    return value
