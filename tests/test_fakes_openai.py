"""The scripted OpenAI fake works with the real langchain_openai client."""
import base64
import json

import httpx
import openai
import pytest
from langchain_core.messages import HumanMessage, SystemMessage
from langchain_openai import ChatOpenAI

from fakes.openai_server import ScriptedOpenAI


@pytest.fixture
def llm_server():
    with ScriptedOpenAI(api_key="x") as server:
        yield server


def _chat(server: ScriptedOpenAI, **kw) -> ChatOpenAI:
    return ChatOpenAI(base_url=server.base_url, api_key="x", model="qwen-flash", max_retries=0, timeout=10, **kw)


def test_invoke_follows_rules_and_records_requests(llm_server):
    llm_server.add_rule("改写", "改写后的问题")
    llm_server.set_default("默认回答")
    chat = _chat(llm_server, extra_body={"enable_thinking": False})

    assert chat.invoke([SystemMessage("你是助手"), HumanMessage("请改写：怎么接线")]).content == "改写后的问题"
    assert chat.invoke("别的问题").content == "默认回答"
    first = llm_server.requests[0]
    assert first["model"] == "qwen-flash"
    assert first["enable_thinking"] is False  # extra_body is merged into the top level


def test_predicate_and_callable_reply(llm_server):
    llm_server.add_rule(lambda text: "温度" in text, lambda body: f"model={body['model']}")
    assert _chat(llm_server).invoke("热床温度多少").content == "model=qwen-flash"


def test_stream_yields_several_deltas(llm_server):
    llm_server.set_default("主板支持12到24伏电源输入。")
    deltas = [c.content for c in _chat(llm_server, streaming=True).stream("电源") if c.content]
    assert len(deltas) > 2
    assert "".join(deltas) == "主板支持12到24伏电源输入。"
    assert llm_server.requests[-1]["stream"] is True


def test_json_mode(llm_server):
    llm_server.add_rule("JSON", '{"products": ["SKR MINI E3"]}')
    chat = _chat(llm_server).bind(response_format={"type": "json_object"})
    reply = chat.invoke("只输出 JSON")
    assert json.loads(reply.content) == {"products": ["SKR MINI E3"]}
    assert llm_server.requests[-1]["response_format"] == {"type": "json_object"}


def test_vision_message_carries_data_url(llm_server):
    llm_server.set_default("一张主板照片")
    data_url = "data:image/png;base64," + base64.b64encode(b"\x89PNG fake").decode()
    msg = HumanMessage(content=[{"type": "text", "text": "描述图片"},
                                {"type": "image_url", "image_url": {"url": data_url}}])
    assert _chat(llm_server).invoke([msg]).content == "一张主板照片"
    parts = llm_server.requests[-1]["messages"][-1]["content"]
    assert any(p["type"] == "image_url" and p["image_url"]["url"].startswith("data:image/png;base64,")
               for p in parts)


def test_drop_mid_stream_raises_on_client(llm_server):
    llm_server.set_default("这是一段会被中途截断的很长的回答内容", drop_after_chars=8)
    received = []
    with pytest.raises((httpx.RemoteProtocolError, openai.APIError)):
        for c in _chat(llm_server, streaming=True).stream("问题"):
            received.append(c.content)
    assert "".join(received).startswith("这是一段")


def test_status_delay_and_times(llm_server):
    llm_server.add_rule("重试", "", status=500, times=1)
    llm_server.add_rule("重试", "第二次成功", delay_s=0.2)
    chat = _chat(llm_server)
    with pytest.raises(openai.InternalServerError):
        chat.invoke("重试一下")
    assert chat.invoke("重试一下").content == "第二次成功"
    with pytest.raises(openai.APITimeoutError):
        ChatOpenAI(base_url=llm_server.base_url, api_key="x", model="m", max_retries=0, timeout=0.05).invoke("重试")


def test_models_and_auth(llm_server):
    models = openai.OpenAI(base_url=llm_server.base_url, api_key="x").models.list()
    assert [m.id for m in models.data] == ["qwen-flash", "qwen3-vl-flash"]
    with pytest.raises(openai.AuthenticationError):
        openai.OpenAI(base_url=llm_server.base_url, api_key="wrong", max_retries=0).models.list()
