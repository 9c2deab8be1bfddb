"""Celery app, keyed queue and the reconcile engine."""

from .celery_app import app

__all__ = ["app"]
