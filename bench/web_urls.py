"""The hub's URLs plus the floors of the stack, measured beside the hub's answers to show what Django itself
costs: /bench/floor/ renders a constant template, /bench/floor.json answers a constant JSON object and
/bench/floor.svg a constant SVG (no query, no work beyond the hub's middleware)."""

from django.http import HttpResponse, JsonResponse
from django.template import engines
from django.urls import include, path

_FLOOR = engines["django"].from_string(
    "<!doctype html><html lang='en'><head><title>floor</title></head><body><main><h1>{{ title }}</h1>"
    "<p>A constant page.</p></main></body></html>")


def floor(request):
    return HttpResponse(_FLOOR.render({"title": "floor"}, request))


def floor_json(request):
    return JsonResponse({"floor": True, "items": []})


_SVG = ('<svg xmlns="http://www.w3.org/2000/svg" width="90" height="20" role="img" aria-label="floor">'
        '<rect width="90" height="20" fill="#555"/></svg>').encode()


def floor_svg(request):
    return HttpResponse(_SVG, content_type="image/svg+xml; charset=utf-8")


urlpatterns = [path("bench/floor/", floor), path("bench/floor.json", floor_json), path("bench/floor.svg", floor_svg),
               path("", include("hub.urls"))]
