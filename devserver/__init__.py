"""A reference Hikyo delivery server for tests and demos (``spec/delivery-api.yaml``).

Serves ``GET .../delivery`` and the proposed ``POST .../delivery/status`` over real HTTPS
with a throw-away CA, plus a control surface (publish, credentials, grants, reveal, pins,
capabilities, faults). The operator never imports this package; tests and demos do.
"""

from devserver.faults import Fault
from devserver.ids import new_id
from devserver.malformed import MALFORMED_KINDS, TOLERATED_KINDS
from devserver.recording import RecordedRequest
from devserver.server import DevServer
from devserver.state import Principal

__all__ = [
    "MALFORMED_KINDS",
    "TOLERATED_KINDS",
    "DevServer",
    "Fault",
    "Principal",
    "RecordedRequest",
    "new_id",
]
