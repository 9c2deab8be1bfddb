"""Plain ``Observed`` worlds for the pure decide tests (test_decide_*.py): no cluster, no store,
no server, no clock but ``NOW``.

``observed()`` answers every read the way a healthy world does (a designated credential, no other
claimant, no target yet, a valid stamp root, no pending 404, a buildable client, no workloads);
keyword arguments override single fields. Every value, token, cursor and stamp root here holds
the word ``CANARY`` so the hygiene tests can look for it in reprs and messages (S0.4, S5.6).
"""

from __future__ import annotations

from dataclasses import replace
from datetime import UTC, datetime, timedelta
from typing import Any

from tests.support.factories import DELETE, make_hikyosecret
from workers.engine.binding import CredentialIdentity, binding_digest
from workers.engine.decide import decide_before_fetch
from workers.engine.decide_after_fetch import decide_after_fetch
from workers.engine.fetched import DeliveredKey, Delivery, FetchOutcome, FetchResult
from workers.engine.observed import Observed
from workers.engine.plan import FetchAttempt, FetchPlan, Needs, Now, Plan, Stop
from workers.engine.ports import SecretObject, Workload
from workers.engine.settings import OperatorSettings
from workers.engine.spec import parse_spec
from workers.engine.stamp import compute_stamp, target_key
from workers.engine.stamp_root import STAMP_ROOT_KEY, STAMP_ROOT_SECRET

OP_NS = "hikyo-system"
NS = "team-a"
CR_NAME = "app"
CR_UID = "uid-m"  # between "uid-a" and "uid-z", for the R7 tie-break
CREATED = "2025-01-02T00:00:00Z"
INSTANCE = "primary"
INSTANCE_UID = "inst-uid-1"
TARGET = "app-env"
CREDENTIAL = "hikyo-credential"
CREDENTIAL_UID, CREDENTIAL_RV = "cred-uid", "7"
SA = "deliverer"
SA_UID, SA_RV = "sa-uid", "3"
AUDIENCE = "hikyo.example.test"

# Canaries: none may show up in a repr, a message, an event or a status value but `cursor`.
CANARY = "CANARY"
TOKEN = "CANARY-token-7f1e9a"
VALUE = "CANARY-value-4b2d"
OLD_VALUE = "CANARY-old-value-81"
CURSOR = "CANARY-cursor-stored-9c0a"
NEW_CURSOR = "CANARY-cursor-new-d3e1"
ROOT = b"CANARY-root-0123456789abcdefghij"
FRESH_ROOT = b"CANARY-fresh-root-0123456789abcd"
assert len(ROOT) == len(FRESH_ROOT) == 32

DESIGNATED = {"hikyo.dev/delivery": "true", "hikyo.dev/instance": INSTANCE}

NOW = Now(at=datetime(2025, 6, 1, 12, 0, tzinfo=UTC), wall=1_750_000_000.0)

SETTINGS = OperatorSettings(operator_namespace=OP_NS, trigger_rollouts=False)
ROLLOUTS = replace(SETTINGS, trigger_rollouts=True)
NATIVE = replace(SETTINGS, native_secret_types=True)

TLS = "kubernetes.io/tls"
TLS_MAPPING = [
    {"key": "TLS_CRT", "secretKey": "tls.crt"},
    {"key": "TLS_KEY", "secretKey": "tls.key"},
]


class _Server:
    """Stands for a built Hikyo client (R14); decide never calls it."""


SERVER = _Server()


# -- objects ------------------------------------------------------------------------------------


def cr(
    *,
    status: dict[str, Any] | None = None,
    metadata: dict[str, Any] | None = None,
    **spec: Any,
) -> dict[str, Any]:
    """A valid HikyoSecret (bootstrap-Secret credential unless ``auth`` says otherwise)."""
    obj = make_hikyosecret(CR_NAME, namespace=NS, **spec)
    obj["metadata"].update(
        uid=CR_UID, generation=1, creationTimestamp=CREATED, resourceVersion="100"
    )
    obj["metadata"].update(metadata or {})
    if status is not None:
        obj["status"] = status
    return obj


SA_AUTH = {"secretRef": DELETE, "serviceAccountRef": {"name": SA}}


def sa_cr(**kwargs: Any) -> dict[str, Any]:
    """A HikyoSecret with a ServiceAccount credential (S2.3)."""
    return cr(auth=SA_AUTH, **kwargs)


def typed_cr(secret_type: str = TLS, mapping: list[dict[str, str]] | None = None, **kwargs: Any):
    return cr(target={"type": secret_type}, mapping=mapping or TLS_MAPPING, **kwargs)


def claimant(
    name: str, uid: str, created: str = CREATED, *, deleting: bool = False
) -> dict[str, Any]:
    """Another HikyoSecret naming the same target (R7)."""
    obj = make_hikyosecret(name, namespace=NS)
    obj["metadata"].update(uid=uid, creationTimestamp=created)
    if deleting:
        obj["metadata"]["deletionTimestamp"] = "2025-05-01T00:00:00Z"
    return obj


def instance(audience: str | None = AUDIENCE) -> dict[str, Any]:
    spec: dict[str, Any] = {"url": "https://hikyo.example.test"}
    if audience is not None:
        spec["audience"] = audience
    return {"metadata": {"name": INSTANCE, "uid": INSTANCE_UID}, "spec": spec}


def credential_secret(
    labels: dict[str, str] | None = None,
    data: dict[str, bytes] | None = None,
    resource_version: str = CREDENTIAL_RV,
) -> SecretObject:
    return SecretObject(
        NS,
        CREDENTIAL,
        data={"hikyo-token": TOKEN.encode() + b"\n"} if data is None else data,
        uid=CREDENTIAL_UID,
        resource_version=resource_version,
        labels=dict(DESIGNATED) if labels is None else labels,
    )


def service_account(labels: dict[str, str] | None = None) -> dict[str, Any]:
    return {
        "metadata": {
            "name": SA,
            "namespace": NS,
            "uid": SA_UID,
            "resourceVersion": SA_RV,
            "labels": dict(DESIGNATED) if labels is None else labels,
        }
    }


def root_secret(root: bytes | None = ROOT) -> SecretObject:
    return SecretObject(
        OP_NS, STAMP_ROOT_SECRET, data={} if root is None else {STAMP_ROOT_KEY: root}, uid="ru"
    )


def owner_ref(
    uid: str = CR_UID,
    *,
    controller: bool = True,
    kind: str = "HikyoSecret",
    api_version: str = "hikyo.dev/v1alpha1",
) -> dict[str, Any]:
    return {
        "apiVersion": api_version,
        "kind": kind,
        "name": CR_NAME,
        "uid": uid,
        "controller": controller,
        "blockOwnerDeletion": True,
    }


def controlled_target(
    data: dict[str, bytes] | None = None, secret_type: str = "Opaque"
) -> SecretObject:
    """The target, controlled by this CR (S0.3)."""
    return SecretObject(
        NS,
        TARGET,
        type=secret_type,
        data={"DATABASE_URL": OLD_VALUE.encode(), "log-level": b"info"} if data is None else data,
        uid="target-uid",
        resource_version="11",
        owner_references=[owner_ref()],
    )


def stamped_cr(namespace: str = "team-b", name: str = "other") -> dict[str, Any]:
    """A CR in reach whose stamp our stamp root made (S6.3)."""
    return {
        "metadata": {"namespace": namespace, "name": name},
        "status": {"stamp": "v1:00000000000000000000000000000000", "operatorNamespace": OP_NS},
    }


def workload(name: str, *, stamp: str | None = None, kind: str = "Deployment", **kw: Any):
    """An opted-in workload (S6.1) carrying ``stamp`` for the target (None: no stamp yet)."""
    stamps = {TARGET: stamp} if stamp is not None else {}
    return Workload(
        kind=kind,
        name=name,
        uid=f"{name}-uid",
        generation=1,
        targets=frozenset({TARGET}),
        stamps=stamps,
        observed_generation=1,
        updated_replicas=1,
        ready_replicas=1,
        **kw,
    )


# -- the world --------------------------------------------------------------------------------


def observed(the_cr: dict[str, Any] | None = None, **fields: Any) -> Observed:
    """Every read as a healthy world answers it; ``fields`` override single ones."""
    the_cr = cr() if the_cr is None else the_cr
    auth = (the_cr.get("spec") or {}).get("auth") or {}
    base: dict[str, Any] = {
        "instance": instance(),
        "claimants": [the_cr],
        "target": None,
        "stamp_root": root_secret(),
        "not_found": None,
        "server": SERVER,
        "workloads": [],
    }
    if "serviceAccountRef" in auth:
        base |= {"service_account": service_account(), "token": TOKEN}
    else:
        base["credential_secret"] = credential_secret()
    base |= fields
    return Observed(NS, CR_NAME, cr=the_cr, **base)


def only_cr(the_cr: dict[str, Any] | None = None, **fields: Any) -> Observed:
    """Nothing read yet but the CR (R0)."""
    return Observed(NS, CR_NAME, cr=cr() if the_cr is None else the_cr, **fields)


def decide(obs: Observed, settings: OperatorSettings = SETTINGS):
    return decide_before_fetch(obs, settings, NOW)


def stopped(obs: Observed, settings: OperatorSettings = SETTINGS) -> Plan:
    decision = decide(obs, settings)
    assert isinstance(decision, Stop), f"expected a Stop, got {decision!r}"
    return decision.plan


def planned(obs: Observed, settings: OperatorSettings = SETTINGS) -> FetchPlan:
    decision = decide(obs, settings)
    assert isinstance(decision, FetchPlan), f"expected a FetchPlan, got {decision!r}"
    return decision


def needs(obs: Observed, settings: OperatorSettings = SETTINGS):
    decision = decide(obs, settings)
    assert isinstance(decision, Needs), f"expected Needs, got {decision!r}"
    return decision.read


def answered(
    obs: Observed, attempt: FetchAttempt, settings: OperatorSettings = SETTINGS, now: Now = NOW
) -> Plan:
    """The plan, checked to be the same whether the run hands over the plan its observe
    reached (as ``reconcile`` does) or ``decide_after_fetch`` decides it again."""
    plan = decide_after_fetch(obs, attempt, settings, now)
    fetch = decide_before_fetch(obs, settings, now)
    if isinstance(fetch, FetchPlan):
        assert decide_after_fetch(obs, attempt, settings, now, fetch) == plan
    return plan


# -- what the spec defines, computed independently of decide ---------------------------------


def binding_for(
    the_cr: dict[str, Any],
    identity: tuple[str, str] = (CREDENTIAL_UID, CREDENTIAL_RV),
    instance_uid: str = INSTANCE_UID,
) -> str:
    """S4.3.2 over the CR, the credential object's identity and the instance UID."""
    return binding_digest(parse_spec(the_cr), CredentialIdentity(*identity), instance_uid)


def key_for(root: bytes = ROOT, instance_uid: str = INSTANCE_UID) -> bytes:
    """S6.2: the target's stamp key."""
    return target_key(root, instance_uid, CR_UID, TARGET)


def eligible_status(the_cr: dict[str, Any], target: SecretObject, **extra: Any) -> dict[str, Any]:
    """A status under which S4.3.1 lets the stored cursor be presented."""
    return {
        "cursor": CURSOR,
        "cursorBinding": binding_for(the_cr),
        "stamp": compute_stamp(key_for(), target.data),
        "operatorNamespace": OP_NS,
        **extra,
    }


def with_status(the_cr: dict[str, Any], status: dict[str, Any]) -> dict[str, Any]:
    return {**the_cr, "status": status}


# -- the fetch's answers --------------------------------------------------------------------------


def dk(name: str, value: str | None, classification: str = "secret", presence: str = "set"):
    return DeliveredKey(name, classification, presence, value)


DEFAULT_KEYS = (dk("DATABASE_URL", VALUE), dk("LOG_LEVEL", "info", "config"))
DEFAULT_DATA = {"DATABASE_URL": VALUE.encode(), "log-level": b"info"}


def delivery(
    keys: tuple[DeliveredKey, ...] = DEFAULT_KEYS,
    *,
    current: bool = False,
    cursor: str = NEW_CURSOR,
    pin_expired: bool = False,
    expires: datetime | None = None,
    pinned: int | None = None,
    capabilities: frozenset[str] | None = None,
) -> FetchAttempt:
    """A valid 200 (S3.4)."""
    return FetchAttempt(
        result=FetchResult(
            FetchOutcome.DELIVERY,
            200,
            delivery=Delivery(
                current=current,
                cursor=cursor,
                schema_revision=1,
                pin_expired=pin_expired,
                keys=keys,
                credential_expires_at=expires,
                pinned_revision=pinned,
                capabilities=capabilities,
            ),
        )
    )


def answer(outcome: FetchOutcome, status: int | None, **kw: Any) -> FetchAttempt:
    return FetchAttempt(result=FetchResult(outcome, status, **kw))


NOT_FOUND = answer(FetchOutcome.AUTHORITATIVE_NOT_FOUND, 404)


def days(n: float) -> datetime:
    return NOW.at + timedelta(days=n)


def scrubbed_condition() -> dict[str, Any]:
    return {
        "type": "Scrubbed",
        "status": "True",
        "reason": "AuthorizationWithdrawn",
        "message": "withdrawn",
    }
