"""What the benchmarks share: the objects they create and the memory and CPU they read from
/proc."""

from __future__ import annotations

import os
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


def stat_fields(pid: int) -> list[str] | None:
    """The fields of /proc/<pid>/stat after the command name (the state first), None once
    gone. The command name in parentheses may hold spaces; the fields after it do not."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return None


def cpu_seconds(pid: int) -> float | None:
    """User + system CPU the process has used so far, None once it is gone."""
    fields = stat_fields(pid)
    if fields is None:
        return None
    # utime and stime are the stat file's fields 14 and 15 (11 and 12 after the command)
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def machine_busy_seconds() -> float:
    """CPU seconds the whole machine has spent not idle (the first line of /proc/stat)."""
    fields = [int(x) for x in Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:]]
    idle = fields[3] + (fields[4] if len(fields) > 4 else 0)  # idle + iowait
    return (sum(fields[:8]) - idle) / os.sysconf("SC_CLK_TCK")
