"""A process's start: a bad setting is one line and exit 2 (S8.1); a missing or unusable
Kubernetes configuration is one line and exit 1 (issue 33 item 5). Never a traceback."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from contextlib import contextmanager


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
        exit_with_one_line(str(error), 2)
    except (ImproperlyConfigured, ImportError):
        pass


@contextmanager
def cluster_errors_as_one_line() -> Iterator[None]:
    """Around a command or a process start that needs the cluster: no usable kubeconfig (nor
    in-cluster configuration) is one line on stderr naming where it looked, and exit 1."""
    try:
        yield
    except Exception as error:
        from k8s.client import ClusterUnavailable  # imported by then: it raised this

        if not isinstance(error, ClusterUnavailable):
            raise
        exit_with_one_line(str(error), 1)


def exit_with_one_line(message: str, code: int) -> None:
    sys.stderr.write(f"hikyo-operator: {message}\n")
    sys.stderr.flush()
    sys.exit(code)
