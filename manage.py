#!/usr/bin/env python
"""Django's command-line utility for the hikyo-operator control plane (the same as
`python -m controlplane`, which the image runs)."""

from controlplane.__main__ import main

if __name__ == "__main__":
    main()
