"""The request log tests inspect. It never holds a token or a cursor (S0.4.1, S0.4.2)."""

from __future__ import annotations

import copy
import threading
from dataclasses import asdict, dataclass, field
from typing import Any


@dataclass(frozen=True)
class RecordedRequest:
    """One request as the server saw it, minus secrets.

    ``query`` lacks ``cursor`` (only ``cursor_present`` says whether one came);
    ``credential_id`` is set when the bearer resolved to a live credential; ``status`` is
    the answer's HTTP status (0 when a ``Fault.disconnect`` sent none).
    """

    origin: str
    method: str
    path: str
    query: dict[str, str]
    cursor_present: bool
    authorization_present: bool
    credential_id: str | None
    status: int = 0
    acknowledged_keys: tuple[str, ...] = field(default=())

    def to_dict(self) -> dict[str, Any]:
        data = asdict(self)
        data["acknowledged_keys"] = list(self.acknowledged_keys)
        return data


class RequestLog:
    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._requests: list[RecordedRequest] = []
        self._reports: list[dict[str, Any]] = []

    def record(self, request: RecordedRequest) -> None:
        with self._lock:
            self._requests.append(request)

    def record_report(self, report: dict[str, Any]) -> None:
        with self._lock:
            self._reports.append(report)

    @property
    def requests(self) -> list[RecordedRequest]:
        with self._lock:
            return list(self._requests)

    @property
    def reports(self) -> list[dict[str, Any]]:
        with self._lock:
            return copy.deepcopy(self._reports)

    def clear_requests(self) -> None:
        with self._lock:
            self._requests.clear()

    def clear_reports(self) -> None:
        with self._lock:
            self._reports.clear()
