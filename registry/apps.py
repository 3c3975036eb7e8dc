from django.apps import AppConfig


class RegistryConfig(AppConfig):
    """The domain: environments, their revisions, index problems and sync runs."""

    name = "registry"
    default_auto_field = "django.db.models.BigAutoField"
