"""Settings for OpenEnv Hub, read from the environment with safe defaults.

Two ways to run: the embedded default (SQLite under var/, a filesystem Celery
broker, no servers to install) and production (PostgreSQL via DATABASE_URL,
Redis via CELERY_BROKER_URL or REDIS_URL). Every variable is listed in
.env.example.
"""

from __future__ import annotations

import os
import secrets
import sys
from pathlib import Path
from urllib.parse import parse_qsl, unquote, urlsplit

from django.core.exceptions import ImproperlyConfigured

BASE_DIR = Path(__file__).resolve().parent.parent
VAR_DIR = Path(os.environ.get("HUB_VAR_DIR", BASE_DIR / "var"))


def env_str(name: str, default: str = "") -> str:
    """The variable's value; unset or empty means the default."""
    return os.environ.get(name) or default


def env_bool(name: str, default: bool) -> bool:
    """Accept only "true"/"false" (any case): a typo must not silently flip a switch."""
    raw = os.environ.get(name)
    if raw is None or raw == "":
        return default
    if raw.lower() == "true":
        return True
    if raw.lower() == "false":
        return False
    raise ImproperlyConfigured(f"{name} must be 'true' or 'false', not {raw!r}")


def env_int(name: str, default: int) -> int:
    raw = os.environ.get(name)
    if raw is None or raw == "":
        return default
    try:
        return int(raw)
    except ValueError:
        raise ImproperlyConfigured(f"{name} must be an integer, not {raw!r}") from None


def env_float(name: str, default: float) -> float:
    raw = os.environ.get(name)
    if raw is None or raw == "":
        return default
    try:
        return float(raw)
    except ValueError:
        raise ImproperlyConfigured(f"{name} must be a number, not {raw!r}") from None


def env_list(name: str, default: list[str], sep: str = ",") -> list[str]:
    raw = os.environ.get(name)
    if not raw:
        return default
    return [item.strip() for item in raw.split(sep) if item.strip()]


def database_from_url(url: str) -> dict:
    """Turn postgres://user:pass@host:port/name?opt=v or sqlite:///path into a DATABASES entry.

    A malformed URL is an ImproperlyConfigured that never repeats the URL (it may hold a password).
    """
    try:
        parts = urlsplit(url)
        options = dict(parse_qsl(parts.query))
        port = parts.port
    except ValueError as exc:
        reason = "its port is not a number" if "port" in str(exc).lower() else "it cannot be parsed"
        raise ImproperlyConfigured(
            f"DATABASE_URL is malformed: {reason} (percent-encode '@', ':', '/', '?' and '#' in the password)"
        ) from None
    if parts.scheme in ("postgres", "postgresql", "pgsql"):
        # No parallel query (unless the URL's own `options` say otherwise): the hub's queries read a page or a
        # count, and a web worker serves one request while the other workers serve theirs. At 100,000
        # environments the planner chose a parallel plan for the search's typo part, which runs only when full
        # text matches nothing: starting its two workers cost a search about 10 ms when the part never ran, and
        # the typo scan itself was no faster with them (`make bench-api`, docs/benchmarks.md run 4).
        options.setdefault("options", "-c max_parallel_workers_per_gather=0")
        return {
            "ENGINE": "django.db.backends.postgresql",
            "NAME": unquote(parts.path.lstrip("/")) or "postgres",
            "USER": unquote(parts.username or ""),
            "PASSWORD": unquote(parts.password or ""),
            "HOST": parts.hostname or "",
            "PORT": str(port or ""),
            "CONN_MAX_AGE": env_int("DATABASE_CONN_MAX_AGE", 60),
            "CONN_HEALTH_CHECKS": True,
            "OPTIONS": options,
        }
    if parts.scheme == "sqlite":
        # sqlite:///relative/path or sqlite:////absolute/path
        if parts.netloc:
            raise ImproperlyConfigured(
                f"DATABASE_URL sqlite://{parts.netloc}… names a host; use sqlite:///relative/path or "
                "sqlite:////absolute/path")
        path = unquote(parts.path[1:] if parts.path.startswith("//") else parts.path.lstrip("/"))
        if parts.path.startswith("//"):
            path = "/" + path.lstrip("/")
        return {"ENGINE": "django.db.backends.sqlite3", "NAME": path or str(VAR_DIR / "hub.sqlite3")}
    raise ImproperlyConfigured(f"DATABASE_URL scheme {parts.scheme!r} is not supported (use postgres:// or sqlite://)")


def _secret_key() -> str:
    """SECRET_KEY from the environment, else one generated once and kept in var/ (never committed)."""
    key = os.environ.get("SECRET_KEY")
    if key:
        return key
    path = VAR_DIR / "secret_key"
    try:
        return path.read_text().strip()
    except FileNotFoundError:
        VAR_DIR.mkdir(parents=True, exist_ok=True)
        key = secrets.token_urlsafe(50)
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(fd, "w") as fh:
            fh.write(key)
        return key


SECRET_KEY = _secret_key()
DEBUG = env_bool("DEBUG", False)
ALLOWED_HOSTS = env_list("ALLOWED_HOSTS", ["localhost", "127.0.0.1", "[::1]"])
SITE_URL = env_str("SITE_URL", "http://127.0.0.1:8000").rstrip("/")
CSRF_TRUSTED_ORIGINS = env_list("CSRF_TRUSTED_ORIGINS", [SITE_URL])
# The DNS name that publishes /api/v1/catalog.json (the `urn:air:<publisher>:` of its identifiers); empty: SITE_URL's
# host when that is a DNS name, else openenv-hub.localhost.
HUB_CATALOG_PUBLISHER = env_str("HUB_CATALOG_PUBLISHER")

INSTALLED_APPS = [
    "django.contrib.admin",
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "django.contrib.messages",
    "django.contrib.staticfiles",
    "django.contrib.humanize",
    "django.contrib.postgres",
    "rest_framework",
    "drf_spectacular",
    "drf_spectacular_sidecar",
    "mozilla_django_oidc",
    "registry",
]

MIDDLEWARE = [
    "django.middleware.security.SecurityMiddleware",
    "registry.middleware.ReadOnlyCorsMiddleware",
    "whitenoise.middleware.WhiteNoiseMiddleware",
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.middleware.common.CommonMiddleware",
    "django.middleware.http.ConditionalGetMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    "django.contrib.messages.middleware.MessageMiddleware",
    "django.middleware.clickjacking.XFrameOptionsMiddleware",
    "django.middleware.csp.ContentSecurityPolicyMiddleware",
]

ROOT_URLCONF = "hub.urls"
WSGI_APPLICATION = "hub.wsgi.application"
ASGI_APPLICATION = "hub.asgi.application"

TEMPLATES = [
    {
        "BACKEND": "django.template.backends.django.DjangoTemplates",
        "DIRS": [BASE_DIR / "templates"],
        "APP_DIRS": True,
        "OPTIONS": {
            "context_processors": [
                "django.template.context_processors.request",
                "django.contrib.auth.context_processors.auth",
                "django.contrib.messages.context_processors.messages",
                "registry.context_processors.site",
            ],
        },
    },
]

DATABASE_URL = env_str("DATABASE_URL")
if DATABASE_URL:
    DATABASES = {"default": database_from_url(DATABASE_URL)}
else:
    DATABASES = {"default": {"ENGINE": "django.db.backends.sqlite3", "NAME": str(VAR_DIR / "hub.sqlite3")}}
if DATABASES["default"]["ENGINE"].endswith("sqlite3"):
    # Worker, beat and web share one SQLite file: wait for the write lock instead of failing.
    # WAL lets the web server read while the worker writes; NORMAL sync is durable across app crashes.
    DATABASES["default"]["OPTIONS"] = {
        "timeout": 30,
        "transaction_mode": "IMMEDIATE",
        "init_command": "PRAGMA journal_mode=WAL; PRAGMA synchronous=NORMAL;",
    }
    # A file, not :memory:, so a Celery worker process in the tests sees the test database.
    DATABASES["default"]["TEST"] = {"NAME": str(VAR_DIR / "test-hub.sqlite3")}
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"

REDIS_URL = env_str("REDIS_URL")
if REDIS_URL:
    CACHES = {"default": {"BACKEND": "django.core.cache.backends.redis.RedisCache", "LOCATION": REDIS_URL}}
else:
    CACHES = {"default": {"BACKEND": "django.core.cache.backends.locmem.LocMemCache"}}

AUTH_PASSWORD_VALIDATORS = [
    {"NAME": "django.contrib.auth.password_validation.UserAttributeSimilarityValidator"},
    {"NAME": "django.contrib.auth.password_validation.MinimumLengthValidator"},
    {"NAME": "django.contrib.auth.password_validation.CommonPasswordValidator"},
    {"NAME": "django.contrib.auth.password_validation.NumericPasswordValidator"},
]

LANGUAGE_CODE = "en-us"
TIME_ZONE = "UTC"
USE_I18N = False
USE_TZ = True

STATIC_URL = "static/"
STATIC_ROOT = VAR_DIR / "static"
# collectstatic fills it for gunicorn; it must exist even when empty (runserver and tests use the finders).
STATIC_ROOT.mkdir(parents=True, exist_ok=True)
STORAGES = {
    "default": {"BACKEND": "django.core.files.storage.FileSystemStorage"},
    # Hashed, compressed names: a page and its assets can be cached forever and never disagree. Needs
    # `collectstatic` (the image, `make run` and the test suite run it); DEBUG serves plain names from the finders.
    "staticfiles": {"BACKEND": "django.contrib.staticfiles.storage.StaticFilesStorage" if DEBUG
                    else "whitenoise.storage.CompressedManifestStaticFilesStorage"},
}
WHITENOISE_USE_FINDERS = DEBUG
WHITENOISE_AUTOREFRESH = DEBUG

if not DEBUG:
    SESSION_COOKIE_HTTPONLY = True
    X_FRAME_OPTIONS = "DENY"
    SECURE_CONTENT_TYPE_NOSNIFF = True
    SECURE_REFERRER_POLICY = "same-origin"

# Content Security Policy: every script and style is the app's own file, so whatever a README or an
# environment's reply smuggles into a page cannot run. Images may come from anywhere over https (READMEs
# show the Hub's files); nothing may frame the hub.
from django.utils.csp import CSP  # noqa: E402 - beside the policy it builds

SECURE_CSP = {
    "default-src": [CSP.SELF],
    "script-src": [CSP.SELF],
    "style-src": [CSP.SELF],
    "img-src": [CSP.SELF, "https:", "data:"],
    "object-src": [CSP.NONE],
    "base-uri": [CSP.NONE],
    "form-action": [CSP.SELF],
    "frame-ancestors": [CSP.NONE],
}
if SITE_URL.startswith("https://"):
    SESSION_COOKIE_SECURE = True
    CSRF_COOKIE_SECURE = True
    SECURE_PROXY_SSL_HEADER = ("HTTP_X_FORWARDED_PROTO", "https")

REST_FRAMEWORK = {
    "DEFAULT_PAGINATION_CLASS": "registry.api.pagination.Pagination",
    "PAGE_SIZE": 50,
    "DEFAULT_RENDERER_CLASSES": ["rest_framework.renderers.JSONRenderer", "rest_framework.renderers.BrowsableAPIRenderer"],
    "DEFAULT_AUTHENTICATION_CLASSES": [
        "registry.api.authentication.ApiTokenAuthentication",
        "registry.api.authentication.HubTokenAuthentication",
        "rest_framework.authentication.SessionAuthentication",
    ],
    "DEFAULT_PERMISSION_CLASSES": ["rest_framework.permissions.IsAuthenticatedOrReadOnly"],
    "DEFAULT_THROTTLE_CLASSES": ["registry.api.throttling.ClientRateThrottle"],
    "EXCEPTION_HANDLER": "registry.api.errors.exception_handler",
    "DEFAULT_SCHEMA_CLASS": "drf_spectacular.openapi.AutoSchema",
    "UNAUTHENTICATED_USER": None,
}
# Requests per client and minute (anonymous clients by address, accounts by name), counted in the cache.
HUB_API_RATE_ANONYMOUS = env_int("HUB_API_RATE_ANONYMOUS", 300)
HUB_API_RATE_ACCOUNT = env_int("HUB_API_RATE_ACCOUNT", 1200)

SPECTACULAR_SETTINGS = {
    "TITLE": "OpenEnv Hub API",
    "DESCRIPTION": ("Discovery of OpenEnv environments: the catalog's search, facets and sorts, a change feed with "
                    "tombstones, revisions pinned to commits, validation reports in OpenEnv's report schema, and "
                    "pull forms. Every error is {\"error\": {\"code\", \"message\", \"detail\"?}}."),
    "VERSION": "1",
    "OAS_VERSION": "3.1.0",
    "SERVE_INCLUDE_SCHEMA": False,
    "SCHEMA_PATH_PREFIX": "/api/v1",
    "SWAGGER_UI_DIST": "SIDECAR",
    "SWAGGER_UI_FAVICON_HREF": "SIDECAR",
    "REDOC_DIST": "SIDECAR",
    "COMPONENT_SPLIT_REQUEST": True,
    "ENUM_NAME_OVERRIDES": {"ValidationOutcome": "registry.models.ValidationRun.Outcome",
                            "ValidationRunner": "registry.models.ValidationRun.Runner"},
}

# --- Celery -----------------------------------------------------------------
CELERY_VISIBILITY_TIMEOUT_S = env_int("CELERY_VISIBILITY_TIMEOUT_S", 4 * 3600)
BROKER_DIR = VAR_DIR / "broker"
CELERY_BROKER_URL = env_str("CELERY_BROKER_URL") or REDIS_URL or "filesystem://localhost/"
if CELERY_BROKER_URL.startswith("filesystem://"):
    for _folder in ("queue", "processed", "control"):
        (BROKER_DIR / _folder).mkdir(parents=True, exist_ok=True)
    # The embedded default: kombu's filesystem transport, one folder shared by web, worker and beat.
    CELERY_BROKER_TRANSPORT_OPTIONS = {
        "data_folder_in": str(BROKER_DIR / "queue"),
        "data_folder_out": str(BROKER_DIR / "queue"),
        "processed_folder": str(BROKER_DIR / "processed"),
        "control_folder": str(BROKER_DIR / "control"),
        "store_processed": False,
    }
else:
    # Longer than any task's hard time limit (a system check, registry.E001, and the worker refuse otherwise),
    # so an unacked message is never redelivered while its task still runs.
    CELERY_BROKER_TRANSPORT_OPTIONS = {"visibility_timeout": CELERY_VISIBILITY_TIMEOUT_S}
CELERY_TASK_IGNORE_RESULT = True
CELERY_RESULT_BACKEND = None
CELERY_TASK_ACKS_LATE = True
CELERY_TASK_REJECT_ON_WORKER_LOST = True
CELERY_WORKER_PREFETCH_MULTIPLIER = 1
CELERY_TASK_DEFAULT_QUEUE = "default"
CELERY_BROKER_CONNECTION_RETRY_ON_STARTUP = True
CELERY_WORKER_HIJACK_ROOT_LOGGER = False
CELERY_TASK_ALWAYS_EAGER = False
CELERY_TIMEZONE = "UTC"

# --- The Hub and the index ---------------------------------------------------
HF_ENDPOINT = env_str("HF_ENDPOINT", "https://huggingface.co").rstrip("/")
HF_TOKEN = env_str("HF_TOKEN")
HF_CACHE_DIR = Path(env_str("HF_CACHE_DIR", str(VAR_DIR / "hf-cache")))
HUB_SYNC_INTERVAL_S = env_int("HUB_SYNC_INTERVAL_S", 3600)
# A running full sync beats this often; one silent for HUB_SYNC_STALE_S is taken as dead, and the next may start.
HUB_SYNC_HEARTBEAT_S = env_float("HUB_SYNC_HEARTBEAT_S", 30.0)
HUB_SYNC_STALE_S = env_float("HUB_SYNC_STALE_S", 300.0)
HUB_HTTP_TIMEOUT_S = env_float("HUB_HTTP_TIMEOUT_S", 30.0)
# A full sync reads and indexes this many Spaces at once (threads sharing one client; a 429 slows them all).
HUB_SYNC_CONCURRENCY = max(1, env_int("HUB_SYNC_CONCURRENCY", 8))
HUB_RETRY_ATTEMPTS = env_int("HUB_RETRY_ATTEMPTS", 4)
HUB_RETRY_BASE_S = env_float("HUB_RETRY_BASE_S", 1.0)
# A Retry-After longer than this is cut short: one hostile header must not park a worker for hours.
HUB_RETRY_AFTER_MAX_S = env_float("HUB_RETRY_AFTER_MAX_S", 60.0)
# How long the Hub's answer about a token (who it is, or that it is refused) is trusted; tokens are never stored.
HUB_IDENTITY_CACHE_S = env_int("HUB_IDENTITY_CACHE_S", 300)
# Tokens the cache does not know, per client address and minute (each costs a call to the Hub's whoami).
HUB_IDENTITY_LOOKUPS_PER_MINUTE = env_int("HUB_IDENTITY_LOOKUPS_PER_MINUTE", 20)
# Hub webhooks (POST /webhooks/huggingface/): the secret set on the webhook at huggingface.co, which the Hub sends
# verbatim in X-Webhook-Secret. Empty: the endpoint refuses every delivery.
HUB_WEBHOOK_SECRET = env_str("HUB_WEBHOOK_SECRET")
# A delivery's body is read up to this size; a larger one is refused (413) unread.
HUB_WEBHOOK_MAX_BYTES = env_int("HUB_WEBHOOK_MAX_BYTES", 64 * 1024)
# How many deliveries the admin keeps to read (older ones are deleted as new ones arrive).
HUB_WEBHOOK_KEEP = env_int("HUB_WEBHOOK_KEEP", 1000)
if HUB_WEBHOOK_MAX_BYTES < 1024 or HUB_WEBHOOK_KEEP < 1:
    raise ImproperlyConfigured("HUB_WEBHOOK_MAX_BYTES must be at least 1024 and HUB_WEBHOOK_KEEP at least 1")
# Unset: the bundled examples, so a fresh `make run` shows a catalog offline. Set but empty: no local sources.
HUB_LOCAL_SOURCES = [
    p for p in os.environ.get("HUB_LOCAL_SOURCES", str(BASE_DIR / "examples" / "envs")).split(":") if p.strip()
]

LOGGING = {
    "version": 1,
    "disable_existing_loggers": False,
    "formatters": {"plain": {"format": "%(asctime)s %(levelname)s %(name)s %(message)s"}},
    "handlers": {"console": {"class": "logging.StreamHandler", "formatter": "plain"}},
    "root": {"handlers": ["console"], "level": env_str("LOG_LEVEL", "INFO")},
    "loggers": {"httpx": {"level": "WARNING"}, "httpx2": {"level": "WARNING"}},
}

# --- Validation ----------------------------------------------------------------
# Runner for Hub Spaces: "space" probes the running Space; "local" installs it in the sandbox here.
HUB_VALIDATION_RUNNER = env_str("HUB_VALIDATION_RUNNER", "space")
if HUB_VALIDATION_RUNNER not in ("space", "local"):
    raise ImproperlyConfigured(f"HUB_VALIDATION_RUNNER must be 'space' or 'local', not {HUB_VALIDATION_RUNNER!r}")
HUB_VALIDATE_NEW_REVISIONS = env_bool("HUB_VALIDATE_NEW_REVISIONS", True)
# Only these hosts are ever contacted by the space runner (fnmatch patterns); nothing an environment says is fetched.
HUB_PROBE_ALLOWED_HOSTS = env_list("HUB_PROBE_ALLOWED_HOSTS", ["*.hf.space"])
HUB_PROBE_CHECK_TIMEOUT_S = env_float("HUB_PROBE_CHECK_TIMEOUT_S", 15.0)
HUB_PROBE_DEADLINE_S = env_float("HUB_PROBE_DEADLINE_S", 180.0)
HUB_PROBE_MAX_BODY_BYTES = env_int("HUB_PROBE_MAX_BODY_BYTES", 1024 * 1024)
# Extra startup time for a Space an explicit request wakes from sleep.
HUB_PROBE_WAKE_S = env_float("HUB_PROBE_WAKE_S", 300.0)
# hub.time_to_first_work warns past this (start to first reset observation).
HUB_PROBE_FIRST_WORK_BUDGET_S = env_float("HUB_PROBE_FIRST_WORK_BUDGET_S", 60.0)
HUB_VALIDATION_SOFT_LIMIT_S = env_int("HUB_VALIDATION_SOFT_LIMIT_S", 1200)
HUB_VALIDATION_HARD_LIMIT_S = HUB_VALIDATION_SOFT_LIMIT_S + 60
HUB_VALIDATION_HEARTBEAT_S = env_float("HUB_VALIDATION_HEARTBEAT_S", 10.0)
HUB_VALIDATION_STALE_S = env_float("HUB_VALIDATION_STALE_S", 120.0)
HUB_VALIDATION_MAX_ATTEMPTS = env_int("HUB_VALIDATION_MAX_ATTEMPTS", 3)
# A queued run whose message the broker never took is sent by the reaper (every 30 s) this long after it was due.
HUB_VALIDATION_UNSENT_GRACE_S = env_float("HUB_VALIDATION_UNSENT_GRACE_S", 15.0)
# After our own transient failure (Hub or package index down) a run waits this long, doubling, before retrying.
HUB_VALIDATION_RETRY_BASE_S = env_float("HUB_VALIDATION_RETRY_BASE_S", 60.0)
HUB_VALIDATION_REPROBE_S = env_int("HUB_VALIDATION_REPROBE_S", 24 * 3600)
# A Space still building or starting is looked at again this often, for at most HUB_VALIDATION_SETTLE_MAX_S
# after the run was queued (then the run is cancelled; the re-probe comes back later). No attempt is used.
HUB_VALIDATION_SETTLE_POLL_S = env_float("HUB_VALIDATION_SETTLE_POLL_S", 300.0)
HUB_VALIDATION_SETTLE_MAX_S = env_float("HUB_VALIDATION_SETTLE_MAX_S", 2 * 3600.0)
# An owner's re-run of a revision waits this long after that revision's last finished run (staff don't wait).
HUB_RERUN_COOLDOWN_S = env_int("HUB_RERUN_COOLDOWN_S", 600)
# A Space is refreshed from the Hub on request at most this often (whoever asks).
HUB_REFRESH_COOLDOWN_S = env_int("HUB_REFRESH_COOLDOWN_S", 30)

# Sign in with Hugging Face (OpenID Connect, mozilla-django-oidc): on when an OAuth app's client id and secret
# are set (create one at huggingface.co/settings/applications with the redirect URL SITE_URL/oidc/callback/).
# The Hub's token is used for the sign-in only and never kept (OIDC_STORE_ACCESS_TOKEN stays off).
HUB_OAUTH_CLIENT_ID = env_str("HUB_OAUTH_CLIENT_ID")
HUB_OAUTH_CLIENT_SECRET = env_str("HUB_OAUTH_CLIENT_SECRET")
SIGN_IN_WITH_HUB = bool(HUB_OAUTH_CLIENT_ID and HUB_OAUTH_CLIENT_SECRET)
OIDC_RP_CLIENT_ID = HUB_OAUTH_CLIENT_ID
OIDC_RP_CLIENT_SECRET = HUB_OAUTH_CLIENT_SECRET
OIDC_OP_AUTHORIZATION_ENDPOINT = f"{HF_ENDPOINT}/oauth/authorize"
OIDC_OP_TOKEN_ENDPOINT = f"{HF_ENDPOINT}/oauth/token"
OIDC_OP_USER_ENDPOINT = f"{HF_ENDPOINT}/oauth/userinfo"
OIDC_OP_JWKS_ENDPOINT = f"{HF_ENDPOINT}/oauth/jwks"
OIDC_RP_SIGN_ALGO = "RS256"
OIDC_RP_SCOPES = "openid profile"
OIDC_TOKEN_USE_BASIC_AUTH = True
OIDC_TIMEOUT = HUB_HTTP_TIMEOUT_S
OIDC_STORE_ACCESS_TOKEN = False
OIDC_STORE_ID_TOKEN = False
OIDC_AUTHENTICATE_CLASS = "registry.signin.SignIn"
LOGIN_REDIRECT_URL = "/account/"
LOGOUT_REDIRECT_URL = "/"
LOGIN_REDIRECT_URL_FAILURE = "/account/sign-in-failed/"
AUTHENTICATION_BACKENDS = ["django.contrib.auth.backends.ModelBackend", "registry.signin.HubBackend"]
HUB_SANDBOX_DIR = Path(env_str("HUB_SANDBOX_DIR", str(VAR_DIR / "sandbox")))
# The interpreter sandbox venvs are built from. It must be executable by the sandbox user (nobody) for the
# privilege drop to apply: Debian's /usr/bin/python3 is; a pyenv build under a 0700 /root is not.
HUB_SANDBOX_PYTHON = env_str(
    "HUB_SANDBOX_PYTHON", "/usr/bin/python3" if os.access("/usr/bin/python3", os.X_OK) else sys.executable)
# Wheels only: installing then runs no code of the package or its dependencies.
HUB_SANDBOX_BINARY_ONLY = env_bool("HUB_SANDBOX_BINARY_ONLY", True)
# Isolation layers whose absence fails a run instead of being reported (e.g. "net,pid,user" in production).
HUB_SANDBOX_REQUIRE = env_list("HUB_SANDBOX_REQUIRE", [])
HUB_SANDBOX_MEMORY_MB = env_int("HUB_SANDBOX_MEMORY_MB", 2048)
# Everything a sandboxed server may write, its package copy included (a tmpfs: memory, not disk).
HUB_SANDBOX_DISK_MB = env_int("HUB_SANDBOX_DISK_MB", 1024)
HUB_SANDBOX_CPU_S = env_int("HUB_SANDBOX_CPU_S", 300)
HUB_SANDBOX_STARTUP_S = env_float("HUB_SANDBOX_STARTUP_S", 120.0)

# Evaluations (leaderboards): a baseline of the reference policies after every pass, models on request.
HUB_EVAL_BASELINE = env_bool("HUB_EVAL_BASELINE", True)
HUB_EVAL_BASELINE_EPISODES = env_int("HUB_EVAL_BASELINE_EPISODES", 20)
# Each episode of a hub-run evaluation stops after this many steps and this many seconds.
HUB_EVAL_MAX_STEPS = env_int("HUB_EVAL_MAX_STEPS", 50)
HUB_EVAL_EPISODE_S = env_float("HUB_EVAL_EPISODE_S", 30.0)
HUB_EVAL_SOFT_LIMIT_S = env_int("HUB_EVAL_SOFT_LIMIT_S", 1200)
HUB_EVAL_HARD_LIMIT_S = HUB_EVAL_SOFT_LIMIT_S + 60
# Models are evaluated through this OpenAI-compatible chat endpoint (a local vLLM or llama.cpp server, …);
# without it, model evaluations are refused. The key is sent to that endpoint only.
HUB_EVAL_OPENAI_BASE_URL = env_str("HUB_EVAL_OPENAI_BASE_URL")
HUB_EVAL_OPENAI_API_KEY = env_str("HUB_EVAL_OPENAI_API_KEY")
# A model's tokens: per episode (the sum of its replies' usage), and per request.
HUB_EVAL_MAX_TOKENS = env_int("HUB_EVAL_MAX_TOKENS", 32_000)
HUB_EVAL_MAX_TOKENS_PER_CALL = env_int("HUB_EVAL_MAX_TOKENS_PER_CALL", 1024)
# Self-reported and imported results: at most this many episodes and bytes.
HUB_EVAL_MAX_EPISODES = env_int("HUB_EVAL_MAX_EPISODES", 10_000)
HUB_EVAL_MAX_BYTES = env_int("HUB_EVAL_MAX_BYTES", 8 * 1024 * 1024)

CELERY_TASK_ROUTES = {"registry.validate_run": {"queue": "validation"}, "registry.evaluate_run": {"queue": "evaluation"}}
CELERY_BEAT_SCHEDULE = {
    "sync-hub": {"task": "registry.sync_hub", "schedule": float(HUB_SYNC_INTERVAL_S)},
    "validation-reap": {"task": "registry.validation_reap", "schedule": 30.0},
    "evaluation-reap": {"task": "registry.evaluation_reap", "schedule": 30.0},
    "validation-reprobe": {"task": "registry.validation_reprobe", "schedule": 3600.0},
}
