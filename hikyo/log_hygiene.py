"""Keeps query strings (the cursor, S0.4.2) out of third-party log lines.

urllib3 logs every request line at DEBUG, URL and query included; this filter rewrites those
records before any handler sees them, whatever level an operator configures.
"""

from __future__ import annotations

import logging
import re

_QUERY = re.compile(r"\?[^\s\"']*")
_LOGGERS = ("urllib3.connectionpool", "urllib3.util.retry", "requests")


class RedactQueryStrings(logging.Filter):
    def filter(self, record: logging.LogRecord) -> bool:
        if isinstance(record.msg, str):
            record.msg = _QUERY.sub("?<redacted>", record.msg)
        if isinstance(record.args, tuple):
            record.args = tuple(
                _QUERY.sub("?<redacted>", arg) if isinstance(arg, str) else arg
                for arg in record.args
            )
        return True


def install() -> None:
    for name in _LOGGERS:
        logger = logging.getLogger(name)
        if not any(isinstance(f, RedactQueryStrings) for f in logger.filters):
            logger.addFilter(RedactQueryStrings())
