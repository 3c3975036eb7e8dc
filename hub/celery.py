"""The Celery application: configured from Django settings (CELERY_*), tasks from workers/."""

import os
from collections.abc import Iterable

from celery import Celery
from celery.signals import worker_init

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "hub.settings")

app = Celery("hub")
app.config_from_object("django.conf:settings", namespace="CELERY")
app.autodiscover_tasks(["workers"], related_name="tasks")


def visibility_timeout_problems(tasks: Iterable, visibility_timeout_s: float, default_limit: float | None) -> list[str]:
    """Tasks whose hard time limit is missing or not shorter than the broker's visibility timeout.

    With acks_late, Redis hands an unacknowledged message to another worker once the visibility timeout
    passes: a task still running then would run twice at once (two syncs, two probes of one run).
    """
    problems = []
    for task in tasks:
        limit = getattr(task, "time_limit", None) or default_limit
        if limit is None:
            problems.append(f"task {task.name} has no hard time limit, so it may outlive the visibility timeout")
        elif limit >= visibility_timeout_s:
            problems.append(f"task {task.name} may run {limit:g} s, not less than CELERY_VISIBILITY_TIMEOUT_S "
                            f"({visibility_timeout_s:g} s)")
    return problems


def our_tasks() -> list:
    """The project's own tasks (every one has a stable `registry.` name), imported."""
    import workers.tasks  # noqa: F401 - registers them (autodiscovery would re-enter Celery's Django fixup)

    return [task for name, task in sorted(app.tasks.items()) if name.startswith("registry.")]


@worker_init.connect
def _refuse_a_visibility_timeout_too_short(**_kwargs) -> None:
    from django.conf import settings

    problems = visibility_timeout_problems(our_tasks(), settings.CELERY_VISIBILITY_TIMEOUT_S, app.conf.task_time_limit)
    if problems:
        # SystemExit, not an Exception: Celery logs and swallows exceptions raised by signal handlers.
        raise SystemExit("refusing to start: " + "; ".join(problems))
