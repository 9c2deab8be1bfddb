"""Django settings, read from the environment with django-environ (the only reader of it).

DATABASE_URL (or HIKYO_OPERATOR_DATABASE_URL) selects the observation store; unset means
SQLite in HIKYO_OPERATOR_DATA_DIR. REDIS_URL (or HIKYO_OPERATOR_REDIS_URL) selects the scaled
mode; unset means embedded mode with no Redis at all.

S8.1: an invalid value raises SettingsInvalid with one line naming the variable and the rule;
manage.py and workers/celery_app.py print that line and exit non-zero (no traceback).
"""

from __future__ import annotations

import importlib.util
import os
import secrets
import warnings
from collections.abc import Mapping
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import environ

from workers.engine.settings import (
    SettingsInvalid,
    operator_settings_from,
    parse_address,
    parse_bool,
    parse_log_level,
)

BASE_DIR = Path(__file__).resolve().parent.parent

env = environ.Env()

# django-environ reads any unknown word as False; S8.1 booleans refuse it instead.
DEBUG: bool = parse_bool("DJANGO_DEBUG", env.str("DJANGO_DEBUG", default=""), False)
# The dashboard never shows a value, but sessions still need a key. Unset, a per-process random
# key signs them, and the dashboard answers loopback clients only
# (security.LoopbackOnlyWithoutSecretKey); the chart sets one from a Secret.
SECRET_KEY_FROM_ENVIRONMENT = bool(env.str("DJANGO_SECRET_KEY", default=""))
SECRET_KEY: str = env.str("DJANGO_SECRET_KEY", default="") or secrets.token_urlsafe(50)


def host_list(raw: str, default: list[str]) -> list[str]:
    """A comma-separated list, blanks dropped; unset or blank means ``default``."""
    items = [item.strip() for item in raw.split(",") if item.strip()]
    return items or default


# The dashboard's Host check; the probes answer any Host (views.ProbesAnyHost, S8.3). Behind a
# Service or an Ingress list the names clients use: "hikyo-operator.hikyo-system.svc,
# dashboard.example.com" (a leading dot matches subdomains). localhost serves port-forwards.
ALLOWED_HOSTS: list[str] = host_list(
    env.str("DJANGO_ALLOWED_HOSTS", default=""), ["localhost", "127.0.0.1", "[::1]"]
)
# Origins (scheme://host[:port]) a proxy presents that differ from the Host Django sees.
CSRF_TRUSTED_ORIGINS: list[str] = host_list(env.str("DJANGO_CSRF_TRUSTED_ORIGINS", default=""), [])

DATA_DIR = Path(env.str("HIKYO_OPERATOR_DATA_DIR", default=str(BASE_DIR / "var")))

POSTGRESQL_ENGINES = frozenset(
    {"django.db.backends.postgresql", "django.contrib.gis.db.backends.postgis"}
)
REDIS_SCHEMES = frozenset({"redis", "rediss", "unix"})
SQLITE_FILE = "hikyo-operator.sqlite3"  # the default store, in HIKYO_OPERATOR_DATA_DIR
# WAL and a busy timeout: a management command or a dashboard request may write beside the
# recorder. IMMEDIATE: a transaction takes the write lock as it begins, so it waits out
# another writer (the busy timeout); a deferred one that read first and wrote after another
# connection's commit failed at once with "database is locked", however long the timeout.
# synchronous=NORMAL: in WAL mode a crash cannot corrupt the store, it can only lose the last
# commits of history, and commits stop waiting for an fsync each. A page cache of 512 KiB
# per connection (SQLite's default is 2 MiB): the recorder and each dashboard request thread
# has its own connection, and a cache miss is only a read from the OS's page cache (issue 13:
# the pod within 128 MiB).
SQLITE_OPTIONS = {
    "timeout": 20,
    "transaction_mode": "IMMEDIATE",
    "init_command": "PRAGMA journal_mode=WAL; PRAGMA synchronous=NORMAL; PRAGMA cache_size=-512;",
}
POSTGRES_CONNECT_TIMEOUT_SECONDS = 5
# Observation writes are single-row inserts and small prunes; 30 s means the server is stuck
# (a migration's ALTER on a big table also fits).
POSTGRES_STATEMENT_TIMEOUT_MS = 30_000


def redis_url_from(environ: Mapping[str, str]) -> tuple[str, str] | None:
    """S8.4: a Redis URL means scaled mode; returns (variable, url). Checked by scheme only and
    never echoed (it may carry a password)."""
    for variable in ("HIKYO_OPERATOR_REDIS_URL", "REDIS_URL"):
        url = (environ.get(variable) or "").strip()
        if url:
            try:
                scheme = urlsplit(url).scheme
            except ValueError:  # e.g. an unclosed [ in the host: never echo the URL
                scheme = ""
            if scheme not in REDIS_SCHEMES:
                raise SettingsInvalid(
                    f"{variable} is not a Redis URL (redis://, rediss:// or unix://)"
                )
            return variable, url
    return None


def database_from(
    environ: Mapping[str, str], data_dir: Path, *, scaled: bool, redis_variable: str = ""
) -> dict[str, Any]:
    """The observation store (S8.1): the DSN when set, else SQLite in ``data_dir``.

    Scaled mode requires PostgreSQL: SQLite cannot take several writing processes (it gave
    "database is locked" for ~18 % of records). Messages name the variable, never the URL.
    """
    variable, url = "HIKYO_OPERATOR_DATABASE_URL", ""
    for candidate in ("HIKYO_OPERATOR_DATABASE_URL", "DATABASE_URL"):
        if (environ.get(candidate) or "").strip():
            variable, url = candidate, environ[candidate].strip()
            break
    if not url:
        if scaled:
            raise SettingsInvalid(
                f"HIKYO_OPERATOR_DATABASE_URL must be set to a PostgreSQL DSN "
                f"(postgresql://...) in scaled mode ({redis_variable} is set)"
            )
        return {
            "ENGINE": "django.db.backends.sqlite3",
            "NAME": str(data_dir / SQLITE_FILE),
            "OPTIONS": dict(SQLITE_OPTIONS),
        }
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # django-environ's warnings print the password
            config = env.db_url_config(url)
    except Exception:  # its messages may quote the URL
        config = {}
    engine = config.get("ENGINE")
    if scaled and engine not in POSTGRESQL_ENGINES:
        raise SettingsInvalid(
            f"{variable} must be a PostgreSQL DSN (postgresql://...) in scaled mode "
            f"({redis_variable} is set); SQLite cannot take several writing processes"
        )
    if engine not in POSTGRESQL_ENGINES | {"django.db.backends.sqlite3"}:
        raise SettingsInvalid(
            f"{variable} must be a PostgreSQL DSN (postgresql://...) or sqlite:///<path>"
        )
    if engine in POSTGRESQL_ENGINES and not (
        importlib.util.find_spec("psycopg") or importlib.util.find_spec("psycopg2")
    ):
        raise SettingsInvalid(
            f"{variable} is a PostgreSQL DSN but no PostgreSQL driver (psycopg) is installed"
        )
    if engine == "django.db.backends.sqlite3":
        config["OPTIONS"] = {**SQLITE_OPTIONS, **config.get("OPTIONS", {})}
    if engine in POSTGRESQL_ENGINES:
        # Every PostgreSQL call bounded: connecting, and each statement (a DSN's own stay).
        options = config.setdefault("OPTIONS", {})
        options.setdefault("connect_timeout", POSTGRES_CONNECT_TIMEOUT_SECONDS)
        if "statement_timeout" not in options.get("options", ""):
            options["options"] = (
                f"{options.get('options', '')} -c statement_timeout={POSTGRES_STATEMENT_TIMEOUT_MS}"
            ).strip()
    return config


# Optional: present means the scaled mode (Celery workers and the keyed queue on Redis).
_redis = redis_url_from(os.environ)
REDIS_URL: str | None = _redis[1] if _redis else None
DATABASES = {
    "default": database_from(
        os.environ, DATA_DIR, scaled=_redis is not None, redis_variable=_redis[0] if _redis else ""
    )
}
if DATABASES["default"]["NAME"] == str(DATA_DIR / SQLITE_FILE):
    try:
        DATA_DIR.mkdir(parents=True, exist_ok=True)  # SQLite needs its directory
    except OSError as error:
        raise SettingsInvalid(
            f"HIKYO_OPERATOR_DATA_DIR={str(DATA_DIR)!r} cannot be created: {error.strerror}"
        ) from None

INSTALLED_APPS = [
    "django.contrib.admin",
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "django.contrib.messages",
    "django.contrib.staticfiles",
    "controlplane.observations",
]

MIDDLEWARE = [
    # First: /healthz, /readyz and /metrics answer any Host (probes hit the pod IP, S8.3).
    "controlplane.observations.views.ProbesAnyHost",
    # Without DJANGO_SECRET_KEY the dashboard answers loopback clients only (issue 35 item 8).
    "controlplane.observations.security.LoopbackOnlyWithoutSecretKey",
    "django.middleware.security.SecurityMiddleware",
    "controlplane.observations.security.ContentSecurityPolicy",
    # Static files answer here, before sessions and the database (whitenoise's documented spot).
    "whitenoise.middleware.WhiteNoiseMiddleware",
    # A page that met a missing table (the store re-created empty) migrated it: ask again.
    "controlplane.observations.healing.HealStore",
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.middleware.common.CommonMiddleware",
    # Failed logins counted per client: over the limit, a login POST is answered 429.
    "controlplane.observations.login_throttle.LoginThrottle",
    "django.middleware.csrf.CsrfViewMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    "django.contrib.messages.middleware.MessageMiddleware",
    "django.middleware.clickjacking.XFrameOptionsMiddleware",
]

ROOT_URLCONF = "controlplane.urls"
WSGI_APPLICATION = "controlplane.wsgi.application"

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
            ],
        },
    },
]

AUTH_PASSWORD_VALIDATORS = [
    {"NAME": "django.contrib.auth.password_validation.UserAttributeSimilarityValidator"},
    {"NAME": "django.contrib.auth.password_validation.MinimumLengthValidator"},
    {"NAME": "django.contrib.auth.password_validation.CommonPasswordValidator"},
    {"NAME": "django.contrib.auth.password_validation.NumericPasswordValidator"},
]

LANGUAGE_CODE = "en-us"
TIME_ZONE = "UTC"
USE_I18N = True
USE_TZ = True

STATIC_URL = "static/"
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"

# Static files (the admin's CSS, JS and icons) are served by whitenoise, DEBUG on or off.
# Default: straight from the installed apps through Django's finders, so there is no
# collectstatic step to forget and nothing to write in a read-only container; whitenoise reads
# the few hundred files' metadata once at start. DJANGO_STATIC_ROOT names a directory filled at
# image build by `manage.py collectstatic`; it is then served instead of the finders.
STATIC_ROOT: str | None = env.str("DJANGO_STATIC_ROOT", default="") or None
WHITENOISE_USE_FINDERS = STATIC_ROOT is None

# The dashboard's browser security (issue 10 item 6). Django's own: CSRF on every POST (the
# CsrfViewMiddleware above), no framing, no MIME sniffing, the referrer kept on this origin.
X_FRAME_OPTIONS = "DENY"
SECURE_CONTENT_TYPE_NOSNIFF = True
SECURE_REFERRER_POLICY = "same-origin"
SECURE_CROSS_ORIGIN_OPENER_POLICY = "same-origin"
# Ours (controlplane.observations.security; Django 5.2 has none): the admin loads scripts,
# styles, images and fonts from its own static files and has no inline script or style.
CONTENT_SECURITY_POLICY = (
    "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self'; "
    "font-src 'self'; connect-src 'self'; form-action 'self'; frame-ancestors 'none'; "
    "base-uri 'none'; object-src 'none'"
)
SESSION_COOKIE_HTTPONLY = True
CSRF_COOKIE_HTTPONLY = True  # the admin's forms carry the token; no script reads the cookie
SESSION_COOKIE_SAMESITE = CSRF_COOKIE_SAMESITE = "Lax"
SESSION_COOKIE_AGE = 8 * 60 * 60  # a working day, then log in again
# Sessions live in the database (Django's default engine, said here because scaled mode
# relies on it): every run_operator replica sees the same logins through PostgreSQL.
SESSION_ENGINE = "django.contrib.sessions.backends.db"
# HIKYO_OPERATOR_HTTPS=true: the dashboard is reached over https through a TLS-terminating
# proxy (an Ingress) that sets X-Forwarded-Proto: https and drops any the client sent. Then the
# cookies are Secure, HSTS is sent on https responses, and CSRF's origin check expects https.
# The operator itself serves plain HTTP (probes and port-forwards keep working); redirecting
# http to https is the proxy's job: done here it loops when the proxy omits the header.
HTTPS: bool = parse_bool("HIKYO_OPERATOR_HTTPS", env.str("HIKYO_OPERATOR_HTTPS", default=""), False)
if HTTPS:
    SECURE_PROXY_SSL_HEADER = ("HTTP_X_FORWARDED_PROTO", "https")
    SESSION_COOKIE_SECURE = CSRF_COOKIE_SECURE = True
    SECURE_HSTS_SECONDS = 365 * 24 * 60 * 60
    # This host only, never preloaded: the domain's other hosts are not ours to commit.
    SECURE_HSTS_INCLUDE_SUBDOMAINS = SECURE_HSTS_PRELOAD = False
    # `check --deploy` is clean but for these choices: W008 SECURE_SSL_REDIRECT (the proxy's,
    # above), W005 and W021 (includeSubDomains, preload).
    SILENCED_SYSTEM_CHECKS = ["security.W005", "security.W008", "security.W021"]

# Celery reads CELERY_* from here (workers/celery_app.py). Only used in scaled mode.
CELERY_BROKER_URL = REDIS_URL or "memory://"
CELERY_TASK_SERIALIZER = "json"
CELERY_ACCEPT_CONTENT = ["json"]
CELERY_RESULT_BACKEND = None
CELERY_TASK_IGNORE_RESULT = True
CELERY_TASK_ACKS_LATE = True
CELERY_TASK_REJECT_ON_WORKER_LOST = True
CELERY_WORKER_PREFETCH_MULTIPLIER = 1
# Workers survive Redis (issue 7 item 4): reconnect for ever, at start and after a loss, with
# every broker socket bounded. kombu's Redis transport with the reconnect fix (workers/broker.py)
# for redis:// URLs; rediss:// and unix:// keep kombu's own (its TLS checks match the scheme).
CELERY_BROKER_TRANSPORT = (
    "workers.broker:Transport" if (REDIS_URL or "").startswith("redis://") else None
)
CELERY_BROKER_CONNECTION_RETRY = True
CELERY_BROKER_CONNECTION_RETRY_ON_STARTUP = True
CELERY_BROKER_CONNECTION_MAX_RETRIES = None  # never give up: Redis comes back, workers stay
CELERY_BROKER_CONNECTION_TIMEOUT = 5.0
# Running reconciles are not killed on a lost connection: each is fenced by its key lock and
# level-based (S4.1.4), and killing one would hold its key until the lock TTL (also celery#9250).
CELERY_WORKER_CANCEL_LONG_RUNNING_TASKS_ON_CONNECTION_LOSS = False
# A Redis error escaping a task is one "raised expected" line, not a traceback (issue 7 item 4).
CELERY_TASK_ANNOTATIONS = ["workers.broker:StoreErrorsExpected"]
# A message unacknowledged this long is redelivered; the dispatcher's stale check (150 s) is
# what actually recovers a worker killed mid-run, this only bounds the duplicate. Redis has no
# AMQP heartbeat (broker_heartbeat is ignored): health_check_interval PINGs an idle connection
# before use, and the timeouts bound every read (BRPOP polls every 1 s) and connect.
CELERY_BROKER_TRANSPORT_OPTIONS = {
    "visibility_timeout": 600,
    "socket_timeout": 10.0,
    "socket_connect_timeout": 5.0,
    "socket_keepalive": True,
    "health_check_interval": 10,
}
CELERY_WORKER_HIJACK_ROOT_LOGGER = False

LOGGING = {
    "version": 1,
    "disable_existing_loggers": False,
    "formatters": {"plain": {"format": "%(asctime)s %(levelname)s %(name)s %(message)s"}},
    "filters": {
        "without_traceback": {"()": "controlplane.observations.security.WithoutTraceback"},
        "client_errors_without_traceback": {
            "()": "controlplane.observations.security.ClientErrorsWithoutTraceback"
        },
    },
    "handlers": {
        "console": {"class": "logging.StreamHandler", "formatter": "plain"},
        "console_short": {
            "class": "logging.StreamHandler",
            "formatter": "plain",
            "filters": ["without_traceback"],
        },
    },
    "root": {
        "handlers": ["console"],
        "level": parse_log_level("HIKYO_LOG_LEVEL", env.str("HIKYO_LOG_LEVEL", default=""), "INFO"),
    },
    "loggers": {
        # An unlisted Host on a dashboard path: one line naming it, no traceback.
        "django.security.DisallowedHost": {"handlers": ["console_short"], "propagate": False},
        # A 403 or 400 the dashboard answers on purpose: one line; a 5xx keeps its traceback.
        "django.request": {"filters": ["client_errors_without_traceback"]},
        "workers": {
            "level": parse_log_level(
                "HIKYO_WORKERS_LOG_LEVEL",
                env.str("HIKYO_WORKERS_LOG_LEVEL", default=""),
                "NOTSET",
            )
        },
    },
}

# The operator's own settings (S8.1), parsed once here; an invalid value stops the process.
HIKYO_OPERATOR = operator_settings_from(os.environ)
KUBECONFIG: str | None = env.str("KUBECONFIG", default="") or None
# run_operator serves /healthz, /readyz and the dashboard here (S8.1 HIKYO_OPERATOR_HEALTH_ADDR).
HIKYO_HTTP_ADDR: str = env.str("HIKYO_OPERATOR_HEALTH_ADDR", default="").strip() or ":8081"
parse_address("HIKYO_OPERATOR_HEALTH_ADDR", HIKYO_HTTP_ADDR, ":8081")
# S8.1/S8.6: /metrics of run_operator and of each Celery worker (workers/metrics.py).
HIKYO_METRICS_ADDR: str = env.str("HIKYO_OPERATOR_METRICS_ADDR", default="").strip() or ":8080"
parse_address("HIKYO_OPERATOR_METRICS_ADDR", HIKYO_METRICS_ADDR, ":8080")
