from django.apps import AppConfig


class RegistryConfig(AppConfig):
    """The domain: environments, their revisions, index problems and sync runs."""

    name = "registry"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        from django.core import checks

        checks.register(_visibility_timeout_check, checks.Tags.compatibility)


def _visibility_timeout_check(app_configs=None, **kwargs):
    """`manage.py check` (and CI) refuses a broker visibility timeout shorter than any task's hard limit."""
    from django.conf import settings
    from django.core import checks

    from hub.celery import app, our_tasks, visibility_timeout_problems

    problems = visibility_timeout_problems(our_tasks(), settings.CELERY_VISIBILITY_TIMEOUT_S, app.conf.task_time_limit)
    return [checks.Error(problem, id="registry.E001") for problem in problems]
