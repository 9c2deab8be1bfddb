"""The pure reconcile engine: decisions over plain data; imports neither Django nor kubernetes."""

from . import log_hygiene

log_hygiene.install()
