"""The operator process this Django instance runs in, if any (read by /readyz)."""

from __future__ import annotations

from typing import Any

current: Any = None  # workers.leader.process.OperatorProcess, set by run_operator
