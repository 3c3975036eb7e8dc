from django.urls import path

from registry import views

app_name = "registry"

urlpatterns = [
    path("", views.home, name="home"),
    path("environments/<str:owner>/<str:name>/", views.environment_detail, name="environment"),
    path("environments/<str:owner>/<str:name>/validate/", views.validation_request, name="validation-request"),
    path("environments/<str:owner>/<str:name>/validations/<int:run_id>/", views.validation_report,
         name="validation-report"),
]
