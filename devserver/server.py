"""``DevServer``: the reference Hikyo delivery server tests and demos start in-process."""

from __future__ import annotations

import datetime as dt
import shutil
import tempfile
import threading
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path
from types import TracebackType
from typing import Any, Self
from urllib.parse import quote

from devserver import pki
from devserver.app import DeliveryApp, TokenVerifier
from devserver.cursors import CursorKeyring
from devserver.faults import Fault, FaultBook
from devserver.federation import Binding, Federation
from devserver.http import OriginServer
from devserver.recording import RecordedRequest, RequestLog
from devserver.state import State


def _utcnow() -> dt.datetime:
    return dt.datetime.now(dt.UTC)


def _check_prefix(prefix: str) -> str:
    if prefix and (
        not prefix.startswith("/")
        or prefix.endswith("/")
        or "?" in prefix
        or "#" in prefix
        or "//" in prefix
    ):
        raise ValueError("path_prefix is empty or like '/hikyo' (leading '/', no trailing '/')")
    return prefix


class DevServer:
    """A Hikyo delivery server (delivery-api.yaml) on two loopback HTTPS origins.

    The control methods are thread-safe and work before :meth:`start` too (to preload
    state). ``url`` is what a HikyoInstance's ``spec.url`` gets; ``ca_bundle_b64`` its
    ``caBundle``. ``second_origin_url`` serves the same API with the same CA, so a redirect
    to it can show whether a client forwarded its bearer (S3.2).
    """

    def __init__(
        self,
        path_prefix: str = "",
        *,
        strict_ids: bool = False,
        clock: Callable[[], dt.datetime] = _utcnow,
        port: int = 0,
        second_port: int = 0,
        state_dir: Path | None = None,
        host: str = "127.0.0.1",
    ) -> None:
        self.path_prefix = _check_prefix(path_prefix)
        self.host = host  # where both origins listen: a local node's pods need its address
        self._clock = clock
        self._ports = (port, second_port)
        self._state_dir = state_dir
        self._own_dir: Path | None = None
        self._state = State(clock)
        self._keyring = CursorKeyring()
        self._faults = FaultBook()
        self._federation = Federation(clock)
        self._log = RequestLog()
        self._stopping = threading.Event()
        self._servers: list[OriginServer] = []
        self._threads: list[threading.Thread] = []
        self._pki: pki.ServingPki | None = None
        self._ca_path: Path | None = None
        self._app = DeliveryApp(
            self._state,
            self._keyring,
            self._faults,
            self._log,
            path_prefix=self.path_prefix,
            strict_ids=strict_ids,
            clock=clock,
            second_origin=lambda: self.second_origin_url,
        )

    # -- lifecycle ---------------------------------------------------------------------

    def start(self) -> Self:
        if self._servers:
            raise RuntimeError("already started")
        self._pki = pki.generate(self.host)
        if self._state_dir is None:
            self._own_dir = Path(tempfile.mkdtemp(prefix="hikyo-devserver-"))
            directory = self._own_dir
        else:
            directory = self._state_dir
            directory.mkdir(parents=True, exist_ok=True)
        self._ca_path = directory / "ca.pem"
        self._ca_path.write_bytes(self._pki.ca_pem)
        context = pki.server_context(self._pki, directory)
        self._stopping.clear()
        try:
            for origin, port in zip(("main", "second"), self._ports, strict=True):
                server = OriginServer(origin, self._app, context, self._stopping, port, self.host)
                self._servers.append(server)
                thread = threading.Thread(
                    target=server.serve,
                    name=f"devserver-{origin}",
                    daemon=True,
                )
                thread.start()
                self._threads.append(thread)
        except BaseException:
            self.stop()
            raise
        return self

    def stop(self) -> None:
        """Stops both origins and wakes every open connection; idempotent."""
        self._stopping.set()
        for server in self._servers:
            server.request_stop()
        for thread in self._threads:
            thread.join(timeout=5)
        for server in self._servers:
            server.server_close()
            server.close_connections()
        self._servers.clear()
        self._threads.clear()
        if self._own_dir is not None:
            shutil.rmtree(self._own_dir, ignore_errors=True)
            self._own_dir = None

    def __enter__(self) -> Self:
        return self.start() if not self._servers else self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()

    # -- addresses and trust -----------------------------------------------------------

    def _origin(self, index: int) -> str:
        if not self._servers:
            raise RuntimeError("the devserver is not started")
        return f"https://{self.host}:{self._servers[index].port}"

    @property
    def url(self) -> str:
        """Base URL including ``path_prefix`` (HikyoInstance ``spec.url``)."""
        return self._origin(0) + self.path_prefix

    @property
    def second_origin_url(self) -> str:
        """The other origin, without prefix (a redirect appends the original path)."""
        return self._origin(1)

    @property
    def ca_pem(self) -> bytes:
        if self._pki is None:
            raise RuntimeError("the devserver is not started")
        return self._pki.ca_pem

    @property
    def ca_bundle_b64(self) -> str:
        if self._pki is None:
            raise RuntimeError("the devserver is not started")
        return self._pki.ca_bundle_b64

    @property
    def ca_path(self) -> Path:
        if self._ca_path is None:
            raise RuntimeError("the devserver is not started")
        return self._ca_path

    def delivery_url(self, org: str, project: str, environment: str) -> str:
        """``{url}/api/v1/orgs/{org}/projects/{project}/environments/{environment}/delivery``."""
        org, project, environment = (quote(part, safe="") for part in (org, project, environment))
        return (
            f"{self.url}/api/v1/orgs/{org}/projects/{project}/environments/{environment}/delivery"
        )

    def status_url(self, org: str, project: str, environment: str) -> str:
        return self.delivery_url(org, project, environment) + "/status"

    def values_url(self, org: str, project: str, environment: str) -> str:
        """The devserver-only flat values route (``devserver.app`` docstring)."""
        return self.delivery_url(org, project, environment) + "/values"

    # -- catalogue and authority -------------------------------------------------------

    def publish(
        self, org: str, project: str, environment: str, keys: Iterable[Mapping[str, Any]]
    ) -> int:
        """Commits a new revision (``schema_revision`` + 1) and returns its number.

        Each key: ``name``, ``classification`` (``secret``/``config``), ``value`` and
        ``presence`` (default ``set`` when a value is given). ``set`` keys always carry a
        value; other presences are catalogue rules for keys the snapshot does not carry.
        """
        return self._state.publish(org, project, environment, keys)

    def unpublish(self, org: str, project: str, environment: str) -> None:
        """Deliveries answer 409 ``conflict`` until the next :meth:`publish`."""
        self._state.unpublish(org, project, environment)

    def add_credential(
        self,
        token: str,
        org: str,
        project: str,
        environment: str,
        grants: Iterable[str] = ("read", "reveal"),
        expires_at: dt.datetime | None = None,
    ) -> str:
        """Registers a machine bearer for one environment; returns its credential id.

        Grants: ``read``, ``reveal``, ``reveal-history``, ``report-delivery-status``.
        ``expires_at`` is timezone-aware; once past, the token answers 401.
        """
        return self._state.add_credential(token, org, project, environment, grants, expires_at)

    def set_grants(self, token: str, grants: Iterable[str]) -> None:
        self._state.set_grants(token, grants)

    def set_expiry(self, token: str, expires_at: dt.datetime | None) -> None:
        self._state.set_expiry(token, expires_at)

    def revoke(self, token: str) -> None:
        self._state.revoke(token)

    def set_machine_reveal(self, org: str, project: str, enabled: bool) -> None:
        """The project's machine-reveal opt-in (default off): secrets need it plus reveal."""
        self._state.set_machine_reveal(org, project, enabled)

    def pin(
        self,
        token: str,
        revision: int,
        expired: bool = False,
        collected: bool = False,
        refused: bool = False,
    ) -> None:
        """A durable pin: serve ``revision`` with ``pinned_revision``; ``expired`` sets
        ``pin_expired``; ``collected`` answers 409 with detail; ``refused`` answers 400.

        Secrets of a pinned revision that is no longer current need ``reveal-history``.
        """
        self._state.pin(token, revision, expired=expired, collected=collected, refused=refused)

    def unpin(self, token: str) -> None:
        self._state.unpin(token)

    def set_capabilities(self, capabilities: Iterable[str] | None) -> None:
        """Default ``["status-report"]``; ``None`` omits the member (and the report route)."""
        self._state.set_capabilities(capabilities)

    def rotate_cursor_key(self) -> None:
        """Invalidates every cursor issued so far (server token-key rotation, S4.3.5)."""
        self._keyring.rotate()

    # -- ServiceAccount federation (S2.3) ------------------------------------------------

    def trust_issuer(
        self,
        issuer: str,
        *,
        audience: str,
        jwks: Mapping[str, Any] | None = None,
        discovery_ca_pem: bytes | None = None,
        discovery_token: str | None = None,
        refused_audiences: Iterable[str] = (),
    ) -> None:
        """Trusts a JWT issuer (``iss``, byte-exact) and installs the federation verifier.

        Keys come from ``jwks`` (a static JWK Set) or, without it, from OIDC discovery of
        ``{issuer}/.well-known/openid-configuration`` and its ``jwks_uri`` over HTTPS that
        trusts only ``discovery_ca_pem`` (system roots when ``None``), optionally sending
        ``discovery_token`` as bearer to the issuer's origin. ``audience`` is the default
        audience of :meth:`bind_subject`; tokens carrying a ``refused_audiences`` entry
        (say, the API server's own) are refused. Calling it again replaces the issuer's
        configuration and drops its cached keys; bindings stay. See
        :mod:`devserver.federation` for what a token must satisfy.

        Raises :class:`RuntimeError` when another :attr:`token_verifier` is installed.
        """
        current = self._app.token_verifier
        if current is not None and current != self._federation.verify:
            raise RuntimeError("a custom token_verifier is installed; federation would replace it")
        self._federation.trust_issuer(
            issuer,
            audience=audience,
            jwks=jwks,
            discovery_ca_pem=discovery_ca_pem,
            discovery_token=discovery_token,
            refused_audiences=refused_audiences,
        )
        self._app.token_verifier = self._federation.verify

    def bind_subject(
        self,
        issuer: str,
        subject: str,
        *,
        org: str,
        project: str,
        environment: str,
        grants: Iterable[str] = ("read", "reveal"),
        audience: str | None = None,
    ) -> str:
        """Binds the exact (issuer, subject, audience) to one environment; returns the
        binding's credential id (what the request log records for its tokens).

        ``subject`` is e.g. ``system:serviceaccount:<ns>:<name>``
        (:func:`devserver.federation.service_account_subject`); ``audience`` defaults to the
        issuer's. Bindings are immutable: binding the same triple again raises
        :class:`ValueError`; :meth:`unbind_subject` removes one.
        """
        return self._federation.bind_subject(
            issuer,
            subject,
            org=org,
            project=project,
            environment=environment,
            grants=grants,
            audience=audience,
        )

    def unbind_subject(self, credential_id: str) -> None:
        self._federation.unbind(credential_id)

    @property
    def federation_bindings(self) -> list[Binding]:
        return self._federation.bindings

    def jwks_fetches(self, issuer: str) -> int:
        """Discovery + JWKS fetches made under the issuer's current configuration."""
        return self._federation.jwks_fetches(issuer)

    @property
    def token_verifier(self) -> TokenVerifier | None:
        """Federation hook (S2.3): called with bearers the devserver did not mint.

        Return a :class:`devserver.Principal` (credential id, scope, grants, optional expiry)
        to accept the token, ``None`` to answer 401. :meth:`trust_issuer` installs the
        built-in ServiceAccount-JWT verifier here; setting another replaces it.
        """
        return self._app.token_verifier

    @token_verifier.setter
    def token_verifier(self, verifier: TokenVerifier | None) -> None:
        self._app.token_verifier = verifier

    # -- faults ------------------------------------------------------------------------

    def set_fault(
        self,
        token: str | None,
        fault: Fault,
        times: int | None = None,
        route: str | None = None,
    ) -> None:
        """Applies ``fault`` to the next ``times`` requests (``None``: until cleared) on the
        main origin that present ``token`` (``None``: every request). ``route`` limits it
        to ``"delivery"`` or ``"status"``. A token's own fault wins over the global one."""
        self._faults.arm(token, fault, times, route)

    def clear_fault(self, token: str | None) -> None:
        self._faults.clear(token)

    def clear_faults(self) -> None:
        self._faults.clear_all()

    # -- observation -------------------------------------------------------------------

    @property
    def requests(self) -> list[RecordedRequest]:
        """Every request on both origins, oldest first; no tokens, no cursors."""
        return self._log.requests

    def clear_requests(self) -> None:
        self._log.clear_requests()

    @property
    def status_reports(self) -> list[dict[str, Any]]:
        """Accepted (204) report bodies, oldest first."""
        return self._log.reports

    def clear_status_reports(self) -> None:
        self._log.clear_reports()
