"""What the benchmarks share: the objects they create and the memory they read from /proc."""

from __future__ import annotations

from pathlib import Path
from typing import Any

INSTANCE = "bench"  # the one HikyoInstance every benchmark creates
CREDENTIAL = "credential"  # the bootstrap Secret its HikyoSecrets name


def bench_instance(url: str, ca_bundle_b64: str) -> dict[str, Any]:
    return {
        "apiVersion": "hikyo.dev/v1alpha1",
        "kind": "HikyoInstance",
        "metadata": {"name": INSTANCE},
        "spec": {"url": url, "caBundle": ca_bundle_b64},
    }


def create_bench_instance(custom: Any, url: str, ca_bundle_b64: str, timeout: float) -> None:
    """Creates the benchmarks' HikyoInstance through a CustomObjectsApi."""
    custom.create_cluster_custom_object(
        "hikyo.dev",
        "v1alpha1",
        "hikyoinstances",
        bench_instance(url, ca_bundle_b64),
        _request_timeout=timeout,
    )


def bench_hikyosecret(
    name: str, scope: tuple[str, str, str], resync_seconds: int | None = None
) -> dict[str, Any]:
    """All keys of ``scope`` into the CR's own target ``<name>-env``."""
    org, project, environment = scope
    spec: dict[str, Any] = {
        "instanceRef": {"name": INSTANCE},
        "auth": {"secretRef": {"name": CREDENTIAL}},
        "scope": {"org": org, "project": project, "environment": environment},
        "allKeys": True,
        "target": {"name": f"{name}-env"},
    }
    if resync_seconds is not None:
        spec["resyncInterval"] = f"{resync_seconds}s"
    return {
        "apiVersion": "hikyo.dev/v1alpha1",
        "kind": "HikyoSecret",
        "metadata": {"name": name},
        "spec": spec,
    }


def status_kib(pid: int, keys: tuple[str, ...] = ("VmRSS", "VmHWM")) -> dict[str, int]:
    """The ``keys`` of /proc/<pid>/status in KiB (VmRSS, VmHWM, RssAnon, ...); {} once gone."""
    try:
        text = Path(f"/proc/{pid}/status").read_text()
    except OSError:
        return {}
    found = {}
    for line in text.splitlines():
        key, _, rest = line.partition(":")
        if key in keys:
            found[key] = int(rest.split()[0])
    return found
