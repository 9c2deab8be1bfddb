"""What to do about each S5.1 reason: one short text per reason, quoting the user's action.

Pure and value-free. ``remediation(reason, context)`` fills in names from ``context``
(``remediation_context``): names from the CR spec and from the condition's facts
(``Condition.facts``: keys, cause, the instance a credential is labelled for...), never read
back out of a message and never a value, token, cursor or stamp (S0.4, S5.6). A fact the
context lacks says so (``UNKNOWN``); any other name shows as ``<name>``. ``explain`` prints
these texts; the dashboard and ``status -o json`` show them too, from the same facts stored
with the condition.

The user actions quoted are the product document's (seed 000): the designation labels, the
five-step journey's machine-reveal opt-in and reveal grant, the Helm values of the chart (S9).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import NamedTuple

# -- the texts, keyed by S5.1 reason ------------------------------------------------------------

# A command the user runs is written between backquotes: ``remediation_parts`` hands it over as
# a command (the dashboard shows it as code with a copy button); ``remediation`` drops them.
_LABEL = (
    "`kubectl -n {namespace} label {credential_resource} {credential} --overwrite "
    'hikyo.dev/delivery="true" hikyo.dev/instance={instance}`'
)
_FORCE_SYNC = (
    "`kubectl -n {namespace} annotate hksec {name} --overwrite hikyo.dev/force-sync=$(date +%s)`"
)
# The operator watches neither Secrets nor the Hikyo server (S4.1.1): a fix made there is seen
# at the CR's next run, so the text ends with the command that runs it now.
_NOW = " Then run it now: " + _FORCE_SYNC + "."
_MINT = (
    "`hikyo sa credential mint --sa SA_ID --lifetime 720h --output-file ./hikyo-token`, where "
    "SA_ID is the Hikyo service account's ID, which `hikyo sa list` shows"
)

TEXTS: dict[str, str] = {
    # Ready
    "Reconciled": "Nothing to do: the Secret is delivered and current.",
    "Blocked": (
        "Ready is blocked by {blocker}: see that condition's message and its remediation "
        "(`python manage.py explain {namespace}/{name}`)."
    ),
    # Synced
    "Delivered": "Nothing to do: Secret {target} holds the delivered content.",
    "Current": "Nothing to do: Secret {target} holds the current content.",
    "FetchFailed": (
        "The Secret is retained and the fetch is retried with backoff. Read the message: "
        "HTTP 401 means the credential is invalid, expired or revoked (mint a new one and "
        "replace data key hikyo-token of {credential_kind} {credential}); 403 means the "
        "credential's principal lacks read on environment {environment} (`hikyo access grant "
        "add --principal MCH_ID --capability read --env {environment}`; `hikyo sa list` shows "
        "its mch_ ID); 5xx and timeouts are the server's side. Once fixed, force a fresh "
        "delivery: " + _FORCE_SYNC
    ),
    "NotMaterialized": (
        "Environment {environment} has no published revision (or its pinned revision was "
        "collected by retention): publish the environment in Hikyo. The Secret is retained and "
        "the fetch is retried at the next resync."
    ),
    # Designation
    "SecretNotDesignated": (
        "Secret {credential} in namespace {namespace} must exist, hold data key hikyo-token "
        "(the output file of hikyo sa credential mint; one trailing newline is fine) and carry "
        'both labels hikyo.dev/delivery="true" and hikyo.dev/instance={instance}. If it does '
        "not exist, create it first: `kubectl -n {namespace} create secret generic "
        "{credential} --from-file=hikyo-token=./hikyo-token`; then label it: " + _LABEL + "."
    ),
    "ServiceAccountNotDesignated": (
        "ServiceAccount {credential} in namespace {namespace} must exist and carry both labels "
        'hikyo.dev/delivery="true" and hikyo.dev/instance={instance} (' + _LABEL + "), and be "
        "listed under the Helm value operator.designatedServiceAccounts.{namespace} (which also "
        "grants the TokenRequest)."
    ),
    "InstanceMismatch": (
        "{credential_kind} {credential} is labelled hikyo.dev/instance={labelled_instance}, but "
        "spec.instanceRef.name is {instance}: relabel it (`kubectl -n {namespace} label "
        "{credential_resource} {credential} --overwrite hikyo.dev/instance={instance}`) or point "
        "spec.instanceRef.name at {labelled_instance}."
    ),
    "AudienceMissing": (
        "HikyoInstance {instance} has no spec.audience, which ServiceAccount federation needs, "
        "and instances are immutable: a cluster admin creates a new HikyoInstance with "
        "spec.audience; then point spec.instanceRef.name at it and relabel the ServiceAccount's "
        "hikyo.dev/instance, or use a bootstrap Secret (spec.auth.secretRef) instead."
    ),
    # Conflict
    "ManagedSecretNotOwned": (
        "Secret {target} already exists in namespace {namespace} and is not controlled by "
        "HikyoSecret {name}; the operator never adopts a Secret: choose another "
        "spec.target.name, or delete or rename the existing Secret once nothing needs it "
        "(`kubectl -n {namespace} delete secret {target}`)."
    ),
    "TargetClaimed": (
        "HikyoSecret {winner} (created earlier) already manages Secret {target}: choose another "
        "spec.target.name for HikyoSecret {name}, or delete HikyoSecret {winner} if it should "
        "not deliver there."
    ),
    "TargetTypeImmutable": (
        "Secret {target} has type {existing_type} but spec.target.type asks for {target_type}; "
        "a Secret's type cannot change and the operator never deletes and recreates it: set "
        "spec.target.type back to {existing_type}, or create a new HikyoSecret with a new "
        "target.name and migrate the consumers."
    ),
    "MergeTargetMissing": (
        "Secret {target} does not exist in namespace {namespace}, and creationPolicy Merge "
        "writes HikyoSecret {name}'s keys into an existing Secret without ever creating one: "
        "create the Secret first (usually the chart or tool that owns it does), or set "
        "spec.target.creationPolicy: Owner to let the operator create and own it."
    ),
    "KeyOwnedElsewhere": (
        "Secret {target} already has keys {keys} that another field manager owns, so nothing "
        "was written: deliver them under other names (spec.mapping[].secretKey), or remove them "
        "from the tool that manages Secret {target} (`kubectl -n {namespace} get secret {target} "
        "--show-managed-fields -o yaml` shows who owns each key)."
    ),
    # Delivery
    "UndeliveredSecrets": (
        "The credential receives only the presence of secret keys {keys}. A Hikyo operator "
        "enables the project's machine-reveal opt-in: `hikyo project-settings machine-reveal set "
        "--enabled true` (or the toggle on the Machine access page), then grants reveal to the "
        "credential's principal: `hikyo access grant add --principal MCH_ID --capability "
        "reveal --env {environment}` (MCH_ID: its mch_ ID, which `hikyo sa list` shows; or "
        "Members → New grant). Or set spec.projection: config-only for config keys only."
    ),
    "KeysMissing": (
        "Mapped keys {keys} are missing: publish them in Hikyo or remove them from "
        "spec.mapping; a typed target needs every required destination mapped."
    ),
    "LoaderControlUnacknowledged": (
        "spec.acknowledgedLoaderKeys must list exactly the loader-control names delivered "
        "(S4.6): set acknowledgedLoaderKeys: {acknowledged} (`kubectl -n {namespace} patch hksec "
        "{name} --type merge -p '{acknowledged_patch}'`), or map those keys to other secretKeys. "
        "Only acknowledge names the workload intentionally trusts."
    ),
    "InvalidSecretData": (
        "The delivered content does not fit a {target_type} Secret (a JSON object where the "
        "type needs one, Secret data-key names, at most 1 MiB in total): correct the published "
        "values or key names in Hikyo. The last accepted Secret is retained."
    ),
    "NativeSecretTypesDisabled": (
        "target.type {target_type} needs native Secret types: enable them with Helm --set "
        "operator.nativeSecretTypes=true (standalone: HIKYO_OPERATOR_NATIVE_SECRET_TYPES=true "
        "with Secret delete RBAC), or use target.type Opaque."
    ),
    "InvalidTemplate": (
        "spec.target.template.data[{key}] of HikyoSecret {name} cannot be used: {kind}. The "
        "Secret keeps its previous content until it is fixed: correct the template (it may "
        "read only the assembled keys, Jinja's filters, b64encode, b64decode, urlquote, tojson, "
        "toyaml, sha256 and dockerconfigjson); `python manage.py explain {namespace}/{name}` "
        "shows each destination key and the sources it reads."
    ),
    "EnvFromSkip": (
        "Warning only: destinations {keys} are not valid environment variable names, so "
        "envFrom may skip them; give them another secretKey if a workload reads them through "
        "envFrom (file mounts are unaffected)."
    ),
    # Scrubbed
    "AuthorizationWithdrawn": (
        "The Hikyo server no longer authorizes this delivery, so Secret {target} was emptied or "
        "removed. If that was not intended, restore the principal's read grant on environment "
        "{environment} or republish the withdrawn keys; the next complete delivery restores the "
        "Secret. Restart pods that still hold the old values."
    ),
    # Rollout
    "Stalled": (
        "A workload that consumes Secret {target} did not progress after its restart request "
        "(a paused Deployment, an OnDelete StatefulSet, failing readiness) or its stamp patch "
        "failed: check kubectl -n {namespace} rollout status on it, resume or restart it. "
        "Delivery itself is not blocked."
    ),
    # CredentialExpiry
    "ExpiresSoon": (
        "The credential expires within 7 days: mint a new one (" + _MINT + ") and replace data "
        "key hikyo-token of {credential_kind} {credential}, keeping both designation labels."
    ),
    "Expired": (
        "The credential has expired: mint a new one (" + _MINT + ") and replace data key "
        "hikyo-token of {credential_kind} {credential}, keeping both designation labels."
    ),
    # PinExpiry
    "PinExpired": (
        "The durable pin on environment {environment} is past its retention: ask a Hikyo "
        "operator to move or remove the pin. Delivery continues meanwhile."
    ),
    # Unreconciled
    "NamespaceNotBound": (
        "The operator has no RBAC in namespace {namespace} (it may not {verb} {resource}): add "
        "{namespace} to the Helm value operator.namespaces (the watch list and the RBAC "
        "bindings both come from it) and helm upgrade the release."
    ),
}

# FetchFailed, KeysMissing and InvalidTemplate have several causes; the condition's ``cause``
# fact picks the text for its own.
_BY_CAUSE: dict[tuple[str, str], str] = {
    ("InvalidTemplate", "dotenv"): (
        "A dotenv file (spec.target.format: dotenv) holds only environment-variable names, "
        "and keys {keys} are not: give them such names with spec.mapping[].secretKey "
        "(letters, digits and _, not starting with a digit), or use format json, yaml or "
        "properties."
    ),
    ("FetchFailed", "R3"): (
        "The HikyoSecret breaks a rule its CRD now enforces (see the message), e.g. "
        "spec.resyncInterval must be a Go duration of at least 10s (5m when empty): fix the "
        "spec with `kubectl -n {namespace} edit hksec {name}`."
    ),
    ("FetchFailed", "R5"): (
        "HikyoInstance {instance} does not exist: a cluster admin creates it (`kubectl get "
        "hkinst` lists the instances), or point spec.instanceRef.name at an existing one. The "
        "credential's hikyo.dev/instance label must name the same instance (`kubectl -n "
        "{namespace} get {credential_resource} {credential} --show-labels`), or the next run "
        "stops at InstanceMismatch. Its creation runs this HikyoSecret again."
    ),
    ("FetchFailed", "R6"): (
        "The TokenRequest for ServiceAccount {credential} failed: list it under the Helm value "
        "operator.designatedServiceAccounts.{namespace} (the chart grants create on "
        "serviceaccounts/token only for those names) and helm upgrade."
    ),
    ("FetchFailed", "R12"): (
        "The stamp root Secret hikyo-operator-stamp-root in the operator's namespace is missing "
        "or damaged: restore it from backup, or set HIKYO_OPERATOR_ALLOW_STAMP_ROOT_RESET=true "
        "to accept one restart of every opted-in workload."
    ),
    ("FetchFailed", "R14"): (
        "No client could be built for HikyoInstance {instance} (its spec.url or caBundle is "
        "invalid) and instances are immutable: a cluster admin creates a corrected "
        "HikyoInstance; point spec.instanceRef.name at it and relabel the credential's "
        "hikyo.dev/instance."
    ),
    ("FetchFailed", "admission"): (
        "The operator's RBAC allows the call, but admission or a quota refused it: check the "
        "namespace's ResourceQuota and admission policies for the resource the message names."
    ),
    ("FetchFailed", "confirming"): (
        "The server answered an authoritative 404; the operator confirms it with a second, "
        "cursor-less fetch before it acts. If access was withdrawn by mistake, restore the "
        "principal's read grant on environment {environment} now."
    ),
    ("FetchFailed", "unauthorized"): (
        "The Hikyo server rejected the credential (401: invalid, expired or revoked): mint a new "
        "one (" + _MINT + ") and replace data key hikyo-token of {credential_kind} "
        "{credential}, keeping both designation labels. The Secret is retained meanwhile; the "
        "retry waits out its backoff, so then force a fresh delivery at once: " + _FORCE_SYNC
    ),
    ("FetchFailed", "server"): (
        "The Hikyo server failed or could not be reached (see the message); the Secret is "
        "retained and the fetch retried with backoff. Once the server is fixed, force a fresh "
        "delivery: " + _FORCE_SYNC
    ),
    ("FetchFailed", "tls"): (
        "The Hikyo server's certificate does not verify against HikyoInstance {instance}'s "
        "caBundle (or the system roots): fix the server certificate, or have a cluster admin "
        "create a HikyoInstance with the right caBundle and point spec.instanceRef.name at it."
    ),
    ("FetchFailed", "rate-limited"): (
        "HikyoInstance {instance} answered 429 for org {org}: fetches to it for that org pause "
        "as the server asks (S4.1.6); lower the number or frequency of that org's HikyoSecrets "
        "on it (spec.resyncInterval) if it persists."
    ),
    ("KeysMissing", "R10"): (
        "A {target_type} Secret needs destinations {keys} in spec.mapping: add a mapping entry "
        "whose secretKey is each of them (e.g. key: TLS_CERTIFICATE, secretKey: tls.crt)."
    ),
}

# Fixed outside the HikyoSecret (a Secret, the Hikyo server, the chart), which the operator does
# not watch: these texts end with the command that runs the HikyoSecret now (_NOW).
_FIXED_ELSEWHERE = (
    "SecretNotDesignated",
    "ServiceAccountNotDesignated",
    "InstanceMismatch",
    "ManagedSecretNotOwned",
    "MergeTargetMissing",
    "KeyOwnedElsewhere",
    "UndeliveredSecrets",
    "NotMaterialized",
    "KeysMissing",
    "InvalidSecretData",
    "ExpiresSoon",
    "Expired",
    "AuthorizationWithdrawn",
)
for _reason in _FIXED_ELSEWHERE:
    TEXTS[_reason] += _NOW
for _cause in ("R6", "R12", "admission", "confirming"):
    _BY_CAUSE[("FetchFailed", _cause)] += _NOW

# Outcomes of a run that set no S5.1 condition (R0-R2, S4.1.6, S4.15), for ``explain``.
OUTCOME_TEXTS: dict[str, str] = {
    "Gone": "HikyoSecret {namespace}/{name} does not exist: check the namespace and name.",
    "OperatorNamespace": (
        "HikyoSecrets in the operator's own namespace are ignored (S8.5): create it in an "
        "application namespace."
    ),
    "ForeignOwner": (
        "Another operator, whose Lease is live, owns this HikyoSecret (S4.1.7): run one "
        "operator per cluster, or stop the other one; this one takes over once that Lease "
        "is stale."
    ),
    "Deleting": "The HikyoSecret is being deleted; Kubernetes garbage-collects its Secret.",
    "Finalized": (
        "The HikyoSecret is being deleted with creationPolicy Orphan: the operator releases "
        "Secret {target} (it stays, unowned) and removes the hikyo.dev/orphan finalizer."
    ),
    "FinalizerAdded": (
        "Nothing to do: the operator adds the hikyo.dev/orphan finalizer (creationPolicy "
        "Orphan) and runs again."
    ),
    "FinalizerRemoved": (
        "Nothing to do: the operator removes the hikyo.dev/orphan finalizer (creationPolicy "
        "Owner) and runs again."
    ),
    "NamespaceTerminating": "Namespace {namespace} is being deleted; nothing is done.",
    "InstancePaused": (
        "HikyoInstance {instance} answered 429 for org {org}: every fetch to it for that org "
        "waits out the pause, and then they run in the order they became due; nothing to do."
    ),
    "Paced": "Fetches to HikyoInstance {instance} are paced (S4.1.6); nothing to do.",
    "CredentialUnanswered": (
        "Requests to HikyoInstance {instance} with this HikyoSecret's credential (org {org}) "
        "timed out while the instance answered others (S4.1.9). One request at a time probes "
        "it and the first answer ends the wait; this HikyoSecret keeps its conditions meanwhile. "
        "Check the Hikyo server's logs for that credential and org."
    ),
    "InstanceUnresponsive": (
        "HikyoInstance {instance} stopped answering: requests for two different credentials "
        "timed out with no answer in between (S4.1.9). One request at a time probes it and the "
        "first answer ends the wait; this HikyoSecret keeps its conditions meanwhile. Check "
        "that the Hikyo server at spec.url is up and reachable from the operator's pods."
    ),
    "NotReconciled": (
        "No reconcile has written a status yet: check that the operator runs and watches "
        "namespace {namespace} (Helm operator.namespaces); `python manage.py explain "
        "{namespace}/{name}` shows what a reconcile would do."
    ),
}

GENERIC = (
    "No remediation is known for reason {reason}: read the conditions and events with "
    "`kubectl -n {namespace} describe hksec {name}`."
)


# A condition stored by an operator that kept no facts beside its message: what the text says
# in place of the name it cannot know (the message, shown beside it, names it).
UNKNOWN: dict[str, str] = {
    "keys": "(the keys the message names)",
    "key": "(the data key the message names)",
    "kind": "the error the message names",
    "labelled_instance": "(the instance the message names)",
    "winner": "(the HikyoSecret the message names)",
    "existing_type": "(the type the message names)",
    "verb": "(the verb the message names)",
    "resource": "(the resource the message names)",
}


class _Named(dict[str, str]):
    """``format_map`` helper: a fact the context lacks says so (``UNKNOWN``); any other name
    shows as ``<name>``."""

    def __missing__(self, key: str) -> str:
        return UNKNOWN.get(key, f"<{key}>")


class Part(NamedTuple):
    """A piece of a remediation: prose, or a ``command`` to run as it stands."""

    text: str
    command: bool = False


def remediation_parts(reason: str, context: Mapping[str, str]) -> list[Part]:
    """The text for ``reason`` in pieces, with the names of ``context`` filled in; its
    ``cause`` (a condition's fact, ``facts.Cause``) picks the text of that cause. The pieces
    are split before the names go in, so no name can make or end a command."""
    names = _Named({k: str(v) for k, v in context.items() if v not in (None, "")})
    names.setdefault("reason", reason)
    text = _BY_CAUSE.get((reason, names.get("cause", "")))
    if text is None:
        text = TEXTS.get(reason) or OUTCOME_TEXTS.get(reason) or GENERIC
    pieces = text.split("`")
    return [
        Part(piece.format_map(names), index % 2 == 1) for index, piece in enumerate(pieces) if piece
    ]


def remediation(reason: str, context: Mapping[str, str]) -> str:
    """The whole text for ``reason`` (``remediation_parts`` joined): what ``explain`` and
    ``status`` print."""
    return "".join(part.text for part in remediation_parts(reason, context))


def known(reason: str) -> bool:
    """Whether ``reason`` has a text of its own (not the generic one)."""
    return reason in TEXTS or reason in OUTCOME_TEXTS
