"""Issue 10 item 7: in scaled mode every run_operator replica serves the same dashboard from
PostgreSQL — a login made on one holds on the other (sessions in the database), with the
security headers on, the admin's static files served with DEBUG off, and a clean SIGTERM."""

from __future__ import annotations

import re
import secrets
import subprocess
import uuid

import pytest
import redis
import requests

from tests.support.operator_harness import Operator, os_env
from tests.support.processes import manage


def _base(service) -> str:
    return f"http://{service.env['HIKYO_OPERATOR_HEALTH_ADDR']}"


def _csrf_token(html: str) -> str:
    found = re.search(r'name="csrfmiddlewaretoken" value="([^"]+)"', html)
    assert found, "no CSRF token in the form"
    return found.group(1)


def _assert_security_headers(response: requests.Response) -> None:
    headers = response.headers
    policy = headers["Content-Security-Policy"]
    assert "default-src 'none'" in policy and "script-src 'self'" in policy
    assert "unsafe" not in policy
    assert headers["X-Frame-Options"] == "DENY"
    assert headers["Referrer-Policy"] == "same-origin"
    assert headers["X-Content-Type-Options"] == "nosniff"
    assert headers["Server"] == "hikyo-operator"


@pytest.mark.timeout(300)
def test_two_scaled_replicas_serve_one_dashboard_from_postgresql(
    kubeconfig, crds, operator_namespace, redis_server, tmp_path
):
    redis.Redis.from_url(redis_server.url).flushall()
    operator = Operator(tmp_path, kubeconfig, redis_server.url)
    # One signing key for all replicas (a Secret in the chart): sessions verify on each.
    operator.env.update(DJANGO_SECRET_KEY=secrets.token_urlsafe(50), DJANGO_DEBUG="false")
    username, password = f"admin-{uuid.uuid4().hex[:8]}", secrets.token_urlsafe(16)
    subprocess.run(
        manage("createsuperuser", "--noinput", "--username", username, "--email", "a@b.example"),
        env={**os_env(), **operator.env, "DJANGO_SUPERUSER_PASSWORD": password},
        check=True,
        capture_output=True,
        timeout=120,
    )
    try:
        first = operator.start_leader("operator-a")
        second = operator.start_leader("operator-b")
        a, b = _base(first), _base(second)
        assert a != b
        browser = requests.Session()

        # Not logged in: the dashboard sends to the login page, on either replica.
        for base in (a, b):
            response = browser.get(f"{base}/admin/", allow_redirects=False, timeout=10)
            assert response.status_code == 302
            assert "/admin/login/" in response.headers["Location"]

        # Log in on A.
        form = browser.get(f"{a}/admin/login/?next=/admin/", timeout=10)
        assert form.status_code == 200
        _assert_security_headers(form)
        assert "HttpOnly" in form.headers["Set-Cookie"]  # the csrftoken cookie
        done = browser.post(
            f"{a}/admin/login/?next=/admin/",
            data={
                "csrfmiddlewaretoken": _csrf_token(form.text),
                "username": username,
                "password": password,
                "next": "/admin/",
            },
            allow_redirects=False,
            timeout=10,
        )
        assert done.status_code == 302, done.text[-2000:]
        assert done.headers["Location"] == "/admin/"
        session_cookie = done.headers["Set-Cookie"]
        assert "sessionid=" in session_cookie and "HttpOnly" in session_cookie
        assert "SameSite=Lax" in session_cookie

        # The same session on B: the index, as that user.
        index = browser.get(f"{b}/admin/", allow_redirects=False, timeout=10)
        assert index.status_code == 200
        assert username in index.text
        _assert_security_headers(index)
        users = browser.get(f"{b}/admin/auth/user/", timeout=10)
        assert users.status_code == 200 and username in users.text

        # Without the CSRF token a POST is refused (CSRF on), on B too.
        refused = browser.post(f"{b}/admin/logout/", allow_redirects=False, timeout=10)
        assert refused.status_code == 403

        # Log out on B: A no longer knows the session either.
        token = _csrf_token(index.text)
        out = browser.post(f"{b}/admin/logout/", data={"csrfmiddlewaretoken": token}, timeout=10)
        assert out.status_code == 200
        again = browser.get(f"{a}/admin/", allow_redirects=False, timeout=10)
        assert again.status_code == 302 and "/admin/login/" in again.headers["Location"]

        # The admin's static files, DEBUG off, from both replicas.
        for base in (a, b):
            css = requests.get(f"{base}/static/admin/css/base.css", timeout=10)
            assert css.status_code == 200
            assert css.headers["Content-Type"].startswith("text/css")
            assert "{" in css.text
            js = requests.get(f"{base}/static/admin/js/theme.js", timeout=10)
            assert js.status_code == 200
            assert js.headers["Content-Type"].startswith("text/javascript")

        # Probes answer under any Host; the dashboard refuses an unlisted one.
        for base in (a, b):
            probe = requests.get(f"{base}/healthz", headers={"Host": "10.9.8.7:8081"}, timeout=10)
            assert probe.status_code == 200 and probe.text == "ok\n"
            bad = requests.get(f"{base}/admin/login/", headers={"Host": "evil.example"}, timeout=10)
            assert bad.status_code == 400

        # SIGTERM: each replica exits by itself and cleanly, its server included. The harness
        # SIGKILLs a process still running 20 s after SIGTERM, which a 0 here rules out.
        for service, base in ((second, b), (first, a)):
            service.stop()
            assert service.process.returncode == 0, service.log()[-3000:]
            assert "did not exit within" not in service.log()
            with pytest.raises(requests.ConnectionError):
                requests.get(f"{base}/healthz", timeout=10)
    finally:
        operator.stop()
    logs = operator.logs()
    assert "Traceback" not in logs, logs[-5000:]
    assert password not in logs
