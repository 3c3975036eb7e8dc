"""The OpenAI-compatible stand-in, driven over real HTTP with httpx (no openai client, no mocks, no Django)."""

from __future__ import annotations

import json
import threading
import time

import httpx
import pytest

from tests.support.openai_stub import OpenAIStub, http_error, raw, text, tool_call

pytestmark = pytest.mark.integration

KEY = "sk-stub-0123456789abcdef"
USER = [{"role": "user", "content": "hello"}]


@pytest.fixture
def stub():
    with OpenAIStub(api_key=KEY) as server:
        yield server
        assert server.errors == []


@pytest.fixture
def api(stub):
    with httpx.Client(base_url=stub.base_url, headers={"Authorization": f"Bearer {KEY}"}, trust_env=False,
                      timeout=10) as client:
        yield client


def chat(api, model="m", messages=USER, **extra):
    return api.post("/chat/completions", json={"model": model, "messages": messages, **extra})


# ---------------------------------------------------------------- completions


def test_a_content_reply_is_a_chat_completion_with_usage(stub, api):
    seen = []
    stub.add_model("m", lambda request: seen.append(request) or "the answer")
    response = chat(api, max_tokens=50, temperature=0.2)
    assert response.status_code == 200
    body = response.json()
    assert body["object"] == "chat.completion" and body["model"] == "m"
    choice = body["choices"][0]
    assert choice["message"] == {"role": "assistant", "content": "the answer"}
    assert choice["finish_reason"] == "stop"
    usage = body["usage"]
    assert usage["prompt_tokens"] > 0 and usage["completion_tokens"] > 0
    assert usage["total_tokens"] == usage["prompt_tokens"] + usage["completion_tokens"]
    assert seen == [{"model": "m", "messages": USER, "max_tokens": 50, "temperature": 0.2}]


def test_a_tool_call_reply_carries_its_arguments_as_a_json_string_and_unique_ids(stub, api):
    stub.add_model("m", lambda request: {"guess": 50})
    stub.add_model("raw-args", lambda request: tool_call('{"guess": 5', name="act"))
    tools = [{"type": "function", "function": {"name": "act", "parameters": {"type": "object"}}}]
    first = chat(api, tools=tools, tool_choice="required").json()["choices"][0]
    second = chat(api, tools=tools).json()["choices"][0]
    broken = chat(api, "raw-args", tools=tools).json()["choices"][0]
    assert first["finish_reason"] == "tool_calls"
    call = first["message"]["tool_calls"][0]
    assert call["type"] == "function" and call["function"]["name"] == "act"
    assert json.loads(call["function"]["arguments"]) == {"guess": 50}
    assert first["message"]["content"] is None
    assert call["id"] != second["message"]["tool_calls"][0]["id"]
    assert broken["message"]["tool_calls"][0]["function"]["arguments"] == '{"guess": 5'


def test_a_conversation_answering_its_tool_calls_is_accepted(stub, api):
    stub.add_model("m", lambda request: "ok")
    messages = [
        {"role": "system", "content": "play"},
        {"role": "user", "content": "obs 0"},
        {"role": "assistant", "content": None, "tool_calls": [
            {"id": "call_1", "type": "function", "function": {"name": "act", "arguments": "{}"}}]},
        {"role": "tool", "tool_call_id": "call_1", "content": "sent"},
        {"role": "user", "content": "obs 1"},
    ]
    assert chat(api, messages=messages).status_code == 200
    assert stub.completions("m")[-1].messages == messages


def test_content_longer_than_max_tokens_is_cut_with_finish_reason_length(stub, api):
    stub.add_model("m", lambda request: "x" * 1000)
    choice = chat(api, max_tokens=10).json()["choices"][0]
    assert choice["message"]["content"] == "x" * 40 and choice["finish_reason"] == "length"


def test_a_model_without_usage_leaves_it_out(stub, api):
    stub.add_model("m", lambda request: "ok", usage=False)
    assert "usage" not in chat(api).json()


def test_models_lists_every_scripted_model(stub, api):
    stub.add_model("b", lambda request: "")
    stub.add_model("a", lambda request: "")
    body = api.get("/models").json()
    assert body["object"] == "list" and [m["id"] for m in body["data"]] == ["a", "b"]


# ---------------------------------------------------------------- refusals


def test_the_api_key_is_required_when_configured(stub):
    stub.add_model("m", lambda request: "ok")
    payload = {"model": "m", "messages": USER}
    with httpx.Client(trust_env=False, timeout=10) as client:
        missing = client.post(stub.base_url + "/chat/completions", json=payload)
        wrong = client.post(stub.base_url + "/chat/completions", json=payload,
                            headers={"Authorization": "Bearer sk-wrong-key-wxyz"})
        models = client.get(stub.base_url + "/models")
        right = client.post(stub.base_url + "/chat/completions", json=payload,
                            headers={"Authorization": f"Bearer {KEY}"})
    assert missing.status_code == wrong.status_code == models.status_code == 401
    assert missing.json()["error"]["code"] == "invalid_api_key"
    assert "didn't provide an API key" in missing.json()["error"]["message"]
    assert wrong.json()["error"]["message"] == "Incorrect API key provided: ****wxyz."
    assert right.status_code == 200
    assert [r.headers.get("authorization") for r in stub.completions()] == [None, "Bearer sk-wrong-key-wxyz",
                                                                           f"Bearer {KEY}"]


def test_no_key_configured_accepts_any_request():
    with OpenAIStub() as stub, httpx.Client(trust_env=False, timeout=10) as client:
        stub.add_model("m", lambda request: "ok")
        response = client.post(stub.base_url + "/chat/completions", json={"model": "m", "messages": USER})
        assert response.status_code == 200


def test_unknown_models_and_paths_are_404(stub, api):
    response = chat(api, "nope")
    assert response.status_code == 404 and response.json()["error"]["code"] == "model_not_found"
    assert api.post("/completions", json={}).status_code == 404
    assert api.get("/chat/completions").status_code == 405


@pytest.mark.parametrize("extra, param", [
    ({"messages": []}, "messages"),
    ({"messages": [{"role": "robot", "content": "x"}]}, "messages[0]"),
    ({"messages": [{"role": "user", "content": None}]}, "messages[0].content"),
    ({"messages": [{"role": "assistant", "content": None, "tool_calls": [
        {"id": "c1", "type": "function", "function": {"name": "act", "arguments": "{}"}}]},
        {"role": "user", "content": "next"}]}, "messages[1]"),
    ({"messages": [{"role": "assistant", "content": None, "tool_calls": [
        {"id": "c1", "type": "function", "function": {"name": "act", "arguments": {}}}]}]}, "messages[0].tool_calls"),
    ({"messages": [{"role": "user", "content": "x"}, {"role": "tool", "tool_call_id": "c9", "content": "x"}]},
     "messages[1]"),
    ({"tools": [{"type": "function", "function": {"name": "bad name!"}}]}, "tools"),
    ({"tool_choice": "required"}, "tool_choice"),
    ({"max_tokens": 0}, "max_tokens"),
    ({"temperature": 3}, "temperature"),
])
def test_requests_the_real_api_refuses_get_400_without_reaching_the_script(stub, api, extra, param):
    called = []
    stub.add_model("m", lambda request: called.append(request) or "ok")
    response = api.post("/chat/completions", json={"model": "m", "messages": USER, **extra})
    assert response.status_code == 400, response.text
    error = response.json()["error"]
    assert error["type"] == "invalid_request_error" and error["param"] == param
    assert called == []


def test_a_body_that_is_not_json_is_400(stub, api):
    response = api.post("/chat/completions", content=b"{not json", headers={"Content-Type": "application/json"})
    assert response.status_code == 400
    assert stub.requests[-1].json is None and stub.requests[-1].body == b"{not json"


def test_models_without_tools_or_required_tool_choice_refuse_them(stub, api):
    stub.add_model("plain", lambda request: "ok", tools=False)
    stub.add_model("old-vllm", lambda request: "ok", required_tool_choice=False)
    tools = [{"type": "function", "function": {"name": "act", "parameters": {"type": "object"}}}]
    assert chat(api, "plain", tools=tools).status_code == 400
    assert chat(api, "plain").status_code == 200
    refused = chat(api, "old-vllm", tools=tools, tool_choice="required")
    assert refused.status_code == 400 and refused.json()["error"]["param"] == "tool_choice"
    assert chat(api, "old-vllm", tools=tools, tool_choice="auto").status_code == 200


# ---------------------------------------------------------------- faults


def test_scripted_errors_raw_bodies_and_huge_bodies_are_served_as_given(stub, api):
    replies = iter([
        http_error(429, "slow down", code="rate_limit_exceeded", retry_after=2),
        http_error(500),
        raw("this is not json", content_type="text/plain"),
        raw(b'{"choices": [' + b" " * (5 * 1024 * 1024) + b"]}"),
    ])
    stub.add_model("m", lambda request: next(replies))
    limited = chat(api)
    assert limited.status_code == 429 and limited.headers["retry-after"] == "2"
    assert limited.json()["error"] == {"message": "slow down", "type": "invalid_request_error", "param": None,
                                       "code": "rate_limit_exceeded"}
    assert chat(api).status_code == 500
    garbage = chat(api)
    assert garbage.status_code == 200 and garbage.text == "this is not json"
    huge = chat(api)
    assert len(huge.content) > 5 * 1024 * 1024


def test_a_delay_holds_the_answer_back_and_ends_when_the_stub_stops():
    stub = OpenAIStub().start()
    try:
        stub.add_model("slow", lambda request: text("late", delay=0.4))
        stub.add_model("slower", lambda request: "never", delay=30)
        started = time.monotonic()
        response = httpx.post(stub.base_url + "/chat/completions", json={"model": "slow", "messages": USER},
                              trust_env=False, timeout=10)
        assert response.status_code == 200 and time.monotonic() - started >= 0.4
        outcome = []

        def call():
            try:
                httpx.post(stub.base_url + "/chat/completions", json={"model": "slower", "messages": USER},
                           trust_env=False, timeout=20)
                outcome.append("answered")
            except httpx.TransportError as exc:
                outcome.append(type(exc).__name__)

        thread = threading.Thread(target=call)
        thread.start()
        time.sleep(0.3)
        started = time.monotonic()
    finally:
        stub.stop()
    thread.join(timeout=10)
    assert not thread.is_alive() and time.monotonic() - started < 5
    assert outcome and outcome[0] != "answered"


def test_injections_answer_matching_requests_first_then_run_out(stub, api):
    stub.add_model("m", lambda request: "ok")
    stub.add_model("other", lambda request: "ok")
    injection = stub.inject(503, times=2, model="m", retry_after=1)
    assert [chat(api).status_code for _ in range(3)] == [503, 503, 200]
    assert chat(api, "other").status_code == 200
    assert injection.hits == 2
    assert [(r.model, r.status, r.injected) for r in stub.completions()] == [
        ("m", 503, True), ("m", 503, True), ("m", 200, False), ("other", 200, False)]
    stub.inject(401, times=None, path="/v1/models")
    assert api.get("/models").status_code == 401 and chat(api).status_code == 200


def test_a_script_that_raises_is_answered_500_and_kept_in_errors():
    with OpenAIStub() as stub:
        stub.add_model("m", lambda request: 1 / 0)
        response = httpx.post(stub.base_url + "/chat/completions", json={"model": "m", "messages": USER},
                              trust_env=False, timeout=10)
        assert response.status_code == 500 and "raised" in response.json()["error"]["message"]
        assert len(stub.errors) == 1 and "ZeroDivisionError" in stub.errors[0]
