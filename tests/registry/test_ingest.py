"""Reading others' evaluation results: openenv collect datasets, self-reported submissions, and every refusal.

Pure Python (registry.evaluation.ingest touches no database and no network). The collect dataset in
tests/data/collect/counter-run/ was written by openenv 0.10.0's own CollectRunner (see make_dataset.py there);
the refusals below are made by editing its real lines.
"""

from __future__ import annotations

import copy
import json
import math
from pathlib import Path

import pytest

from registry.evaluation.episodes import DONE, STEP_BOUND, TIME_BOUND, EpisodeResult
from registry.evaluation.ingest import (
    AGGREGATE_TOLERANCE,
    METADATA_MAX_BYTES,
    EnvironmentCandidate,
    IngestError,
    SubmittedEpisode,
    check_reward_range,
    match_environment,
    normalize_base_url,
    read_collect_dataset,
    read_submission,
)

RUN = Path(__file__).resolve().parents[1] / "data" / "collect" / "counter-run"
RESULTS = (RUN / "results.jsonl").read_bytes()
METADATA = (RUN / "metadata.json").read_bytes()
LINES = [json.loads(line) for line in RESULTS.decode().splitlines()]
HOST = "https://openenv-counter-env.hf.space"


def read(results: bytes = RESULTS, metadata: bytes = METADATA, *, max_episodes: int = 100,
         max_bytes: int = 1 << 20):
    return read_collect_dataset(results, metadata, max_episodes=max_episodes, max_bytes=max_bytes)


def jsonl(records) -> bytes:
    return "".join(json.dumps(r) + "\n" for r in records).encode()


def edited(index: int, **changes) -> bytes:
    """The real results.jsonl with one record changed (a value of ... removes the key)."""
    records = copy.deepcopy(LINES)
    for key, value in changes.items():
        if value is ...:
            records[index].pop(key, None)
        else:
            records[index][key] = value
    return jsonl(records)


def meta(**changes) -> bytes:
    data = json.loads(METADATA)
    for key, value in changes.items():
        if value is ...:
            data.pop(key, None)
        else:
            data[key] = value
    return json.dumps(data).encode()


def refused(fn, *args, **kwargs) -> IngestError:
    with pytest.raises(IngestError) as info:
        fn(*args, **kwargs)
    return info.value


# ---------------------------------------------------------------- collect datasets: what is read


def test_the_real_collect_dataset_becomes_episode_results():
    dataset = read()
    assert [e.episode_id for e in dataset.episodes] == ["ep-000000", "ep-000001", "ep-000002", "ep-000003"]
    assert [e.reward for e in dataset.episodes] == [1.0, 1.0, 0.25, 1.0]
    # verify_metrics.step_count is the environment's own count; done false is the --max-turns bound.
    assert [e.steps for e in dataset.episodes] == [2, 3, 4, 1]
    assert [e.ended for e in dataset.episodes] == [DONE, DONE, STEP_BOUND, DONE]
    assert all(e.seed is None and e.success is None and e.invalid_actions == 0 for e in dataset.episodes)
    m = dataset.metadata
    assert (m.env, m.env_base_url, m.provider, m.model) == ("openspiel:counter", HOST, "scripted", None)
    assert (m.num_episodes_requested, m.temperature, m.keep_losses, m.other) == (4, 0.2, False, {})
    notes = " ".join(dataset.notes)
    assert "not a sum of step rewards" in notes and "keep_losses false" in notes and "cannot be replayed" in notes
    played = dataset.played()
    assert (played.agent_kind, played.harness, played.episodes) == ("policy", "openenv collect", dataset.episodes)


def test_a_model_teacher_is_a_model_agent_and_unknown_metadata_keys_are_kept():
    dataset = read(metadata=meta(provider="openai", model="gpt-4o-mini", keep_losses=True, run_by="ci"))
    played = dataset.played()
    assert (played.agent, played.agent_kind) == ("gpt-4o-mini", "model")
    assert dataset.metadata.other == {"run_by": "ci"}
    assert not any("keep_losses" in n for n in dataset.notes)


def test_steps_fall_back_to_tool_calls_then_tool_messages_then_zero_with_a_note():
    records = copy.deepcopy(LINES)
    records[0]["verify_metrics"] = {}  # the tool trace: 2 calls
    records[1]["verify_metrics"], records[1]["tool_trace"] = {}, None  # metrics.tool_calls: 3
    records[2]["verify_metrics"], records[2]["tool_trace"], records[2]["metrics"] = {}, None, {}  # 4 tool messages
    for key in ("verify_metrics", "tool_trace", "metrics", "messages"):
        records[3].pop(key)
    dataset = read(jsonl(records))
    assert [e.steps for e in dataset.episodes] == [2, 3, 4, 0]
    assert any("1 of 4 episodes say nothing countable about their steps" in n for n in dataset.notes)


def test_success_seed_and_invalid_actions_are_read_where_collect_records_them():
    records = copy.deepcopy(LINES)
    records[0]["verify_metrics"]["success"] = True
    records[1]["metrics"]["success"] = False
    records[2]["verify_metrics"]["success"] = "yes"  # not a boolean: not read
    records[0]["extra"] = {"seed": 7}
    records[1]["task"] = {"seed": 8, "prompt": "count"}
    records[2]["tool_trace"][1]["result"]["error"] = "illegal action"
    dataset = read(jsonl(records))
    assert [e.success for e in dataset.episodes] == [True, False, None, None]
    assert [e.seed for e in dataset.episodes] == [7, 8, None, None]
    assert [e.invalid_actions for e in dataset.episodes] == [0, 0, 1, 0]
    assert not any("cannot be replayed" in n for n in dataset.notes)


def test_done_because_the_model_stopped_calling_tools_is_noted():
    records = copy.deepcopy(LINES)
    records[2]["done"] = True  # the harness sets done when the model answers without a tool call
    dataset = read(jsonl(records))
    assert dataset.episodes[2].ended == DONE
    assert any("1 of 4 episodes are marked done because the model stopped" in n for n in dataset.notes)


def test_blank_lines_are_skipped_and_counting_still_names_the_right_line():
    lines = RESULTS.decode().splitlines()
    text = "\n".join([lines[0], "", "   ", lines[1], lines[1]]) + "\n\n"
    error = refused(read, text.encode())
    assert error.line == 5 and "already appeared on line 4" in str(error)


def test_missing_episodes_and_resumed_runs_are_noted():
    fewer = read(metadata=meta(num_episodes_requested=10))
    assert any("4 of the 10 requested episodes" in n for n in fewer.notes)
    more = read(metadata=meta(num_episodes_requested=2))
    assert any("more than one run" in n for n in more.notes)


# ---------------------------------------------------------------- collect datasets: refusals


@pytest.mark.parametrize(("literal", "name"), [("NaN", "NaN"), ("Infinity", "Infinity"), ("-Infinity", "-Infinity"),
                                               ("1e400", "Infinity")])
def test_a_non_finite_reward_is_refused_with_its_line(literal, name):
    lines = RESULTS.decode().splitlines()
    lines[2] = lines[2].replace('"reward": 0.25,', f'"reward": {literal},', 1)
    error = refused(read, ("\n".join(lines) + "\n").encode())
    assert str(error) == f"results.jsonl line 3: reward is {name}, which is not a JSON number"
    assert (error.line, error.field) == (3, "reward")


def test_nan_anywhere_in_a_line_is_refused_with_its_path():
    lines = RESULTS.decode().splitlines()
    lines[1] = lines[1].replace('"tool_calls": 3}', '"tool_calls": 3, "loss": NaN}', 1)
    error = refused(read, ("\n".join(lines) + "\n").encode())
    assert str(error) == "results.jsonl line 2: metrics.loss is NaN, which is not a JSON number"


@pytest.mark.parametrize(("changes", "message"), [
    ({"reward": ...}, "results.jsonl line 2: reward is missing"),
    ({"reward": "1.0"}, "results.jsonl line 2: reward must be a number, not a string"),
    ({"reward": True}, "results.jsonl line 2: reward must be a number, not a boolean"),
    ({"reward": None}, "results.jsonl line 2: reward must be a number, not null"),
    ({"done": ...}, "results.jsonl line 2: done is missing"),
    ({"done": 1}, "results.jsonl line 2: done must be a boolean, not a number"),
    ({"episode_id": ...}, "results.jsonl line 2: episode_id is missing"),
    ({"episode_id": 3}, "results.jsonl line 2: episode_id must be a string, not a number"),
    ({"episode_id": "e" * 256}, "results.jsonl line 2: episode_id is 256 characters long; at most 255 are accepted"),
    ({"tool_trace": {}}, "results.jsonl line 2: tool_trace must be a list, not an object"),
    ({"metrics": [1]}, "results.jsonl line 2: metrics must be an object, not a list"),
    ({"verify_metrics": {"step_count": -1}},
     "results.jsonl line 2: verify_metrics.step_count must be a non-negative integer, not -1"),
    ({"extra": {"seed": 1}, "task": {"seed": 2}}, "results.jsonl line 2: extra.seed (1) and task.seed (2) disagree"),
    ({"episode_id": "ep-000000"}, "results.jsonl line 2: episode_id 'ep-000000' already appeared on line 1"),
])
def test_a_bad_record_is_refused_naming_its_line_and_field(changes, message):
    error = refused(read, edited(1, **changes))
    assert str(error) == message and error.line == 2


def test_bad_json_is_refused_with_its_line_number():
    lines = RESULTS.decode().splitlines()
    lines[2] = lines[2][:100]  # a line cut short
    error = refused(read, ("\n".join(lines) + "\n").encode())
    assert str(error).startswith("results.jsonl line 3: not valid JSON: ") and error.line == 3


def test_a_line_that_is_not_an_object_or_repeats_a_key_is_refused():
    assert str(refused(read, b"[1, 2]\n")) == "results.jsonl line 1: expected a JSON object, not a list"
    error = refused(read, b'{"episode_id": "a", "reward": 0.0, "reward": 1.0, "done": true}\n')
    assert "line 1" in str(error) and "'reward' appears twice" in str(error)


def test_bytes_that_are_not_utf8_are_refused_with_their_line():
    text = RESULTS.replace(b"ep-000002", b"ep-00\xff002")
    error = refused(read, text)
    assert str(error).startswith("results.jsonl line 3: not UTF-8") and error.line == 3


def test_too_many_episodes_or_bytes_are_refused():
    error = refused(read, max_episodes=3)
    assert str(error) == "results.jsonl line 4: more than 3 episodes; at most 3 are accepted"
    error = refused(read, max_bytes=len(RESULTS) - 1)
    assert str(error) == f"results.jsonl is {len(RESULTS)} bytes; at most {len(RESULTS) - 1} are accepted"
    big = meta(padding="x" * METADATA_MAX_BYTES)
    assert str(refused(read, metadata=big)).startswith(f"metadata.json is {len(big)} bytes")


def test_nesting_beyond_the_bound_is_refused_without_exhausting_the_stack():
    deep = {"episode_id": "a", "reward": 0.0, "done": True, "extra": {"x": json.loads("[" * 500 + "]" * 500)}}
    assert "nested more than 64 levels deep" in str(refused(read, jsonl([deep])))
    assert "nested too deeply" in str(refused(read, b'{"a": ' + b"[" * 100_000 + b"]" * 100_000 + b"}\n"))


def test_an_empty_dataset_is_refused():
    assert str(refused(read, b"\n\n")) == "results.jsonl has no episodes"


@pytest.mark.parametrize(("metadata", "message"), [
    (b"[]", "metadata.json must be a JSON object, not a list"),
    (b"{", "metadata.json: not valid JSON: Expecting property name enclosed in double quotes (column 2)"),
    (meta(env_base_url=...), "metadata.json: env_base_url is missing"),
    (meta(provider=3), "metadata.json: provider must be a string, not a number"),
    (meta(keep_losses="no"), "metadata.json: keep_losses must be a boolean or null, not a string"),
    (meta(num_episodes_requested=-1), "metadata.json: num_episodes_requested must be a non-negative integer or null, "
                                      "not -1"),
    (meta(temperature=float("nan")), "metadata.json: temperature is NaN, which is not a JSON number"),
])
def test_bad_metadata_is_refused(metadata, message):
    assert str(refused(read, metadata=metadata)) == message


# ---------------------------------------------------------------- which environment


CANDIDATES = [
    EnvironmentCandidate("openenv/counter_env", HOST),
    EnvironmentCandidate("openenv/echo_env", "https://openenv-echo-env.hf.space"),
]


def metadata_with(url: str):
    return read(metadata=meta(env_base_url=url)).metadata


@pytest.mark.parametrize("url", [
    HOST, HOST + "/", HOST + "/web", HOST + "/web/", "HTTPS://OpenEnv-Counter-Env.HF.space",
    "http://openenv-counter-env.hf.space", "wss://openenv-counter-env.hf.space/",
    "https://openenv-counter-env.hf.space:443/web",
])
def test_the_environment_is_matched_by_its_space_host(url):
    match = match_environment(metadata_with(url), mapping=None, candidates=CANDIDATES)
    assert (match.repo_id, match.matched_by) == ("openenv/counter_env", "env_base_url")


@pytest.mark.parametrize("url", [HOST + "/ws", HOST + ":8443", "https://openenv-counter-env.hf.space.evil.example",
                                 "https://counter.example"])
def test_a_url_that_is_not_the_host_matches_nothing(url):
    error = refused(match_environment, metadata_with(url), mapping=None, candidates=CANDIDATES)
    assert str(error) == (f"env_base_url {url!r} is not the host of any environment the hub knows; name the "
                          "environment (owner/name) when importing")


def test_a_local_server_is_matched_by_an_explicit_mapping():
    local = metadata_with("http://localhost:8000")
    match = match_environment(local, mapping="OpenEnv/Echo_Env", candidates=CANDIDATES)
    assert (match.repo_id, match.matched_by) == ("openenv/echo_env", "mapping")
    assert "localhost" in match.detail
    # The mapping agrees with the URL: still recorded as the mapping.
    same = match_environment(metadata_with(HOST), mapping="openenv/counter_env", candidates=CANDIDATES)
    assert same.matched_by == "mapping"


def test_a_mapping_is_refused_when_unknown_invalid_or_contradicted_by_the_url():
    assert str(refused(match_environment, metadata_with(HOST), mapping="someone/else", candidates=CANDIDATES)) == (
        "the mapping names someone/else, which is not an environment the hub knows")
    assert "is not a repo id" in str(refused(match_environment, metadata_with(HOST), mapping="echo_env",
                                             candidates=CANDIDATES))
    error = refused(match_environment, metadata_with(HOST), mapping="openenv/echo_env", candidates=CANDIDATES)
    assert str(error) == (f"env_base_url {HOST!r} is the host of openenv/counter_env, but the mapping names "
                          "openenv/echo_env; correct one of them")


def test_an_ambiguous_host_is_refused():
    twins = [*CANDIDATES, EnvironmentCandidate("mirror/counter", HOST + "/")]
    error = refused(match_environment, metadata_with(HOST), mapping=None, candidates=twins)
    assert str(error) == (f"env_base_url {HOST!r} is the host of more than one environment (mirror/counter, "
                          "openenv/counter_env); name the environment (owner/name) when importing")
    # Naming it settles it.
    named = match_environment(metadata_with(HOST), mapping="mirror/counter", candidates=twins)
    assert named.repo_id == "mirror/counter"


def test_a_non_http_url_needs_a_mapping():
    error = refused(match_environment, metadata_with("openspiel:counter"), mapping=None, candidates=CANDIDATES)
    assert "is not an http(s) URL" in str(error)
    assert normalize_base_url("ftp://x.hf.space") is None and normalize_base_url("https://x:notaport") is None


def test_space_facts_are_candidates():
    from registry.hub import SpaceFacts

    facts = SpaceFacts(repo_id="openenv/counter_env", sha="a" * 40, subdomain="openenv-counter-env", host=HOST)
    assert match_environment(metadata_with(HOST + "/web"), mapping=None, candidates=[facts]).repo_id == facts.repo_id


# ---------------------------------------------------------------- submissions


def submission(**changes) -> dict:
    payload = {
        "config": {
            "harness_name": "my-harness",
            "harness_version": "1.2.0",
            "library_versions": {"openenv": "0.10.0", "transformers": "4.57.0"},
            "dataset": "openenv/echo_env",
            "eval_parameters": {"num_episodes": 4, "max_steps": 20, "temperature": 0.0},
        },
        "scores": {"mean_reward": 0.5, "std": 0.5773502691896257, "success_rate": 0.5, "pass@1": 0.5},
        "revision": "3f2a9c1",
        "agent": {"name": "Qwen/Qwen2.5-7B-Instruct", "kind": "model", "revision": "a" * 40},
        "episodes": [
            {"reward": 1.0, "seed": 0, "steps": 3, "success": True, "wall_s": 1.5, "episode_id": "ep-0"},
            {"reward": 0.0, "seed": 1, "steps": 20, "success": False, "wall_s": 4.0, "episode_id": "ep-1",
             "ended": "step_bound"},
            {"reward": 1.0, "seed": 2, "steps": 5, "success": True, "episode_id": "ep-2"},
            {"reward": 0.0, "seed": 3, "success": False},
        ],
        "idempotency_key": "run-2025-01-01-0001",
    }
    for path, value in changes.items():
        target, keys = payload, path.split("__")
        for key in keys[:-1]:
            target = target[int(key)] if isinstance(target, list) else target[key]
        last = keys[-1]
        if value is ...:
            del target[last]
        elif isinstance(target, list):
            target[int(last)] = value
        else:
            target[last] = value
    return payload


def submit(payload: dict, max_episodes: int = 100):
    return read_submission(payload, max_episodes=max_episodes)


def test_a_valid_submission_is_read():
    sub = submit(submission())
    assert (sub.harness_name, sub.harness_version, sub.dataset) == ("my-harness", "1.2.0", "openenv/echo_env")
    assert (sub.revision, sub.agent.name, sub.agent.kind, sub.agent.revision) == (
        "3f2a9c1", "Qwen/Qwen2.5-7B-Instruct", "model", "a" * 40)
    assert sub.idempotency_key == "run-2025-01-01-0001"
    assert sub.episodes[3] == SubmittedEpisode(reward=0.0, seed=3, success=False)
    results = sub.results()
    assert [r.steps for r in results] == [3, 20, 5, 0]
    assert [r.ended for r in results] == [DONE, STEP_BOUND, DONE, DONE]
    assert results[0] == EpisodeResult(seed=0, reward=1.0, steps=3, ended=DONE, wall_s=1.5, success=True,
                                       episode_id="ep-0")
    played = sub.played()
    assert (played.agent, played.agent_kind, played.client_version, played.agent_revision) == (
        "Qwen/Qwen2.5-7B-Instruct", "model", "0.10.0", "a" * 40)
    notes = " ".join(sub.notes)
    assert "pass@1" in notes and "1 of 4 episodes do not say how many steps" in notes
    assert "3 of 4 episodes do not say how they ended" in notes


def test_the_shape_matches_openenv_eval_result():
    """config and scores are exactly OpenEnv's EvalResult fields (openenv/core/evals/types.py, extra="forbid")."""
    payload = submission()
    eval_result = {"config": payload["config"], "scores": payload["scores"]}
    assert set(eval_result["config"]) == {"harness_name", "harness_version", "library_versions", "dataset",
                                          "eval_parameters"}
    error = refused(submit, submission(config__model="gpt"))
    assert str(error).startswith("config has unknown field(s) 'model'; accepted: harness_name")


@pytest.mark.parametrize(("path", "value", "message"), [
    ("episodes__1__reward", float("nan"), "episodes[1].reward is NaN, which is not a JSON number"),
    ("episodes__1__reward", float("inf"), "episodes[1].reward is Infinity, which is not a JSON number"),
    ("scores__mean_reward", float("-inf"), "scores.mean_reward is -Infinity, which is not a JSON number"),
    ("config__eval_parameters__temperature", float("nan"),
     "config.eval_parameters.temperature is NaN, which is not a JSON number"),
    ("episodes__0__wall_s", float("inf"), "episodes[0].wall_s is Infinity, which is not a JSON number"),
])
def test_nan_and_infinity_are_refused_anywhere(path, value, message):
    error = refused(submit, submission(**{path: value}))
    assert str(error) == message and error.field == message.split(" ")[0]


@pytest.mark.parametrize(("changes", "message"), [
    ({"config__eval_parameters__num_episodes": 5}, "config.eval_parameters.num_episodes says 5 episodes but 4 were "
                                                   "submitted"),
    ({"config__eval_parameters__n_episodes": 3}, "config.eval_parameters.n_episodes says 3 episodes but 4 were "
                                                 "submitted"),
    ({"scores__num_episodes": 10}, "scores.num_episodes says 10 episodes but 4 were submitted"),
    ({"scores__n": 3.0}, "scores.n says 3 episodes but 4 were submitted"),
    ({"config__eval_parameters__num_episodes": "4"}, "config.eval_parameters.num_episodes must be a whole number of "
                                                     "episodes, not '4'"),
    ({"scores__count": 4.5}, "scores.count must be a whole number of episodes, not 4.5"),
])
def test_an_episode_count_that_does_not_match_is_refused(changes, message):
    assert str(refused(submit, submission(**changes))) == message


def test_a_matching_count_as_a_whole_float_is_accepted():
    assert len(submit(submission(scores__n=4.0, scores__num_episodes=4)).episodes) == 4


@pytest.mark.parametrize(("key", "value", "says"), [
    ("mean_reward", 0.9, "0.5 (the mean reward of the 4 episodes)"),
    ("avg_reward", 0.51, "0.5 (the mean reward of the 4 episodes)"),
    ("sum", 3.0, "2 (the sum of the 4 episodes' rewards)"),
    ("max_reward", 2.0, "1 (the highest of the 4 episodes' rewards)"),
    ("min", 0.5, "0 (the lowest of the 4 episodes' rewards)"),
    ("median", 1.0, "0.5 (the median of the 4 episodes' rewards)"),
    ("std", 0.1, "0.57735 (the sample standard deviation of the 4 rewards) or 0.5 (the population standard "
                 "deviation of the 4 rewards)"),
    ("stderr", 0.5, "0.288675 (the standard error from the sample standard deviation"),
    ("success_rate", 0.75, "0.5 (2 of 4 episodes succeeded) or 0.5 (2 of 4 episodes have reward > 0)"),
])
def test_an_aggregate_the_episodes_contradict_is_refused_naming_it(key, value, says):
    error = refused(submit, submission(**{f"scores__{key}": value}))
    assert str(error).startswith(f"scores.{key} is {value!r} but the episodes give {says}")
    assert f"the tolerance {AGGREGATE_TOLERANCE:g}" in str(error) and error.field == f"scores.{key}"


def test_aggregates_within_the_tolerance_either_std_and_collects_success_rate_are_accepted():
    rounded = submission(scores__mean_reward=0.5004, scores__std=0.5, scores__sem=0.2887, scores__sum=2)
    assert submit(rounded).scores["sem"] == 0.2887
    # openenv collect's success_rate is the share of rewards > 0, whatever `success` says.
    payload = submission(scores__success_rate=0.5)
    for episode in payload["episodes"]:
        episode["success"] = True
    submit(payload)
    assert submit(submission(scores__std=None)).scores["std"] is None  # no claim
    error = refused(submit, submission(scores__mean_reward="0.5"))
    assert str(error) == "scores.mean_reward must be a number, not a string"


@pytest.mark.parametrize(("changes", "message"), [
    ({"config": ...}, "config is missing (required: config, scores, revision, agent, episodes, idempotency_key)"),
    ({"idempotency_key": ...}, "idempotency_key is missing (required: config, scores, revision, agent, episodes, "
                               "idempotency_key)"),
    ({"config__dataset": ...}, "config.dataset is missing (OpenEnv's EvalConfig requires it)"),
    ({"agent__kind": ...}, "agent.kind is missing"),
    ({"agent__name": ...}, "agent.name is missing"),
    ({"episodes__2__reward": ...}, "episodes[2].reward is missing"),
    ({"extra": 1}, "the submission has unknown field(s) 'extra'; accepted: config, scores, revision, agent, episodes, "
                   "idempotency_key"),
    ({"agent__org": "x"}, "agent has unknown field(s) 'org'; accepted: name, kind, revision"),
    ({"episodes__0__rewards": 1}, "episodes[0] has unknown field(s) 'rewards'; accepted: reward, seed, steps, success, "
                                  "wall_s, episode_id, ended"),
])
def test_missing_and_unknown_fields_are_refused(changes, message):
    assert str(refused(submit, submission(**changes))) == message


@pytest.mark.parametrize(("changes", "message"), [
    ({"config__harness_name": 3}, "config.harness_name must be a string, not a number"),
    ({"config__harness_version": ""}, "config.harness_version must not be empty"),
    ({"config__library_versions": ["openenv"]}, "config.library_versions must be an object, not a list"),
    ({"config__library_versions__openenv": 0.1}, "config.library_versions.openenv must be a string, not a number"),
    ({"config__eval_parameters": None}, "config.eval_parameters must be an object, not null"),
    ({"scores": []}, "scores must be an object, not a list"),
    ({"agent__kind": "human"}, "agent.kind must be one of model, policy, not 'human'"),
    ({"revision": "main"}, "revision must be a hex commit sha or a prefix of one (7 to 64 characters), not 'main'"),
    ({"revision": "abc"}, "revision must be a hex commit sha or a prefix of one (7 to 64 characters), not 'abc'"),
    ({"idempotency_key": "short"}, "idempotency_key must be 8 to 128 characters of A-Z, a-z, 0-9, '.', '_', ':' and "
                                   "'-', starting with a letter or digit"),
    ({"episodes": {}}, "episodes must be a list, not an object"),
    ({"episodes": []}, "episodes is empty: the hub computes every result from the episodes"),
    ({"episodes__0": 1.0}, "episodes[0] must be an object, not a number"),
    ({"episodes__0__reward": "1"}, "episodes[0].reward must be a number, not a string"),
    ({"episodes__0__reward": True}, "episodes[0].reward must be a number, not a boolean"),
    ({"episodes__0__success": "yes"}, "episodes[0].success must be a boolean or null, not a string"),
    ({"episodes__0__steps": -1}, "episodes[0].steps must be an integer from 0 to 1000000000 or null, not -1"),
    ({"episodes__0__seed": 1.5}, "episodes[0].seed must be an integer from 0 to 9223372036854775807 or null, not 1.5"),
    ({"episodes__0__wall_s": -2}, "episodes[0].wall_s must be a number from 0 to 10000000 or null, not -2"),
    ({"episodes__0__ended": "won"}, "episodes[0].ended must be one of done, step_bound, time_bound, failed, not 'won'"),
    ({"episodes__3__episode_id": "ep-1"}, "episodes[3].episode_id 'ep-1' repeats episodes[1]"),
])
def test_wrong_types_and_values_are_refused(changes, message):
    assert str(refused(submit, submission(**changes))) == message


def test_an_uppercase_sha_and_an_ending_are_accepted():
    sub = submit(submission(revision="3F2A9C1", episodes__3__ended=TIME_BOUND))
    assert sub.revision == "3f2a9c1" and sub.results()[3].ended == TIME_BOUND


def test_too_many_episodes_and_too_long_strings_are_refused():
    assert str(refused(submit, submission(), max_episodes=3)) == "episodes has 4 episodes; at most 3 are accepted"
    assert str(refused(submit, submission(config__harness_name="h" * 201))) == (
        "config.harness_name is 201 characters long; at most 200 are accepted")
    assert str(refused(submit, submission(episodes__0__episode_id="e" * 256))) == (
        "episodes[0].episode_id is 256 characters long; at most 255 are accepted")
    assert str(refused(submit, submission(agent__name="a\x00b"))) == "agent.name contains a NUL character"
    huge = submission(config__eval_parameters={"prompt": "p" * 20_000})
    assert str(refused(submit, huge)).startswith("config.eval_parameters is 20013 bytes as JSON; at most 16384")


def test_a_submission_that_is_not_an_object_is_refused():
    assert str(refused(submit, [1])) == "the submission must be an object, not a list"


# ---------------------------------------------------------------- reward range


def test_rewards_within_the_range_scaled_by_steps_pass():
    check_reward_range([SubmittedEpisode(reward=3.0, steps=3), SubmittedEpisode(reward=0.0, steps=0),
                        SubmittedEpisode(reward=1.0)], 0.0, 1.0)
    check_reward_range(read().episodes, 0.0, 1.0)  # EpisodeResult too
    check_reward_range([SubmittedEpisode(reward=-4.0, steps=4)], -1.0, 1.0)


def test_a_reward_outside_the_range_is_refused_naming_the_episode():
    error = refused(check_reward_range, [SubmittedEpisode(reward=1.0, steps=3),
                                         SubmittedEpisode(reward=3.5, steps=3, episode_id="ep-1")], 0.0, 1.0)
    assert str(error) == ("episodes[1] ('ep-1'): reward 3.5 is outside [0, 3], the declared per-step range [0, 1] "
                          "over 3 steps")
    assert error.field == "episodes[1].reward"
    error = refused(check_reward_range, [SubmittedEpisode(reward=1.5)], 0.0, 1.0)
    assert str(error) == ("episodes[0]: reward 1.5 is outside [0, 1], the declared per-step range (its steps are "
                          "unknown)")
    error = refused(check_reward_range, [SubmittedEpisode(reward=-0.5, steps=2)], 0.0, 1.0)
    assert "outside [0, 2]" in str(error)
    assert "outside [-2, 1]" in str(refused(check_reward_range, [SubmittedEpisode(reward=1.5, steps=2)], -1.0, 0.5))


def test_a_nonsense_range_is_a_programming_error():
    with pytest.raises(ValueError, match="not a finite interval"):
        check_reward_range([], 1.0, 0.0)
    with pytest.raises(ValueError, match="not a finite interval"):
        check_reward_range([], 0.0, math.inf)
