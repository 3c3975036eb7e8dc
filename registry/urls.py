from django.urls import path

from registry import converters  # noqa: F401 - registers the <part:…> and <tag:…> converters
from registry import views

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
]
