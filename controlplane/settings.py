"""Django settings, read from the environment with django-environ (the only reader of it).

DATABASE_URL (or HIKYO_OPERATOR_DATABASE_URL) selects the observation store; unset means
SQLite in HIKYO_OPERATOR_DATA_DIR. REDIS_URL (or HIKYO_OPERATOR_REDIS_URL) selects the scaled
mode; unset means embedded mode with no Redis at all.
"""

from __future__ import annotations

import os
import secrets
from pathlib import Path

import environ
from django.core.exceptions import ImproperlyConfigured

from workers.engine.settings import SettingsInvalid, operator_settings_from

BASE_DIR = Path(__file__).resolve().parent.parent

env = environ.Env(
    DJANGO_DEBUG=(bool, False),
    DJANGO_ALLOWED_HOSTS=(list, ["localhost", "127.0.0.1", "[::1]"]),
)

DEBUG: bool = env("DJANGO_DEBUG")
# The dashboard never shows a value, but sessions still need a key; a per-process random key
# is safe for the embedded default (sessions then last one process lifetime).
SECRET_KEY: str = env.str("DJANGO_SECRET_KEY", default="") or secrets.token_urlsafe(50)
ALLOWED_HOSTS: list[str] = env("DJANGO_ALLOWED_HOSTS")

DATA_DIR = Path(env.str("HIKYO_OPERATOR_DATA_DIR", default=str(BASE_DIR / "var")))

_database_url = env.str("HIKYO_OPERATOR_DATABASE_URL", default="") or env.str(
    "DATABASE_URL", default=""
)
DATABASES = {
    "default": env.db_url_config(_database_url)
    if _database_url
    else {
        "ENGINE": "django.db.backends.sqlite3",
        "NAME": str(DATA_DIR / "hikyo-operator.sqlite3"),
        # WAL and a busy timeout: several worker processes may record at once (tests, demos).
        "OPTIONS": {"timeout": 20, "init_command": "PRAGMA journal_mode=WAL;"},
    }
}
if not _database_url:
    DATA_DIR.mkdir(parents=True, exist_ok=True)  # SQLite needs its directory

# Optional: present means the scaled mode (Celery workers and the keyed queue on Redis).
REDIS_URL: str | None = (
    env.str("HIKYO_OPERATOR_REDIS_URL", default="") or env.str("REDIS_URL", default="") or None
)

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
    "django.middleware.security.SecurityMiddleware",
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.middleware.common.CommonMiddleware",
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

# Celery reads CELERY_* from here (workers/celery_app.py). Only used in scaled mode.
CELERY_BROKER_URL = REDIS_URL or "memory://"
CELERY_TASK_SERIALIZER = "json"
CELERY_ACCEPT_CONTENT = ["json"]
CELERY_RESULT_BACKEND = None
CELERY_TASK_IGNORE_RESULT = True
CELERY_TASK_ACKS_LATE = True
CELERY_TASK_REJECT_ON_WORKER_LOST = True
CELERY_WORKER_PREFETCH_MULTIPLIER = 1
CELERY_BROKER_CONNECTION_RETRY_ON_STARTUP = True
# A message unacknowledged this long is redelivered; the dispatcher's stale check (150 s) is
# what actually recovers a worker killed mid-run, this only bounds the duplicate.
CELERY_BROKER_TRANSPORT_OPTIONS = {"visibility_timeout": 600}
CELERY_WORKER_HIJACK_ROOT_LOGGER = False

LOGGING = {
    "version": 1,
    "disable_existing_loggers": False,
    "formatters": {"plain": {"format": "%(asctime)s %(levelname)s %(name)s %(message)s"}},
    "handlers": {"console": {"class": "logging.StreamHandler", "formatter": "plain"}},
    "root": {"handlers": ["console"], "level": env.str("HIKYO_LOG_LEVEL", default="INFO")},
    "loggers": {"workers": {"level": env.str("HIKYO_WORKERS_LOG_LEVEL", default="NOTSET")}},
}

# Where `manage.py dev_cluster up` keeps the local control plane's state (PKI, logs, kubeconfig).
DEV_CLUSTER_DIR = Path(
    env.str(
        "HIKYO_DEV_CLUSTER_DIR",
        default=str(
            Path(env.str("XDG_CACHE_HOME", default=str(Path.home() / ".cache")))
            / "hikyo-dev"
            / "cluster"
        ),
    )
)

# The operator's own settings (S8.1), parsed once here; an invalid value stops the process.
try:
    HIKYO_OPERATOR = operator_settings_from(os.environ)
except SettingsInvalid as error:
    raise ImproperlyConfigured(str(error)) from error
KUBECONFIG: str | None = env.str("KUBECONFIG", default="") or None
# run_operator serves /healthz, /readyz and the dashboard here (S8.1 HIKYO_OPERATOR_HEALTH_ADDR).
HIKYO_HTTP_ADDR: str = env.str("HIKYO_OPERATOR_HEALTH_ADDR", default=":8081")
