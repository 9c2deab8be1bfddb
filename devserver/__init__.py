"""A reference Hikyo delivery server for tests and demos (``spec/delivery-api.yaml``).

Serves ``GET .../delivery`` and the proposed ``POST .../delivery/status`` (plus the
devserver-only ``GET .../delivery/values``, a flat JSON object for generic webhook clients
such as External Secrets Operator's) over real HTTPS
with a throw-away CA, plus a control surface (publish, credentials, grants, reveal, pins,
capabilities, faults). The operator never imports this package; tests and demos do.

    with DevServer() as server:
        server.publish(org, project, env, [{"name": "A", "classification": "config", "value": "1"}])
        server.add_credential("hik_x", org, project, env, grants={"read"})
        server.set_fault("hik_x", Fault.status(503), times=1)
        # HikyoInstance: spec.url = server.url, spec.caBundle = server.ca_bundle_b64

Module map: ``state`` (catalogue, credentials, pins), ``delivery`` (the 200 body),
``cursors`` (change tokens, cursors), ``faults`` and ``malformed`` (injected behaviour),
``reports`` (status report schema), ``app`` (request decisions), ``http`` (sockets, TLS),
``pki`` (throw-away CA), ``federation`` (ServiceAccount JWTs: trusted issuers, JWKS,
bindings), ``control`` and ``__main__`` (standalone use).
"""

from devserver.faults import Fault
from devserver.federation import Binding, service_account_subject
from devserver.ids import new_id
from devserver.malformed import MALFORMED_KINDS, TOLERATED_KINDS
from devserver.recording import RecordedRequest
from devserver.server import DevServer
from devserver.state import Principal

__all__ = [
    "MALFORMED_KINDS",
    "TOLERATED_KINDS",
    "Binding",
    "DevServer",
    "Fault",
    "Principal",
    "RecordedRequest",
    "new_id",
    "service_account_subject",
]
