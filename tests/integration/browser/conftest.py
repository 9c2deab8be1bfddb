"""The dashboard's browser tests' world: the session's real kube-apiserver and devserver (the
integration fixtures, shared because this package sits under tests/integration/), one running
embedded operator (``run_operator``: the dashboard on HIKYO_OPERATOR_HEALTH_ADDR, /metrics on
HIKYO_OPERATOR_METRICS_ADDR, SQLite in HIKYO_OPERATOR_DATA_DIR) watching one namespace with a
handful of HikyoSecrets, three dashboard users, and headless Chromium.

The tests run in file order and share this module-scoped setup: the overview and the list see
the not-Ready objects before the force-resync test fixes one.
"""

from __future__ import annotations

import json
import secrets
import subprocess
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import pytest
from kubernetes import client
from kubernetes.client.exceptions import ApiException

from tests.integration.conftest import SECRETS_OF_RECORD, _keep_for_sweep, make_engine
from tests.support.browser import chromium
from tests.support.factories import GROUP, VERSION
from tests.support.operator_harness import Operator, os_env
from tests.support.processes import manage
from tests.support.waiting import wait_for
from tests.support.world import CANARIES, World, canary

VIEWERS, OPERATORS = "hikyo-viewers", "hikyo-operators"  # migration 0005_groups
READY_NAMES = ("app-0", "app-1", "app-2")
UNDELIVERED = "needs-reveal"  # maps a secret key; the project has no machine-reveal opt-in
REFUSED = "no-credential"  # names a credential Secret that does not exist
CONVERGE_TIMEOUT = 240.0

ADD_USERS = """
import json, os
from django.contrib.auth.models import Group, User
for name, password, group in json.loads(os.environ["HIKYO_TEST_USERS"]):
    user = User.objects.create_user(name, password=password, is_staff=True)
    user.groups.add(Group.objects.get(name=group))
"""


@dataclass
class Dashboard:
    world: World
    operator: Operator
    base: str
    users: dict[str, tuple[str, str]]  # role -> (username, password)
    cluster_secrets: set[str] = field(default_factory=set)  # cursors and stamps seen

    def hikyosecrets(self) -> list[dict[str, Any]]:
        listed = self.world.custom.list_namespaced_custom_object(
            GROUP, VERSION, self.world.namespace, "hikyosecrets"
        )
        for item in listed["items"]:  # every cursor and stamp the run saw, for the sweep
            status = item.get("status") or {}
            self.cluster_secrets.update(str(status[f]) for f in ("cursor", "stamp") if f in status)
        return listed["items"]

    def secrets_of_the_run(self) -> set[str]:
        """What no page may show: canary values and tokens, cursors, stamps, passwords."""
        self.hikyosecrets()
        for secret in self.world.core.list_namespaced_secret(self.world.namespace).items:
            for key, value in (secret.metadata.annotations or {}).items():
                if key.startswith("stamp.hikyo.dev/"):
                    self.cluster_secrets.add(value)
        passwords = {password for _, password in self.users.values()}
        return CANARIES | {self.world.token} | SECRETS_OF_RECORD | self.cluster_secrets | passwords


def _populate(world: World) -> None:
    world.publish_keys(
        [
            {"name": "DATABASE_URL", "classification": "config", "value": canary("value")},
            {"name": "LOG_LEVEL", "classification": "config", "value": canary("value")},
            {"name": "API_KEY", "classification": "secret", "value": canary("value")},
        ]
    )
    world.devserver.set_machine_reveal(world.org, world.project, False)
    world.grant()  # read and reveal on the environment; the project's opt-in is what lacks
    world.create_instance()
    world.create_credential()
    for index, name in enumerate(READY_NAMES):
        world.create_cr(name, target={"name": f"app-env-{index}"})
    world.create_cr(
        UNDELIVERED,
        target={"name": "reveal-env"},
        mapping=[{"key": "API_KEY"}, {"key": "LOG_LEVEL", "secretKey": "log-level"}],
    )
    world.create_cr(
        REFUSED, target={"name": "refused-env"}, auth={"secretRef": {"name": "absent-credential"}}
    )


def _reason(item: dict[str, Any], type_: str) -> tuple[str, str] | None:
    for condition in (item.get("status") or {}).get("conditions") or []:
        if condition["type"] == type_:
            return condition["status"], condition["reason"]
    return None


def _converged(dashboard: Dashboard) -> bool:
    items = {item["metadata"]["name"]: item for item in dashboard.hikyosecrets()}
    return (
        all(_reason(items[name], "Ready") == ("True", "Reconciled") for name in READY_NAMES)
        and (_reason(items[UNDELIVERED], "Delivery") or ("", ""))[1] == "UndeliveredSecrets"
        and (_reason(items[REFUSED], "Designation") or ("", ""))[1] == "SecretNotDesignated"
    )


def _add_users(operator: Operator) -> dict[str, tuple[str, str]]:
    suffix = uuid.uuid4().hex[:6]
    users = {
        role: (f"{role}-{suffix}", secrets.token_urlsafe(16))
        for role in ("admin", "viewer", "operator")
    }
    env = {**os_env(), **operator.env}
    admin, password = users["admin"]
    for argv, extra in (
        (
            manage("createsuperuser", "--noinput", "--username", admin, "--email", "a@b.example"),
            {"DJANGO_SUPERUSER_PASSWORD": password},
        ),
        (
            manage("shell", "-c", ADD_USERS),
            {
                "HIKYO_TEST_USERS": json.dumps(
                    [[*users["viewer"], VIEWERS], [*users["operator"], OPERATORS]]
                )
            },
        ),
    ):
        done = subprocess.run(
            argv, env={**env, **extra}, capture_output=True, text=True, timeout=120
        )
        assert done.returncode == 0, (argv[2], done.stdout[-2000:], done.stderr[-3000:])
    return users


def _delete_hikyosecrets(world: World) -> None:
    """Before the operator stops, so that it releases its finalizers; the namespace goes after."""
    for item in world.custom.list_namespaced_custom_object(
        GROUP, VERSION, world.namespace, "hikyosecrets"
    )["items"]:
        try:
            world.custom.delete_namespaced_custom_object(
                GROUP, VERSION, world.namespace, "hikyosecrets", item["metadata"]["name"]
            )
        except ApiException as error:
            if error.status != 404:
                raise


@pytest.fixture(scope="module")
def dashboard(
    api_client, crds, operator_namespace, devserver, kubeconfig, tmp_path_factory
) -> Iterator[Dashboard]:
    namespace = f"t-{uuid.uuid4().hex[:10]}"
    core = client.CoreV1Api(api_client)
    core.create_namespace(client.V1Namespace(metadata=client.V1ObjectMeta(name=namespace)))
    world = World(api_client, devserver, make_engine(api_client), namespace)
    operator = Operator(tmp_path_factory.mktemp("dashboard-operator"), kubeconfig, None)
    operator.env.update(
        HIKYO_OPERATOR_NAMESPACES=f"{namespace}, hikyo-system",  # leave the rest alone
        DJANGO_DEBUG="false",  # as in production: static files through whitenoise
    )
    try:
        users = _add_users(operator)
        _populate(world)
        leader = operator.start_leader()
        built = Dashboard(
            world, operator, f"http://{leader.env['HIKYO_OPERATOR_HEALTH_ADDR']}", users
        )
        print(f"\ndashboard under test: {built.base} (namespace {namespace})")
        wait_for(
            lambda: _converged(built),
            timeout=CONVERGE_TIMEOUT,
            interval=1,
            what="the HikyoSecrets reconciled by the running operator",
        )
        yield built
        _keep_for_sweep(world)
        _delete_hikyosecrets(world)
        try:  # best effort: a CR the operator does not release only delays the namespace
            wait_for(lambda: not built.hikyosecrets(), timeout=60, interval=1, what="CRs gone")
        except AssertionError as error:
            print(f"dashboard teardown: {error}")
    finally:
        operator.stop()
        try:
            core.delete_namespace(namespace)
        except ApiException as error:
            if error.status != 404:
                raise
        devserver.clear_fault(world.token)


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    """Headless Chromium for this module only: playwright's sync API keeps an event loop in
    this thread, which the later tests' Django ORM calls must not find. Requested before the
    dashboard, so a missing browser fails before the operator is set up."""
    with chromium() as launched:
        yield launched
