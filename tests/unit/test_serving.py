"""Issue 10 items 6 and 7: the dashboard's production serving — cheroot in-process, static
files by whitenoise with DEBUG off, and the browser security headers and cookies."""

from __future__ import annotations

import http.client
import re
import socket
import subprocess
import sys

import pytest
from django.conf import settings
from django.core.wsgi import get_wsgi_application
from django.test import override_settings

from controlplane import settings as controlplane_settings
from controlplane.observations import serving
from tests.support.processes import REPO, free_port

ADMIN_CSS = "/static/admin/css/base.css"
ADMIN_JS = "/static/admin/js/theme.js"


def _body(response) -> bytes:
    if response.streaming:
        return b"".join(response.streaming_content)
    return response.content


# --- headers and cookies (Django's test client) ------------------------------------------------


def test_debug_is_off_by_default():
    assert controlplane_settings.DEBUG is False
    assert settings.DEBUG is False


def test_the_login_page_carries_the_security_headers(client):
    response = client.get("/admin/login/")
    assert response.status_code == 200
    assert response["Content-Security-Policy"] == settings.CONTENT_SECURITY_POLICY
    assert response["X-Frame-Options"] == "DENY"
    assert response["Referrer-Policy"] == "same-origin"
    assert response["X-Content-Type-Options"] == "nosniff"
    assert response["Cross-Origin-Opener-Policy"] == "same-origin"
    assert "Strict-Transport-Security" not in response  # plain http: no HSTS


def test_the_policy_is_strict():
    directives = dict(
        part.strip().split(" ", 1) for part in settings.CONTENT_SECURITY_POLICY.split(";")
    )
    assert directives["default-src"] == "'none'"
    for name in ("script-src", "style-src", "img-src", "font-src", "connect-src"):
        assert directives[name] == "'self'", name
    assert directives["frame-ancestors"] == "'none'"
    assert "unsafe" not in settings.CONTENT_SECURITY_POLICY  # no 'unsafe-inline'/'unsafe-eval'


def test_a_response_with_its_own_policy_keeps_it(rf):
    from django.http import HttpResponse

    from controlplane.observations.security import ContentSecurityPolicy

    own = HttpResponse()
    own["Content-Security-Policy"] = "default-src 'self'"
    middleware = ContentSecurityPolicy(lambda request: own)
    assert middleware(rf.get("/"))["Content-Security-Policy"] == "default-src 'self'"


def test_cookies_are_httponly_lax_and_not_secure_over_http(client):
    response = client.get("/admin/login/")
    csrf = response.cookies["csrftoken"]
    assert csrf["httponly"] and csrf["samesite"] == "Lax"
    assert not csrf["secure"]
    assert settings.SESSION_COOKIE_HTTPONLY and settings.SESSION_COOKIE_SAMESITE == "Lax"
    assert settings.SESSION_COOKIE_AGE == 8 * 3600
    assert settings.SESSION_ENGINE == "django.contrib.sessions.backends.db"


def test_csrf_is_enforced_on_the_login_form():
    from django.test import Client

    strict = Client(enforce_csrf_checks=True)
    response = strict.post("/admin/login/", {"username": "x", "password": "y"})
    assert response.status_code == 403


HTTPS = {
    "SECURE_PROXY_SSL_HEADER": ("HTTP_X_FORWARDED_PROTO", "https"),
    "SESSION_COOKIE_SECURE": True,
    "CSRF_COOKIE_SECURE": True,
    "SECURE_HSTS_SECONDS": 31536000,
}


@override_settings(**HTTPS)
def test_behind_a_tls_proxy_cookies_are_secure_and_hsts_is_sent(client):
    response = client.get("/admin/login/", HTTP_X_FORWARDED_PROTO="https")
    assert response["Strict-Transport-Security"] == "max-age=31536000"
    assert response.cookies["csrftoken"]["secure"]


@override_settings(**HTTPS)
def test_behind_a_tls_proxy_plain_http_gets_no_hsts_and_no_redirect(client):
    response = client.get("/admin/login/")  # no X-Forwarded-Proto: a port-forward
    assert response.status_code == 200
    assert "Strict-Transport-Security" not in response


def _settings_in_a_child(environ: dict[str, str], expression: str) -> subprocess.CompletedProcess:
    code = (
        "import django, os; os.environ['DJANGO_SETTINGS_MODULE']='controlplane.settings'; "
        f"django.setup(); from django.conf import settings as s; print({expression})"
    )
    env = {"PATH": "/usr/bin:/bin", "HOME": "/tmp", "HIKYO_OPERATOR_DATA_DIR": "/tmp/hikyo-x"}
    return subprocess.run(
        [sys.executable, "-c", code],
        env={**env, **environ},
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=60,
    )


def test_hikyo_operator_https_turns_on_secure_cookies_hsts_and_the_proxy_header():
    done = _settings_in_a_child(
        {"HIKYO_OPERATOR_HTTPS": "true"},
        "s.SESSION_COOKIE_SECURE, s.CSRF_COOKIE_SECURE, s.SECURE_HSTS_SECONDS, "
        "s.SECURE_PROXY_SSL_HEADER, s.SECURE_SSL_REDIRECT",
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "True True 31536000 ('HTTP_X_FORWARDED_PROTO', 'https') False"


def test_hikyo_operator_https_is_an_s81_boolean():
    done = _settings_in_a_child({"HIKYO_OPERATOR_HTTPS": "maybe"}, "1")
    assert done.returncode != 0
    assert "HIKYO_OPERATOR_HTTPS" in done.stderr


def test_deploy_checks_are_clean_with_https_and_a_secret_key():
    done = subprocess.run(
        [sys.executable, "manage.py", "check", "--deploy", "--fail-level", "WARNING"],
        env={
            "PATH": "/usr/bin:/bin",
            "HOME": "/tmp",
            "HIKYO_OPERATOR_DATA_DIR": "/tmp/hikyo-x",
            "HIKYO_OPERATOR_HTTPS": "true",
            "DJANGO_SECRET_KEY": "k" * 20 + "-x9Q" * 10,
        },
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stdout + done.stderr


@pytest.mark.parametrize(
    "raw, expected",
    [
        ("", ["localhost", "127.0.0.1", "[::1]"]),
        (" , ", ["localhost", "127.0.0.1", "[::1]"]),
        (
            "hikyo-operator.hikyo-system.svc, dashboard.example.com,",
            ["hikyo-operator.hikyo-system.svc", "dashboard.example.com"],
        ),
    ],
)
def test_allowed_hosts_from_the_environment(raw, expected):
    assert controlplane_settings.host_list(raw, ["localhost", "127.0.0.1", "[::1]"]) == expected


@override_settings(ALLOWED_HOSTS=["hikyo-operator.hikyo-system.svc"])
def test_a_service_name_in_allowed_hosts_reaches_the_dashboard(client):
    response = client.get("/admin/login/", HTTP_HOST="hikyo-operator.hikyo-system.svc:8081")
    assert response.status_code == 200
    assert client.get("/healthz", HTTP_HOST="10.0.0.7:8081").status_code == 200  # probes: any


# --- no inline script or style: what lets the strict policy hold --------------------------------

INLINE_SCRIPT = re.compile(r"<script(?![^>]*\bsrc=)(?![^>]*application/json)[^>]*>", re.I)
STYLE_ATTRIBUTE = re.compile(r"<[^>]+\sstyle\s*=", re.I)
INLINE_STYLE = re.compile(r"<style\b", re.I)
EVENT_HANDLER = re.compile(r"<[^>]+\son[a-z]+\s*=", re.I)


def _assert_no_inline(html: str, page: str) -> None:
    for pattern in (INLINE_SCRIPT, STYLE_ATTRIBUTE, INLINE_STYLE, EVENT_HANDLER):
        found = pattern.search(html)
        assert found is None, f"{page}: {found.group(0)[:200]} is blocked by the policy"


def test_the_login_page_has_no_inline_script_or_style(client):
    _assert_no_inline(client.get("/admin/login/").content.decode(), "/admin/login/")


@pytest.mark.django_db
@pytest.mark.parametrize(
    "page",
    ["/admin/", "/admin/auth/user/", "/admin/auth/user/add/", "/admin/auth/group/add/",
     "/admin/password_change/"],
)  # fmt: skip
def test_admin_pages_have_no_inline_script_or_style(admin_client, page):
    response = admin_client.get(page)
    assert response.status_code == 200
    _assert_no_inline(response.content.decode(), page)


# --- static files: whitenoise, DEBUG off -------------------------------------------------------


@pytest.mark.parametrize(
    "path, content_type",
    [(ADMIN_CSS, "text/css"), (ADMIN_JS, "text/javascript"), ("/static/admin/img/search.svg",
     "image/svg+xml")],
)  # fmt: skip
def test_admin_static_files_are_served_with_debug_off(client, path, content_type):
    response = client.get(path)
    assert response.status_code == 200
    assert response["Content-Type"].split(";")[0] == content_type
    assert response["X-Content-Type-Options"] == "nosniff"
    assert _body(response)


def test_an_unknown_static_file_is_a_404(client):
    assert client.get("/static/admin/css/nope.css").status_code == 404


def test_static_files_come_from_the_finders_unless_a_static_root_is_given():
    assert settings.STATIC_ROOT is None
    assert settings.WHITENOISE_USE_FINDERS is True
    done = _settings_in_a_child(
        {"DJANGO_STATIC_ROOT": "/srv/static"}, "s.STATIC_ROOT, s.WHITENOISE_USE_FINDERS"
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "/srv/static False"


# --- the server itself -------------------------------------------------------------------------


@pytest.fixture
def served():
    running = serving.serve(("127.0.0.1", 0), get_wsgi_application(), threads=2)
    try:
        yield running
    finally:
        running.stop()


def _get(port: int, path: str, host: str = "localhost") -> http.client.HTTPResponse:
    connection = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
    connection.request("GET", path, headers={"Host": host})
    response = connection.getresponse()
    response.body = response.read()  # type: ignore[attr-defined]
    connection.close()
    return response


def test_the_server_answers_probes_under_any_host_and_names_no_software(served):
    port = served.address[1]
    response = _get(port, "/healthz", host="10.1.2.3:8081")
    assert response.status == 200 and response.body == b"ok\n"  # type: ignore[attr-defined]
    assert response.getheader("Server") == "hikyo-operator"
    assert _get(port, "/admin/login/", host="evil.example").status == 400


def test_the_server_serves_admin_css(served):
    response = _get(served.address[1], ADMIN_CSS)
    assert response.status == 200
    assert response.getheader("Content-Type").startswith("text/css")
    assert b"{" in response.body  # type: ignore[attr-defined]


def test_the_server_keeps_connections_alive(served):
    connection = http.client.HTTPConnection("127.0.0.1", served.address[1], timeout=10)
    try:
        for _ in range(3):
            connection.request("GET", "/healthz")
            response = connection.getresponse()
            assert response.status == 200 and response.read() == b"ok\n"
    finally:
        connection.close()


def test_a_silent_client_is_dropped_after_the_socket_timeout(monkeypatch):
    monkeypatch.setattr(serving, "SOCKET_TIMEOUT_SECONDS", 1)
    running = serving.serve(("127.0.0.1", 0), get_wsgi_application(), threads=1)
    try:
        # The client waits 30 times the server's timeout: a server that never drops it
        # makes recv raise TimeoutError here, the server's close ends the loop instead.
        with socket.create_connection(running.address, timeout=30) as slow:
            slow.sendall(b"GET /healthz HTTP/1.1\r\nHost: x\r\n")  # never finishes the headers
            received = b""
            while chunk := slow.recv(4096):  # a 408 and/or the close
                received += chunk
            assert received == b"" or received.startswith(b"HTTP/1.1 408 ")
        # The one thread is free again: a normal request is served.
        assert _get(running.address[1], "/healthz").status == 200
    finally:
        running.stop()


def test_stop_closes_idle_connections_ends_the_thread_and_frees_the_port(monkeypatch):
    monkeypatch.setattr(serving, "SOCKET_TIMEOUT_SECONDS", 60)  # no idle close before stop's
    running = serving.serve(("127.0.0.1", 0), get_wsgi_application(), threads=2)
    port = running.address[1]
    idle = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
    try:
        idle.request("GET", "/healthz")  # keep-alive: the connection stays open after this
        assert idle.getresponse().read() == b"ok\n"
        running.stop()
        # stop does not wait for the idle keep-alive client: the server has closed it (a
        # server still holding it would leave recv to time out, an error here).
        assert idle.sock.recv(1) == b""
    finally:
        idle.close()
    assert not running.thread.is_alive()
    with pytest.raises(OSError), socket.create_connection(("127.0.0.1", port), timeout=2):
        pass


def test_a_busy_port_is_an_oserror_at_serve():
    port = free_port()
    with socket.socket() as holder:
        holder.bind(("127.0.0.1", port))
        holder.listen(1)
        with pytest.raises(OSError):
            serving.serve(("127.0.0.1", port), get_wsgi_application())


def test_a_refused_host_is_logged_in_one_line_without_a_traceback():
    import logging

    from controlplane.observations.security import WithoutTraceback

    logger = logging.getLogger("django.security.DisallowedHost")
    assert not logger.propagate
    assert any(
        isinstance(f, WithoutTraceback) for handler in logger.handlers for f in handler.filters
    )
    try:
        raise ValueError("Invalid HTTP_HOST header: 'evil.example'.")
    except ValueError:
        record = logging.LogRecord("x", logging.ERROR, __file__, 1, "m", None, sys.exc_info())
    assert WithoutTraceback().filter(record)
    assert record.exc_info is None
    assert logging.Formatter().format(record) == "m"
