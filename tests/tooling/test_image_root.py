"""The image's root filesystem rules (tools/image/assemble_root.py), checked against the code:
the kubernetes API modules the image keeps are those the operator calls (issue 12)."""

from __future__ import annotations

import importlib.util
import re
from pathlib import Path

import kubernetes.client

REPO = Path(__file__).resolve().parents[2]
OUR_PACKAGES = ("controlplane", "workers", "k8s", "hikyo")


def _assemble_root():
    spec = importlib.util.spec_from_file_location(
        "assemble_root", REPO / "tools/image/assemble_root.py"
    )
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _api_modules_used() -> set[str]:
    """The kubernetes.client API modules whose classes our packages name."""
    exports: dict[str, str] = kubernetes.client._exports
    used = set()
    for package in OUR_PACKAGES:
        for source in (REPO / package).rglob("*.py"):
            for name in set(re.findall(r"\b([A-Z]\w*Api)\b", source.read_text())):
                module = exports.get(name, "")
                if module.startswith(".api."):
                    used.add(module.removeprefix(".api.") + ".py")
    return used


def test_the_image_keeps_every_kubernetes_api_the_operator_calls():
    used = _api_modules_used()
    assert "core_v1_api.py" in used  # the scan finds what it is for
    assert used <= _assemble_root().KEPT_KUBERNETES_APIS


def test_the_image_leaves_out_docs_programs_and_most_zones():
    wanted = _assemble_root().wanted
    assert wanted("/usr/bin/python3.11")
    assert wanted("/usr/lib/x86_64-linux-gnu/libssl.so.3")
    assert wanted("/usr/share/zoneinfo/Etc/UTC")
    assert wanted("/usr/lib/python3.11/lib-dynload/_ssl.cpython-311-x86_64-linux-gnu.so")
    for path in (
        "/usr/bin/pydoc3.11",
        "/bin/sh",
        "/usr/share/doc/libc6/copyright",
        "/usr/share/zoneinfo/Europe/Paris",
        "/usr/lib/x86_64-linux-gnu/gconv/UTF-16.so",
        "/usr/lib/python3.11/ensurepip/__init__.py",
        "/usr/lib/python3.11/lib-dynload/readline.cpython-311-x86_64-linux-gnu.so",
    ):
        assert not wanted(path), path
