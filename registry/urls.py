from django.urls import path, re_path

from registry import converters  # noqa: F401 - registers the <part:…> and <tag:…> converters
from registry import badges, views

app_name = "registry"

urlpatterns = [
    path("", views.home, name="home"),
    path("environments/", views.browse, name="browse"),
    path("owners/<part:owner>/", views.browse, name="owner"),
    path("tags/<tag:tag>/", views.browse, name="tag"),
    path("environments/<part:owner>/<part:name>/", views.environment_detail, name="environment"),
    path("environments/<part:owner>/<part:name>/validate/", views.validation_request, name="validation-request"),
    path("environments/<part:owner>/<part:name>/validations/<int:run_id>/", views.validation_report,
         name="validation-report"),
    # Hub webhooks; also without the slash, which APPEND_SLASH cannot add to a POST.
    re_path(r"^webhooks/huggingface/?$", views.hub_webhook, name="hub-webhook"),
    # Status badges: /badges/<owner>/<name>/<kind>.svg or .json, named badge-<kind>-<svg|json>.
    *(path(f"badges/<part:owner>/<part:name>/{kind}.{fmt}", views.badge, {"kind": kind, "fmt": fmt},
           name=f"badge-{kind}-{fmt}")
      for kind in badges.BADGES for fmt in views.BADGE_CONTENT_TYPES),
]
