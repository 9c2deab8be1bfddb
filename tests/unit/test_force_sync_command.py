"""`manage.py resync` (issue 9 item 2) over a fake cluster: selection rules as kubectl's, the
annotation it sets, the --wait outcomes, and one-line errors. The real apiserver is in
tests/integration/test_resync_command.py."""

from __future__ import annotations

import re
from io import StringIO
from types import SimpleNamespace
from typing import Any

import pytest
from django.core.management import call_command
from django.core.management.base import CommandError
from django.test import override_settings

from controlplane.observations import resync_requests
from controlplane.observations.management.commands import resync
from k8s.errors import KubeError, NotFound
from workers.engine.force_sync import FORCE_SYNC_ANNOTATION, requested_value
from workers.engine.settings import OperatorSettings


def hksec(namespace: str, name: str, instance: str = "primary", **labels: str) -> dict[str, Any]:
    return {
        "metadata": {
            "namespace": namespace,
            "name": name,
            "uid": f"uid-{namespace}-{name}",
            "labels": labels,
            "annotations": {},
        },
        "spec": {"instanceRef": {"name": instance}},
        "status": {"lifecycle": "Synced", "cursor": "CANARYCURSOR"},
    }


class FakeCluster:
    """The three calls resync makes. ``handle_after``: GETs before an operator 'handles' a
    pending value (records it in status.lastForcedSync); None: never."""

    def __init__(self, *crs: dict[str, Any], handle_after: int | None = 1) -> None:
        self.crs = {(c["metadata"]["namespace"], c["metadata"]["name"]): c for c in crs}
        self.handle_after = handle_after
        self.gets: dict[tuple[str, str], int] = {}
        self.patches: list[tuple[str, str, dict[str, Any], str]] = []
        self.selects: list[tuple[str | None, str]] = []
        self.error: BaseException | None = None
        self.api_client = SimpleNamespace(
            configuration=SimpleNamespace(host="https://admin:pw@fake.example:6443")
        )

    def get_hikyosecret(self, namespace: str, name: str) -> dict[str, Any] | None:
        if self.error is not None:
            raise self.error
        cr = self.crs.get((namespace, name))
        if cr is None:
            return None
        count = self.gets[(namespace, name)] = self.gets.get((namespace, name), 0) + 1
        value = requested_value(cr)
        if value is not None and self.handle_after is not None and count > self.handle_after:
            cr["status"]["lastForcedSync"] = {
                "value": value,
                "reason": "Delivered",
                "fetched": True,
                "wroteSecret": False,
            }
        return cr

    def select_hikyosecrets(self, namespace: str | None, label_selector: str = "") -> list[Any]:
        self.selects.append((namespace, label_selector))
        if label_selector == "bad selector!":
            raise KubeError("list hikyosecrets", 400, "BadRequest")
        wanted = dict(part.split("=") for part in label_selector.split(",") if part)
        return [
            c
            for (ns, _), c in sorted(self.crs.items())
            if (namespace is None or ns == namespace)
            and all(c["metadata"]["labels"].get(k) == v for k, v in wanted.items())
        ]

    def annotate_hikyosecret(
        self, namespace: str, name: str, annotations: dict[str, Any], *, uid: str = ""
    ) -> None:
        cr = self.crs.get((namespace, name))
        if cr is None:
            raise NotFound(f"patch hikyosecrets {namespace}/{name}", 404, "NotFound")
        self.patches.append((namespace, name, dict(annotations), uid))
        cr["metadata"]["annotations"].update(annotations)


@pytest.fixture
def fake(monkeypatch):
    cluster = FakeCluster(
        hksec("team", "a", team="pay"),
        hksec("team", "b", instance="other"),
        hksec("ops", "c", team="pay"),
        hksec("hikyo-system", "own", team="pay"),
    )
    monkeypatch.setattr(resync, "_cluster", lambda: cluster)
    monkeypatch.setattr(resync_requests, "POLL_FIRST_SECONDS", 0.01)
    monkeypatch.setattr(resync_requests, "POLL_MAX_SECONDS", 0.02)
    with override_settings(HIKYO_OPERATOR=OperatorSettings(operator_namespace="hikyo-system")):
        yield cluster


def run(*argv: str) -> tuple[str, str]:
    out, err = StringIO(), StringIO()
    call_command("resync", *argv, stdout=out, stderr=err)
    return out.getvalue(), err.getvalue()


VALUE = r"resync-\d{8}T\d{6}Z-[0-9a-f]{6}"
LINE = re.compile(
    rf"^(\S+/\S+): resync requested \({re.escape(FORCE_SYNC_ANNOTATION)}=({VALUE})\)$"
)


def requested(out: str) -> dict[str, str]:
    return {m[1]: m[2] for m in map(LINE.match, out.splitlines()) if m}


def test_named_objects_are_annotated_with_one_new_value(fake):
    out, _ = run("team/a", "ops/c")
    asked = requested(out)
    assert list(asked) == ["team/a", "ops/c"] and len(set(asked.values())) == 1
    value = asked["team/a"]
    assert [(ns, name, a, uid) for ns, name, a, uid in fake.patches] == [
        ("team", "a", {FORCE_SYNC_ANNOTATION: value}, "uid-team-a"),
        ("ops", "c", {FORCE_SYNC_ANNOTATION: value}, "uid-ops-c"),
    ]
    again, _ = run("team/a")
    assert requested(again)["team/a"] != value  # every run asks anew


def test_names_with_the_namespace_flag(fake):
    out, _ = run("-n", "team", "a", "team/b")
    assert list(requested(out)) == ["team/a", "team/b"]


def test_all_selector_and_instance(fake):
    out, err = run("--all")
    assert list(requested(out)) == ["ops/c", "team/a", "team/b"]
    assert "hikyo-system/own: skipped" in err  # S8.5: the operator would never handle it
    assert fake.selects[-1] == (None, "")
    out, _ = run("-n", "team", "--all")
    assert list(requested(out)) == ["team/a", "team/b"]
    out, _ = run("--all", "-l", "team=pay")
    assert list(requested(out)) == ["ops/c", "team/a"]
    assert fake.selects[-1] == (None, "team=pay")
    out, _ = run("-n", "team", "-l", "team=pay")
    assert list(requested(out)) == ["team/a"]
    out, _ = run("-n", "team", "--instance", "other")
    assert list(requested(out)) == ["team/b"]
    out, _ = run("--all", "--instance", "primary", "--selector", "team=pay")
    assert list(requested(out)) == ["ops/c", "team/a"]


def test_outside_the_watch_list_is_skipped(fake):
    watching = OperatorSettings(operator_namespace="hikyo-system", namespaces=("team",))
    with override_settings(HIKYO_OPERATOR=watching):
        out, err = run("--all")
    assert list(requested(out)) == ["team/a", "team/b"]
    assert "ops/c: skipped: namespace ops is not in HIKYO_OPERATOR_NAMESPACES" in err


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        ((), "give NAMESPACE/NAME"),
        (("-n", "team"), "give NAMESPACE/NAME"),
        (("team/a", "--all"), "not both"),
        (("team/a", "-l", "x=y"), "not both"),
        (("team/a", "--instance", "primary"), "not both"),
        (("-l", "team=pay"), "within -n NAMESPACE"),
        (("--instance", "primary"), "within -n NAMESPACE"),
        (("no-slash",), "NAMESPACE/NAME"),
        (("team/",), "NAMESPACE/NAME"),
        (("team/a/b",), "NAMESPACE/NAME"),
        (("-n", "ops", "team/a"), "not in namespace 'ops'"),
        (("team/a", "--wait=0"), "above 0"),
        (("team/a", "--wait=-3"), "above 0"),
    ],
)
def test_bad_arguments_are_one_line_and_touch_nothing(fake, argv, message):
    with pytest.raises(CommandError, match=message) as raised:
        run(*argv)
    assert "\n" not in str(raised.value)
    assert fake.patches == []


def test_an_unknown_object_annotates_none(fake):
    with pytest.raises(CommandError, match=r"^HikyoSecret not found: team/nope, ops/gone$"):
        run("team/a", "team/nope", "ops/gone")
    assert fake.patches == []


def test_a_bad_selector_is_the_apiservers_400_in_one_line(fake):
    with pytest.raises(CommandError, match=r"invalid label selector 'bad selector!'.*HTTP 400"):
        run("--all", "-l", "bad selector!")


def test_no_match_says_where_it_looked(fake):
    with pytest.raises(CommandError, match=r"no HikyoSecret matched in namespace team with labels"):
        run("-n", "team", "-l", "team=none")
    with pytest.raises(CommandError, match=r"in any namespace naming instance 'x'"):
        run("--all", "--instance", "x")


@pytest.mark.parametrize(
    ("error", "message"),
    [
        (
            OSError("connection refused"),
            r"^cannot reach the cluster at https://fake\.example:6443: OSError$",  # no userinfo
        ),
        (
            KubeError("get hikyosecrets team/a", 401, "Unauthorized"),
            r"^cannot talk to the cluster: get hikyosecrets team/a: HTTP 401 Unauthorized$",
        ),
    ],
)
def test_an_unreachable_or_refusing_cluster_is_one_line(fake, error, message):
    fake.error = error
    with pytest.raises(CommandError, match=message):
        run("team/a")


def test_no_cluster_configured_is_one_line(monkeypatch, tmp_path):
    missing = tmp_path / "nowhere.yaml"
    monkeypatch.delenv("KUBERNETES_SERVICE_HOST", raising=False)
    with override_settings(KUBECONFIG=str(missing)), pytest.raises(CommandError) as raised:
        run("team/a")
    assert str(raised.value).startswith("no cluster configured")
    assert "\n" not in str(raised.value)


def test_wait_prints_each_outcome(fake):
    out, _ = run("team/a", "ops/c", "--wait=30")
    lines = out.splitlines()
    assert lines[2:] == [
        "team/a: Delivered lifecycle=Synced fetched=yes wrote=no",
        "ops/c: Delivered lifecycle=Synced fetched=yes wrote=no",
    ]
    assert "CANARY" not in out  # the status's cursor is never printed


@pytest.mark.parametrize("argv", [("--wait", "team/a"), ("team/a", "--wait")])
def test_a_bare_wait_waits_the_default(fake, monkeypatch, argv):
    seen = []
    monkeypatch.setattr(
        resync.Command, "_wait", lambda self, cluster, asked, value, s: seen.append(s)
    )
    out, _ = run(*argv)
    assert list(requested(out)) == ["team/a"] and seen == [resync.DEFAULT_WAIT_SECONDS]


def test_wait_lists_what_was_not_handled_and_fails(fake):
    fake.handle_after = None  # no operator
    with pytest.raises(CommandError, match=r"^2 of 2 HikyoSecrets did not handle the resync"):
        run("team/a", "team/b", "--wait=0.2")


def test_a_value_handled_earlier_is_not_this_request(fake):
    """Only this run's value counts: an older lastForcedSync is not an outcome."""
    fake.crs[("team", "a")]["status"]["lastForcedSync"] = {"value": "older", "reason": "Current"}
    fake.handle_after = None
    with pytest.raises(CommandError, match="1 of 1"):
        run("team/a", "--wait=0.1")


def test_deleted_while_waiting(fake, monkeypatch):
    original = fake.get_hikyosecret

    def vanishing(namespace: str, name: str):
        if name == "b" and fake.gets.get((namespace, name)):  # found once, then gone
            return None
        return original(namespace, name)

    monkeypatch.setattr(fake, "get_hikyosecret", vanishing)
    out = StringIO()
    with pytest.raises(CommandError, match=r"^1 of 2 HikyoSecrets did not handle"):
        call_command("resync", "team/a", "team/b", "--wait=5", stdout=out, stderr=StringIO())
    assert "team/b: deleted before it handled the request" in out.getvalue()
    assert "team/a: Delivered lifecycle=Synced" in out.getvalue()


def test_request_values_are_unique():
    assert len({resync.new_request_value() for _ in range(200)}) == 200


@pytest.mark.django_db
def test_a_wait_names_the_429_pause_the_store_recorded():
    from datetime import timedelta

    from django.utils import timezone

    from controlplane.observations.management.commands.resync import held_back_by_pause
    from controlplane.observations.models import TrackedObject
    from workers.keys import ObjectKey

    key = ObjectKey("team", "app", "u1")
    assert held_back_by_pause(key) is None
    TrackedObject.objects.create(
        namespace="team",
        name="app",
        uid="u1",
        instance="primary",
        names={"org": "acme"},
        paused_until=timezone.now() + timedelta(seconds=50),
    )
    said = held_back_by_pause(key)
    assert said is not None and said.startswith(
        "waits for HikyoInstance primary's 429 pause of acme"
    )
    TrackedObject.objects.update(paused_until=timezone.now() - timedelta(seconds=1))
    assert held_back_by_pause(key) is None  # the pause is over
