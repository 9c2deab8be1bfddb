"""The filters and the one function S11.2 adds to Jinja's built-ins. Pure.

Each reads text the way S11.2 gives it (a value that is not UTF-8 is a ``BinaryValue`` that
only ``b64encode`` reads) and builds deterministic output: ``tojson`` and ``toyaml`` sort
mapping keys.
"""

from __future__ import annotations

import base64
import hashlib
import json
import math
from collections.abc import Callable, Iterator
from typing import Any
from urllib.parse import quote

from .file_formats import yaml_quoted
from .template_bounds import BinaryValue


def _text(value: Any) -> str:
    return str(value)


def _b64encode(value: Any) -> str:
    raw = value.raw if isinstance(value, BinaryValue) else _text(value).encode("utf-8")
    return base64.b64encode(raw).decode("ascii")


def _b64decode(value: Any) -> str:
    return base64.b64decode(_text(value).encode("ascii"), validate=True).decode("utf-8")


def _urlquote(value: Any) -> str:
    return quote(_text(value), safe="")  # everything but unreserved characters


def _sha256(value: Any) -> str:
    return hashlib.sha256(_text(value).encode("utf-8")).hexdigest()


def _tojson(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False, sort_keys=True)


def _toyaml(value: Any) -> str:
    return (
        "".join(_yaml_lines(value, 0))
        if isinstance(value, dict | list)
        else (_yaml_scalar(value) + "\n")
    )


def _yaml_scalar(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int) or (isinstance(value, float) and math.isfinite(value)):
        return repr(value)
    return yaml_quoted(_text(value))


def _yaml_lines(value: Any, indent: int) -> Iterator[str]:
    pad = " " * indent
    if isinstance(value, dict):
        if not value:
            yield f"{pad}{{}}\n"
        for key in sorted(value, key=str):
            item = value[key]
            if isinstance(item, dict | list) and item:
                yield f"{pad}{yaml_quoted(str(key))}:\n"
                yield from _yaml_lines(item, indent + 2)
            else:
                yield f"{pad}{yaml_quoted(str(key))}: {_inline(item)}\n"
    else:
        if not value:
            yield f"{pad}[]\n"
        for item in value:
            if isinstance(item, dict | list) and item:
                yield f"{pad}-\n"
                yield from _yaml_lines(item, indent + 2)
            else:
                yield f"{pad}- {_inline(item)}\n"


def _inline(value: Any) -> str:
    if isinstance(value, dict):
        return "{}"
    if isinstance(value, list):
        return "[]"
    return _yaml_scalar(value)


def dockerconfigjson(registry: Any, username: Any, password: Any) -> str:
    """The canonical ``.dockerconfigjson`` text, as ``kubectl create secret docker-registry``
    writes it (key order username, password, auth; no spaces)."""
    user, secret = _text(username), _text(password)
    auth = base64.b64encode(f"{user}:{secret}".encode()).decode("ascii")
    entry = {"username": user, "password": secret, "auth": auth}
    return json.dumps({"auths": {_text(registry): entry}}, separators=(",", ":"))


ADDED_FILTERS: dict[str, Callable[..., Any]] = {
    "b64encode": _b64encode,
    "b64decode": _b64decode,
    "urlquote": _urlquote,
    "tojson": _tojson,
    "toyaml": _toyaml,
    "sha256": _sha256,
}
