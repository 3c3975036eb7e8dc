"""A side thread that proves a long job is alive, for jobs whose progress the database watches.

Validation runs and full syncs both record `heartbeat_at` while they work, so
that a reaper can tell a dead worker from a slow one. The beat runs in its
own thread (a long pip install, a slow Hub page or a stuck probe must not
stop it) and on its own database connection, closed when it ends.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable

logger = logging.getLogger(__name__)


class Heartbeat:
    """Call `beat()` every `interval_s` until the job ends or `beat` raises `lost_on` (the job is not ours any more).

    Any other exception (a database hiccup) is logged and the next beat tries again. `check()` raises the
    `lost_on` exception in the job's own thread, so the job can stop at a safe point.
    """

    def __init__(self, beat: Callable[[], None], interval_s: float, *, name: str,
                 lost_on: type[BaseException] = Exception):
        self.beat, self.interval_s, self.name, self.lost_on = beat, interval_s, name, lost_on
        self.stopped = threading.Event()
        self.lost: BaseException | None = None
        self.thread = threading.Thread(target=self._loop, name=name, daemon=True)

    def _loop(self) -> None:
        from django.db import connection

        try:
            while not self.stopped.wait(self.interval_s):
                try:
                    self.beat()
                except self.lost_on as exc:
                    self.lost = exc
                    return
                except Exception:  # noqa: BLE001 - a database hiccup must not end the job; the next beat retries
                    logger.exception("%s: heartbeat failed", self.name)
        finally:
            connection.close()

    def check(self, _step: str = "") -> None:
        if self.lost is not None:
            raise self.lost

    def __enter__(self) -> Heartbeat:
        self.thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self.stopped.set()
        self.thread.join(timeout=5)
