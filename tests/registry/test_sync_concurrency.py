"""A full sync reads the Hub on several threads: bounded, sharing one 429 gate, one bad Space stopping nothing.

These tests commit for real (transactional database): the sync's threads use their own connections, which
could not see a test transaction's uncommitted rows. Inside a transaction the sync works one item at a time.
"""

from __future__ import annotations

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

from registry import services
from registry.models import Environment, Revision
from tests.conftest import CORPUS_NAMES
from tests.support.hostile_spaces import HOSTILE

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.integration]


@pytest.fixture
def concurrent(settings):
    settings.HUB_SYNC_CONCURRENCY = 4
    settings.HUB_RETRY_BASE_S = 0.05
    return settings


def test_a_first_sync_reads_in_parallel_up_to_the_bound(corpus_stub, concurrent):
    corpus_stub.inject("resolve", status=None, times=None, delay=0.05)  # each file read takes a while
    summary = services.hub_sync()
    run = summary.run
    assert (run.found, run.new, run.errors) == (34, 34, 0), str(summary)
    assert 2 <= corpus_stub.max_in_flight("resolve") <= 4
    for name in CORPUS_NAMES:
        head = Environment.objects.select_related("head").get(key=f"openenv/{name}").head
        assert head.sha == corpus_stub.head(f"openenv/{name}")
    assert corpus_stub.errors == []


def test_a_no_op_resync_reads_no_file_and_its_queries_do_not_grow_per_environment(corpus_stub, concurrent):
    services.hub_sync()
    corpus_stub.reset_requests()
    with CaptureQueriesContext(connection) as queries:
        run = services.hub_sync().run
    assert (run.found, run.unchanged, run.new, run.updated) == (34, 34, 0, 0)
    assert corpus_stub.count("resolve") == 0 and corpus_stub.count("info") == 0
    assert len(queries) < 20  # a chunk of environments is one read and one batch of writes, not one per item


def test_a_429_slows_every_reader_not_just_the_one_it_answered(corpus_stub, concurrent):
    corpus_stub.inject("resolve", status=None, times=None, delay=0.05)
    limited = corpus_stub.inject(lambda r: r.kind == "resolve" and r.repo_id == "openenv/echo_env",
                                 status=429, times=1, retry_after=1)
    corpus_stub._injections.insert(0, corpus_stub._injections.pop())  # the 429 is matched before the delay
    run = services.hub_sync().run
    assert (run.new, run.errors) == (34, 0)
    assert limited.hits == 1
    requests = corpus_stub.requests
    at = next(r.received_at for r in requests if r.status == 429)
    # Requests already on their way when the 429 came back are answered; after that, nobody asks for the
    # Retry-After second. Without a shared gate the three other threads would send about 30 reads meanwhile.
    during = [r for r in requests if at + 0.3 < r.received_at < at + 0.9]
    assert during == []
    assert any(r.received_at >= at + 0.9 for r in requests)


def test_one_bad_space_stops_no_other_thread(corpus_stub, concurrent):
    for repo_id, (files, _) in HOSTILE.items():
        corpus_stub.put_space(repo_id, files, tags=["openenv"])
    corpus_stub.inject("resolve", repo_id="openenv/chess_env", times=None, status=500)
    run = services.hub_sync().run
    assert run.found == 34 + len(HOSTILE)
    assert run.errors == 1  # chess_env: the Hub kept failing; every hostile Space is indexed with its problems
    chess = Environment.objects.get(key="openenv/chess_env")
    assert chess.head_id is None
    assert chess.problems.filter(code="hub.unavailable", resolved_at__isnull=True).exists()
    assert Revision.objects.filter(environment__owner="openenv").count() == 33
    for repo_id, (_, code) in HOSTILE.items():
        hostile = Environment.objects.get(key=repo_id.lower())
        assert hostile.head_id is not None and hostile.problems.filter(code=code).exists(), repo_id


def test_a_sync_inside_a_transaction_works_item_by_item(corpus_stub, concurrent):
    from django.db import transaction

    with transaction.atomic():
        run = services.hub_sync().run
        assert run.new == 34
        assert Environment.objects.count() == 34  # written in this transaction, by this thread
    assert corpus_stub.max_in_flight("resolve") == 1
