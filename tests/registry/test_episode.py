"""The /ws episode player's interface: policies, budgets, the progress hook, extra frames, closing.

The pure parts (the fixed-actions adapter, what an Episode exposes, refusals
before any socket) need nothing; the rest plays the real example servers
(`examples/envs/guess_number`, `examples/envs/echo_env`), each started once
for the module. Both allow one /ws session at a time, so every test closes
what it opens.
"""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest

from registry.conformance.episode import Episode, EpisodeSession, Exchange, fixed_actions, play_episode
from registry.conformance.http import ProbeClient, WsReply
from tests.support.envserver import EnvServer

EXAMPLES = Path(__file__).resolve().parents[2] / "examples" / "envs"
ALLOWED = ("127.0.0.1",)
# guess_number's own probe plan: seed 7 hides 42, found by the fifth guess.
PLAN = json.loads((EXAMPLES / "guess_number" / "validation" / "runtime.json").read_text())
PLAN_RESET = {"seed": PLAN["reset"]["seed"], "episode_id": PLAN["reset"]["episode_id"]}


def deadline(seconds: float = 30.0) -> float:
    return time.monotonic() + seconds


def rewards(episode: Episode) -> list:
    return [e.reply.data["reward"] for e in episode.observations()]


def ops(episode: Episode) -> list[str]:
    return [e.op for e in episode.exchanges]


# --------------------------------------------------------------------------- #
# Without a server
# --------------------------------------------------------------------------- #


def test_fixed_actions_plays_the_list_in_order_then_stops():
    policy = fixed_actions([{"guess": 1}, {"guess": 2}])
    assert [policy(Episode(reset_data={}, steps_ok=n)) for n in range(3)] == [{"guess": 1}, {"guess": 2}, None]
    assert fixed_actions([])(Episode(reset_data={})) is None


def test_last_observation_is_the_latest_reset_or_step_observation():
    def exchange(op, frame, problem=None):
        return Exchange(op=op, label=op, reply=WsReply(sent={}, frame=frame, problem=problem), steps=0, at=0.0)

    episode = Episode(reset_data={})
    assert episode.last_observation is None
    episode.exchanges += [
        exchange("reset", {"type": "observation", "data": {"observation": {"n": 0}, "reward": None, "done": False}}),
        exchange("state", {"type": "state", "data": {"step_count": 0}}),
        exchange("step", {"type": "observation", "data": {"observation": {"n": 1}, "reward": 0.5, "done": False}}),
        exchange("step", {"type": "error", "data": {"code": "VALIDATION_ERROR"}}),
        exchange("step", None, problem="no reply within 1.0 s"),
    ]
    assert [e.reply.data["observation"]["n"] for e in episode.observations()] == [0, 1]
    assert episode.last_observation == {"observation": {"n": 1}, "reward": 0.5, "done": False}


def test_no_time_left_ends_the_episode_before_any_connection():
    calls = []
    client = ProbeClient("http://127.0.0.1:9", allowed_hosts=ALLOWED)  # nothing listens: nothing must try
    episode = play_episode(client, fixed_actions([{}]), reset_data={}, deadline=time.monotonic(),
                           on_progress=lambda: calls.append("progress"))
    assert episode.failure == episode.failure_short == "WebSocket /ws: no time left to connect"
    assert episode.exchanges == [] and not episode.usable and episode.first_reset_at is None
    assert calls == ["progress"]


def test_a_session_holds_one_episode_and_needs_it_before_any_frame():
    session = EpisodeSession(ProbeClient("http://127.0.0.1:9", allowed_hosts=ALLOWED))
    with pytest.raises(RuntimeError):
        session.exchange("state", "state", {"type": "state"}, deadline=deadline())
    session.play(fixed_actions([]), reset_data={}, deadline=time.monotonic())
    with pytest.raises(RuntimeError):
        session.play(fixed_actions([]), reset_data={}, deadline=deadline())
    session.close()


# --------------------------------------------------------------------------- #
# Against real OpenEnv servers
# --------------------------------------------------------------------------- #


@pytest.fixture(scope="module")
def servers(openenv_python):
    """guess_number and echo_env served on loopback, booted side by side; name -> ProbeClient."""
    started = {name: EnvServer(EXAMPLES / name, python=openenv_python).start() for name in ("guess_number", "echo_env")}
    try:
        for server in started.values():
            server.wait_ready()
        yield {name: ProbeClient(server.base_url, allowed_hosts=ALLOWED) for name, server in started.items()}
    finally:
        for server in started.values():
            server.request_stop()
        for server in started.values():
            server.stop()


class Bisect:
    """A policy that reads each observation's feedback: binary search for guess_number's secret."""

    def __init__(self):
        self.low, self.high, self.guess = 1, 100, None
        self.seen: list[str] = []

    def __call__(self, episode: Episode) -> dict:
        feedback = episode.last_observation["observation"]["feedback"]
        self.seen.append(feedback)
        if feedback == "higher":
            self.low = self.guess + 1
        elif feedback == "lower":
            self.high = self.guess - 1
        self.guess = (self.low + self.high) // 2
        return {"guess": self.guess}


@pytest.mark.integration
def test_a_policy_plays_from_the_observations_until_done(servers):
    policy = Bisect()
    episode = play_episode(servers["guess_number"], policy, reset_data=PLAN_RESET, deadline=deadline())
    assert episode.failure is None and episode.envelope_problems == []
    assert episode.done and episode.first_reset_at is not None
    assert episode.last_observation["observation"]["feedback"] == "correct" and policy.guess == 42
    assert rewards(episode) == [None, *[0.0] * (episode.steps_ok - 1), 1.0]
    assert policy.seen[0] == "start" and len(policy.seen) == episode.steps_ok  # not asked again once done
    assert ops(episode) == ["reset", "state", *["step", "state"] * episode.steps_ok]
    states = [e for e in episode.exchanges if e.op == "state"]
    assert [e.reply.data["step_count"] for e in states] == [e.steps for e in states] == list(range(episode.steps_ok + 1))
    assert {e.reply.data["episode_id"] for e in states} == {PLAN["reset"]["episode_id"]}


@pytest.mark.integration
def test_a_policy_returning_none_stops_and_the_session_takes_more_frames(servers):
    echoes = iter([{"message": "hi"}, {"message": "there"}])
    with EpisodeSession(servers["echo_env"]) as session:
        episode = session.play(lambda episode: next(echoes, None), reset_data={"episode_id": "e1"}, deadline=deadline())
        assert episode.failure is None and episode.usable
        assert episode.steps_ok == 2 and not episode.done  # echo_env never ends an episode by itself
        assert [e.reply.data["observation"]["echoed_message"] for e in episode.observations()][1:] == ["hi", "there"]
        assert ops(episode) == ["reset", "state", "step", "state", "step", "state"]

        invalid = session.exchange("invalid", "invalid action", {"type": "step", "data": {}}, deadline=deadline(5))
        after, alive = session.answers_state("state_after_invalid", "state after", deadline=deadline(5))
    assert invalid.reply.error_code == "VALIDATION_ERROR" and invalid.steps == 2
    assert alive and after.reply.data["step_count"] == 2
    assert ops(episode)[-2:] == ["invalid", "state_after_invalid"]


@pytest.mark.integration
def test_a_replay_without_states_gives_the_same_rewards(servers):
    played = [
        play_episode(servers["guess_number"], fixed_actions(PLAN["actions"]), reset_data=PLAN_RESET,
                     deadline=deadline(), state_after_step=False)
        for _ in range(2)
    ]
    for episode in played:
        assert episode.failure is None and episode.done and episode.steps_ok == len(PLAN["actions"])
        assert ops(episode) == ["reset", "state", *["step"] * len(PLAN["actions"])]
    assert rewards(played[0]) == rewards(played[1]) == [None, 0.0, 0.0, 0.0, 0.0, 1.0]


@pytest.mark.integration
def test_what_on_progress_raises_propagates_untouched_and_the_session_is_given_back(servers):
    class Stop(BaseException):
        pass

    stop, calls = Stop("third frame"), []

    def on_progress():
        calls.append(len(calls))
        if len(calls) == 3:
            raise stop

    with pytest.raises(Stop) as raised:
        play_episode(servers["guess_number"], fixed_actions(PLAN["actions"]), reset_data=PLAN_RESET,
                     deadline=deadline(), on_progress=on_progress)
    assert raised.value is stop and calls == [0, 1, 2]  # open, reset, state after reset
    # The single session slot was given back: the next episode gets it.
    episode = play_episode(servers["guess_number"], fixed_actions(PLAN["actions"]), reset_data=PLAN_RESET,
                           deadline=deadline())
    assert episode.failure is None and episode.done


@pytest.mark.integration
def test_the_deadline_and_the_budget_end_the_episode_between_steps(servers):
    end = deadline(3)

    def slow(episode: Episode) -> dict:
        if episode.steps_ok == 1:
            time.sleep(max(0.0, end - time.monotonic()) + 0.05)
        return {"message": "x"}

    episode = play_episode(servers["echo_env"], slow, reset_data={}, deadline=end)
    assert episode.failure == episode.failure_short == "the episode budget ran out after 1 step(s)"
    assert episode.steps_ok == 1 and episode.usable

    limits = []

    def budget(limit):
        limits.append(limit)
        if limit is None:  # the caller's own clock, which runs out once a step was played
            return 0.0 if session.episode.steps_ok else 5.0
        return min(5.0, limit)

    with EpisodeSession(servers["echo_env"], budget=budget) as session:
        episode = session.play(fixed_actions([{"message": "a"}] * 3), reset_data={}, deadline=deadline())
    assert episode.failure == "the episode budget ran out after 1 step(s)"
    assert None in limits and all(limit is None or 0 < limit <= 30 for limit in limits)
