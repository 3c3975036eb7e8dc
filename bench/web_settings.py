"""Settings for `make bench-web`: the hub's own, plus a bare view beside it (the floor of the stack)."""

from hub.settings import *  # noqa: F403 - the same settings, one URL more

ROOT_URLCONF = "bench.web_urls"
