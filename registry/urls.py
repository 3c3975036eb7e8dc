from django.urls import path, re_path

from registry import converters  # noqa: F401 - registers the <part:…> and <tag:…> converters
from registry import badges, feeds, owner_views, views

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
    path("environments/<part:owner>/<part:name>/yank/", owner_views.revision_yank, name="revision-yank"),
    path("environments/<part:owner>/<part:name>/deprecation/", owner_views.deprecation, name="environment-deprecation"),
    path("environments/<part:owner>/<part:name>/refresh/", owner_views.refresh, name="environment-refresh"),
    path("environments/<part:owner>/<part:name>/leaderboard/", views.leaderboard, name="leaderboard"),
    path("environments/<part:owner>/<part:name>/evaluations/<int:evaluation_id>/", views.evaluation_detail,
         name="evaluation"),
    path("models/<path:agent>/", views.model_detail, name="model"),
    *(path(f"badges/<part:owner>/<part:name>/score.{fmt}", views.score_badge, {"fmt": fmt}, name=f"badge-score-{fmt}")
      for fmt in views.BADGE_CONTENT_TYPES),
    path("feeds/environments.atom", feeds.EnvironmentsFeed(), name="feed-environments"),
    path("feeds/verdicts.atom", feeds.VerdictsFeed(), name="feed-verdicts"),
    path("environments/<part:owner>/<part:name>/feed.atom", feeds.EnvironmentFeed(), name="feed-environment"),
    path("account/", owner_views.account, name="account"),
    path("account/tokens/", owner_views.token_create, name="token-create"),
    path("account/tokens/<int:token_id>/revoke/", owner_views.token_revoke, name="token-revoke"),
    path("account/sign-in-failed/", owner_views.sign_in_failed, name="sign-in-failed"),
    # Hub webhooks; also without the slash, which APPEND_SLASH cannot add to a POST.
    re_path(r"^webhooks/huggingface/?$", views.hub_webhook, name="hub-webhook"),
    # Status badges: /badges/<owner>/<name>/<kind>.svg or .json, named badge-<kind>-<svg|json>.
    *(path(f"badges/<part:owner>/<part:name>/{kind}.{fmt}", views.badge, {"kind": kind, "fmt": fmt},
           name=f"badge-{kind}-{fmt}")
      for kind in badges.BADGES for fmt in views.BADGE_CONTENT_TYPES),
]
