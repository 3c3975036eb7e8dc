from django.urls import path

from registry import views

app_name = "registry"

urlpatterns = [
    path("", views.home, name="home"),
    path("environments/<str:owner>/<str:name>/", views.environment_detail, name="environment"),
]
