"""S8.7 on the leader: the served CRDs are checked before anything is enqueued, then every
10 min, sooner while a check fails."""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Mapping
from typing import Any

from k8s.errors import describe
from k8s.gateway import VERSION

from ..engine.crd_check import served_crd_problems

log = logging.getLogger(__name__)

CRD_CHECK_EVERY_SECONDS = 600.0  # S8.7
# While a check fails, look again sooner: S8.7 holds every reconcile until one passes, and a
# fixed CRD should not wait ten minutes to be noticed.
CRD_RECHECK_FAILING_SECONDS = 15.0
CRD_UNCHECKED = "served CRDs not checked yet (S8.7)"


class ServedCrdCheck(threading.Thread):
    """S8.7 on the leader: at the start of leadership and every 10 min, GET both CRDs and
    compare them (``workers.engine.crd_check``). ``problem`` is None while the last check
    passed; until the first check passes it is not (nothing may be enqueued before)."""

    def __init__(
        self,
        read: Callable[[], Mapping[str, Any]],
        stop: threading.Event,
        *,
        version: str = VERSION,
        every: float = CRD_CHECK_EVERY_SECONDS,
        failing_every: float = CRD_RECHECK_FAILING_SECONDS,
    ) -> None:
        super().__init__(name="served-crd-check", daemon=True)
        self.read, self.stop_event, self.version = read, stop, version
        self.every, self.failing_every = every, failing_every
        self.problem: str | None = CRD_UNCHECKED

    def run(self) -> None:
        while not self.stop_event.is_set():
            self.check_once()
            self.stop_event.wait(self.failing_every if self.problem else self.every)

    def check_once(self) -> str | None:
        try:
            crds = self.read()
        except Exception as error:
            # A read that fails proves nothing about the schema: keep the last verdict, but
            # never pass before one check has.
            log.warning("served-CRD check could not read the CRDs: %s", describe(error))
            if self.problem == CRD_UNCHECKED:
                self.problem = f"served CRDs unreadable (S8.7): {describe(error)}"
            return self.problem
        problems = served_crd_problems(crds, self.version)
        found = f"served-CRD check failed (S8.7): {'; '.join(problems)}" if problems else None
        if found != self.problem:
            if found:
                log.error("%s; enqueueing nothing until the CRDs are upgraded", found)
            else:
                log.info("served-CRD check passed (S8.7)")
        self.problem = found
        return found
