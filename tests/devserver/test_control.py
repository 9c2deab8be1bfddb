"""The JSON control API and ``python -m devserver`` (standalone use by demos)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
import requests

from devserver import DevServer
from devserver.control import ControlServer, apply_seed
from tests.devserver.helpers import auth, fetch, keys_by_name

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture
def control(devserver: DevServer) -> Iterator[ControlServer]:
    server = ControlServer(devserver, "control-secret").start()
    yield server
    server.stop()


def _call(control: ControlServer, operation: str, control_token: str = "control-secret", **args):
    with requests.Session() as session:
        session.trust_env = False
        return session.post(
            f"{control.url}/v1/{operation}",
            json=args,
            headers={"Authorization": f"Bearer {control_token}"},
            timeout=10,
        )


def test_control_api_drives_the_server(devserver, http, scope, control):
    assert _call(
        control,
        "publish",
        org=scope.org,
        project=scope.project,
        environment=scope.environment,
        keys=[{"name": "A", "classification": "config", "value": "1"}],
    ).json() == {"revision": 1}
    created = _call(
        control,
        "add_credential",
        org=scope.org,
        project=scope.project,
        environment=scope.environment,
        grants=["read"],
    ).json()
    token = created["token"]
    assert keys_by_name(fetch(http, devserver, scope, token=token))["A"]["value"] == "1"

    armed = _call(
        control, "set_fault", token=token, fault={"kind": "status", "status": 503}, times=1
    )
    assert armed.status_code == 200
    assert fetch(http, devserver, scope, token=token).status_code == 503
    assert fetch(http, devserver, scope, token=token).status_code == 200

    with requests.Session() as session:
        session.trust_env = False
        recorded = session.get(
            f"{control.url}/v1/requests",
            headers={"Authorization": "Bearer control-secret"},
            timeout=10,
        ).json()
    assert [entry["status"] for entry in recorded] == [200, 503, 200]
    assert token not in json.dumps(recorded)


def test_control_api_requires_its_token(control, scope):
    response = _call(
        control,
        "publish",
        control_token="wrong",
        org=scope.org,
        project=scope.project,
        environment=scope.environment,
        keys=[],
    )

    assert response.status_code == 401


def test_control_api_reports_argument_errors(control):
    assert _call(control, "publish", org="o").status_code == 400
    assert _call(control, "no_such_operation").status_code == 404


def test_seed_preloads_catalogue_credentials_and_reveal(devserver, http, scope):
    apply_seed(
        devserver,
        {
            "machine_reveal": [{"org": scope.org, "project": scope.project, "enabled": True}],
            "publish": [
                {
                    "org": scope.org,
                    "project": scope.project,
                    "environment": scope.environment,
                    "keys": [{"name": "S", "classification": "secret", "value": "v"}],
                }
            ],
            "credentials": [
                {
                    "token": "hik_seeded",
                    "org": scope.org,
                    "project": scope.project,
                    "environment": scope.environment,
                    "grants": ["read", "reveal"],
                    "expires_at": "2099-01-01T00:00:00Z",
                }
            ],
            "capabilities": None,
        },
    )

    body = fetch(http, devserver, scope, token="hik_seeded").json()

    assert body["keys"][0]["value"] == "v"
    assert body["credential_expires_at"].startswith("2099-01-01T00:00:00")
    assert "capabilities" not in body


def test_seed_rejects_unknown_sections(devserver):
    with pytest.raises(ValueError):
        apply_seed(devserver, {"secrets": []})


def test_python_dash_m_devserver_serves_a_seed(tmp_path, scope):
    seed = tmp_path / "seed.json"
    seed.write_text(
        json.dumps(
            {
                "publish": [
                    {
                        "org": scope.org,
                        "project": scope.project,
                        "environment": scope.environment,
                        "keys": [{"name": "A", "classification": "config", "value": "1"}],
                    }
                ],
                "credentials": [
                    {
                        "token": "hik_demo",
                        "org": scope.org,
                        "project": scope.project,
                        "environment": scope.environment,
                        "grants": ["read"],
                    }
                ],
            }
        )
    )
    process = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "devserver",
            "--seed",
            str(seed),
            "--json",
            "--path-prefix",
            "/hikyo",
            "--state-dir",
            str(tmp_path / "state"),
        ],
        cwd=REPO,
        stdout=subprocess.PIPE,
        text=True,
        env={**os.environ, "PYTHONPATH": str(REPO)},
    )
    try:
        assert process.stdout is not None
        info = json.loads(process.stdout.readline())
        assert info["url"].endswith("/hikyo")
        assert Path(info["ca_path"]).read_text().startswith("-----BEGIN CERTIFICATE-----")

        url = (
            f"{info['url']}/api/v1/orgs/{scope.org}/projects/{scope.project}"
            f"/environments/{scope.environment}/delivery"
        )
        with requests.Session() as session:
            session.trust_env = False
            response = session.get(
                url, headers=auth("hik_demo"), verify=info["ca_path"], timeout=10
            )
        assert response.json()["keys"][0]["value"] == "1"

        with requests.Session() as session:
            session.trust_env = False
            reports = session.get(
                f"{info['control_url']}/v1/status-reports",
                timeout=10,
                headers={"Authorization": f"Bearer {info['control_token']}"},
            )
        assert reports.json() == []
    finally:
        process.terminate()
        process.wait(timeout=10)
        if process.stdout is not None:
            process.stdout.close()
    assert process.returncode == 0
