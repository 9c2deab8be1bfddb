"""`python -m controlplane <command>`: manage.py for an installed operator (the image's
entrypoint, where manage.py is not shipped): `python -m controlplane run_operator`."""

import os
import sys


def main() -> None:
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "controlplane.settings")
    from controlplane.boot import load_settings_or_exit

    load_settings_or_exit()  # S8.1: a bad setting is one line and exit 2
    from django.core.management import execute_from_command_line

    execute_from_command_line(sys.argv)


if __name__ == "__main__":
    main()
