"""The pure reconcile engine: imports neither Django nor kubernetes."""
