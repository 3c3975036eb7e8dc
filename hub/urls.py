from django.contrib import admin
from django.urls import include, path

from registry import views

urlpatterns = [
    path("healthz", views.healthz, name="healthz"),
    path("readyz", views.readyz, name="readyz"),
    path("admin/", admin.site.urls),
    path("api/v1/", include("registry.api.urls")),
    path("", include("registry.urls")),
]

handler404 = "registry.views.not_found"
handler500 = "registry.views.server_error"
