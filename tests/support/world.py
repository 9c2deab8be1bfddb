"""A test's little world: a devserver scope, an instance, a credential, CRs, and reconciles.

Every value and token made here is a canary (``CANARY`` prefix) registered for the final sweep
that proves none leaked into logs, events, status, the database or exception text.
"""

from __future__ import annotations

import base64
import time
import uuid
from dataclasses import dataclass, field
from typing import Any

from kubernetes import client
from kubernetes.client.exceptions import ApiException

from devserver import DevServer, new_id
from k8s.gateway import KubeCluster
from tests.support.factories import GROUP, VERSION, make_hikyoinstance, make_hikyosecret
from workers.engine.ports import SecretObject
from workers.engine.reconcile import Engine, RunResult, reconcile

CANARIES: set[str] = set()


def canary(label: str) -> str:
    value = f"CANARY{label.upper()}{uuid.uuid4().hex[:12]}"
    CANARIES.add(value)
    return value


@dataclass
class World:
    api_client: client.ApiClient
    devserver: DevServer
    engine: Engine
    namespace: str
    org: str = field(default_factory=lambda: new_id("org"))
    project: str = field(default_factory=lambda: new_id("prj"))
    environment: str = field(default_factory=lambda: new_id("env"))
    instance: str = field(default_factory=lambda: f"inst-{uuid.uuid4().hex[:8]}")
    token: str = field(default_factory=lambda: canary("token"))
    credential: str = "hikyo-credential"
    results: list[RunResult] = field(default_factory=list)

    @property
    def core(self) -> client.CoreV1Api:
        return client.CoreV1Api(self.api_client)

    @property
    def custom(self) -> client.CustomObjectsApi:
        return client.CustomObjectsApi(self.api_client)

    @property
    def scope(self) -> tuple[str, str, str]:
        return self.org, self.project, self.environment

    # -- server side -------------------------------------------------------------------

    def publish(self, **values: str | None) -> dict[str, str]:
        """Publishes config keys NAME=value (None: a secret key); returns the published values."""
        keys = []
        for name, value in values.items():
            keys.append({"name": name, "classification": "config", "value": value})
        self.devserver.publish(*self.scope, keys)
        return {k: v for k, v in values.items() if v is not None}

    def publish_keys(self, keys: list[dict[str, Any]]) -> None:
        self.devserver.publish(*self.scope, keys)

    def grant(self, grants: tuple[str, ...] = ("read", "reveal"), **options: Any) -> None:
        self.devserver.add_credential(self.token, *self.scope, grants=grants, **options)

    def requests(self) -> list[Any]:
        """Requests the devserver received for this world's scope."""
        return [r for r in self.devserver.requests if self.environment in r.path]

    # -- cluster side ------------------------------------------------------------------

    def create_instance(self, **spec: Any) -> dict[str, Any]:
        spec.setdefault("url", self.devserver.url)
        spec.setdefault("caBundle", self.devserver.ca_bundle_b64)
        return self.custom.create_cluster_custom_object(
            GROUP, VERSION, "hikyoinstances", make_hikyoinstance(self.instance, **spec)
        )

    def create_credential(
        self,
        token: str | None = None,
        labels: dict[str, str] | None = None,
        data: dict[str, bytes] | None = None,
        name: str | None = None,
    ) -> None:
        if labels is None:
            labels = {"hikyo.dev/delivery": "true", "hikyo.dev/instance": self.instance}
        if data is None:
            data = {"hikyo-token": (token or self.token).encode() + b"\n"}
        self.core.create_namespaced_secret(
            self.namespace,
            client.V1Secret(
                metadata=client.V1ObjectMeta(name=name or self.credential, labels=labels),
                data={k: base64.b64encode(v).decode() for k, v in data.items()},
            ),
        )

    def create_cr(self, name: str = "app", **spec: Any) -> dict[str, Any]:
        spec.setdefault("instanceRef", {"name": self.instance})
        spec.setdefault(
            "scope", {"org": self.org, "project": self.project, "environment": self.environment}
        )
        spec.setdefault("auth", {"secretRef": {"name": self.credential}})
        return self.custom.create_namespaced_custom_object(
            GROUP, VERSION, self.namespace, "hikyosecrets", make_hikyosecret(name, **spec)
        )

    def patch_cr(self, name: str, spec: dict[str, Any]) -> None:
        self.custom.patch_namespaced_custom_object(
            GROUP, VERSION, self.namespace, "hikyosecrets", name, {"spec": spec}
        )

    def prepare(self, values: dict[str, str] | None = None, **spec: Any) -> dict[str, str]:
        """Published values (canaries by default), a grant, the instance, the credential and
        the CR ``app``; nothing reconciled yet. Returns the published values."""
        published = self.publish(
            **(values or {"DATABASE_URL": canary("value"), "LOG_LEVEL": canary("value")})
        )
        self.grant()
        self.create_instance()
        self.create_credential()
        self.create_cr(**spec)
        return published

    def ready(self, **spec: Any) -> dict[str, str]:
        """Instance + credential + published values + CR, reconciled once: the happy path."""
        values = self.prepare(**spec)
        result = self.reconcile()
        if result.outcome.reason == "FinalizerAdded":  # R2 stops after the patch; rerun
            result = self.reconcile()
        assert result.outcome.reason == "Delivered", result.outcome.message
        return values

    def reconcile(
        self, name: str = "app", *, forced_full: bool = False, engine: Engine | None = None
    ) -> RunResult:
        result = reconcile(engine or self.engine, self.namespace, name, forced_full=forced_full)
        self.results.append(result)
        return result

    def cr(self, name: str = "app") -> dict[str, Any]:
        return self.custom.get_namespaced_custom_object(
            GROUP, VERSION, self.namespace, "hikyosecrets", name
        )

    def status(self, name: str = "app") -> dict[str, Any]:
        return self.cr(name).get("status") or {}

    def conditions(self, name: str = "app") -> dict[str, tuple[str, str]]:
        return {
            c["type"]: (c["status"], c["reason"]) for c in self.status(name).get("conditions") or []
        }

    def message(self, type_: str, name: str = "app") -> str:
        for condition in self.status(name).get("conditions") or []:
            if condition["type"] == type_:
                return condition["message"]
        raise AssertionError(f"no {type_} condition")

    def target(self, name: str = "app-env") -> SecretObject | None:
        return KubeCluster(self.api_client).get_secret(self.namespace, name)

    def events(self, name: str = "app") -> list[tuple[str, str]]:
        listed = self.core.list_namespaced_event(
            self.namespace, field_selector=f"involvedObject.name={name}"
        )
        return [(e.type, e.reason) for e in listed.items]

    def delete_target(self, name: str = "app-env") -> None:
        self.core.delete_namespaced_secret(name, self.namespace)
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            try:
                self.core.read_namespaced_secret(name, self.namespace)
            except ApiException as error:
                if error.status == 404:
                    return
                raise
            time.sleep(0.1)
        raise AssertionError(f"Secret {name} was not deleted")
