"""Issue 35 item 4: an answer the dashboard gives on purpose (403 to a user without the
permission) is one log line through settings.LOGGING's django.request filter, where Django would
attach a ~25-line PermissionDenied traceback; an unexpected error (500) keeps its traceback.

Django test client over the test database and the LOGGING the settings configure; the log is
read through the settings' own formatter, as the operator's console prints it.
"""

from __future__ import annotations

import io
import logging
from collections.abc import Iterator

import pytest
from django.conf import settings as django_settings
from django.contrib.auth.models import User
from django.test import Client
from django.urls import path

pytestmark = pytest.mark.django_db

OVERVIEW = "/admin/observations/trackedobject/overview/"


def _broken(request):
    raise RuntimeError("a bug of ours")


# The ROOT_URLCONF of the 500 test: the real routes plus one view that fails.
urlpatterns = [path("broken/", _broken)]


@pytest.fixture
def request_log() -> Iterator[io.StringIO]:
    """What django.request prints, formatted as settings.LOGGING's console formats it."""
    written = io.StringIO()
    handler = logging.StreamHandler(written)
    handler.setFormatter(
        logging.Formatter(django_settings.LOGGING["formatters"]["plain"]["format"])
    )
    logger = logging.getLogger("django.request")
    logger.addHandler(handler)
    try:
        yield written
    finally:
        logger.removeHandler(handler)


def test_a_permission_denied_is_one_line_with_its_status(request_log):
    outsider = User.objects.create_user("outsider", password="x", is_staff=True)
    client = Client()
    client.force_login(outsider)
    assert client.get(OVERVIEW).status_code == 403
    lines = request_log.getvalue().splitlines()
    assert len(lines) == 1, lines
    assert "Forbidden (Permission denied): " + OVERVIEW in lines[0]
    assert lines[0].endswith("status=403 method=GET")


def test_an_unexpected_error_keeps_its_traceback(request_log, settings):
    settings.ROOT_URLCONF = __name__
    assert Client(raise_request_exception=False).get("/broken/").status_code == 500
    written = request_log.getvalue()
    assert "Internal Server Error: /broken/" in written
    assert "Traceback (most recent call last)" in written and "RuntimeError" in written
