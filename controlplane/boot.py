"""Loading the settings at a process's start: a bad value is one line and exit 2 (S8.1)."""

from __future__ import annotations

import sys


def load_settings_or_exit() -> None:
    """Loads the settings module (its S8.1 checks run then). On an invalid value: one line
    naming the variable and the rule on stderr, exit 2, no traceback. Errors that are not ours
    are left to the caller's own handling (Django's or Celery's)."""
    from django.conf import settings
    from django.core.exceptions import ImproperlyConfigured

    from workers.engine.settings import SettingsInvalid

    try:
        settings.INSTALLED_APPS  # noqa: B018 - loads the settings module
    except SettingsInvalid as error:
        sys.stderr.write(f"hikyo-operator: {error}\n")
        sys.exit(2)
    except (ImproperlyConfigured, ImportError):
        pass
