"""Issue 7 item 7 / S8.3: probes reach the pod IP, so /healthz, /readyz and /metrics answer any
Host header, while the dashboard keeps Django's ALLOWED_HOSTS check."""

from __future__ import annotations

import pytest

from controlplane.observations import process

POD_IP = "10.1.2.3:8080"


class _Ready:
    def problem(self) -> str | None:
        return None

    def is_leader(self) -> bool:
        return True


def test_healthz_answers_a_pod_ip_host(client):
    response = client.get("/healthz", HTTP_HOST=POD_IP)
    assert response.status_code == 200
    assert response.content == b"ok\n"


def test_readyz_answers_a_pod_ip_host(client, monkeypatch):
    monkeypatch.setattr(process, "current", None)
    assert client.get("/readyz", HTTP_HOST=POD_IP).status_code == 503  # its own answer, not 400
    monkeypatch.setattr(process, "current", _Ready())
    response = client.get("/readyz", HTTP_HOST=POD_IP)
    assert response.status_code == 200
    assert response.content == b"ok (leader)\n"


def test_metrics_path_is_covered_even_before_it_is_routed(client):
    """/metrics does not exist yet: a plain 404 under any Host, never the 400 of a bad Host."""
    assert client.get("/metrics", HTTP_HOST=POD_IP).status_code == 404


@pytest.mark.parametrize("host", [POD_IP, "evil.example:80"])
def test_dashboard_keeps_the_allowed_hosts_check(client, host):
    assert client.get("/admin/", HTTP_HOST=host).status_code == 400


def test_dashboard_answers_an_allowed_host(client):
    response = client.get("/admin/", HTTP_HOST="localhost")
    assert response.status_code == 302  # to the login page
    assert "/admin/login/" in response["Location"]


@pytest.mark.parametrize("path", ["/healthz/", "/healthzx", "/readyz/extra"])
def test_only_the_exact_probe_paths_skip_the_host_check(client, path):
    assert client.get(path, HTTP_HOST=POD_IP).status_code == 400
