"""The only thing on the broker: an object reference (S0.4.4). Workers re-read everything."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, order=True, slots=True)  # one per CR in the router and the queues
class ObjectKey:
    namespace: str
    name: str
    uid: str

    def __str__(self) -> str:
        return f"{self.namespace}/{self.name}"

    def as_args(self) -> tuple[str, str, str]:
        return self.namespace, self.name, self.uid
