"""Full syncs run one at a time, and concurrent writers count problems without losing any: real threads,
real database connections, the Hub stand-in over real HTTP."""

from __future__ import annotations

import threading
from datetime import timedelta

import pytest
from django.core.management import call_command
from django.db import connection
from django.utils import timezone

from registry import manifest as mf
from registry import services
from registry.models import Environment, IndexProblem, SyncRun
from tests.support.worker import wait_for

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.integration]


def _in_thread(fn, results: list) -> threading.Thread:
    def target():
        try:
            results.append(fn())
        finally:
            connection.close()

    thread = threading.Thread(target=target)
    thread.start()
    return thread


def test_a_second_full_sync_does_nothing_while_one_runs(corpus_stub, capsys):
    corpus_stub.inject("list", status=None, delay=1.5)  # the first sync is still reading the listing
    results: list = []
    first = _in_thread(services.hub_sync, results)
    running = wait_for(lambda: SyncRun.objects.filter(kind="hub", state="running").first(), what="a running sync")
    corpus_stub.reset_requests()
    second = services.hub_sync()
    assert second.skipped and second.run.pk == running.pk and "nothing was done" in str(second)
    assert corpus_stub.count() == 0  # the second one did not even list
    with pytest.raises(SystemExit) as exit_:
        call_command("sync_hub", "--hub-only")
    assert exit_.value.code == 1 and "skipped" in capsys.readouterr().out
    first.join(30)
    assert not results[0].skipped and results[0].run.found == 34 and results[0].run.state == "finished"
    assert services.hub_sync().run.unchanged == 34  # once it finished, the next one runs


def test_two_syncs_started_together_run_once(corpus_stub):
    corpus_stub.inject("list", status=None, delay=0.5, times=None)
    results: list = []
    barrier = threading.Barrier(2)

    def start():
        barrier.wait()
        return services.hub_sync()

    threads = [_in_thread(start, results) for _ in range(2)]
    for thread in threads:
        thread.join(60)
    assert sorted(r.skipped for r in results) == [False, True]
    assert SyncRun.objects.filter(kind="hub").count() == 1
    assert Environment.objects.count() == 34


def test_a_sync_whose_process_died_is_abandoned_and_the_next_one_runs(corpus_stub, settings):
    dead = SyncRun.objects.create(kind="hub", heartbeat_at=timezone.now() - timedelta(seconds=settings.HUB_SYNC_STALE_S + 1))
    summary = services.hub_sync()
    assert not summary.skipped and summary.run.found == 34
    dead.refresh_from_db()
    assert dead.state == "abandoned" and dead.finished_at is not None


def test_a_sync_presumed_dead_stops_writing_once_it_notices(corpus_stub, settings):
    settings.HUB_SYNC_HEARTBEAT_S = 0.05
    corpus_stub.inject("list", status=None, delay=1.0)
    results: list = []
    slow = _in_thread(services.hub_sync, results)
    run = wait_for(lambda: SyncRun.objects.filter(kind="hub", state="running").first(), what="a running sync")
    SyncRun.objects.filter(pk=run.pk).update(state="abandoned")  # what a starter does to a silent sync
    slow.join(30)
    run.refresh_from_db()
    assert run.state == "abandoned" and any("Stopped early" in m for m in run.messages)
    assert Environment.objects.count() == 0  # it indexed nothing after it noticed


def test_concurrent_writers_lose_no_occurrence(tiny_envs):
    env = tiny_envs
    problem = mf.Problem("local.unreadable", "Could not read it.")
    services.index_problem_record(environment=env, sha="", problem=problem)
    threads, per_thread = 4, 25
    barrier = threading.Barrier(threads)

    def record_many():
        barrier.wait()
        for _ in range(per_thread):
            services.index_problem_record(environment=env, sha="", problem=problem)

    workers = [_in_thread(record_many, []) for _ in range(threads)]
    for worker in workers:
        worker.join(60)
    assert IndexProblem.objects.get(environment=env, code="local.unreadable").occurrences == 1 + threads * per_thread
