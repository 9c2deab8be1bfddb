"""The dashboard's browser tests' world: the session's real kube-apiserver and devserver (the
integration fixtures, shared because this package sits under tests/integration/), one running
embedded operator (``run_operator``: the dashboard on HIKYO_OPERATOR_HEALTH_ADDR, /metrics on
HIKYO_OPERATOR_METRICS_ADDR, SQLite in HIKYO_OPERATOR_DATA_DIR) watching one namespace with a
handful of healthy HikyoSecrets and one of each kind of breakage (issue 35): a missing reveal
opt-in, a credential Secret that does not exist, a revoked credential (401), a failing server
(503), a HikyoInstance that does not exist, a mapped key the server lacks (Ready, with a
warning), a credential expiring within 7 days (Ready, with a warning), and a second
HikyoInstance answering 429 (the CR that drew it, and one created after that waits on the
pause); three dashboard users, and headless Chromium.

The tests run in file order and share this module-scoped setup: the overview and the list see
the not-Ready objects before the force-resync test fixes one.
"""

from __future__ import annotations

import datetime as dt
import json
import re
import secrets
import subprocess
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import pytest
from kubernetes import client
from kubernetes.client.exceptions import ApiException

from devserver import Fault
from tests.integration.conftest import SECRETS_OF_RECORD, _keep_for_sweep, make_engine
from tests.support.browser import chromium
from tests.support.factories import GROUP, VERSION, make_hikyoinstance
from tests.support.operator_harness import Operator, os_env
from tests.support.processes import manage
from tests.support.waiting import wait_for
from tests.support.world import CANARIES, World, canary

VIEWERS, OPERATORS = "hikyo-viewers", "hikyo-operators"  # migration 0005_groups
READY_NAMES = ("app-0", "app-1", "app-2")
UNDELIVERED = "needs-reveal"  # maps a secret key; the project has no machine-reveal opt-in
REFUSED = "no-credential"  # names a credential Secret that does not exist
REVOKED = "revoked"  # its credential's token answers 401
SERVER_DOWN = "server-down"  # its credential's token answers 503
NO_INSTANCE = "no-instance"  # names a HikyoInstance that does not exist
KEYS_MISSING = "keys-missing"  # maps a key the server does not have: Ready, with a warning
EXPIRING = "expiring"  # its credential expires in 3 days: Ready, with a warning
DREW_429 = "drew-429"  # its fetch drew a 429 (Retry-After: 300) from the busy instance
WAITS_429 = "waits-429"  # created after: waits on the pause of (busy instance, org)
PAUSE_SECONDS = "300"  # the longest pause (S4.1.6), so it outlasts the tests that look at it
HANGS = "hangs"  # its credential's token hangs 45 s, past the operator's 30 s (S4.1.9)
MISMATCHED = "wrong-instance"  # its credential is labelled for the busy instance
UNACKNOWLEDGED = "loader-keys"  # maps LOG_LEVEL to LD_PRELOAD and acknowledges nothing
BAD_TEMPLATE = "bad-template"  # a template with a filter Jinja does not have
CLAIMED = "taken-target"  # names the target an older HikyoSecret manages
# Refused before the fetch, on the world's instance: enough rows for one screen of not-Ready.
MORE_REFUSED = (MISMATCHED, UNACKNOWLEDGED, BAD_TEMPLATE, CLAIMED)
NOT_READY = (
    REFUSED,
    UNDELIVERED,
    REVOKED,
    SERVER_DOWN,
    NO_INSTANCE,
    DREW_429,
    WAITS_429,
    HANGS,
    *MORE_REFUSED,
)
READY_WITH_WARNINGS = (KEYS_MISSING, EXPIRING)
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
    broken: Broken
    cluster_secrets: set[str] = field(default_factory=set)  # cursors and stamps seen

    def explain(self, *names: str) -> dict[str, str]:
        """``manage.py explain NAMESPACE/NAME... --fetch`` as a user runs it beside the dashboard
        (the operator's settings and kubeconfig; one process for all ``names``, each block
        headed by its ``HikyoSecret NAMESPACE/NAME`` line); it writes nothing."""
        targets = [f"{self.world.namespace}/{name}" for name in names]
        done = subprocess.run(
            manage("explain", *targets, "--fetch"),
            env={**os_env(), **self.operator.env},
            capture_output=True,
            text=True,
            timeout=60 + 30 * len(names),
        )
        assert done.returncode == 0, (names, done.stdout[-2000:], done.stderr[-3000:])
        blocks = re.split(r"\n\n(?=HikyoSecret )", done.stdout)
        headed = {block.split("\n", 1)[0].removeprefix("HikyoSecret "): block for block in blocks}
        assert list(headed) == targets, list(headed)
        return dict(zip(names, headed.values(), strict=True))

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
        tokens = {self.world.token, *self.broken.tokens}
        return CANARIES | tokens | SECRETS_OF_RECORD | self.cluster_secrets | passwords


@dataclass
class Broken:
    """The names and tokens of the breakage (every token a canary)."""

    busy_instance: str = field(default_factory=lambda: f"busy-{uuid.uuid4().hex[:8]}")
    missing_instance: str = field(default_factory=lambda: f"old-{uuid.uuid4().hex[:8]}")
    revoked: str = field(default_factory=lambda: canary("token"))
    hanging: str = field(default_factory=lambda: canary("token"))
    failing: str = field(default_factory=lambda: canary("token"))
    expiring: str = field(default_factory=lambda: canary("token"))
    limited: str = field(default_factory=lambda: canary("token"))

    @property
    def tokens(self) -> tuple[str, ...]:
        return (self.revoked, self.failing, self.expiring, self.limited, self.hanging)


def _populate(world: World, broken: Broken) -> None:
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
    devserver = world.devserver
    soon = dt.datetime.now(dt.UTC) + dt.timedelta(days=3)
    for token, name, fault, expires in (
        (broken.revoked, "revoked-credential", Fault.unauthorized(), None),
        (broken.failing, "failing-credential", Fault.status(503), None),
        (broken.expiring, "expiring-credential", None, soon),
        (broken.hanging, "hanging-credential", Fault.slow(45.0), None),
    ):
        devserver.add_credential(token, *world.scope, expires_at=expires)
        if fault is not None:
            devserver.set_fault(token, fault)
        world.create_credential(token, name=name)
    world.create_cr(REVOKED, target={"name": "revoked-env"}, auth=_secret("revoked-credential"))
    world.create_cr(SERVER_DOWN, target={"name": "down-env"}, auth=_secret("failing-credential"))
    world.create_cr(EXPIRING, target={"name": "expiring-env"}, auth=_secret("expiring-credential"))
    world.create_cr(HANGS, target={"name": "hangs-env"}, auth=_secret("hanging-credential"))
    world.create_cr(
        NO_INSTANCE,
        target={"name": "no-instance-env"},
        instanceRef={"name": broken.missing_instance},
    )
    world.create_cr(
        KEYS_MISSING,
        target={"name": "keys-missing-env"},
        mapping=[{"key": "DATABASE_URL"}, {"key": "NOT_PUBLISHED"}],
    )
    # A second instance (same server): its 429 pauses (busy instance, org), not the first one.
    world.custom.create_cluster_custom_object(
        GROUP,
        VERSION,
        "hikyoinstances",
        make_hikyoinstance(
            broken.busy_instance, url=devserver.url, caBundle=devserver.ca_bundle_b64
        ),
    )
    devserver.add_credential(broken.limited, *world.scope)
    devserver.set_fault(broken.limited, Fault.rate_limited(retry_after=PAUSE_SECONDS))
    world.create_credential(
        broken.limited,
        name="busy-credential",
        labels={"hikyo.dev/delivery": "true", "hikyo.dev/instance": broken.busy_instance},
    )
    world.create_cr(
        DREW_429,
        target={"name": "drew-env"},
        instanceRef={"name": broken.busy_instance},
        auth=_secret("busy-credential"),
    )
    world.create_cr(MISMATCHED, target={"name": "mismatch-env"}, auth=_secret("busy-credential"))
    world.create_cr(
        UNACKNOWLEDGED,
        target={"name": "loader-env"},
        mapping=[{"key": "LOG_LEVEL", "secretKey": "LD_PRELOAD"}],
    )
    world.create_cr(
        BAD_TEMPLATE,
        target={
            "name": "template-env",
            "template": {"data": {"url": "{{ DATABASE_URL | nosuch }}"}},
        },
        mapping=[{"key": "DATABASE_URL"}],
    )


def _secret(name: str) -> dict[str, Any]:
    return {"secretRef": {"name": name}}


def _wait_on_the_pause(world: World, broken: Broken) -> None:
    """After the busy instance's 429: a CR that then comes due waits on the pause (S4.1.6)."""
    world.create_cr(
        WAITS_429,
        target={"name": "waits-env"},
        instanceRef={"name": broken.busy_instance},
        auth=_secret("busy-credential"),
    )


def _reason(item: dict[str, Any], type_: str) -> tuple[str, str] | None:
    for condition in (item.get("status") or {}).get("conditions") or []:
        if condition["type"] == type_:
            return condition["status"], condition["reason"]
    return None


def _message(item: dict[str, Any], type_: str) -> str:
    for condition in (item.get("status") or {}).get("conditions") or []:
        if condition["type"] == type_:
            return str(condition.get("message") or "")
    return ""


def _converged(dashboard: Dashboard) -> bool:
    items = {item["metadata"]["name"]: item for item in dashboard.hikyosecrets()}
    for later in (WAITS_429, CLAIMED):
        items.pop(later, None)
    ready = [*READY_NAMES, *READY_WITH_WARNINGS]
    failed = {
        REVOKED: "status 401",
        SERVER_DOWN: "status 503",
        NO_INSTANCE: "not found",
        DREW_429: "status 429",
        HANGS: "timeout",  # its own failure, after the operator's 30 s (S3.5, S4.1.9)
    }
    return (
        all(_reason(items[name], "Ready") == ("True", "Reconciled") for name in ready)
        and (_reason(items[UNDELIVERED], "Delivery") or ("", ""))[1] == "UndeliveredSecrets"
        and (_reason(items[REFUSED], "Designation") or ("", ""))[1] == "SecretNotDesignated"
        and (_reason(items[KEYS_MISSING], "Delivery") or ("", ""))[1] == "KeysMissing"
        and (_reason(items[EXPIRING], "CredentialExpiry") or ("", ""))[1] == "ExpiresSoon"
        and all(
            (_reason(items[name], type_) or ("", ""))[1] == reason
            for name, type_, reason in (
                (MISMATCHED, "Designation", "InstanceMismatch"),
                (UNACKNOWLEDGED, "Delivery", "LoaderControlUnacknowledged"),
                (BAD_TEMPLATE, "Delivery", "InvalidTemplate"),
            )
        )
        and all(
            _reason(items[name], "Synced") == ("False", "FetchFailed")
            and text in _message(items[name], "Synced")
            for name, text in failed.items()
        )
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
    broken = Broken()
    operator = Operator(tmp_path_factory.mktemp("dashboard-operator"), kubeconfig, None)
    operator.env.update(
        HIKYO_OPERATOR_NAMESPACES=f"{namespace}, hikyo-system",  # leave the rest alone
        DJANGO_DEBUG="false",  # as in production: static files through whitenoise
    )
    try:
        users = _add_users(operator)
        _populate(world, broken)
        leader = operator.start_leader()
        built = Dashboard(
            world, operator, f"http://{leader.env['HIKYO_OPERATOR_HEALTH_ADDR']}", users, broken
        )
        print(f"\ndashboard under test: {built.base} (namespace {namespace})")
        wait_for(
            lambda: _converged(built),
            timeout=CONVERGE_TIMEOUT,
            interval=1,
            what="the HikyoSecrets reconciled by the running operator",
        )
        _wait_on_the_pause(world, broken)
        # Created seconds after READY_NAMES[0], whose target it names: R7's oldest-first rule
        # then always keeps that target with READY_NAMES[0] (a tie in the same second would
        # go by UID).
        world.create_cr(CLAIMED, target={"name": "app-env-0"})
        wait_for(
            lambda: (
                _reason(
                    next(i for i in built.hikyosecrets() if i["metadata"]["name"] == CLAIMED),
                    "Conflict",
                )
                == ("True", "TargetClaimed")
            ),
            timeout=CONVERGE_TIMEOUT,
            interval=1,
            what="the HikyoSecret naming a taken target refused",
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
        for token in broken.tokens:
            devserver.clear_fault(token)
        try:
            world.custom.delete_cluster_custom_object(
                GROUP, VERSION, "hikyoinstances", broken.busy_instance
            )
        except ApiException as error:
            if error.status != 404:
                raise


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    """Headless Chromium for this module only: playwright's sync API keeps an event loop in
    this thread, which the later tests' Django ORM calls must not find. Requested before the
    dashboard, so a missing browser fails before the operator is set up."""
    with chromium() as launched:
        yield launched
