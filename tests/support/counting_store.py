"""An in-memory coordination store that counts its reads of notes: on Redis each one is a
round trip (issue 13)."""

from __future__ import annotations

from collections.abc import Callable

from workers.queue.memory import MemoryQueue


class NoteReadCountingQueue(MemoryQueue):
    def __init__(self, clock: Callable[[], float]) -> None:
        super().__init__(clock=clock)
        self.note_reads = 0

    def get_note(self, name: str) -> str | None:
        self.note_reads += 1
        return super().get_note(name)

    def get_notes(self, *names: str) -> list[str | None]:
        self.note_reads += 1
        return [MemoryQueue.get_note(self, name) for name in names]
