"""A Helm release of charts/hikyo-operator in the real control plane, and the operator run out
of cluster as that release's ServiceAccount with the environment the chart rendered."""

from __future__ import annotations

import base64
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml
from kubernetes import client

from tests.support.audit import AuditedRequest, audited_requests, service_account_user
from tests.support.helm import CHART, DIGEST, Helm, helm
from tests.support.operator_harness import Operator

# The chart's env that only makes sense in a pod; the harness gives the local process its own.
POD_ONLY_ENV = frozenset(
    {
        "HIKYO_OPERATOR_HEALTH_ADDR",
        "HIKYO_OPERATOR_METRICS_ADDR",
        "HIKYO_OPERATOR_DATA_DIR",
        "HOME",
    }
)
TOKEN_SECONDS = 3600


def chart_values(**operator: Any) -> dict[str, Any]:
    """Operator values for a release: cluster-wide, every feature on unless ``operator`` says."""
    values: dict[str, Any] = {
        "enabled": True,
        "namespaces": [],
        "triggerRollouts": True,
        "designatedServiceAccounts": {},
        "resources": {
            "requests": {"cpu": "50m", "memory": "64Mi"},
            "limits": {"cpu": "200m", "memory": "128Mi"},
        },
        "image": {"digest": DIGEST},
    }
    values.update(operator)
    return {"operator": values}


@dataclass
class Release:
    name: str
    namespace: str
    kubeconfig: Path  # the cluster admin's, which installs it
    tmp: Path
    installed: bool = field(default=False)

    @property
    def fullname(self) -> str:
        return self.name if "hikyo-operator" in self.name else f"{self.name}-hikyo-operator"

    @property
    def user(self) -> str:
        return service_account_user(self.namespace, self.fullname)

    def install(self, values: dict[str, Any]) -> Helm:
        result = helm(
            "install",
            self.name,
            str(CHART),
            "--namespace",
            self.namespace,
            "--create-namespace",
            kubeconfig=self.kubeconfig,
            values=values,
            tmp=self.tmp,
        )
        self.installed = self.installed or result.returncode == 0
        return result

    def upgrade(self, values: dict[str, Any]) -> Helm:
        return helm(
            "upgrade",
            self.name,
            str(CHART),
            "--namespace",
            self.namespace,
            kubeconfig=self.kubeconfig,
            values=values,
            tmp=self.tmp,
        )

    def uninstall(self) -> Helm:
        result = helm(
            "uninstall",
            self.name,
            "--namespace",
            self.namespace,
            "--wait",
            "--timeout",
            "60s",
            kubeconfig=self.kubeconfig,
            tmp=self.tmp,
        )
        self.installed = self.installed and result.returncode != 0
        return result

    def service_account_kubeconfig(self, api_client: client.ApiClient) -> Path:
        """A kubeconfig for the release's ServiceAccount, from a TokenRequest (no kubelet here
        to mount one), against the same apiserver and CA as the admin's."""
        token = (
            client.CoreV1Api(api_client)
            .create_namespaced_service_account_token(
                self.fullname,
                self.namespace,
                client.AuthenticationV1TokenRequest(
                    spec=client.V1TokenRequestSpec(audiences=[], expiration_seconds=TOKEN_SECONDS)
                ),
            )
            .status.token
        )
        admin = yaml.safe_load(self.kubeconfig.read_text())
        config = {
            "apiVersion": "v1",
            "kind": "Config",
            "clusters": [{"name": "local", "cluster": admin["clusters"][0]["cluster"]}],
            "users": [{"name": self.fullname, "user": {"token": token}}],
            "contexts": [{"name": "sa", "context": {"cluster": "local", "user": self.fullname}}],
            "current-context": "sa",
        }
        path = self.tmp / f"{self.name}.sa.kubeconfig"
        path.write_text(yaml.safe_dump(config))
        path.chmod(0o600)
        return path

    def rendered_env(self, api_client: client.ApiClient) -> dict[str, str]:
        """The installed run_operator container's env, resolved as the kubelet would: the
        downward-API namespace and secretKeyRefs read from the cluster."""
        deployment = client.AppsV1Api(api_client).read_namespaced_deployment(
            self.fullname, self.namespace
        )
        (container,) = deployment.spec.template.spec.containers
        core = client.CoreV1Api(api_client)
        env: dict[str, str] = {}
        for variable in container.env:
            if variable.value_from is None:  # the API omits an empty value
                env[variable.name] = variable.value or ""
            elif variable.value_from.field_ref is not None:
                assert variable.value_from.field_ref.field_path == "metadata.namespace"
                env[variable.name] = self.namespace
            else:
                ref = variable.value_from.secret_key_ref
                secret = core.read_namespaced_secret(ref.name, self.namespace)
                env[variable.name] = base64.b64decode(secret.data[ref.key]).decode()
        return {k: v for k, v in env.items() if k not in POD_ONLY_ENV}

    def operator(self, api_client: client.ApiClient, redis_url: str | None = None) -> Operator:
        """run_operator (and, with ``redis_url``, scaled-mode workers) as this release's
        ServiceAccount, configured by the chart's env."""
        home = self.tmp / self.name
        home.mkdir(exist_ok=True)
        operator = Operator(home, self.service_account_kubeconfig(api_client), redis_url)
        operator.env.update(self.rendered_env(api_client))
        return operator

    def requests(self, audit_log: Path) -> list[AuditedRequest]:
        return audited_requests(audit_log, self.user)
