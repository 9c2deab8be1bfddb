"""S11.2 and S11.3 on the real apiserver and the devserver: templates and file formats reach
the Secret byte for byte, an edit re-renders at once, and a hostile template is a clear
InvalidTemplate that quotes nothing."""

from __future__ import annotations

import io

from dotenv import dotenv_values
from kubernetes import client

from bench.hostile_templates import CONTAINED, HOSTILE
from tests.integration.test_rollouts import _apps, _deployment, _stamp_on
from tests.support.kube import settle, write_counters
from tests.support.world import canary

URL = "postgres://{{ DATABASE_URL | urlquote }}/{{ values['log-level'] }}"


def test_a_template_renders_into_the_secret_and_an_edit_renders_again_at_once(world):
    values = world.ready(target={"name": "app-env", "template": {"data": {"url": URL}}})
    from urllib.parse import quote

    expected = f"postgres://{quote(values['DATABASE_URL'], safe='')}/{values['LOG_LEVEL']}"
    assert world.target().data == {"url": expected.encode()}
    assert world.reconcile().outcome.reason == "Current"

    world.patch_cr("app", {"target": {"template": {"data": {"url": "{{ DATABASE_URL }}"}}}})
    result = world.reconcile()
    # S11: the edit changed the binding, so no cursor let the server answer "current"
    assert result.outcome.reason == "Delivered", result.outcome.message
    assert world.target().data == {"url": values["DATABASE_URL"].encode()}
    assert world.requests()[-1].cursor_present is False


def test_a_dotenv_file_reads_back_as_the_delivered_values(world):
    published = {"DATABASE_URL": canary("value") + ' $HOME #x "d" ü', "LOG_LEVEL": "it's\nmulti"}
    values = world.prepare(
        published,
        mapping=[{"key": "DATABASE_URL"}, {"key": "LOG_LEVEL"}],
        target={"name": "app-env", "format": "dotenv", "formatKey": ".env"},
    )
    assert world.reconcile().outcome.reason == "Delivered"
    (text,) = world.target().data.values()
    read = dotenv_values(stream=io.StringIO(text.decode()), interpolate=False)
    assert read == {"DATABASE_URL": values["DATABASE_URL"], "LOG_LEVEL": values["LOG_LEVEL"]}


def test_a_hostile_template_is_invalid_in_bounded_time_and_quotes_nothing(world):
    hostile = "{{ (DATABASE_URL ~ 'x') * 100000000 }}"
    values = world.prepare(target={"name": "app-env", "template": {"data": {"boom": hostile}}})
    result = world.reconcile()
    assert result.outcome.reason == "InvalidTemplate", result.outcome.message
    message = world.message("Delivery")
    assert "data key boom" in message
    assert values["DATABASE_URL"] not in message and "100000000" not in message
    assert world.target() is None  # nothing written, nothing half-rendered


def test_unchanged_resyncs_of_all_three_kinds_write_nothing(world):
    """S4.17 for S11, by the apiserver's own request counters: a template, a file format and a
    merge, each resynced twice after its first delivery, make no write at all."""
    world.publish(DATABASE_URL=canary("value"), LOG_LEVEL="info")
    world.grant()
    world.create_instance()
    world.create_credential()
    world.core.create_namespaced_secret(
        world.namespace,
        client.V1Secret(metadata=client.V1ObjectMeta(name="m-env"), string_data={"own": "x"}),
        field_manager="helm",
    )
    shapes = {
        "t": {"name": "t-env", "template": {"data": {"url": URL}}},
        "f": {"name": "f-env", "format": "json", "formatKey": "config.json"},
        "m": {"name": "m-env", "creationPolicy": "Merge"},
    }
    for name, target in shapes.items():
        world.create_cr(name, target=target)
        reasons = [world.reconcile(name).outcome.reason for _ in range(3)]
        assert "Delivered" in reasons and reasons[-1] == "Current", (name, reasons)
    settle(world.api_client, world.namespace)
    before = write_counters(world.api_client)
    for name in shapes:
        for _ in range(2):
            result = world.reconcile(name)
            assert result.outcome.reason == "Current" and not result.status_written, name
    assert write_counters(world.api_client) == before


def test_a_forced_sync_of_values_toyaml_with_nothing_changed_writes_nothing_and_keeps_the_stamp(
    world,
):
    """S11.2 rev 4 determinism: ``values | toyaml`` (ESO's ``. | toYaml``) renders the same bytes
    on every full delivery, so a forced cursorless sync writes neither the Secret nor the
    workload (the apiserver's own counters) and the stamp stays."""
    target = {"name": "app-env", "template": {"data": {"all.yaml": "{{ values | toyaml }}"}}}
    _apps(world).create_namespaced_deployment(world.namespace, _deployment(opt_in="app-env"))
    values = world.ready(target=target)
    assert world.target().data["all.yaml"].startswith(b'"DATABASE_URL": ')
    assert values["DATABASE_URL"].encode() in world.target().data["all.yaml"]
    assert world.reconcile().outcome.reason == "Current"
    stamp = world.status()["stamp"]
    assert _stamp_on(world, "Deployment", "web") == stamp
    settle(world.api_client, world.namespace)
    before = write_counters(world.api_client)
    forced = world.reconcile(forced_full=True)
    assert world.requests()[-1].cursor_present is False  # a full delivery, not a "current"
    assert forced.outcome.reason == "Delivered", forced.outcome.message
    assert forced.outcome.wrote_secret is False and forced.rolled == []
    # A forced sync updates the CR's status (its outcome and cursor); the Secret and the workload
    # are not written at all.
    after = write_counters(world.api_client)
    assert {k: v for k, v in after.items() if "hikyosecrets" not in k} == {
        k: v for k, v in before.items() if "hikyosecrets" not in k
    }
    assert world.status()["stamp"] == stamp
    assert _stamp_on(world, "Deployment", "web") == stamp


def test_every_hostile_template_is_invalid_template_of_its_kind_and_quotes_nothing(world):
    """Every case of bench/hostile_templates.py as a HikyoSecret of its own, rendered through the
    renderer pool over canary values: each ends InvalidTemplate of its kind with nothing written,
    and the session's canary sweep reads every condition, event and log line they made."""
    cases = {
        name: case
        for name, case in {**HOSTILE, **CONTAINED}.items()
        if "blob" not in case[0]  # the devserver publishes text; binary values are unit-tested
    }
    values = world.prepare(
        mapping=[
            {"key": "DATABASE_URL", "secretKey": "password"},
            {"key": "LOG_LEVEL", "secretKey": "user"},
        ],
        target={"name": "app-env", "template": {"data": {"ok": "{{ user }}"}}},
    )
    for index, (template, _) in enumerate(cases.values()):
        world.create_cr(
            f"h{index}",
            mapping=[
                {"key": "DATABASE_URL", "secretKey": "password"},
                {"key": "LOG_LEVEL", "secretKey": "user"},
            ],
            target={"name": f"h{index}-env", "template": {"data": {"dest": template}}},
        )
    for index, (name, (_, kind)) in enumerate(cases.items()):
        reasons = [world.reconcile(f"h{index}").outcome.reason for _ in range(2)]
        assert reasons[-1] == "InvalidTemplate", (name, reasons)
        message = world.message("Delivery", f"h{index}")
        stopped = message.removeprefix("the template of data key dest is invalid: ")
        assert stopped.startswith(kind), (name, message)
        assert not any(value in message for value in values.values()), name
        assert world.target(f"h{index}-env") is None, name
