"""Bounded fan-out: run one job per item on a few threads, with the results handed back in the caller's thread.

A full sync reads the Hub for thousands of Spaces; each item is network waits
plus one short transaction, so a handful of threads keeps both the Hub and the
database busy. The number of items queued at any time is bounded (twice the
threads), so memory does not grow with the number of items, and each thread
closes its own database connections when it ends.

A caller inside a transaction (an enclosing `atomic`) gets the items done one
by one in its own thread: other threads could not see its uncommitted writes.
"""

from __future__ import annotations

import queue
import threading
from collections.abc import Callable, Iterable
from typing import TypeVar

from django.db import connection, connections

T = TypeVar("T")
R = TypeVar("R")

_STOP = object()


def fan_out(items: Iterable[T], work: Callable[[T], R], *, workers: int, on_result: Callable[[R], None],
            check: Callable[[], None] = lambda: None) -> None:
    """Call `work(item)` for every item on up to `workers` threads; `on_result` gets each result in this thread.

    `check()` runs in this thread between items; if it raises (the job was taken over), no further item starts,
    the ones already started finish, and the exception propagates. An exception from `work` propagates the same
    way (work meant to go on after a bad item catches its own errors).
    """
    if workers <= 1 or connection.in_atomic_block:
        for item in items:
            check()
            on_result(work(item))
        return

    todo: queue.Queue = queue.Queue(maxsize=workers * 2)
    done: queue.Queue = queue.Queue()

    def worker() -> None:
        try:
            while (item := todo.get()) is not _STOP:
                try:
                    done.put((True, work(item)))
                except BaseException as exc:  # noqa: BLE001 - handed to the caller's thread
                    done.put((False, exc))
        finally:
            connections.close_all()

    threads = [threading.Thread(target=worker, name=f"fan-out-{i}", daemon=True) for i in range(workers)]
    for thread in threads:
        thread.start()
    pending = 0
    failure: BaseException | None = None

    def collect(block: bool) -> None:
        nonlocal pending, failure
        while pending:
            try:
                ok, value = done.get(timeout=0.2) if block else done.get_nowait()
            except queue.Empty:
                return
            pending -= 1
            if ok:
                on_result(value)
            elif failure is None:
                failure = value
            block = False  # after one result, take only what is already there

    try:
        for item in items:
            check()
            if failure is not None:
                break
            while True:
                try:
                    todo.put(item, timeout=0.2)
                    pending += 1
                    break
                except queue.Full:
                    collect(block=False)
                    check()
            collect(block=False)
        while pending:
            collect(block=True)
            check()
    finally:
        while True:  # nothing new starts: drop what is queued, then stop every thread
            try:
                if todo.get_nowait() is not _STOP:
                    pending -= 1
            except queue.Empty:
                break
        for _ in threads:
            todo.put(_STOP)
        for thread in threads:
            thread.join()
        collect(block=False)
    if failure is not None:
        raise failure
