"""S11.3 whole-file formats: every assembled key as one file in one data key. Pure.

The bytes depend only on the keys and values: keys sorted byte-wise (code-point order is
UTF-8 byte order), one fixed quoting rule per format, no timestamps or comments. A value that a
format cannot hold is a refusal naming the key (S5.6), never quoting the value.

The quoting rules, and why (docs/operator-spec.md S11.3):

- dotenv: ``KEY='value'`` when the value has no ``'``, ``\\`` or carriage return: both
  python-dotenv and Docker Compose read a single-quoted value literally (line breaks, ``$``,
  ``#`` and ``"`` included). Otherwise ``KEY="value"`` with ``\\``, ``"``, line feed and
  carriage return escaped, which both decode alike, provided the value holds no ``$`` (Compose
  interpolates inside double quotes and python-dotenv without interpolation does not) and does
  not end in ``"`` or ``\\`` (Compose finds the closing quote by looking one byte back).
  A value neither rule fits is refused.
- json: one object of strings, two-space indent, only JSON's required escapes, ``\\n`` last.
- yaml: one block mapping, every key and value a double-quoted scalar (so YAML 1.1 and 1.2
  readers both read strings: no ``yes``/``on``/``0x10`` surprises) with ``\\``, ``"``, line
  breaks and every character outside YAML's printable set escaped.
- properties: ``key=value`` lines with the escapes of Java's ``Properties.store``; every
  character outside printable ASCII as ``\\uXXXX`` (UTF-16 units), so the file is ASCII and
  reads the same whether the reader assumes ISO-8859-1 (``Properties.load(InputStream)``) or
  UTF-8. The spec asks this for characters outside ISO-8859-1; doing it for every non-ASCII
  character is the stricter form of the same rule.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Mapping

from .content import INVALID_SECRET_DATA, ContentRefusal
from .messages import key_list

INVALID_TEMPLATE = "InvalidTemplate"  # S11.5: a dotenv key that is no variable name
FORMATS = ("dotenv", "json", "yaml", "properties")
ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*\Z")


def render_file(file_format: str, data: Mapping[str, bytes]) -> bytes | ContentRefusal:
    """The one file ``data`` becomes in ``file_format``, or why it cannot (names only)."""
    writer = _WRITERS.get(file_format)
    if writer is None:
        raise ValueError(f"unknown format {file_format!r}")  # admission allows only FORMATS
    texts: dict[str, str] = {}
    binary = []
    for name, value in data.items():
        try:
            texts[name] = value.decode("utf-8")
        except UnicodeDecodeError:
            binary.append(name)
    if binary:
        return ContentRefusal(
            INVALID_SECRET_DATA,
            f"the values of {key_list(sorted(binary))} are not UTF-8 text, which a "
            f"{file_format} file cannot hold: map them to keys of their own",
        )
    return writer(sorted(texts.items()))


def dotenv_names_refused(names: list[str]) -> ContentRefusal | None:
    """S11.3: every key of a dotenv file is an environment-variable name."""
    bad = sorted(n for n in names if not ENV_NAME.match(n))
    if not bad:
        return None
    return ContentRefusal(
        INVALID_TEMPLATE,
        f"keys {key_list(bad)} are no environment-variable names ([A-Za-z_][A-Za-z0-9_]*), "
        "which a dotenv file needs: rename them with spec.mapping",
    )


# -- dotenv ---------------------------------------------------------------------------------


def _dotenv(items: list[tuple[str, str]]) -> bytes | ContentRefusal:
    refused = dotenv_names_refused([name for name, _ in items])
    if refused is not None:
        return refused
    lines, unquotable = [], []
    for name, value in items:
        quoted = dotenv_quoted(value)
        if quoted is None:
            unquotable.append(name)
        else:
            lines.append(f"{name}={quoted}\n")
    if unquotable:
        return ContentRefusal(
            INVALID_SECRET_DATA,
            f"the values of {key_list(unquotable)} hold a quote or backslash together with '$' "
            "(or end in one), which no dotenv quoting lets both python-dotenv and Docker "
            "Compose read back alike: map them to keys of their own",
        )
    return "".join(lines).encode("utf-8")


_DOUBLE_QUOTED = str.maketrans({"\\": "\\\\", '"': '\\"', "\n": "\\n", "\r": "\\r"})


def dotenv_quoted(value: str) -> str | None:
    """The value as a dotenv file writes it, or None when no quoting is read back alike."""
    if not any(c in value for c in "'\\\r"):
        return f"'{value}'"
    if "$" not in value and not value.endswith(('"', "\\")):
        return f'"{value.translate(_DOUBLE_QUOTED)}"'
    return None


# -- json -----------------------------------------------------------------------------------


def _json(items: list[tuple[str, str]]) -> bytes:
    return (json.dumps(dict(items), indent=2, ensure_ascii=False) + "\n").encode("utf-8")


# -- yaml -----------------------------------------------------------------------------------

_YAML_NAMED = {"\\": "\\\\", '"': '\\"', "\n": "\\n", "\r": "\\r", "\t": "\\t", "\0": "\\0"}


def _yaml_printable(code: int) -> bool:
    """YAML 1.2's printable set, less the characters some readers treat as line breaks or
    byte-order marks (NEL, LS, PS, BOM): those are escaped too."""
    if code in (0x2028, 0x2029, 0xFEFF):
        return False
    return (
        0x20 <= code <= 0x7E
        or 0xA0 <= code <= 0xD7FF
        or 0xE000 <= code <= 0xFFFD
        or 0x10000 <= code <= 0x10FFFF
    )


def yaml_quoted(text: str) -> str:
    out = []
    for char in text:
        code = ord(char)
        if char in _YAML_NAMED:
            out.append(_YAML_NAMED[char])
        elif _yaml_printable(code):
            out.append(char)
        elif code <= 0xFF:
            out.append(f"\\x{code:02x}")
        else:
            out.append(f"\\u{code:04x}")
    return '"' + "".join(out) + '"'


def _yaml(items: list[tuple[str, str]]) -> bytes:
    if not items:
        return b"{}\n"
    return "".join(f"{yaml_quoted(k)}: {yaml_quoted(v)}\n" for k, v in items).encode("utf-8")


# -- properties -----------------------------------------------------------------------------

_PROPERTIES_NAMED = {"\\": "\\\\", "\t": "\\t", "\n": "\\n", "\r": "\\r", "\f": "\\f"}
_PROPERTIES_SPECIAL = "=:#!"


def properties_escaped(text: str, *, key: bool) -> str:
    out = []
    for index, char in enumerate(text):
        code = ord(char)
        if char in _PROPERTIES_NAMED:
            out.append(_PROPERTIES_NAMED[char])
        elif char == " " and (key or index == 0):
            out.append("\\ ")  # a key's spaces end it; a value's leading ones are skipped
        elif char in _PROPERTIES_SPECIAL:
            out.append("\\" + char)
        elif 0x20 <= code <= 0x7E:
            out.append(char)
        else:  # UTF-16 code units, as Java writes them
            units = char.encode("utf-16-be")
            out.extend(
                f"\\u{int.from_bytes(units[i : i + 2], 'big'):04x}" for i in range(0, len(units), 2)
            )
    return "".join(out)


def _properties(items: list[tuple[str, str]]) -> bytes:
    lines = (
        f"{properties_escaped(k, key=True)}={properties_escaped(v, key=False)}\n" for k, v in items
    )
    return "".join(lines).encode("ascii")


_WRITERS: dict[str, Callable[[list[tuple[str, str]]], bytes | ContentRefusal]] = {
    "dotenv": _dotenv,
    "json": _json,
    "yaml": _yaml,
    "properties": _properties,
}
