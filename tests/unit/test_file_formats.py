"""S11.3 whole-file formats (workers/engine/file_formats.py): byte-exact vectors, and every
format read back to the same pairs by the reader its users use, over generated values with
quotes, ``$``, ``#``, backslashes, line breaks and non-ASCII (Hypothesis)."""

from __future__ import annotations

import io
import json
from pathlib import Path

import javaproperties
import pytest
from dotenv import dotenv_values
from hypothesis import given, settings
from hypothesis import strategies as st
from ruamel.yaml import YAML

from workers.engine.content import INVALID_SECRET_DATA, ContentRefusal
from workers.engine.file_formats import (
    FORMATS,
    INVALID_TEMPLATE,
    dotenv_quoted,
    render_file,
)

CANARY = "fmt-canary-31b7"
TRICKY = 'it\'s $HOME # "quoted"\n\\path\tü€😀'

# -- byte-exact vectors -------------------------------------------------------------------------

VECTOR = {"b.key": b"two words", "A_KEY": TRICKY.encode(), "z": b""}


@pytest.mark.parametrize(
    ("file_format", "expected"),
    [
        pytest.param(
            "json",
            b'{\n  "A_KEY": "it\'s $HOME # \\"quoted\\"\\n\\\\path\\t'
            b'\xc3\xbc\xe2\x82\xac\xf0\x9f\x98\x80",\n  "b.key": "two words",\n  "z": ""\n}\n',
            id="json",
        ),
        pytest.param(
            "yaml",
            b'"A_KEY": "it\'s $HOME # \\"quoted\\"\\n\\\\path\\t\xc3\xbc\xe2\x82\xac\xf0\x9f\x98'
            b'\x80"\n"b.key": "two words"\n"z": ""\n',
            id="yaml",
        ),
        pytest.param(
            "properties",
            b'A_KEY=it\'s $HOME \\# "quoted"\\n\\\\path\\t\\u00fc\\u20ac\\ud83d\\ude00\n'
            b"b.key=two words\nz=\n",
            id="properties",
        ),
    ],
)
def test_byte_exact_vectors(file_format, expected):
    assert render_file(file_format, VECTOR) == expected


def test_dotenv_byte_exact_vector():
    data = {
        "PLAIN": b"a b",
        "DOLLAR": b'$HOME #1 "x"\nnext',  # single quotes: all literal
        "QUOTE": b"it's C:\\dir\r\n",  # double quotes, escaped
        "EMPTY": b"",
    }
    assert render_file("dotenv", data) == (
        b"DOLLAR='$HOME #1 \"x\"\nnext'\nEMPTY=''\nPLAIN='a b'\nQUOTE=\"it's C:\\\\dir\\r\\n\"\n"
    )


def test_yaml_escapes_what_some_readers_take_for_line_breaks_or_a_bom():
    text = render_file("yaml", {"k": "a\u2028b\u2029c\ufeffd\x85e".encode()})
    assert text == b'"k": "a\\u2028b\\u2029c\\ufeffd\\x85e"\n'


@pytest.mark.parametrize("file_format", FORMATS)
def test_empty_data_is_a_fixed_file(file_format):
    expected = {"dotenv": b"", "json": b"{}\n", "yaml": b"{}\n", "properties": b""}
    assert render_file(file_format, {}) == expected[file_format]


@pytest.mark.parametrize("file_format", FORMATS)
def test_the_same_pairs_in_any_order_give_the_same_bytes(file_format):
    pairs = [("B", b"2"), ("A", b"1"), ("C_3", b"3")]
    assert render_file(file_format, dict(pairs)) == render_file(file_format, dict(pairs[::-1]))


# -- refusals (names only) ----------------------------------------------------------------------


@pytest.mark.parametrize("file_format", FORMATS)
def test_a_value_that_is_not_utf8_is_refused_naming_the_key(file_format):
    refused = render_file(file_format, {"GOOD": b"x", "BINARY": b"\xff" + CANARY.encode()})
    assert isinstance(refused, ContentRefusal) and refused.reason == INVALID_SECRET_DATA
    assert "BINARY" in refused.message and "GOOD" not in refused.message
    assert CANARY not in refused.message


def test_a_dotenv_key_that_is_no_variable_name_is_invalid_template():
    refused = render_file("dotenv", {"tls.crt": b"x", "OK": b"y"})
    assert isinstance(refused, ContentRefusal) and refused.reason == INVALID_TEMPLATE
    assert "tls.crt" in refused.message and "OK" not in refused.message.split("(")[0]


@pytest.mark.parametrize(
    "value",
    [
        f"it's ${CANARY}",  # a single quote and a dollar
        f"C:\\{CANARY}$",  # a backslash and a dollar
        f"{CANARY}\r$",  # a carriage return and a dollar
        f"'{CANARY}\"",  # a quote, ending in a double quote
        f"'{CANARY}\\",  # a quote, ending in a backslash
    ],
)
def test_a_dotenv_value_no_quoting_reads_back_alike_is_refused_without_its_value(value):
    assert dotenv_quoted(value) is None
    refused = render_file("dotenv", {"KEY": value.encode()})
    assert isinstance(refused, ContentRefusal) and refused.reason == INVALID_SECRET_DATA
    assert "KEY" in refused.message and CANARY not in refused.message


def test_an_unknown_format_is_a_caller_error():
    with pytest.raises(ValueError, match="unknown format"):
        render_file("toml", {})


# -- read back with the readers users use -------------------------------------------------------

TEXT = st.text(
    alphabet=st.one_of(
        st.sampled_from(list("'\"$#\\\n\r\t =:! {}[],&*?|>%@`-")),
        st.characters(codec="utf-8", exclude_categories=("Cs",)),
    ),
    max_size=40,
)
DATA_KEY = st.from_regex(r"[-._a-zA-Z0-9]{1,20}", fullmatch=True)
ENV_KEY = st.from_regex(r"[A-Za-z_][A-Za-z0-9_]{0,19}", fullmatch=True)


def _pairs(keys: st.SearchStrategy[str]) -> st.SearchStrategy[dict[str, str]]:
    return st.dictionaries(keys, TEXT, max_size=6)


def _encoded(pairs: dict[str, str]) -> dict[str, bytes]:
    return {k: v.encode("utf-8") for k, v in pairs.items()}


@settings(max_examples=300, deadline=None)
@given(_pairs(DATA_KEY))
def test_json_reads_back_with_the_json_module(pairs):
    assert json.loads(render_file("json", _encoded(pairs))) == pairs


@settings(max_examples=300, deadline=None)
@given(_pairs(DATA_KEY))
def test_yaml_reads_back_with_a_yaml_1_2_reader(pairs):
    text = render_file("yaml", _encoded(pairs))
    loaded = YAML(typ="safe", pure=True).load(io.StringIO(text.decode("utf-8")))
    assert loaded == pairs


@settings(max_examples=300, deadline=None)
@given(_pairs(DATA_KEY))
def test_properties_read_back_with_a_properties_reader(pairs):
    text = render_file("properties", _encoded(pairs))
    assert javaproperties.loads(text.decode("iso-8859-1")) == pairs  # as Java reads it
    assert javaproperties.loads(text.decode("utf-8")) == pairs  # the same: the file is ASCII


@settings(max_examples=300, deadline=None)
@given(_pairs(ENV_KEY))
def test_dotenv_reads_back_with_python_dotenv_or_is_refused(tmp_path_factory, pairs):
    """Read from a file, as users read it (python-dotenv, interpolation off)."""
    rendered = render_file("dotenv", _encoded(pairs))
    quotable = {k: v for k, v in pairs.items() if dotenv_quoted(v) is not None}
    if quotable != pairs:
        assert isinstance(rendered, ContentRefusal) and rendered.reason == INVALID_SECRET_DATA
        rendered = render_file("dotenv", _encoded(quotable))
    path = Path(tmp_path_factory.mktemp("dotenv")) / ".env"
    path.write_bytes(rendered)
    assert dotenv_values(path, interpolate=False) == quotable


@given(TEXT)
def test_only_values_mixing_a_dollar_with_a_quote_or_backslash_are_unquotable(value):
    if dotenv_quoted(value) is None:
        assert any(c in value for c in "'\\\r")
        assert "$" in value or value.endswith(('"', "\\"))
