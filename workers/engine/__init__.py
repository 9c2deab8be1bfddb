"""The reconcile engine: pure decisions over plain data (``decide``, ``decide_after_fetch``,
...) and the ``observe``/``fetch``/``apply`` phases, which reach the outside only through the
ports they are given (``ports``); no Django, Celery, kubernetes client or HTTP library
(pyproject.toml's import-linter contracts)."""
