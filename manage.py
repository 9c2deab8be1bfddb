#!/usr/bin/env python
"""Django's command-line utility for the hikyo-operator control plane."""

import os
import sys


def main() -> None:
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "controlplane.settings")
    from django.conf import settings
    from django.core.exceptions import ImproperlyConfigured

    from workers.engine.settings import SettingsInvalid

    try:
        settings.INSTALLED_APPS  # noqa: B018 - loads the settings module: S8.1 checks run here
    except SettingsInvalid as error:
        # S8.1: one line naming the variable and the rule, exit non-zero, no traceback.
        sys.stderr.write(f"hikyo-operator: {error}\n")
        sys.exit(2)
    except (ImproperlyConfigured, ImportError):
        pass  # not ours: Django's own handling below reports it, as it always did
    from django.core.management import execute_from_command_line

    execute_from_command_line(sys.argv)


if __name__ == "__main__":
    main()
