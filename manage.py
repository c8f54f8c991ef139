#!/usr/bin/env python
"""Django's command-line utility for the control plane."""

import os
import sys


def main() -> None:
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "controlplane.settings")
    from django.core.management import execute_from_command_line

    from controlplane.lib.env import EnvError

    try:
        execute_from_command_line(sys.argv)
    except EnvError as exc:
        # A setting the environment gets wrong: one line naming the variable, not a traceback.
        sys.exit(f"configuration error: {exc}")


if __name__ == "__main__":
    main()
