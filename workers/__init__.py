"""Celery app (workers.celery_app), keyed queue and the reconcile engine (workers.engine).

Nothing is imported here, so the pure engine never drags in Celery or Django: run workers with
``celery -A workers.celery_app worker``.
"""
