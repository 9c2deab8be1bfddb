"""The published instance's URL (workers/engine/userinfo.py, used by
workers/published_reads.py; S0.4, S3.1): a URL's userinfo is replaced before the leader
stores it, and the worker's S3.1 check answers the published URL exactly as it answers the
one the cluster holds."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from hikyo.endpoint import normalize_base_url
from workers.engine.errors import InvalidBaseUrl
from workers.engine.userinfo import REDACTED_USERINFO, without_userinfo

SECRET = "pw-canary-7c1d"


def _s3_1(url: str) -> str:
    """What the S3.1 check makes of ``url``: the normalized URL, or its refusal's text."""
    try:
        return normalize_base_url(url)
    except InvalidBaseUrl as error:
        return f"refused: {error}"
    except ValueError as error:  # urlsplit's own, for a malformed host
        return f"malformed: {type(error).__name__}"


@pytest.mark.parametrize(
    ("url", "published"),
    [
        (f"https://user:{SECRET}@h:8443/x", f"https://{REDACTED_USERINFO}@h:8443/x"),
        (f"https://{SECRET}@h", f"https://{REDACTED_USERINFO}@h"),
        (f"https://a@{SECRET}@h/", f"https://{REDACTED_USERINFO}@h/"),
        (f"http://u:{SECRET}@h", f"http://{REDACTED_USERINFO}@h"),
        (f"https://u:{SECRET}@h?q#f", f"https://{REDACTED_USERINFO}@h?q#f"),
        ("https://h/path@segment", "https://h/path@segment"),  # no userinfo: kept as written
        ("https://h", "https://h"),
    ],
)
def test_userinfo_is_replaced_and_nothing_else_changes(url, published):
    assert without_userinfo(url) == published
    assert SECRET not in without_userinfo(url)


@given(
    st.sampled_from(["https://", "http://", "https:", ""]),
    st.text(alphabet="abc:@%", max_size=8),
    st.sampled_from(["h", "h:8443", "[::1]", "h:x", ""]),
    st.sampled_from(["", "/", "/base/", "/p@q", "?q", "#f"]),
)
def test_the_published_url_meets_the_same_s3_1_answer(scheme, userinfo, host, rest):
    url = f"{scheme}{userinfo}{'@' if userinfo else ''}{host}{rest}"
    assert _s3_1(without_userinfo(url)) == _s3_1(url)
