"""The WebSocket episode player: one `/ws` session of an OpenEnv server, played by a policy and recorded.

An episode is reset → state → (step → state)* on one connection (PROTOCOL
§1.2). The actions come from a *policy*: a callable handed the `Episode`
recorded so far (`episode.last_observation` is what it acts on) that returns
the next action, the `data` of a step frame, or None to stop. The probe plays
its fixed action list through `fixed_actions`; evaluation episodes play a
random or a no-op policy; a determinism replay plays a recorded list again.

    episode = play_episode(client, fixed_actions([{"guess": 50}]),
                           reset_data={"seed": 7, "episode_id": "e1"}, deadline=time.monotonic() + 60)
    episode.steps_ok, episode.done, episode.failure

Invariants: nothing a server does raises out of here. A missing, late,
malformed or error reply ends the episode, and `Episode.failure` says which
frame got what; every wait is bounded by the caller's `budget` and the
episode's `deadline`. What the caller's own callables raise (`on_progress`,
the policy) propagates untouched, and the caller closes the session (a
`with` block does). The module knows nothing of checks, reports or Django:
the caller grades the returned `Episode`.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass, field
from typing import Any, Callable, Sequence

from .http import ProbeClient, WebSocketFailed, WsReply, WsSession
from .report import clip

WS_PATH = "/ws"
CAPACITY_WAIT_S = 10.0
CAPACITY_RETRY_S = 0.25

# Given the episode so far, the next action (the `data` of a step frame), or None to stop.
Policy = Callable[["Episode"], Any]
# Seconds allowed for the next operation when at most `limit` seconds are left
# (None: no extra limit); 0 or less means the caller's time is up.
Budget = Callable[[float | None], float]
# Called before every connection attempt and every frame: the caller's heartbeat and cancellation point.
Progress = Callable[[], None]


@dataclass
class Exchange:
    """One frame sent on /ws and what came back; `steps` = successful steps before it."""

    op: str
    label: str
    reply: WsReply
    steps: int
    at: float


@dataclass
class Episode:
    """Everything recorded on one /ws session."""

    reset_data: dict
    exchanges: list[Exchange] = field(default_factory=list)
    envelope_problems: list[str] = field(default_factory=list)
    failure: str | None = None  # what ended the episode, with what was sent (evidence)
    failure_short: str | None = None  # the same without the frame sent (skip reasons)
    usable: bool = False  # the session can still be talked to
    steps_ok: int = 0
    done: bool = False
    first_reset_at: float | None = None
    capacity_retries: int = 0

    def observations(self) -> list[Exchange]:
        """The reset and step exchanges that brought back an observation (a JSON object that is no error frame)."""
        return [
            e for e in self.exchanges
            if e.op in ("reset", "step") and not e.reply.problem and not e.reply.is_error_frame
            and isinstance(e.reply.data, dict)
        ]

    @property
    def last_observation(self) -> dict | None:
        """The `data` of the latest observation: {observation, reward, done, metadata?}; None before any."""
        observations = self.observations()
        return observations[-1].reply.data if observations else None


def fixed_actions(actions: Sequence[Any]) -> Policy:
    """The policy that plays `actions` in order and then stops (the probe's plan, a replay)."""
    actions = list(actions)

    def policy(episode: Episode) -> Any:
        # Any failed step ends the episode, so the successful steps count the actions already played.
        return actions[episode.steps_ok] if episode.steps_ok < len(actions) else None

    return policy


def _deadline_only(limit: float | None) -> float:
    return math.inf if limit is None else max(0.0, limit)


def _call(on_progress: Progress | None) -> None:
    if on_progress is not None:
        on_progress()


class EpisodeSession:
    """One /ws connection and the one episode played on it: `play`, then any extra `exchange`, then `close`.

    A caller that keeps it open keeps every other client out of a stock server
    (one session at a time, PROTOCOL §1.2): close it, or use it in a `with` block.
    """

    def __init__(self, client: ProbeClient, *, budget: Budget | None = None):
        self.client = client
        self.budget: Budget = budget or _deadline_only
        self.episode: Episode | None = None
        self._ws: WsSession | None = None

    def __enter__(self) -> EpisodeSession:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def play(
        self,
        policy: Policy,
        *,
        reset_data: dict,
        deadline: float,
        state_after_step: bool = True,
        capacity_wait_s: float = CAPACITY_WAIT_S,
        on_progress: Progress | None = None,
    ) -> Episode:
        """Open /ws, reset with `reset_data`, ask for state, then step with what `policy` returns until it
        returns None, `done` comes back, a reply ends the episode or `deadline` (time.monotonic()) passes.

        `state_after_step` asks for state after every step too. While the
        server answers CAPACITY_REACHED, the reset is retried for up to
        `capacity_wait_s`. The episode is `self.episode` from the start, so a
        caller whose `on_progress` raised still finds what was recorded.
        """
        if self.episode is not None:
            raise RuntimeError("one episode per session: open another EpisodeSession")
        self.episode = Episode(reset_data=reset_data)
        reset = self._open(deadline, capacity_wait_s, on_progress)
        if reset is not None:
            self._play(policy, reset, deadline, state_after_step, on_progress)
        return self.episode

    def exchange(
        self, op: str, label: str, frame: dict, *, deadline: float, on_progress: Progress | None = None,
    ) -> Exchange:
        """Send `frame` on the episode's session and record the answer as an Exchange of kind `op`."""
        episode = self.episode
        if episode is None:
            raise RuntimeError("exchange() needs an episode: call play() first")
        _call(on_progress)
        if self._ws is None:
            reply = WsReply(sent=frame, problem="the session is not open", fatal=True)
        else:
            reply = self._ws.exchange(frame, timeout_s=self.budget(deadline - time.monotonic()))
        record = Exchange(op=op, label=label, reply=reply, steps=episode.steps_ok, at=time.monotonic())
        episode.exchanges.append(record)
        if reply.fatal:
            episode.usable = False
        return record

    def answers_state(
        self, op: str, label: str, *, deadline: float, on_progress: Progress | None = None,
    ) -> tuple[Exchange, bool]:
        """Ask for state and say whether the session still answers with a state frame (after a refused frame)."""
        record = self.exchange(op, label, {"type": "state"}, deadline=deadline, on_progress=on_progress)
        frame = record.reply.frame
        return record, isinstance(frame, dict) and frame.get("type") == "state"

    def close(self) -> None:
        """Send the close frame and drop the socket; safe to call any number of times."""
        if self._ws is not None:
            self._ws.send_only({"type": "close"})
            self._ws.close()
            self._ws = None

    def _open(self, deadline: float, capacity_wait_s: float, on_progress: Progress | None) -> Exchange | None:
        """Open /ws and send reset, waiting while the server's single session slot is still taken."""
        episode = self.episode
        frame = {"type": "reset", "data": episode.reset_data}
        give_up = time.monotonic() + min(capacity_wait_s, self.budget(None))
        while True:
            _call(on_progress)
            try:
                self._ws = self.client.websocket(WS_PATH, open_timeout_s=self.budget(deadline - time.monotonic()))
            except WebSocketFailed as exc:
                episode.failure = episode.failure_short = str(exc)
                return None
            episode.usable = True
            record = self.exchange("reset", "reset", frame, deadline=deadline, on_progress=on_progress)
            if record.reply.error_code == "CAPACITY_REACHED" and time.monotonic() + CAPACITY_RETRY_S < give_up:
                episode.exchanges.pop()
                episode.capacity_retries += 1
                self.close()
                time.sleep(CAPACITY_RETRY_S)
                continue
            return record

    def _play(
        self, policy: Policy, reset: Exchange, deadline: float, state_after_step: bool, on_progress: Progress | None,
    ) -> None:
        episode = self.episode
        if self._ends(reset, {"type": "reset", "data": episode.reset_data}):
            return
        self._check_envelope(reset, "observation")
        if isinstance(reset.reply.data, dict):
            episode.first_reset_at = reset.at
            episode.done = reset.reply.data.get("done") is True
        if not self._state("state after reset", deadline, on_progress):
            return
        while not episode.done:
            action = policy(episode)
            if action is None:
                return
            if time.monotonic() >= deadline or self.budget(None) <= 0:
                episode.failure = episode.failure_short = f"the episode budget ran out after {episode.steps_ok} step(s)"
                return
            index = episode.steps_ok + 1
            frame = {"type": "step", "data": action}
            record = self.exchange("step", f"step {index}", frame, deadline=deadline, on_progress=on_progress)
            if self._ends(record, frame):
                if episode.usable:
                    _, alive = self.answers_state("state_after_error", "state after the failed step",
                                                  deadline=deadline, on_progress=on_progress)
                    episode.failure += "; the session still answers state" if alive else "; the session no longer answers"
                    episode.usable = alive
                return
            self._check_envelope(record, "observation")
            episode.steps_ok += 1
            data = record.reply.data if isinstance(record.reply.data, dict) else {}
            episode.done = data.get("done") is True
            if state_after_step and not self._state(f"state after step {index}", deadline, on_progress):
                return

    def _state(self, label: str, deadline: float, on_progress: Progress | None) -> bool:
        frame = {"type": "state"}
        record = self.exchange("state", label, frame, deadline=deadline, on_progress=on_progress)
        if self._ends(record, frame):
            return False
        self._check_envelope(record, "state")
        return True

    def _ends(self, record: Exchange, sent: Any) -> bool:
        """Whether a reply ends the episode (no reply, not JSON, an error frame); records why."""
        reply = record.reply
        if reply.problem:
            what = reply.problem
        elif reply.is_error_frame:
            data = reply.data if isinstance(reply.data, dict) else {}
            what = f"error frame {reply.error_code or '?'}: {clip(data.get('message', ''), 120)}"
        else:
            return False
        self.episode.failure = f"{record.label} (sent {clip(sent, 100)}): {what}"
        self.episode.failure_short = f"{record.label}: {clip(what, 80)}"
        return True

    def _check_envelope(self, record: Exchange, expected: str) -> None:
        """Record a reply that is not {"type": expected, "data": {...}}, each problem once per kind of frame."""
        frame = record.reply.frame
        problems = []
        if not isinstance(frame, dict):
            problems.append(f"reply is not an object: {record.reply.describe(80)}")
        else:
            if frame.get("type") != expected:
                problems.append(f"reply type {frame.get('type')!r}, expected {expected!r}")
            if not isinstance(frame.get("data"), dict):
                problems.append("reply data is not an object")
        for problem in problems:
            line = f"{record.op}: {problem}"
            if line not in self.episode.envelope_problems:
                self.episode.envelope_problems.append(line)


def play_episode(
    client: ProbeClient,
    policy: Policy,
    *,
    reset_data: dict,
    deadline: float,
    budget: Budget | None = None,
    state_after_step: bool = True,
    capacity_wait_s: float = CAPACITY_WAIT_S,
    on_progress: Progress | None = None,
) -> Episode:
    """Play one episode on a session of its own and close it, whatever happens; see `EpisodeSession.play`."""
    with EpisodeSession(client, budget=budget) as session:
        return session.play(
            policy, reset_data=reset_data, deadline=deadline, state_after_step=state_after_step,
            capacity_wait_s=capacity_wait_s, on_progress=on_progress,
        )
