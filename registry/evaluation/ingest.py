"""Reading evaluation results that others produced into the hub's episode record; refusing bad input, clearly.

Two sources, both untrusted:

- an imported ``openenv collect`` dataset: ``results.jsonl`` (one ``EpisodeRecord`` a line) and
  ``metadata.json``, as written by ``openenv/core/harness/collect.py`` (``EpisodeRecord``,
  ``RolloutSerializer``) and ``openenv/cli/commands/collect.py`` (the metadata dict) in openenv 0.10.0.
  Neither file carries a schema version or the environment's repo id: `match_environment` finds the
  environment from ``env_base_url`` or from an explicit mapping given at import;
- a self-reported submission: OpenEnv's ``EvalResult`` (``openenv/core/evals/types.py``: ``config``
  ``{harness_name, harness_version, library_versions, dataset, eval_parameters}`` and ``scores``) plus what
  the hub requires besides: the environment ``revision``, the ``agent``, the per-episode ``episodes`` and an
  ``idempotency_key``.

The hub computes every statistic from the episodes (registry.evalstats); submitted aggregates are only
checked against them. Every refusal is an `IngestError` naming the field (and, for a dataset, the line).
Pure Python: no Django, no I/O.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlsplit

from registry.evaluation.episodes import DONE, ENDINGS, STEP_BOUND, EpisodeResult, PlayedEvaluation

METADATA_MAX_BYTES = 64 * 1024  # metadata.json is a dozen keys; anything near this is not one
MAX_DEPTH = 64  # JSON nesting, in a line of results.jsonl or in a submission
MAX_EPISODE_ID = 255  # what OpenEnv's /reset accepts as an episode_id
MAX_NAME = 200
MAX_VERSION = 100
MAX_TEXT = 500
MAX_URL = 2048
MAX_MAPPING_JSON = 16 * 1024  # eval_parameters, scores: encoded as JSON
MAX_STEPS = 10**9
MAX_SEED = 2**63 - 1
MAX_WALL_S = 10**7
# Submitted aggregates may be rounded: they agree with the episodes when within this, absolutely or relatively.
AGGREGATE_TOLERANCE = 1e-3

# OpenEnv's EvalConfig (extra="forbid", every field required).
EVAL_CONFIG_FIELDS = ("harness_name", "harness_version", "library_versions", "dataset", "eval_parameters")
SUBMISSION_FIELDS = ("config", "scores", "revision", "agent", "episodes", "idempotency_key")
AGENT_FIELDS = ("name", "kind", "revision")
AGENT_KINDS = ("model", "policy")
EPISODE_FIELDS = ("reward", "seed", "steps", "success", "wall_s", "episode_id", "ended")
# How many episodes a submission says it played: `openenv collect --num-episodes` (CollectRunner.run's
# num_episodes) is OpenEnv's name; n_episodes is accepted as well. Both are checked when given.
EPISODE_COUNT_PARAMETERS = ("num_episodes", "n_episodes")
EPISODE_COUNT_SCORES = ("num_episodes", "n_episodes", "count", "n")
# Aggregates checked against the episodes. `avg_reward` and `success_rate` are openenv collect's own
# (CollectResult), where success_rate is the share of episodes with reward > 0.
AGGREGATE_KEYS = {
    "mean": ("mean", "mean_reward", "reward_mean", "avg_reward", "average_reward"),
    "sum": ("sum", "sum_reward", "reward_sum", "total_reward"),
    "min": ("min", "min_reward", "reward_min"),
    "max": ("max", "max_reward", "reward_max"),
    "median": ("median", "median_reward", "reward_median"),
    "std": ("std", "std_reward", "reward_std", "stdev"),
    "sem": ("sem", "stderr", "std_err", "standard_error", "reward_sem"),
    "success_rate": ("success_rate",),
}
# Where a collected episode may say it succeeded (a boolean; anything else is not read).
SUCCESS_KEY = "success"

_REVISION = re.compile(r"[0-9a-f]{7,64}")
_IDEMPOTENCY_KEY = re.compile(r"[A-Za-z0-9][A-Za-z0-9._:-]{7,127}")
_REPO_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,95}/[A-Za-z0-9][A-Za-z0-9._-]{0,95}")
_NO_VALUE = object()


class IngestError(ValueError):
    """Input the hub refuses. The message says what and where; `field` and `line` say it for a program."""

    def __init__(self, message: str, *, field: str | None = None, line: int | None = None):
        super().__init__(message)
        self.field = field
        self.line = line


# --- shared checks ------------------------------------------------------------------------------------------------


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _is_number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def _type_name(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, str):
        return "a string"
    if _is_number(value):
        return "a number"
    if isinstance(value, list):
        return "a list"
    if isinstance(value, dict):
        return "an object"
    return type(value).__name__


def _nonfinite_name(value: float) -> str:
    return "NaN" if math.isnan(value) else ("Infinity" if value > 0 else "-Infinity")


def _scan(value: Any, root: str) -> tuple[str, str] | None:
    """The first problem anywhere inside a parsed JSON value, as (path, what), or None.

    Python's json reads NaN, Infinity and 1e400 (which overflows to infinity): none of them is a JSON number,
    and none may reach a statistic. Strings may not hold NUL (PostgreSQL text cannot). Nesting is bounded.
    Iterative, so a deep value cannot exhaust the stack.
    """
    stack: list[tuple[Any, str, int]] = [(value, root, 0)]
    while stack:
        item, path, depth = stack.pop()
        if isinstance(item, float) and not math.isfinite(item):
            return path, f"is {_nonfinite_name(item)}, which is not a JSON number"
        if isinstance(item, str):
            if "\x00" in item:
                return path, "contains a NUL character"
        elif isinstance(item, dict):
            if depth >= MAX_DEPTH:
                return path, f"is nested more than {MAX_DEPTH} levels deep"
            for key, child in item.items():
                if not isinstance(key, str) or "\x00" in key:
                    return path, "has a key that is not a string without NUL"
                stack.append((child, f"{path}.{key}" if path else key, depth + 1))
        elif isinstance(item, (list, tuple)):
            if depth >= MAX_DEPTH:
                return path, f"is nested more than {MAX_DEPTH} levels deep"
            for index, child in enumerate(item):
                stack.append((child, f"{path}[{index}]", depth + 1))
    return None


def _no_duplicate_keys(pairs: list[tuple[str, Any]]) -> dict:
    out: dict = {}
    for key, value in pairs:
        if key in out:
            # Parsers disagree on which of two equal keys wins: a record must not mean two things.
            raise ValueError(f"the key {key!r} appears twice in one object")
        out[key] = value
    return out


def _parse_json(text: str, where: str, *, line: int | None = None) -> Any:
    try:
        value = json.loads(text, object_pairs_hook=_no_duplicate_keys)
    except json.JSONDecodeError as exc:
        raise IngestError(f"{where}: not valid JSON: {exc.msg} (column {exc.colno})", line=line) from None
    except RecursionError:
        raise IngestError(f"{where}: nested too deeply to read", line=line) from None
    except ValueError as exc:  # a repeated key; an integer longer than Python reads
        raise IngestError(f"{where}: not valid JSON: {exc}", line=line) from None
    problem = _scan(value, "")
    if problem is not None:
        path, what = problem
        raise IngestError(f"{where}: {path or 'the value'} {what}", field=path or None, line=line)
    return value


def _decode(data: bytes, name: str) -> str:
    """UTF-8 text (a leading BOM dropped), or an IngestError naming the line of the first bad byte."""
    if not isinstance(data, (bytes, bytearray, memoryview)):
        raise TypeError(f"{name} must be bytes")
    data = bytes(data)
    if data.startswith(b"\xef\xbb\xbf"):
        data = data[3:]
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        line = data.count(b"\n", 0, exc.start) + 1
        raise IngestError(f"{name} line {line}: not UTF-8 (byte {exc.start + 1} of the file)", line=line) from None


def _text(value: Any, where: str, *, cap: int, required: bool = True, empty: bool = False,
          line: int | None = None, name: str | None = None) -> str | None:
    """A string field: present (when required), a string, not empty (unless allowed), at most `cap` characters.
    `where` starts the message; `name` is the field's own name when `where` says more."""
    name = name or where
    if value is _NO_VALUE or value is None:
        if required:
            raise IngestError(f"{where} is missing" if value is _NO_VALUE else f"{where} must be a string, not null",
                              field=name, line=line)
        return None
    if not isinstance(value, str):
        raise IngestError(f"{where} must be a string, not {_type_name(value)}", field=name, line=line)
    if not value and not empty:
        raise IngestError(f"{where} must not be empty", field=name, line=line)
    if len(value) > cap:
        raise IngestError(f"{where} is {len(value)} characters long; at most {cap} are accepted", field=name,
                          line=line)
    return value


def _bounded_json(value: Any, where: str) -> None:
    try:
        size = len(json.dumps(value, separators=(",", ":")))
    except (TypeError, ValueError) as exc:
        raise IngestError(f"{where} is not JSON ({exc})", field=where) from None
    if size > MAX_MAPPING_JSON:
        raise IngestError(f"{where} is {size} bytes as JSON; at most {MAX_MAPPING_JSON} are accepted", field=where)


# --- openenv collect datasets -------------------------------------------------------------------------------------


@dataclass
class CollectMetadata:
    """metadata.json of an ``openenv collect`` run (written by openenv/cli/commands/collect.py).

    `env` is the collect command's env spec ("openspiel:tic_tac_toe"), not a repo id; `env_base_url` is the
    server the episodes were played against; `provider` is "scripted", "openai", "anthropic" or
    "openai-compatible"; `model` is None for the scripted teacher. Keys this reader does not know are kept in
    `other`, verbatim.
    """

    env: str
    env_base_url: str
    provider: str
    model: str | None = None
    llm_endpoint: str | None = None
    llm_port: int | None = None
    num_episodes_requested: int | None = None
    temperature: float | None = None
    keep_losses: bool | None = None
    other: dict[str, Any] = field(default_factory=dict)


@dataclass
class CollectedDataset:
    """An imported ``openenv collect`` dataset: its episodes in the hub's record, its metadata, and what a reader
    of the row should know (`notes`)."""

    episodes: list[EpisodeResult]
    metadata: CollectMetadata
    notes: list[str] = field(default_factory=list)

    def played(self) -> PlayedEvaluation:
        """The episodes as one agent's evaluation. The scripted teacher (the first legal action) is a policy; any
        other provider is a model. collect records neither its own version nor the client's."""
        meta = self.metadata
        if meta.provider == "scripted":
            agent, kind = "openenv collect scripted (first legal action)", "policy"
        else:
            agent, kind = meta.model or meta.provider, "model"
        return PlayedEvaluation(
            agent=agent[:MAX_NAME], agent_kind=kind, harness="openenv collect", harness_version="",
            client_version="", episodes=list(self.episodes), notes=list(self.notes),
        )


_METADATA_TEXT = {"env": MAX_TEXT, "env_base_url": MAX_URL, "provider": MAX_VERSION}


def _read_metadata(data: bytes, *, max_bytes: int) -> CollectMetadata:
    cap = min(max_bytes, METADATA_MAX_BYTES)
    if len(data) > cap:
        raise IngestError(f"metadata.json is {len(data)} bytes; at most {cap} are accepted")
    raw = _parse_json(_decode(data, "metadata.json"), "metadata.json")
    if not isinstance(raw, dict):
        raise IngestError(f"metadata.json must be a JSON object, not {_type_name(raw)}")
    values: dict[str, Any] = {}
    for key, cap_chars in _METADATA_TEXT.items():
        values[key] = _text(raw.get(key, _NO_VALUE), f"metadata.json: {key}", cap=cap_chars, name=key)
    for key in ("model", "llm_endpoint"):
        values[key] = _text(raw.get(key), f"metadata.json: {key}", cap=MAX_URL, required=False, name=key)
    for key in ("llm_port", "num_episodes_requested"):
        value = raw.get(key)
        if value is not None and not (_is_int(value) and 0 <= value <= MAX_STEPS):
            raise IngestError(f"metadata.json: {key} must be a non-negative integer or null, not {value!r}",
                              field=key)
        values[key] = value
    temperature = raw.get("temperature")
    if temperature is not None and not _is_number(temperature):
        raise IngestError(f"metadata.json: temperature must be a number or null, not {_type_name(temperature)}",
                          field="temperature")
    values["temperature"] = None if temperature is None else float(temperature)
    keep_losses = raw.get("keep_losses")
    if keep_losses is not None and not isinstance(keep_losses, bool):
        raise IngestError(f"metadata.json: keep_losses must be a boolean or null, not {_type_name(keep_losses)}",
                          field="keep_losses")
    values["keep_losses"] = keep_losses
    other = {k: v for k, v in raw.items() if k not in values}
    return CollectMetadata(**values, other=other)


def _count(value: Any) -> bool:
    return _is_int(value) and 0 <= value <= MAX_STEPS


def _object_field(record: dict, key: str, where: str, line: int) -> dict:
    value = record.get(key)
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise IngestError(f"{where}: {key} must be an object, not {_type_name(value)}", field=key, line=line)
    return value


def _collected_episode(record: dict, where: str, line: int) -> tuple[EpisodeResult, bool, bool]:
    """One results.jsonl record as an EpisodeResult, plus (steps were countable, done came from the model
    stopping rather than from the environment)."""
    episode_id = record.get("episode_id", _NO_VALUE)
    _text(episode_id, f"{where}: episode_id", cap=MAX_EPISODE_ID, line=line, name="episode_id")
    reward = record.get("reward", _NO_VALUE)
    if reward is _NO_VALUE:
        raise IngestError(f"{where}: reward is missing", field="reward", line=line)
    if not _is_number(reward):
        raise IngestError(f"{where}: reward must be a number, not {_type_name(reward)}", field="reward", line=line)
    done = record.get("done", _NO_VALUE)
    if not isinstance(done, bool):
        what = "is missing" if done is _NO_VALUE else f"must be a boolean, not {_type_name(done)}"
        raise IngestError(f"{where}: done {what}", field="done", line=line)
    for key in ("messages", "tool_trace"):
        if record.get(key) is not None and not isinstance(record[key], list):
            raise IngestError(f"{where}: {key} must be a list, not {_type_name(record[key])}", field=key, line=line)
    messages = record.get("messages") or []
    tool_trace = record.get("tool_trace")
    metrics = _object_field(record, "metrics", where, line)
    verify_metrics = _object_field(record, "verify_metrics", where, line)
    _object_field(record, "artifacts", where, line)
    extra = _object_field(record, "extra", where, line)
    task = record.get("task")

    # Steps: the environment's own state.step_count (StepEnvSessionAdapter's default verify puts it in
    # verify_metrics), else one step per tool call (the trace, the harness's metrics.tool_calls, the tool
    # messages of the transcript).
    step_count = verify_metrics.get("step_count")
    if step_count is not None and not _count(step_count):
        raise IngestError(f"{where}: verify_metrics.step_count must be a non-negative integer, not {step_count!r}",
                          field="verify_metrics.step_count", line=line)
    if step_count is not None:
        steps: int | None = step_count
    elif isinstance(tool_trace, list):
        steps = len(tool_trace)
    elif _count(metrics.get("tool_calls")):
        steps = metrics["tool_calls"]
    elif messages:
        steps = sum(1 for m in messages if isinstance(m, dict) and m.get("role") == "tool")
    else:
        steps = None

    success = None
    for source in (verify_metrics, metrics):
        if isinstance(source.get(SUCCESS_KEY), bool):
            success = source[SUCCESS_KEY]
            break

    seeds = [(name, holder.get("seed")) for name, holder in (("extra", extra), ("task", task))
             if isinstance(holder, dict) and _is_int(holder.get("seed")) and 0 <= holder["seed"] <= MAX_SEED]
    if len(seeds) == 2 and seeds[0][1] != seeds[1][1]:
        raise IngestError(f"{where}: extra.seed ({seeds[0][1]}) and task.seed ({seeds[1][1]}) disagree",
                          field="extra.seed", line=line)
    seed = seeds[0][1] if seeds else None

    trace = tool_trace if isinstance(tool_trace, list) else []
    results = [entry.get("result") for entry in trace if isinstance(entry, dict)]
    invalid = sum(1 for result in results if isinstance(result, dict) and result.get("error"))
    # The harness also sets done when the model answers without a tool call: the environment did not end it.
    model_stopped = done and isinstance(tool_trace, list) and not (
        results and isinstance(results[-1], dict) and results[-1].get("done") is True)
    episode = EpisodeResult(
        seed=seed, reward=float(reward), steps=steps or 0, ended=DONE if done else STEP_BOUND,
        success=success, invalid_actions=invalid, episode_id=episode_id,
    )
    return episode, steps is not None, model_stopped


def read_collect_dataset(results_jsonl: bytes, metadata_json: bytes, *, max_episodes: int,
                         max_bytes: int) -> CollectedDataset:
    """Read an ``openenv collect`` dataset (results.jsonl + metadata.json), strictly.

    Each non-blank line of results.jsonl must be a JSON object with a string `episode_id` (unique in the file),
    a finite numeric `reward` and a boolean `done` (openenv/core/harness/collect.py, ``EpisodeRecord``); the
    optional fields must have their EpisodeRecord types. NaN, Infinity, a repeated key, bytes that are not
    UTF-8, more than `max_episodes` episodes or more than `max_bytes` bytes: IngestError with the line number.

    Per episode: `reward` is the record's (collect's last environment reward, not a sum of step rewards);
    `done` true is DONE, false is STEP_BOUND (collect stops at --max-turns); `steps` is
    verify_metrics.step_count, else the tool calls (tool_trace, metrics.tool_calls, tool messages), else 0 with
    a note; `success` is a boolean verify_metrics.success or metrics.success, else None; `seed` is extra.seed
    or task.seed when an integer (collect records none of its own); `invalid_actions` counts tool calls whose
    result carries an error.
    """
    if max_episodes < 1 or max_bytes < 1:
        raise ValueError("max_episodes and max_bytes must be positive")
    if len(results_jsonl) > max_bytes:
        raise IngestError(f"results.jsonl is {len(results_jsonl)} bytes; at most {max_bytes} are accepted")
    metadata = _read_metadata(metadata_json, max_bytes=max_bytes)
    text = _decode(results_jsonl, "results.jsonl")
    episodes: list[EpisodeResult] = []
    seen: dict[str, int] = {}
    uncounted, model_stopped = 0, 0
    for number, raw in enumerate(text.split("\n"), start=1):
        if not raw.strip():
            continue  # blank lines, as openenv's own reader skips them
        where = f"results.jsonl line {number}"
        if len(episodes) >= max_episodes:
            raise IngestError(f"{where}: more than {max_episodes} episodes; at most {max_episodes} are accepted",
                              line=number)
        record = _parse_json(raw, where, line=number)
        if not isinstance(record, dict):
            raise IngestError(f"{where}: expected a JSON object, not {_type_name(record)}", line=number)
        episode, counted, stopped = _collected_episode(record, where, number)
        if episode.episode_id in seen:
            raise IngestError(f"{where}: episode_id {episode.episode_id!r} already appeared on line "
                              f"{seen[episode.episode_id]}", field="episode_id", line=number)
        seen[episode.episode_id] = number
        uncounted += not counted
        model_stopped += stopped
        episodes.append(episode)
    if not episodes:
        raise IngestError("results.jsonl has no episodes")
    return CollectedDataset(episodes, metadata, _collect_notes(episodes, metadata, uncounted, model_stopped))


def _collect_notes(episodes: list[EpisodeResult], meta: CollectMetadata, uncounted: int,
                   model_stopped: int) -> list[str]:
    n = len(episodes)
    notes = ["Imported from an openenv collect dataset: each reward is the last reward the environment reported "
             "in the episode, not a sum of step rewards; no wall time was recorded."]
    if meta.keep_losses is not True:
        said = "keep_losses false" if meta.keep_losses is False else "keep_losses not recorded"
        notes.append(f"openenv collect keeps only episodes with reward >= 0 unless --keep-losses ({said}): "
                     "episodes with a negative reward may be missing, which biases the mean upward.")
    requested = meta.num_episodes_requested
    if requested is not None and n < requested:
        notes.append(f"{n} of the {requested} requested episodes are in the dataset: openenv collect writes no line "
                     "for an episode that failed or was dropped.")
    elif requested is not None and n > requested:
        notes.append(f"{n} episodes but {requested} requested: results.jsonl holds more than one run "
                     "(collect appends, and metadata.json describes the last run only).")
    if uncounted:
        notes.append(f"{uncounted} of {n} episodes say nothing countable about their steps (recorded as 0).")
    if model_stopped:
        notes.append(f"{model_stopped} of {n} episodes are marked done because the model stopped calling tools, "
                     "not because the environment ended them.")
    if all(e.seed is None for e in episodes):
        notes.append("No episode records its seed: the episodes cannot be replayed.")
    return notes


# --- which environment a dataset was collected against ------------------------------------------------------------


@dataclass(frozen=True)
class EnvironmentCandidate:
    """An environment a dataset may belong to: its Space's repo id and host (SpaceFacts has both fields)."""

    repo_id: str
    host: str


@dataclass(frozen=True)
class EnvironmentMatch:
    repo_id: str
    matched_by: str  # "env_base_url" or "mapping"
    detail: str  # one sentence for the row


def normalize_base_url(url: str) -> str | None:
    """An env server URL reduced to what identifies the server: host (lower case, no trailing dot), port when not
    the scheme's default, and path without trailing slashes or the `/web` UI suffix. http, https, ws and wss are
    one scheme for this purpose. None when it is not such a URL."""
    if not isinstance(url, str):
        return None
    try:
        parts = urlsplit(url.strip())
        port = parts.port
    except ValueError:
        return None
    scheme = parts.scheme.lower()
    if scheme not in ("http", "https", "ws", "wss"):
        return None
    host = (parts.hostname or "").rstrip(".").lower()
    if not host:
        return None
    default = 443 if scheme in ("https", "wss") else 80
    netloc = host if port in (None, default) else f"{host}:{port}"
    path = parts.path.rstrip("/")
    if path.endswith("/web"):
        path = path[: -len("/web")].rstrip("/")
    return netloc + path


def match_environment(metadata: CollectMetadata, *, mapping: str | None,
                      candidates: Iterable[Any]) -> EnvironmentMatch:
    """The environment a collect dataset was played against.

    `candidates` are the environments the hub knows, as anything with `repo_id` and `host` (SpaceFacts,
    EnvironmentCandidate; the host is the Space's ``https://<subdomain>.hf.space``). The dataset's
    `env_base_url` is compared with each host after `normalize_base_url`; `mapping` ("owner/name", given by
    whoever imports the dataset) names the environment outright and wins over the URL, unless the URL is the
    host of a different environment. No match, more than one, a mapping the hub does not know, or a mapping
    the URL contradicts: IngestError.
    """
    by_id: dict[str, str] = {}
    by_host: dict[str, list[str]] = {}
    for candidate in candidates:
        repo_id, host = getattr(candidate, "repo_id", None), getattr(candidate, "host", None)
        if not isinstance(repo_id, str) or repo_id.lower() in by_id:
            continue
        by_id[repo_id.lower()] = repo_id
        key = normalize_base_url(host) if host else None
        if key is not None:
            by_host.setdefault(key, []).append(repo_id)
    url = metadata.env_base_url
    key = normalize_base_url(url)
    by_url = sorted(by_host.get(key, [])) if key is not None else []
    if mapping is not None:
        if not isinstance(mapping, str) or not _REPO_ID.fullmatch(mapping):
            raise IngestError(f"the mapping {mapping!r} is not a repo id (owner/name)", field="mapping")
        repo_id = by_id.get(mapping.lower())
        if repo_id is None:
            raise IngestError(f"the mapping names {mapping}, which is not an environment the hub knows",
                              field="mapping")
        others = [r for r in by_url if r != repo_id]
        if others and repo_id not in by_url:
            raise IngestError(f"env_base_url {url!r} is the host of {', '.join(others)}, but the mapping names "
                              f"{repo_id}; correct one of them", field="mapping")
        return EnvironmentMatch(repo_id, "mapping", f"named {repo_id} when imported (env_base_url {url!r})")
    if key is None:
        raise IngestError(f"env_base_url {url!r} is not an http(s) URL; name the environment (owner/name) "
                          "when importing", field="env_base_url")
    if not by_url:
        raise IngestError(f"env_base_url {url!r} is not the host of any environment the hub knows; name the "
                          "environment (owner/name) when importing", field="env_base_url")
    if len(by_url) > 1:
        raise IngestError(f"env_base_url {url!r} is the host of more than one environment ({', '.join(by_url)}); "
                          "name the environment (owner/name) when importing", field="env_base_url")
    return EnvironmentMatch(by_url[0], "env_base_url", f"env_base_url {url!r} is the host of {by_url[0]}")


# --- self-reported submissions ------------------------------------------------------------------------------------


@dataclass(frozen=True)
class SubmittedAgent:
    name: str
    kind: str  # "model" or "policy"
    revision: str = ""  # a model's revision, when given


@dataclass
class SubmittedEpisode:
    """One submitted episode as submitted: what the submitter did not say stays None."""

    reward: float
    seed: int | None = None
    steps: int | None = None
    success: bool | None = None
    wall_s: float | None = None
    episode_id: str = ""
    ended: str | None = None

    def to_result(self) -> EpisodeResult:
        return EpisodeResult(
            seed=self.seed, reward=self.reward, steps=self.steps or 0, ended=self.ended or DONE,
            wall_s=self.wall_s or 0.0, success=self.success, episode_id=self.episode_id,
        )


@dataclass
class Submission:
    """A self-reported evaluation: OpenEnv's EvalResult fields, and what the hub requires besides.

    `revision` is as submitted (a sha or a prefix, lower case): the caller resolves it. `scores` is kept as
    submitted; its aggregates have been checked against the episodes, never used instead of them.
    """

    harness_name: str
    harness_version: str
    library_versions: dict[str, str]
    dataset: str
    eval_parameters: dict[str, Any]
    scores: dict[str, Any]
    revision: str
    agent: SubmittedAgent
    episodes: list[SubmittedEpisode]
    idempotency_key: str
    notes: list[str] = field(default_factory=list)

    def results(self) -> list[EpisodeResult]:
        return [episode.to_result() for episode in self.episodes]

    def played(self) -> PlayedEvaluation:
        versions = self.library_versions
        return PlayedEvaluation(
            agent=self.agent.name, agent_kind=self.agent.kind, harness=self.harness_name,
            harness_version=self.harness_version,
            client_version=versions.get("openenv") or versions.get("openenv-core") or "",
            episodes=self.results(), agent_revision=self.agent.revision, notes=list(self.notes),
        )


def _object(value: Any, where: str, allowed: Sequence[str] | None = None) -> dict:
    if value is _NO_VALUE:
        raise IngestError(f"{where} is missing", field=where)
    if not isinstance(value, dict):
        raise IngestError(f"{where} must be an object, not {_type_name(value)}", field=where)
    if allowed is not None:
        unknown = sorted(k for k in value if k not in allowed)
        if unknown:
            raise IngestError(f"{where} has unknown field(s) {', '.join(map(repr, unknown))}; accepted: "
                              f"{', '.join(allowed)}", field=f"{where}.{unknown[0]}")
    return value


def _optional_number(value: Any, where: str, *, low: float, high: float, integer: bool = False) -> Any:
    if value is None:
        return None
    ok = _is_int(value) if integer else _is_number(value)
    if not ok or not low <= value <= high:
        kind = "an integer" if integer else "a number"
        raise IngestError(f"{where} must be {kind} from {low} to {high} or null, not {value!r}", field=where)
    return value if integer else float(value)


def _submitted_episode(raw: Any, where: str) -> SubmittedEpisode:
    item = _object(raw, where, EPISODE_FIELDS)
    reward = item.get("reward", _NO_VALUE)
    if reward is _NO_VALUE:
        raise IngestError(f"{where}.reward is missing", field=f"{where}.reward")
    if not _is_number(reward):
        raise IngestError(f"{where}.reward must be a number, not {_type_name(reward)}", field=f"{where}.reward")
    success = item.get("success")
    if success is not None and not isinstance(success, bool):
        raise IngestError(f"{where}.success must be a boolean or null, not {_type_name(success)}",
                          field=f"{where}.success")
    ended = item.get("ended")
    if ended is not None and ended not in ENDINGS:
        raise IngestError(f"{where}.ended must be one of {', '.join(ENDINGS)}, not {ended!r}",
                          field=f"{where}.ended")
    return SubmittedEpisode(
        reward=float(reward),
        seed=_optional_number(item.get("seed"), f"{where}.seed", low=0, high=MAX_SEED, integer=True),
        steps=_optional_number(item.get("steps"), f"{where}.steps", low=0, high=MAX_STEPS, integer=True),
        success=success,
        wall_s=_optional_number(item.get("wall_s"), f"{where}.wall_s", low=0, high=MAX_WALL_S),
        episode_id=_text(item.get("episode_id"), f"{where}.episode_id", cap=MAX_EPISODE_ID, required=False) or "",
        ended=ended,
    )


def _declared_count(value: Any, where: str) -> int:
    if _is_number(value) and float(value).is_integer() and value >= 0:
        return int(value)
    raise IngestError(f"{where} must be a whole number of episodes, not {value!r}", field=where)


def _computed_aggregates(episodes: list[SubmittedEpisode]) -> dict[str, list[tuple[float, str]]]:
    """Each checked aggregate's acceptable values from the episodes, with how each was computed."""
    rewards = [e.reward for e in episodes]
    n = len(rewards)
    mean = math.fsum(rewards) / n
    ordered = sorted(rewards)
    median = ordered[n // 2] if n % 2 else (ordered[n // 2 - 1] + ordered[n // 2]) / 2
    squares = math.fsum((r - mean) ** 2 for r in rewards)
    stds = [(math.sqrt(squares / n), "population")]
    if n > 1:
        stds.insert(0, (math.sqrt(squares / (n - 1)), "sample"))
    positive = sum(1 for r in rewards if r > 0)
    rates = [(positive / n, f"{positive} of {n} episodes have reward > 0")]
    if all(e.success is not None for e in episodes):
        won = sum(1 for e in episodes if e.success)
        rates.insert(0, (won / n, f"{won} of {n} episodes succeeded"))
    return {
        "mean": [(mean, f"the mean reward of the {n} episodes")],
        "sum": [(math.fsum(rewards), f"the sum of the {n} episodes' rewards")],
        "min": [(ordered[0], f"the lowest of the {n} episodes' rewards")],
        "max": [(ordered[-1], f"the highest of the {n} episodes' rewards")],
        "median": [(median, f"the median of the {n} episodes' rewards")],
        "std": [(s, f"the {how} standard deviation of the {n} rewards") for s, how in stds],
        "sem": [(s / math.sqrt(n), f"the standard error from the {how} standard deviation of the {n} rewards")
                for s, how in stds],
        "success_rate": rates,
    }


def _check_scores(scores: dict, episodes: list[SubmittedEpisode]) -> list[str]:
    """Refuse a submitted aggregate the episodes contradict; return the score keys left unchecked."""
    computed = _computed_aggregates(episodes)
    checked = set(EPISODE_COUNT_SCORES)
    for stat, keys in AGGREGATE_KEYS.items():
        for key in keys:
            if key not in scores:
                continue
            checked.add(key)
            value, where = scores[key], f"scores.{key}"
            if value is None:
                continue  # no claim (what a tool writes for the spread of one episode)
            if not _is_number(value):
                raise IngestError(f"{where} must be a number, not {_type_name(value)}", field=where)
            options = computed[stat]
            if any(math.isclose(value, v, rel_tol=AGGREGATE_TOLERANCE, abs_tol=AGGREGATE_TOLERANCE)
                   for v, _ in options):
                continue
            said = " or ".join(f"{v:.6g} ({how})" for v, how in options)
            raise IngestError(f"{where} is {value!r} but the episodes give {said}; they disagree by more than "
                              f"the tolerance {AGGREGATE_TOLERANCE:g} (absolute or relative)", field=where)
    return sorted(k for k in scores if k not in checked)


def read_submission(payload: dict, *, max_episodes: int) -> Submission:
    """Read a self-reported evaluation, strictly. The accepted shape (every field required unless marked)::

        {"config": {"harness_name": str, "harness_version": str, "library_versions": {str: str},
                    "dataset": str, "eval_parameters": {...}},          # OpenEnv's EvalConfig, no other keys
         "scores": {...},                                              # OpenEnv's EvalResult.scores
         "revision": "<hex sha or unique prefix, 7-64>",
         "agent": {"name": str, "kind": "model"|"policy", "revision"?: str},
         "episodes": [{"reward": number, "seed"?: int, "steps"?: int, "success"?: bool,
                       "wall_s"?: number, "episode_id"?: str, "ended"?: "done"|"step_bound"|...}],
         "idempotency_key": "<8-128 of A-Z a-z 0-9 . _ : ->"}

    Refused, with the field named: unknown or missing fields, wrong types, strings too long, NaN or infinity
    anywhere, more than `max_episodes` episodes, repeated episode ids, an episode count that differs from
    eval_parameters.num_episodes / n_episodes or from scores.num_episodes / n_episodes / count / n, and a
    submitted aggregate (mean, sum, min, max, median, std, sem, success_rate under the names in
    AGGREGATE_KEYS) that the episodes contradict beyond AGGREGATE_TOLERANCE.
    """
    if max_episodes < 1:
        raise ValueError("max_episodes must be positive")
    top = _object(payload, "the submission", SUBMISSION_FIELDS)
    problem = _scan(top, "")
    if problem is not None:
        path, what = problem
        raise IngestError(f"{path} {what}", field=path)
    missing = [k for k in SUBMISSION_FIELDS if k not in top]
    if missing:
        raise IngestError(f"{missing[0]} is missing (required: {', '.join(SUBMISSION_FIELDS)})", field=missing[0])

    config = _object(top["config"], "config", EVAL_CONFIG_FIELDS)
    for key in EVAL_CONFIG_FIELDS:
        if key not in config:
            raise IngestError(f"config.{key} is missing (OpenEnv's EvalConfig requires it)", field=f"config.{key}")
    harness_name = _text(config["harness_name"], "config.harness_name", cap=MAX_NAME)
    harness_version = _text(config["harness_version"], "config.harness_version", cap=MAX_VERSION)
    dataset = _text(config["dataset"], "config.dataset", cap=MAX_TEXT, empty=True)
    versions = _object(config["library_versions"], "config.library_versions")
    if len(versions) > 100:
        raise IngestError("config.library_versions names more than 100 libraries", field="config.library_versions")
    for name, version in versions.items():
        _text(name, "config.library_versions: a library name", cap=MAX_VERSION)
        _text(version, f"config.library_versions.{name}", cap=MAX_VERSION)
    parameters = _object(config["eval_parameters"], "config.eval_parameters")
    _bounded_json(parameters, "config.eval_parameters")
    scores = _object(top["scores"], "scores")
    _bounded_json(scores, "scores")
    for key in scores:
        _text(key, "scores: a score name", cap=MAX_VERSION)

    revision = _text(top["revision"], "revision", cap=64).lower()
    if not _REVISION.fullmatch(revision):
        raise IngestError(f"revision must be a hex commit sha or a prefix of one (7 to 64 characters), not "
                          f"{top['revision']!r}", field="revision")
    agent_raw = _object(top["agent"], "agent", AGENT_FIELDS)
    agent_name = _text(agent_raw.get("name", _NO_VALUE), "agent.name", cap=MAX_NAME)
    kind = agent_raw.get("kind", _NO_VALUE)
    if kind not in AGENT_KINDS:
        raise IngestError("agent.kind is missing" if kind is _NO_VALUE else
                          f"agent.kind must be one of {', '.join(AGENT_KINDS)}, not {kind!r}", field="agent.kind")
    agent_revision = _text(agent_raw.get("revision"), "agent.revision", cap=MAX_VERSION, required=False) or ""
    key = _text(top["idempotency_key"], "idempotency_key", cap=128)
    if not _IDEMPOTENCY_KEY.fullmatch(key):
        raise IngestError("idempotency_key must be 8 to 128 characters of A-Z, a-z, 0-9, '.', '_', ':' and '-', "
                          "starting with a letter or digit", field="idempotency_key")

    raw_episodes = top["episodes"]
    if not isinstance(raw_episodes, list):
        raise IngestError(f"episodes must be a list, not {_type_name(raw_episodes)}", field="episodes")
    if not raw_episodes:
        raise IngestError("episodes is empty: the hub computes every result from the episodes", field="episodes")
    if len(raw_episodes) > max_episodes:
        raise IngestError(f"episodes has {len(raw_episodes)} episodes; at most {max_episodes} are accepted",
                          field="episodes")
    episodes = [_submitted_episode(raw, f"episodes[{i}]") for i, raw in enumerate(raw_episodes)]
    first: dict[str, int] = {}
    for index, episode in enumerate(episodes):
        if episode.episode_id and episode.episode_id in first:
            raise IngestError(f"episodes[{index}].episode_id {episode.episode_id!r} repeats "
                              f"episodes[{first[episode.episode_id]}]", field=f"episodes[{index}].episode_id")
        first.setdefault(episode.episode_id, index)

    n = len(episodes)
    for source, names, holder in (("config.eval_parameters", EPISODE_COUNT_PARAMETERS, parameters),
                                  ("scores", EPISODE_COUNT_SCORES, scores)):
        for name in names:
            if name in holder:
                declared = _declared_count(holder[name], f"{source}.{name}")
                if declared != n:
                    raise IngestError(f"{source}.{name} says {declared} episodes but {n} were submitted",
                                      field=f"{source}.{name}")
    unchecked = _check_scores(scores, episodes)

    notes = ["Self-reported: the hub did not watch these episodes being played."]
    if unchecked:
        notes.append(f"Submitted scores not checked against the episodes: {', '.join(unchecked)}.")
    unknown_steps = sum(1 for e in episodes if e.steps is None)
    if unknown_steps:
        notes.append(f"{unknown_steps} of {n} episodes do not say how many steps they took (recorded as 0).")
    unknown_end = sum(1 for e in episodes if e.ended is None)
    if unknown_end:
        notes.append(f"{unknown_end} of {n} episodes do not say how they ended (recorded as done).")
    return Submission(
        harness_name=harness_name, harness_version=harness_version, library_versions=dict(versions),
        dataset=dataset, eval_parameters=parameters, scores=scores, revision=revision,
        agent=SubmittedAgent(agent_name, kind, agent_revision), episodes=episodes, idempotency_key=key, notes=notes,
    )


def check_reward_range(episodes: Sequence[Any], low: float, high: float) -> None:
    """Refuse an episode whose reward the environment could not have given.

    `low`/`high` is the environment's declared per-step reward range (its manifest's validation.reward.range;
    OpenEnv's validator defaults to [0, 1]). An episode's reward, the sum of at most `steps` step rewards, must
    lie in [min(low, low·steps), max(high, high·steps)] when its steps are known (an int; a SubmittedEpisode's
    None is unknown), else in [low, high]. `episodes` are SubmittedEpisode or EpisodeResult.
    """
    if not (_is_number(low) and _is_number(high) and math.isfinite(low) and math.isfinite(high) and low <= high):
        raise ValueError(f"the declared reward range [{low}, {high}] is not a finite interval")
    for index, episode in enumerate(episodes):
        steps = getattr(episode, "steps", None)
        if _is_int(steps) and steps >= 0:
            lo, hi = min(low, low * steps), max(high, high * steps)
            why = f"the declared per-step range [{low:g}, {high:g}] over {steps} steps"
        else:
            lo, hi = low, high
            why = "the declared per-step range (its steps are unknown)"
        reward = episode.reward
        if not (_is_number(reward) and math.isfinite(reward) and lo <= reward <= hi):
            name = f"episodes[{index}]"
            if getattr(episode, "episode_id", ""):
                name += f" ({episode.episode_id!r})"
            raise IngestError(f"{name}: reward {reward!r} is outside [{lo:g}, {hi:g}], {why}",
                              field=f"episodes[{index}].reward")
