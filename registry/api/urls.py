from django.urls import path, re_path

from registry import converters  # noqa: F401 - registers the <part:…> converter
from registry.api import views
from registry.api.catalog import catalog_snapshot
from registry.api.errors import no_route

app_name = "api"

# <part:…>: see registry.converters.
_SEG = "<part:owner>/<part:name>"

urlpatterns = [
    path("environments/", views.EnvironmentList.as_view(), name="environment-list"),
    path(f"environments/{_SEG}/", views.EnvironmentDetail.as_view(), name="environment-detail"),
    path(f"environments/{_SEG}/revisions/", views.RevisionList.as_view(), name="revision-list"),
    path(f"environments/{_SEG}/revisions/<str:sha>/", views.RevisionDetail.as_view(), name="revision-detail"),
    path(f"environments/{_SEG}/validations/", views.ValidationRunList.as_view(), name="validation-list"),
    path(f"environments/{_SEG}/validations/latest/", views.ValidationRunLatest.as_view(), name="validation-latest"),
    path(f"environments/{_SEG}/validations/<int:run_id>/", views.ValidationRunDetail.as_view(), name="validation-detail"),
    path(f"environments/{_SEG}/revisions/<str:sha>/yank/", views.RevisionYankView.as_view(), name="revision-yank"),
    path(f"environments/{_SEG}/refresh/", views.EnvironmentRefresh.as_view(), name="environment-refresh"),
    path(f"environments/{_SEG}/deprecation/", views.EnvironmentDeprecation.as_view(), name="environment-deprecation"),
    path(f"environments/{_SEG}/history/", views.EnvironmentHistory.as_view(), name="environment-history"),
    path(f"environments/{_SEG}/evaluations/", views.EvaluationList.as_view(), name="evaluation-list"),
    path(f"environments/{_SEG}/evaluations/import/", views.EvaluationImport.as_view(), name="evaluation-import"),
    path(f"environments/{_SEG}/evaluations/runs/", views.EvaluationRunList.as_view(), name="evaluation-run-list"),
    path(f"environments/{_SEG}/evaluations/<int:evaluation_id>/", views.EvaluationDetail.as_view(),
         name="evaluation-detail"),
    path(f"environments/{_SEG}/leaderboard/", views.LeaderboardView.as_view(), name="leaderboard"),
    path("tags/", views.TagList.as_view(), name="tag-list"),
    path("owners/", views.OwnerList.as_view(), name="owner-list"),
    path("catalog.json", catalog_snapshot, name="catalog"),
    re_path(r"^(?:[\s\S]*/)?$", no_route),  # last: everything else under /api/v1/ (without a slash, APPEND_SLASH redirects first)
]
