"""The leader's room: what the elected process runs and no worker does.

Leader election and, on the leader, the watches (``sources``: events to keyed-queue entries),
the dispatcher (due keys out to the runs), S8.7's served-CRD check, S7.4's report gate and the
executor the runs go to (``executors``: threads here, or Celery tasks to the workers). The
worker side (``workers.tasks``, ``workers.runner``, ``workers.reporting``) never imports this
package (a lint-imports contract in pyproject.toml): the leader schedules, workers run.
"""
