"""Helm for the chart's tests: the binary (tools/build-helm.sh, or HELM), rendering, the seed's
values file, and reading rendered manifests."""

from __future__ import annotations

import functools
import os
import re
import subprocess
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

REPO_ROOT = Path(__file__).resolve().parents[2]
CHART = REPO_ROOT / "charts" / "hikyo-operator"
BUILD_SCRIPT = REPO_ROOT / "tools" / "build-helm.sh"
SEED = REPO_ROOT / "docs" / "seeds" / "000_operator.txt"
DIGEST = "sha256:" + "ab" * 32  # any well-formed digest: nothing pulls it here
HELM_TIMEOUT_SECONDS = 120


def built_binary(script: Path, hint: str = "") -> str:
    """The path a tools/build-*.sh script prints last (it builds the binary, or a warm cache
    answers at once; its variable, e.g. HELM, names an installed one instead)."""
    built = subprocess.run(["bash", str(script)], capture_output=True, text=True, timeout=1800)
    lines = built.stdout.strip().splitlines()
    if built.returncode != 0 or not lines:
        last = built.stderr.strip().splitlines()[-1:] or ["no output"]
        raise RuntimeError(f"{script.name} failed: {last[0]}{hint}")
    return lines[-1]


@functools.cache
def helm_binary() -> str:
    return built_binary(BUILD_SCRIPT)


@dataclass(frozen=True)
class Helm:
    """One helm invocation's result."""

    returncode: int
    stdout: str
    stderr: str

    def manifests(self) -> list[dict[str, Any]]:
        assert self.returncode == 0, self.stderr
        return [doc for doc in yaml.safe_load_all(self.stdout) if doc]


def helm(
    *args: str,
    kubeconfig: Path | None = None,
    values: dict[str, Any] | None = None,
    tmp: Path | None = None,
) -> Helm:
    """Runs helm with ``args``; ``values`` (plain data) are passed as a values file in ``tmp``."""
    argv = [helm_binary(), *args]
    if values is not None:
        assert tmp is not None, "a values dict needs a tmp directory for its file"
        path = tmp / f"values-{len(list(tmp.glob('values-*.yaml')))}.yaml"
        path.write_text(yaml.safe_dump(values, sort_keys=False))
        argv += ["--values", str(path)]
    env = {
        **os.environ,
        "HELM_CACHE_HOME": str((tmp or REPO_ROOT / "var") / "helm-cache"),
        "HELM_CONFIG_HOME": str((tmp or REPO_ROOT / "var") / "helm-config"),
        "HELM_DATA_HOME": str((tmp or REPO_ROOT / "var") / "helm-data"),
    }
    if kubeconfig is not None:
        env["KUBECONFIG"] = str(kubeconfig)
    done = subprocess.run(
        argv, capture_output=True, text=True, env=env, timeout=HELM_TIMEOUT_SECONDS
    )
    return Helm(done.returncode, done.stdout, done.stderr)


def template(
    values: dict[str, Any], tmp: Path, *extra: str, release: str = "hikyo", namespace: str = "hikyo"
) -> Helm:
    return helm(
        "template", release, str(CHART), "--namespace", namespace, *extra, values=values, tmp=tmp
    )


def seed_values_text() -> str:
    """The values file of seed 000 ("Create a values file for the Hikyo server and operator"),
    byte for byte as the document shows it."""
    text = SEED.read_text(encoding="utf-8")
    start = text.index("Create a values file for the Hikyo server and operator")
    block = text[text.index("\n\n", start) + 2 : text.index("\nInstall a packaged release chart")]
    assert re.match(r"^database:\n", block), "the seed's values file moved; update the extraction"
    return block.strip() + "\n"


def seed_values() -> dict[str, Any]:
    return yaml.safe_load(seed_values_text())


def operator_values(**overrides: Any) -> dict[str, Any]:
    """The seed's operator values with a digest, plus ``overrides`` merged into ``operator``."""
    values = {"operator": {**seed_values()["operator"], "image": {"digest": DIGEST}}}
    values["operator"].update(overrides)
    return values


def objects(rendered: list[dict[str, Any]], kind: str) -> list[dict[str, Any]]:
    return [doc for doc in rendered if doc["kind"] == kind]


def one(rendered: list[dict[str, Any]], kind: str, name: str) -> dict[str, Any]:
    found = [doc for doc in objects(rendered, kind) if doc["metadata"]["name"] == name]
    assert len(found) == 1, f"{kind}/{name}: {len(found)} rendered"
    return found[0]


def container_env(container: dict[str, Any]) -> dict[str, Any]:
    """name -> value, or the valueFrom mapping for variables taken from elsewhere."""
    return {e["name"]: e.get("value", e.get("valueFrom")) for e in container.get("env", [])}
