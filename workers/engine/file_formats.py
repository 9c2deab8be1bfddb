"""S11.3 whole-file formats: every assembled key as one file in one data key. Pure.

The bytes depend only on the keys and values: keys sorted byte-wise (code-point order is
UTF-8 byte order), one fixed quoting rule per format, no timestamps or comments. A value that a
format cannot hold is a refusal naming the key (S5.6), never quoting the value.

The quoting rules, and why (docs/operator-spec.md S11.3):

- dotenv: ``KEY=value`` lines that python-dotenv (>= 1.2, without interpolation, as S11.3 names
  it) and Docker Compose (compose-go v2's ``dotenv``, with its ``$`` interpolation against any
  environment) both read back exactly. Of the three forms, single quotes, double
  quotes with backslash escapes and unquoted, each value that is not refused (below) takes the
  first that fits:

  1. ``'value'`` when it holds no ``'``, ``\\`` or carriage return: both readers take it
     literally (line feeds, ``$``, ``#`` and ``"`` included; Compose expands no ``$`` in
     single quotes).
  2. ``"value"`` with ``\\``, ``"``, line feed and carriage return escaped (``\\\\``,
     ``\\"``, ``\\n``, ``\\r``), which both decode alike, when no ``$`` in it is one
     Compose expands (``$$``, ``${``, or ``$`` before ``_`` or a letter: ASCII, or U+017F
     and U+212A, which Go's case folding adds; python-dotenv decodes neither ``\\$`` nor ``$$``,
     so such a ``$`` has no spelling both read) and it does not end in ``\\`` (python-dotenv
     before 1.2.3 takes ``\\\\"`` for an escaped quote and reads on to the next ``"`` in
     the file).
  3. ``'value'`` with ``'`` as ``\\'`` (both readers decode that, and Compose expands no
     ``$`` in single quotes) when it holds no carriage return (python-dotenv reads the file with
     universal newlines), no ``\\`` before ``\\`` or ``'`` (python-dotenv decodes those
     pairs in single quotes, Compose keeps them) and does not end in ``\\`` (both take
     ``\\'`` for an escaped quote).
  4. ``value`` unquoted when it is one line that starts with no quote or whitespace, ends in no
     whitespace, holds no ``#`` after whitespace (a comment to both) and no ``$`` Compose
     expands: e.g. ``\\`` or ``C:\\dir\\``.

  Refused (``InvalidSecretData`` naming the keys, never the values), because no form carries
  them: a value ending in ``\\`` that cannot be unquoted (2 and 3 cannot close it); and a
  value with a ``$`` Compose expands (so neither 2 nor 4) that also holds a carriage return,
  ``\\\\`` or ``\\'`` (so not 3). A value the rules before spec revision 4 delivered (1 and
  a narrower 2) keeps its bytes. python-dotenv's own ``${NAME}`` interpolation, on when a
  program calls ``load_dotenv`` without ``interpolate=False``, replaces such references in
  every form; read such a file with ``interpolate=False`` (docs/coming-from-eso.md).
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
from .facts import Cause
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
        facts={"keys": key_list(bad), "cause": Cause.DOTENV},
    )


# -- dotenv ---------------------------------------------------------------------------------


def _dotenv(items: list[tuple[str, str]]) -> bytes | ContentRefusal:
    refused = dotenv_names_refused([name for name, _ in items])
    if refused is not None:
        return refused
    lines: list[str] = []
    unquotable: dict[str, list[str]] = {}  # why -> the keys (names only, S5.6)
    for name, value in items:
        quoted = dotenv_quoted(value)
        if quoted is None:
            unquotable.setdefault(dotenv_refusal(value), []).append(name)
        else:
            lines.append(f"{name}={quoted}\n")
    if unquotable:
        reasons = "; ".join(
            f"the values of {key_list(names)} {why}" for why, names in sorted(unquotable.items())
        )
        return ContentRefusal(
            INVALID_SECRET_DATA,
            f"{reasons}: so no dotenv form (single quotes, double quotes with backslash escapes, "
            "or unquoted) lets both python-dotenv and Docker Compose read them back exactly; "
            "change those values in Hikyo, or deliver them in the json, yaml or properties format",
        )
    return "".join(lines).encode("utf-8")


_DOUBLE_QUOTED = str.maketrans({"\\": "\\\\", '"': '\\"', "\n": "\\n", "\r": "\\r"})
# A '$' Compose's interpolation takes up outside single quotes: '$$', '${', or '$' before a
# name's first character ([_a-z] case-insensitively; Go's folding adds U+017F and U+212A).
_COMPOSE_EXPANDS = re.compile("\\$[$_{A-Za-z\u017f\u212a]")
# Pairs python-dotenv decodes inside single quotes and Compose keeps as they are.
_SINGLE_QUOTE_PAIR = re.compile(r"\\[\\']")
_COMMENT = re.compile(r"\s#")  # python-dotenv ends an unquoted value there, Compose at " #"


def dotenv_quoted(value: str) -> str | None:
    """The value as a dotenv file writes it (the first form of the module docstring that both
    readers read back exactly), or None when no form does."""
    if not any(c in value for c in "'\\\r"):
        return f"'{value}'"
    expands = _COMPOSE_EXPANDS.search(value) is not None
    open_end = value.endswith("\\")  # a quote after it reads as escaped
    if not expands and not open_end:
        return f'"{value.translate(_DOUBLE_QUOTED)}"'
    if not open_end and "\r" not in value and not _SINGLE_QUOTE_PAIR.search(value):
        return "'" + value.replace("'", "\\'") + "'"
    if not expands and _unquoted_fits(value):
        return value
    return None


def _unquoted_fits(value: str) -> bool:
    """Both readers take an unquoted value to the line's end, less trailing whitespace and a
    comment; a leading quote starts a quoted value and leading whitespace is skipped."""
    return (
        value != ""
        and value[0] not in "'\""
        and not value[0].isspace()
        and not value[-1].isspace()
        and "\n" not in value
        and "\r" not in value
        and not _COMMENT.search(value)
    )


def dotenv_refusal(value: str) -> str:
    """Why no dotenv form carries ``value`` (for a value ``dotenv_quoted`` refuses); it names
    the kind of content, never the content."""
    if value.endswith("\\"):
        return (
            "end in a backslash, which one of the readers takes as escaping any closing quote, "
            "and cannot go unquoted (they span lines, start with a quote or whitespace, or hold "
            "'#' after whitespace or a '$' that Compose expands)"
        )
    return (
        "hold a '$' that Compose expands outside single quotes ('$$', '${' or '$' before a "
        "name) together with a carriage return, a double backslash or a backslash before a "
        "quote, which the two readers take apart differently in single quotes"
    )


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
