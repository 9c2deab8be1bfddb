"""The chart README's values table is generated from values.yaml and kept current; every key
of values.yaml and of values.schema.json is documented there (S9.1)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import yaml

REPO = Path(__file__).resolve().parents[2]
CHART = REPO / "charts" / "hikyo-operator"
sys.path.insert(0, str(REPO / "tools"))

import chart_readme  # noqa: E402


def _leaves(node, prefix=""):
    """Dotted paths of values.yaml's scalars, lists and empty maps."""
    if isinstance(node, dict) and node:
        for key, value in node.items():
            yield from _leaves(value, f"{prefix}{key}.")
    else:
        yield prefix[:-1]


def _documented() -> set[str]:
    return {row.key for row in chart_readme.rows((CHART / "values.yaml").read_text())}


def test_the_readme_table_is_current():
    checked = subprocess.run(
        [sys.executable, str(REPO / "tools" / "chart_readme.py"), "--check"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert checked.returncode == 0, checked.stderr


def test_every_values_key_is_documented_or_inside_a_documented_key():
    documented = _documented()
    values = yaml.safe_load((CHART / "values.yaml").read_text())
    for leaf in _leaves(values):
        parts = leaf.split(".")
        assert any(".".join(parts[:n]) in documented for n in range(1, len(parts) + 1)), leaf


def test_every_schema_property_is_documented():
    schema = json.loads((CHART / "values.schema.json").read_text())
    documented = _documented()

    def walk(node, path):
        for key, child in (node.get("properties") or {}).items():
            here = f"{path}.{key}" if path else key
            if here in documented:
                continue  # a documented map documents its members
            if child.get("properties"):
                walk(child, here)
            elif path:  # the top level's other keys are a server values file's
                raise AssertionError(f"{here} is in the schema but not documented")

    walk(schema, "")
    walk(schema["properties"]["operator"], "operator")


def test_rows_read_required_keys_nesting_and_continued_comments():
    text = (
        "top:\n"
        "  # -- Needed.\n"
        "  # more words\n"
        "  # needed: [a]\n"
        "\n"
        "  # A plain comment documents nothing.\n"
        "  plain: 1\n"
        "  inner:\n"
        "    # -- Deep one.\n"
        "    deep: {x: 1}\n"
        "  # -- Back out.\n"
        '  back: ""\n'
    )
    assert chart_readme.rows(text) == [
        chart_readme.Row("top.needed", 'required, e.g. `["a"]`', "Needed. more words", True),
        chart_readme.Row("top.inner.deep", '`{"x": 1}`', "Deep one.", False),
        chart_readme.Row("top.back", '`""`', "Back out.", False),
    ]
