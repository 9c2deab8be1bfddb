"""S11.2 templates (workers/engine/templates.py): the language, the context, the checks before
the fetch, the render after it, and the hostile set (bench/hostile_templates.py measures the
same cases' times against the run deadline; here each is a fault, in bounded memory, that
names the destination and a kind, never a value)."""

from __future__ import annotations

import base64
import hashlib
import json

import pytest

from bench.hostile_templates import CANARY, HOSTILE, TRACED_BOUND_MIB, VALUES, measure
from workers.engine.template_bounds import NESTED_TOO_DEEP, RENDERS_AN_OBJECT
from workers.engine.templates import (
    Rendered,
    TemplateFault,
    dockerconfigjson,
    parse_templates,
    render_templates,
    template_variables,
)

SOURCES = {"user": b"admin", "password": b"p@ss w/rd:" + CANARY.encode(), "tls.crt": b"PEM\n"}


def _render(template: str, sources: dict[str, bytes] = SOURCES) -> bytes:
    outcome = render_templates({"out": template}, sources)
    assert isinstance(outcome, Rendered), outcome
    return outcome.data["out"]


# -- the language ------------------------------------------------------------------------------


def test_a_connection_url_from_a_user_and_a_password():
    password = SOURCES["password"].decode()
    expected = f"postgres://admin:p%40ss%20w%2Frd%3A{password[10:]}@db:5432/app"
    assert _render("postgres://{{ user }}:{{ password|urlquote }}@db:5432/app") == (
        expected.encode()
    )


def test_keys_that_are_no_identifiers_are_read_through_values():
    assert _render("{{ values['tls.crt'] }}|{{ values.user }}") == b"PEM\n|admin"


def test_the_output_is_byte_exact_nothing_added_or_stripped():
    assert _render("  {{ user }}\n\n") == b"  admin\n\n"
    assert _render("\n{{ user }}") == b"\nadmin"


@pytest.mark.parametrize(
    ("template", "expected"),
    [
        ("{{ user|b64encode }}", base64.b64encode(b"admin")),
        ("{{ 'YWRtaW4='|b64decode }}", b"admin"),
        ("{{ user|sha256 }}", hashlib.sha256(b"admin").hexdigest().encode()),
        ("{{ {'b': 1, 'a': 'é'}|tojson }}", '{"a": "é", "b": 1}'.encode()),
        ("{{ {'b': [1, 'x'], 'a': None}|toyaml }}", b'"a": null\n"b":\n  - 1\n  - "x"\n'),
        ("{{ 'a-b_c.d~e f/g'|urlquote }}", b"a-b_c.d~e%20f%2Fg"),
        ("{{ user|upper }} {{ user.upper() }} {{ ['b', 'a']|sort|join(',') }}", b"ADMIN ADMIN a,b"),
    ],
)
def test_the_filters_s11_2_names_and_jinja_s_built_ins(template, expected):
    assert _render(template) == expected


def test_dockerconfigjson_is_the_text_kubectl_writes():
    text = dockerconfigjson("ghcr.io", "admin", "pw")
    assert text == (
        '{"auths":{"ghcr.io":{"username":"admin","password":"pw","auth":"YWRtaW46cHc="}}}'
    )
    assert json.loads(_render("{{ dockerconfigjson('ghcr.io', user, 'pw') }}")) == json.loads(text)


def test_the_same_sources_and_templates_give_the_same_bytes():
    template = "{% for k in values %}{{ k }}={{ values[k]|sha256 }};{% endfor %}"
    assert _render(template) == _render(template)


def test_a_value_that_is_not_utf8_is_available_only_through_b64encode():
    sources = {"blob": b"\xff\x00" + CANARY.encode()}
    assert _render("{{ blob|b64encode }}", sources) == base64.b64encode(sources["blob"])
    fault = render_templates({"out": "{{ blob }}"}, sources)
    assert isinstance(fault, TemplateFault) and "not UTF-8" in fault.kind
    assert CANARY not in fault.message


# -- before the fetch --------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("template", "kind"),
    [
        ("{{ user ", "a syntax error on line 1"),
        ("line\n{% for %}", "a syntax error on line 2"),
        ("{{ user|nofilter }}", "an unknown filter on line 1"),
        ("{{ user|random }}", "an unknown filter on line 1"),  # S11.2: no randomness
        ("{{ lipsum() }}", "an unknown function on line 1"),
        ("{{ namespace(a=1) }}", "an unknown function on line 1"),
        ("{{ hikyo_loop }}", "a syntax error on line 1"),  # the guards' names are reserved
    ],
)
def test_a_template_that_cannot_parse_is_refused_before_the_fetch(template, kind):
    assert parse_templates({"out": template}, None) == TemplateFault("out", kind)


def test_in_mapping_mode_a_variable_must_be_an_assembled_key():
    known = frozenset({"user", "password"})
    good = {"a": "{{ user }}{% set x = 1 %}{{ x }}{% for c in user %}{{ loop.index }}{% endfor %}"}
    assert parse_templates(good, known) is None
    bad = {"a": "{{ user }}", "b": "{{ values['tls.crt'] }}"}
    assert parse_templates(bad, known) == TemplateFault("b", "variable tls.crt is no assembled key")


def test_the_first_fault_is_reported_by_destination_key_order():
    fault = parse_templates({"z": "{{", "a": "{{ x|nope }}"}, None)
    assert fault is not None and fault.key == "a"


def test_template_variables_name_what_each_entry_reads():
    variables = template_variables({"url": "{{ user }}:{{ values['password'] }}{{ range(2) }}"})
    assert variables == {"url": frozenset({"user", "password"})}


def test_the_message_names_the_key_and_the_kind_only():
    fault = parse_templates({"config.yaml": "{{ user|secretfilter }}"}, None)
    assert fault is not None
    assert fault.message == (
        "the template of data key config.yaml is invalid: an unknown filter on line 1"
    )


# -- after the fetch ---------------------------------------------------------------------------


def test_an_entry_that_reads_a_missing_source_is_left_out_and_named():
    outcome = render_templates(
        {"url": "{{ user }}:{{ password }}", "name": "{{ user }}"},
        {"user": b"admin"},
        missing=frozenset({"password"}),
    )
    assert isinstance(outcome, Rendered)
    assert outcome.data == {"name": b"admin"}
    assert outcome.lacking == {"url": ("password",)}


def test_a_missing_source_read_through_values_at_render_is_left_out_too():
    outcome = render_templates(
        {"k": "{% for n in ['user', 'password'] %}{{ values[n] }}{% endfor %}"},
        {"user": b"admin"},
        missing=frozenset({"password"}),
    )
    assert isinstance(outcome, Rendered) and outcome.lacking == {"k": ("password",)}


# -- the hostile set ---------------------------------------------------------------------------


@pytest.mark.parametrize("name", list(HOSTILE))
def test_a_hostile_template_is_a_clear_fault_in_bounded_memory_without_a_value(name):
    template, kind = HOSTILE[name]
    message, _, peak_mib = measure(template)
    assert message.startswith("the template of data key dest is invalid: " + kind), message
    assert CANARY not in message
    assert peak_mib < TRACED_BOUND_MIB


def test_no_fault_text_quotes_a_value_even_when_a_filter_fails_on_it():
    for name in ("b64decode", "int", "float", "tojson", "first", "last"):
        outcome = render_templates({"k": "{{ (password|" + name + ") + password }}"}, VALUES)
        text = outcome.message if isinstance(outcome, TemplateFault) else ""
        assert CANARY not in text and CANARY[:8] not in text


# -- determinism (S11.2 rev 4) -------------------------------------------------------------------

PAIR = {"DB_USER": b"admin", "b.key": b"it's"}


@pytest.mark.parametrize(
    ("template", "expected"),
    [
        ("{{ values|tojson }}", '{"DB_USER": "admin", "b.key": "it\'s"}'),
        ("{{ values|toyaml }}", '"DB_USER": "admin"\n"b.key": "it\'s"\n'),
        (
            "{% for k, v in values.items() %}{{ k }}={{ v }};{% endfor %}",
            "DB_USER=admin;b.key=it's;",
        ),
        ("{% for k, v in values|dictsort %}{{ k }};{% endfor %}", "b.key;DB_USER;"),
        ("{{ values.DB_USER }}", "admin"),
    ],
)
def test_values_is_a_mapping_of_strings_as_other_operators_give_it(template, expected):
    assert _render(template, PAIR) == expected.encode()


@pytest.mark.parametrize(
    "template",
    ["{{ values }}", "{{ DB_USER.upper }}", "{{ [DB_USER] }}", "{{ {'a': DB_USER} }}"],
)
def test_an_object_the_parser_can_see_is_refused_before_the_fetch(template):
    assert parse_templates({"k": template}, None) == TemplateFault("k", RENDERS_AN_OBJECT)


@pytest.mark.parametrize(
    "template",
    [
        "{{ DB_USER.upper ~ '' }}",
        "{{ DB_USER.upper|string }}",
        "{{ [DB_USER]|map('upper') }}",
        "{{ [DB_USER, DB_USER]|map(attribute='upper')|join(',') }}",
        "{% set s = values.items() %}{{ s }}",
        "{{ values.items() }}",
    ],
)
def test_an_object_seen_only_at_render_is_a_fault_never_a_repr(template):
    assert parse_templates({"k": template}, None) is None
    assert render_templates({"k": template}, PAIR) == TemplateFault("k", RENDERS_AN_OBJECT)


def test_an_entry_that_reads_values_whole_lacks_every_missing_source():
    outcome = render_templates(
        {"all": "{{ values|tojson }}", "one": "{{ values['user'] }}"},
        {"user": b"admin"},
        missing=frozenset({"password"}),
    )
    assert isinstance(outcome, Rendered)
    assert outcome.data == {"one": b"admin"} and outcome.lacking == {"all": ("password",)}


def test_explain_s_variables_of_a_template_nested_too_deep_are_empty_not_an_error():
    deep = "{{ " + "(" * 200 + "x" + ")" * 200 + " }}"
    assert template_variables({"k": deep, "ok": "{{ a }}"}) == {
        "k": frozenset(),
        "ok": frozenset({"a"}),
    }
    assert parse_templates({"k": deep}, None) == TemplateFault("k", NESTED_TOO_DEEP)


def test_a_render_s_output_over_1_mib_in_all_stops_at_the_key_that_passes_it():
    """Each entry may emit up to 1 MiB, but no Secret holds more than that in all (S4.4.3):
    64 entries of 1 MiB would otherwise carry 64 MiB from the renderer to the operator."""
    templates = {f"k{n:02d}": "{{ 'x' * 600000 }}" for n in range(64)}
    assert render_templates(templates, SOURCES) == TemplateFault(
        "k01", "output over 1,048,576 bytes in all"
    )
