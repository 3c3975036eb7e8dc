"""The hub's URLs plus /bench/floor/: a bare Django view rendering a constant template (no query, no middleware
work beyond the hub's own), measured beside the pages to show what the stack itself costs."""

from django.template import engines
from django.http import HttpResponse
from django.urls import include, path

_FLOOR = engines["django"].from_string(
    "<!doctype html><html lang='en'><head><title>floor</title></head><body><main><h1>{{ title }}</h1>"
    "<p>A constant page.</p></main></body></html>")


def floor(request):
    return HttpResponse(_FLOOR.render({"title": "floor"}, request))


urlpatterns = [path("bench/floor/", floor), path("", include("hub.urls"))]
