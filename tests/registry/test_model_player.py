"""The model player: real OpenEnv servers (examples/envs/guess_number, echo_env) played by scripted models
behind the OpenAI-compatible stand-in (tests/support/openai_stub.py), all over real HTTP.

The environment servers are started once for the module and allow one /ws
session at a time; every test gets its own stand-in. A scripted model reads
the conversation it is sent, as a real one would: the bisecting model finds
guess_number's secret from the feedback in the observations and its own
earlier guesses.
"""

from __future__ import annotations

import json
import random
import re
import socket
import time
from dataclasses import asdict
from pathlib import Path

import httpx
import pytest

from registry.conformance.http import ProbeClient
from registry.conformance.report import with_property_order
from registry.evaluation.episodes import DONE, FAILED, STEP_BOUND, TIME_BOUND, PlayedEvaluation
from registry.evaluation.model import (
    AGENT_KIND,
    CLIENT_VERSION,
    HARNESS,
    HARNESS_VERSION,
    STOPPED,
    _json_in_text,
    _schema_for_model,
    play_model,
)
from tests.support.envserver import EnvServer
from tests.support.openai_stub import OpenAIStub, http_error, raw, text, tool_call

EXAMPLES = Path(__file__).resolve().parents[2] / "examples" / "envs"
ALLOWED = ("127.0.0.1",)
KEY = "sk-test-4f1c9a7e2b6d8c03"
SEEDS = [7, 11, 23]
FENCED = re.compile(r"```json\s*(\{.*?\})\s*```", re.S)


def secret(seed: int) -> int:
    """guess_number's secret for a seed (its server/guess_number_environment.py)."""
    return random.Random(seed).randint(1, 100)


# --------------------------------------------------------------------------- #
# Scripted models
# --------------------------------------------------------------------------- #


def guess_in(message: dict) -> int | None:
    """The guess an assistant message made, by tool call or by JSON in its text."""
    calls = message.get("tool_calls")
    try:
        if calls:
            return json.loads(calls[0]["function"]["arguments"]).get("guess")
        content = message.get("content") or ""
        found = FENCED.search(content)
        return json.loads(found.group(1) if found else content).get("guess")
    except (ValueError, AttributeError):
        return None


def next_guess(request: dict) -> int:
    """Binary search over the conversation: each observation's feedback against the guess before it."""
    low, high, last = 1, 100, None
    for message in request["messages"]:
        if message["role"] == "assistant":
            last = guess_in(message)
        elif message["role"] == "user" and message["content"].startswith("Observation"):
            feedback = json.loads(message["content"].split("\n", 1)[1])["observation"]["feedback"]
            if feedback == "higher":
                low = last + 1
            elif feedback == "lower":
                high = last - 1
    return (low + high) // 2


def bisect(request: dict):
    return tool_call({"guess": next_guess(request)})


def bisect_fenced(request: dict):
    return text(f"The secret is between my bounds, so:\n```json\n{{\"guess\": {next_guess(request)}}}\n```")


# --------------------------------------------------------------------------- #
# Fixtures
# --------------------------------------------------------------------------- #


@pytest.fixture(scope="module")
def envs(openenv_python):
    """guess_number and echo_env on loopback: name -> (ProbeClient, action schema from /schema)."""
    started = {name: EnvServer(EXAMPLES / name, python=openenv_python).start() for name in ("guess_number", "echo_env")}
    try:
        out = {}
        for name, server in started.items():
            server.wait_ready()
            schema = httpx.get(server.base_url + "/schema", trust_env=False, timeout=30).json()["action"]
            out[name] = (ProbeClient(server.base_url, allowed_hosts=ALLOWED), schema)
        yield out
    finally:
        for server in started.values():
            server.request_stop()
        for server in started.values():
            server.stop()


@pytest.fixture
def stub():
    with OpenAIStub(api_key=KEY) as server:
        yield server
        assert server.errors == []


def play(envs, stub, model, env="guess_number", **overrides) -> PlayedEvaluation:
    client, schema = envs[env]
    arguments = dict(endpoint=stub.base_url, api_key=KEY, model=model, action_schema=schema, seeds=SEEDS,
                     max_steps=10, max_tokens=50_000, episode_deadline_s=60, total_deadline_s=300,
                     request_timeout_s=15)
    arguments.update(overrides)
    return play_model(client, **arguments)


def endings(evaluation: PlayedEvaluation) -> list[str]:
    return [e.ended for e in evaluation.episodes]


def stopped_note(evaluation: PlayedEvaluation) -> str:
    notes = [n for n in evaluation.notes if n.startswith(STOPPED)]
    assert len(notes) == 1, evaluation.notes
    return notes[0]


def assert_key_absent(evaluation: PlayedEvaluation) -> None:
    assert KEY not in json.dumps(asdict(evaluation))


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


# --------------------------------------------------------------------------- #
# A good model
# --------------------------------------------------------------------------- #


def test_a_bisecting_model_finds_every_secret_through_tool_calls(envs, stub):
    stub.add_model("bisect", bisect)
    evaluation = play(envs, stub, "bisect")

    assert (evaluation.agent, evaluation.agent_kind, evaluation.harness, evaluation.harness_version,
            evaluation.client_version) == ("bisect", AGENT_KIND, HARNESS, HARNESS_VERSION, CLIENT_VERSION)
    assert [e.seed for e in evaluation.episodes] == SEEDS
    for result in evaluation.episodes:
        assert (result.ended, result.reward, result.invalid_actions, result.failure) == (DONE, 1.0, 0, ""), result
        assert 1 <= result.steps <= 7 and result.wall_s > 0
    assert len({e.episode_id for e in evaluation.episodes}) == len(SEEDS)

    requests = stub.completions("bisect")
    assert len(requests) == sum(e.steps for e in evaluation.episodes)
    first = requests[0].json
    _, schema = envs["guess_number"]
    assert first["tools"] == [{"type": "function", "function": {
        "name": "act", "description": "Send one action to the environment.", "parameters": schema}}]
    assert first["tool_choice"] == "required" and first["max_tokens"] == 1024 and first["temperature"] == 0.0
    system, observation = first["messages"]
    assert system["role"] == "system" and json.dumps(schema, indent=1) in system["content"]
    assert observation["role"] == "user" and observation["content"].startswith("Observation after the reset:\n")
    assert json.loads(observation["content"].split("\n", 1)[1])["observation"]["feedback"] == "start"
    assert all(r.headers["authorization"] == f"Bearer {KEY}" for r in requests)
    # Each episode's last guess was its secret: every action reached the environment as the model chose it.
    ends = [sum(e.steps for e in evaluation.episodes[: i + 1]) - 1 for i in range(len(SEEDS))]
    assert [next_guess(requests[i].json) for i in ends] == [secret(s) for s in SEEDS]
    assert any(n.startswith("tokens: ") and f"over {len(requests)} request(s)" in n for n in evaluation.notes)
    assert not any(n.startswith(STOPPED) for n in evaluation.notes)


def test_the_conversation_carries_every_earlier_action_and_observation(envs, stub):
    stub.add_model("bisect", bisect)
    evaluation = play(envs, stub, "bisect", seeds=[23])
    assert evaluation.episodes[0].ended == DONE and evaluation.episodes[0].steps >= 3
    last = stub.completions("bisect")[-1].messages
    roles = [m["role"] for m in last]
    steps = evaluation.episodes[0].steps
    assert roles == ["system"] + ["user", "assistant", "tool"] * (steps - 1) + ["user"]
    assert last[-1]["content"].startswith(f"Observation after step {steps - 1}:")


def test_an_echo_model_is_stopped_at_the_step_bound_with_its_rewards(envs, stub):
    stub.add_model("echo", lambda request: {"message": "x" * 40})
    evaluation = play(envs, stub, "echo", env="echo_env", seeds=[1, 2], max_steps=3)
    for result in evaluation.episodes:
        assert (result.ended, result.steps, result.invalid_actions, result.failure) == (STEP_BOUND, 3, 0, "")
        assert result.reward == pytest.approx(3 * 0.4)
    assert len(stub.completions("echo")) == 6


def test_a_model_answering_in_a_json_fence_is_read_when_the_endpoint_has_no_tools(envs, stub):
    stub.add_model("fenced", bisect_fenced, tools=False)
    evaluation = play(envs, stub, "fenced", seeds=[7, 11])
    assert endings(evaluation) == [DONE, DONE]
    assert [e.reward for e in evaluation.episodes] == [1.0, 1.0]
    assert all(e.invalid_actions == 0 for e in evaluation.episodes)
    requests = stub.completions("fenced")
    # Refused with tool_choice "required", then "auto"; every later request (both episodes) has no tools.
    assert [(r.json.get("tool_choice"), r.status) for r in requests[:3]] == [("required", 400), ("auto", 400),
                                                                           (None, 200)]
    assert all("tools" not in r.json for r in requests[2:])
    assert "Answer with the action alone" in requests[2].messages[0]["content"]
    assert any('refused tool_choice "required" (HTTP 400' in n for n in evaluation.notes)
    assert any("refused tools (HTTP 400: tools are not supported" in n for n in evaluation.notes)
    assert any("as a JSON object in the reply (no tools)" in n for n in evaluation.notes)


def test_a_server_without_required_tool_choice_is_asked_with_auto(envs, stub):
    stub.add_model("old-vllm", bisect, required_tool_choice=False)
    evaluation = play(envs, stub, "old-vllm", seeds=[7])
    assert endings(evaluation) == [DONE]
    assert [r.json["tool_choice"] for r in stub.completions()][:2] == ["required", "auto"]
    assert any('tool_choice "auto")' in n for n in evaluation.notes)


def test_content_json_and_a_wrapped_action_are_read_even_when_tools_were_offered(envs, stub):
    replies = iter([text('{"action": {"guess": 50}}'), text('Sure! {"guess": 25} is my guess.')])
    stub.add_model("chatty", lambda request: next(replies, tool_call({"guess": 1})))
    evaluation = play(envs, stub, "chatty", seeds=[7], max_steps=3)  # the secret is 42
    assert (evaluation.episodes[0].invalid_actions, evaluation.episodes[0].steps) == (0, 3)
    feedback = [json.loads(r.messages[-1]["content"].split("\n", 1)[1])["observation"]["feedback"]
                for r in stub.completions()]
    assert feedback == ["start", "lower", "higher"]  # 50, then 25, reached the environment


# --------------------------------------------------------------------------- #
# A bad model
# --------------------------------------------------------------------------- #


GARBAGE = [
    (text("I think the secret is fifty."), "the reply holds no JSON object"),
    (text('{"guess": 50'), "the reply holds no JSON object"),
    (tool_call({"guess": "fifty"}), "the action schema rejects it (guess: 'fifty' is not of type 'integer')"),
    (tool_call('{"guess": 5', name="act"), "the arguments of `act` are not JSON"),
    (tool_call({"guess": 500}), "the action schema rejects it (guess: 500 is greater than the maximum of 100)"),
    (tool_call({"guess": 50}, name="guess"), "it calls 'guess', not the function `act`"),
    (text("[50]"), "the reply is a JSON list, not an object"),
    (tool_call({"guess": 50, "hint": "x"}), "Additional properties are not allowed"),
    (text(""), "the reply holds neither a call nor any text"),
]


def test_garbage_replies_are_counted_as_invalid_actions_corrected_and_end_the_episode(envs, stub):
    replies = iter(GARBAGE)
    stub.add_model("garbage", lambda request: next(replies)[0])
    evaluation = play(envs, stub, "garbage")  # 3 seeds x 3 replies: every kind of garbage once

    assert endings(evaluation) == [FAILED, FAILED, FAILED]
    for result, (_, last_problem) in zip(evaluation.episodes, GARBAGE[2::3]):
        assert (result.steps, result.reward, result.invalid_actions) == (0, 0.0, 3)
        assert result.failure.startswith("step 1: the model gave no valid action in 3 replies; the last: ")
        assert last_problem in result.failure
    # Each invalid reply was answered with a correction naming what was wrong, as a tool answer for a tool call.
    requests = stub.completions("garbage")
    assert len(requests) == 9
    corrections = [r.messages[-1] for r in requests if len(r.messages) > 2]
    assert len(corrections) == 6
    for correction, (reply, problem) in zip(corrections, [g for i, g in enumerate(GARBAGE) if i % 3 != 2]):
        assert correction["role"] == ("tool" if reply.tool_calls else "user")
        assert correction["content"].startswith("That is not a valid action: ") and problem in correction["content"]
    assert not any(n.startswith(STOPPED) for n in evaluation.notes)


def test_a_model_that_recovers_after_a_correction_plays_on(envs, stub):
    def script(request):
        if len(request["messages"]) == 2:
            return text("Let me think about the number first.")
        return bisect(request)

    stub.add_model("recovers", script)
    evaluation = play(envs, stub, "recovers", seeds=[7, 11])
    assert endings(evaluation) == [DONE, DONE]
    assert [e.invalid_actions for e in evaluation.episodes] == [1, 1]
    assert all(e.reward == 1.0 for e in evaluation.episodes)


def test_fewer_corrections_fail_sooner(envs, stub):
    stub.add_model("prose", lambda request: "no idea")
    evaluation = play(envs, stub, "prose", seeds=[7], invalid_retries=0)
    assert evaluation.episodes[0].invalid_actions == 1
    assert "no valid action in 1 reply;" in evaluation.episodes[0].failure
    assert len(stub.completions()) == 1


# --------------------------------------------------------------------------- #
# Bounds
# --------------------------------------------------------------------------- #


def test_a_slow_model_hits_the_episode_time_bound(envs, stub):
    stub.add_model("slow", lambda request: tool_call({"guess": 50}, delay=5))
    started = time.monotonic()
    evaluation = play(envs, stub, "slow", seeds=[7, 11], episode_deadline_s=1.5, request_timeout_s=30)
    assert time.monotonic() - started < 8
    assert endings(evaluation) == [TIME_BOUND, TIME_BOUND]
    for result in evaluation.episodes:
        assert result.steps == 0 and 1.4 <= result.wall_s < 4
        assert result.failure.startswith("step 1: the episode's time ran out while asking the model")
    assert not any(n.startswith(STOPPED) for n in evaluation.notes)


def test_the_run_deadline_leaves_later_seeds_unplayed(envs, stub):
    stub.add_model("slow", lambda request: tool_call({"guess": 50}, delay=5))
    evaluation = play(envs, stub, "slow", episode_deadline_s=30, total_deadline_s=2, request_timeout_s=30)
    assert endings(evaluation) == [TIME_BOUND]
    assert "the run's time ran out" in evaluation.episodes[0].failure
    assert stopped_note(evaluation) == STOPPED + "the run's time ran out; 2 seed(s) not played: [11, 23]"


def test_a_request_slower_than_the_request_timeout_fails_the_episode(envs, stub):
    stub.add_model("slow", lambda request: tool_call({"guess": 50}, delay=5))
    evaluation = play(envs, stub, "slow", seeds=[7, 11], request_timeout_s=0.5)
    assert endings(evaluation) == [FAILED, FAILED]  # not retried, and the run goes on: the next prompt may be quicker
    assert evaluation.episodes[0].failure == ("step 1: the model endpoint gave no complete answer within the request "
                                              "timeout (0.5 s)")
    assert len(stub.completions()) == 2


def test_the_token_budget_counts_max_tokens_where_usage_is_missing(envs, stub):
    stub.add_model("no-usage", lambda request: {"message": "hi"}, usage=False)
    evaluation = play(envs, stub, "no-usage", env="echo_env", seeds=[1], max_tokens=100, max_tokens_per_call=64)
    result = evaluation.episodes[0]
    assert (result.ended, result.steps) == (STEP_BOUND, 2)
    assert result.failure == "the token budget (100) was spent after 2 step(s)"
    assert [r.json["max_tokens"] for r in stub.completions()] == [64, 36]
    assert any("2 reply(s) without usage charged their max_tokens" in n for n in evaluation.notes)


def test_the_token_budget_sums_reported_usage(envs, stub):
    stub.add_model("echo", lambda request: {"message": "hi"})
    evaluation = play(envs, stub, "echo", env="echo_env", seeds=[1], max_tokens=1500, max_steps=50)
    result = evaluation.episodes[0]
    requests = stub.completions()
    assert result.ended == STEP_BOUND and result.failure.startswith("the token budget (1,500) was spent after ")
    assert result.steps == len(requests) and 1 < len(requests) < 50


# --------------------------------------------------------------------------- #
# A failing endpoint
# --------------------------------------------------------------------------- #


@pytest.mark.parametrize("status", [500, 429])
def test_an_endpoint_that_keeps_failing_ends_the_run_with_its_status(envs, stub, status):
    stub.add_model("bisect", bisect)
    stub.inject(status, times=None, retry_after=0 if status == 429 else None,
                body={"error": {"message": f"overloaded ({status})", "type": "server_error"}})
    evaluation = play(envs, stub, "bisect")
    assert endings(evaluation) == [FAILED]
    assert evaluation.episodes[0].failure == (f"step 1: the model endpoint answered HTTP {status}: "
                                              f"overloaded ({status}), 3 times")
    assert len(stub.completions()) == 3  # the request and two retries
    assert stopped_note(evaluation).endswith("; 2 seed(s) not played: [11, 23]")


def test_a_passing_429_is_retried_and_the_episode_goes_on(envs, stub):
    stub.add_model("bisect", bisect)
    stub.inject(429, times=1, retry_after=0)
    stub.inject(503, times=1)
    evaluation = play(envs, stub, "bisect", seeds=[7])
    assert endings(evaluation) == [DONE]
    assert [r.status for r in stub.completions()[:3]] == [429, 503, 200]


def test_a_wrong_api_key_stops_the_run_at_the_first_request(envs, stub):
    stub.add_model("bisect", bisect)
    evaluation = play(envs, stub, "bisect", api_key="sk-wrong-key-0000wxyz")
    assert endings(evaluation) == [FAILED]
    assert evaluation.episodes[0].failure == ("step 1: the model endpoint refused the API key "
                                              "(HTTP 401: Incorrect API key provided: ****wxyz.)")
    assert len(stub.completions()) == 1
    assert "2 seed(s) not played" in stopped_note(evaluation)


def test_no_api_key_for_an_endpoint_that_wants_one(envs, stub):
    stub.add_model("bisect", bisect)
    evaluation = play(envs, stub, "bisect", api_key="")
    assert "wants an API key and none is configured (HTTP 401" in evaluation.episodes[0].failure
    assert "authorization" not in stub.completions()[0].headers


def test_an_endpoint_that_is_down_ends_the_run_with_a_clear_error(envs):
    client, schema = envs["guess_number"]
    evaluation = play_model(client, endpoint=f"http://127.0.0.1:{free_port()}/v1", api_key=KEY, model="m",
                            action_schema=schema, seeds=SEEDS, max_steps=10, max_tokens=10_000,
                            episode_deadline_s=30, total_deadline_s=60, request_timeout_s=5)
    assert endings(evaluation) == [FAILED]
    failure = evaluation.episodes[0].failure
    assert failure.startswith("step 1: the model endpoint is unreachable (POST /chat/completions: ")
    assert failure.endswith(", 3 times")
    assert stopped_note(evaluation).startswith(STOPPED + "the model endpoint is unreachable")


def test_an_unknown_model_stops_the_run(envs, stub):
    evaluation = play(envs, stub, "gpt-nonexistent")
    assert endings(evaluation) == [FAILED]
    assert "has no model 'gpt-nonexistent' or no /v1/chat/completions (HTTP 404: The model `gpt-nonexistent` does " \
           "not exist" in evaluation.episodes[0].failure


@pytest.mark.parametrize("reply, expected", [
    (raw(b'{"choices": "' + b"x" * (2 * 1024 * 1024) + b'"}'), "answered more than 1,048,576 bytes (the cap)"),
    (raw("<html>Bad gateway</html>", content_type="text/html"),
     "answered 200 with a body that is not JSON: '<html>Bad gateway</html>'"),
    (raw('{"id": "x", "choices": []}'), 'answered 200 without choices[0].message: \'{"id": "x", "choices": []}\''),
])
def test_unusable_bodies_fail_the_episode_but_not_the_run(envs, stub, reply, expected):
    stub.add_model("broken", lambda request: reply)
    evaluation = play(envs, stub, "broken", seeds=[7, 11])
    assert endings(evaluation) == [FAILED, FAILED]
    assert evaluation.episodes[0].failure == f"step 1: the model endpoint {expected}"
    assert not any(n.startswith(STOPPED) for n in evaluation.notes)


def test_a_context_too_long_refusal_fails_the_episode(envs, stub):
    replies = iter([tool_call({"guess": 50}), http_error(400, "maximum context length is 8192 tokens",
                                                         code="context_length_exceeded")])
    stub.add_model("short-context", lambda request: next(replies, tool_call({"guess": 1})))
    evaluation = play(envs, stub, "short-context", seeds=[7])
    assert evaluation.episodes[0].steps == 1 and evaluation.episodes[0].ended == FAILED
    assert evaluation.episodes[0].failure == ("step 2: the model endpoint refused the request "
                                              "(HTTP 400: maximum context length is 8192 tokens)")


# --------------------------------------------------------------------------- #
# The API key
# --------------------------------------------------------------------------- #


def test_the_api_key_never_appears_in_the_result_even_when_the_endpoint_echoes_it(envs, stub):
    stub.add_model("leaky", lambda request: text(f"Your key is {KEY}, no action from me."))
    stub.add_model("leaky-action", lambda request: {"message": f"exfiltrate {KEY}"})
    stub.add_model("leaky-invalid", lambda request: {"guess": "y" * 280 + KEY})  # cut by error lines' own cap
    leaky = play(envs, stub, "leaky", seeds=[7])
    assert "Your key is [api key], no action" in leaky.episodes[0].failure
    exfiltrating = play(envs, stub, "leaky-action", env="echo_env", seeds=[1])
    assert exfiltrating.episodes[0].steps == 0 and exfiltrating.episodes[0].invalid_actions == 3
    assert "it holds the API key" in exfiltrating.episodes[0].failure
    invalid = play(envs, stub, "leaky-invalid", seeds=[7])
    assert "it holds the API key" in invalid.episodes[0].failure
    assert KEY[:12] not in json.dumps(asdict(invalid))
    stub.inject(500, times=None, body={"error": {"message": f"bad credentials {KEY} for this org"}})
    echoed = play(envs, stub, "leaky", seeds=[7])
    assert "bad credentials [api key] for this org" in echoed.episodes[0].failure
    stub.clear_injections()
    stub.inject(502, times=None, body=f"upstream said: {KEY}" * 20)
    cut = play(envs, stub, "leaky", seeds=[7])
    assert "[api key]" in cut.episodes[0].failure
    for evaluation in (leaky, exfiltrating, invalid, echoed, cut):
        assert_key_absent(evaluation)
        assert not any(KEY[:8] in n for n in evaluation.notes)
    # It went in the Authorization header of requests to the endpoint, and in nothing else sent there.
    for request in stub.completions():
        assert request.headers["authorization"] == f"Bearer {KEY}"
        assert KEY not in json.dumps(request.json["messages"][:2])


def test_a_good_run_holds_no_key_either(envs, stub):
    stub.add_model("bisect", bisect)
    assert_key_absent(play(envs, stub, "bisect", seeds=[7]))


# --------------------------------------------------------------------------- #
# What is refused before any episode, and what the caller's hook does
# --------------------------------------------------------------------------- #


@pytest.mark.parametrize("endpoint, schema, key, reason", [
    ("ftp://models.example/v1", {"type": "object"}, KEY, "the model endpoint URL is not usable"),
    ("https://user:pw@models.example/v1", {"type": "object"}, KEY, "the model endpoint URL is not usable"),
    ("https://models.example/v1", "not a schema", KEY, "the environment's action schema is not a JSON object"),
    ("https://models.example/v1", {"type": 5}, KEY, "the environment's action schema is not a valid JSON Schema"),
    ("https://models.example/v1", {"type": "object", "description": "x" * 40_000}, KEY, "more than the 32,000"),
    ("https://models.example/v1", {"type": "object"}, "sk-with\nnewline", "characters an HTTP header cannot carry"),
])
def test_what_no_model_can_be_asked_with_plays_no_episode(endpoint, schema, key, reason):
    client = ProbeClient("http://127.0.0.1:9", allowed_hosts=ALLOWED)  # nothing listens: nothing must try
    evaluation = play_model(client, endpoint=endpoint, api_key=key, model="m", action_schema=schema, seeds=[1, 2],
                            max_steps=5, max_tokens=1000, episode_deadline_s=5, total_deadline_s=5,
                            request_timeout_s=5)
    assert evaluation.episodes == []
    assert stopped_note(evaluation).startswith(STOPPED) and reason in stopped_note(evaluation)
    assert "no episode was played" in stopped_note(evaluation)


def test_what_on_progress_raises_propagates(envs, stub):
    stub.add_model("bisect", bisect)
    calls = []

    def heartbeat():
        calls.append(time.monotonic())
        if len(calls) == 6:
            raise RuntimeError("cancelled")

    with pytest.raises(RuntimeError, match="cancelled"):
        play(envs, stub, "bisect", on_progress=heartbeat)
    # The session was closed: the single-session server takes the next episode at once.
    assert endings(play(envs, stub, "bisect", seeds=[7])) == [DONE]


# --------------------------------------------------------------------------- #
# Reading replies (no server)
# --------------------------------------------------------------------------- #


@pytest.mark.parametrize("content, expected", [
    ('{"guess": 3}', {"guess": 3}),
    ('  \n{"guess": 3}\n', {"guess": 3}),
    ('Here:\n```json\n{"guess": 3}\n```\nGood luck.', {"guess": 3}),
    ('```\n{"guess": 3}\n```', {"guess": 3}),
    ('```json\n[1]\n```\n```json\n{"guess": 4}\n```', {"guess": 4}),
    ('I pick {"guess": 5} because {"x": 1} is wrong', {"guess": 5}),
    ('{"a": {"b": {"c": [1, 2, {"d": null}]}}}', {"a": {"b": {"c": [1, 2, {"d": None}]}}}),
])
def test_a_json_object_is_found_in_a_text_reply(content, expected):
    assert _json_in_text(content) == (expected, None)


@pytest.mark.parametrize("content, problem", [
    ("fifty", "the reply holds no JSON object"),
    ('{"guess": ', "the reply holds no JSON object"),
    ("42", "the reply is a JSON int, not an object"),
    ('```json\n"x"\n```', "the reply is a JSON str, not an object"),
])
def test_a_text_reply_without_an_object_says_why(content, problem):
    assert _json_in_text(content) == (None, problem)


def test_the_schema_a_model_sees_is_the_one_the_environment_published():
    schema = {"type": "object", "properties": {"b": {"type": "integer"}, "a": {"type": "string"}}, "required": ["b"]}
    stored = with_property_order(schema)
    stored["properties"] = dict(sorted(stored["properties"].items()))  # as jsonb gives it back
    restored = _schema_for_model(stored)
    assert restored == schema and list(restored["properties"]) == ["b", "a"]
