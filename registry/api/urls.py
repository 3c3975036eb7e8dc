from django.urls import path

from registry.api import views

app_name = "api"

# Hub ids allow letters, digits, '-', '_' and '.'.
_SEG = "<str:owner>/<str:name>"

urlpatterns = [
    path("environments/", views.EnvironmentList.as_view(), name="environment-list"),
    path(f"environments/{_SEG}/", views.EnvironmentDetail.as_view(), name="environment-detail"),
    path(f"environments/{_SEG}/validations/", views.ValidationRunList.as_view(), name="validation-list"),
    path(f"environments/{_SEG}/validations/latest/", views.ValidationRunLatest.as_view(), name="validation-latest"),
    path(f"environments/{_SEG}/validations/<int:run_id>/", views.ValidationRunDetail.as_view(), name="validation-detail"),
]
