"""A URL without the userinfo of its authority: what the leader publishes for the workers
(workers.published_reads) and what the dashboard shows of an instance's URL. Pure, so the
embedded operator's dashboard does not import the scaled mode's Redis client for it."""

from __future__ import annotations

REDACTED_USERINFO = "redacted"


def without_userinfo(url: str) -> str:
    """``url`` with the userinfo of its authority (``user:password@``) replaced by a fixed
    word, so the worker's S3.1 check refuses it for the same reason and the store never holds
    it. The URL is otherwise kept as written, so every other check answers as before. The
    authority is found as ``urllib.parse.urlsplit`` finds it (after ``//``, up to ``/?#``),
    by hand, because urlsplit raises on some malformed hosts."""
    start = url.find("//")
    if start < 0:
        return url
    start += 2
    ends = [i for i in (url.find(c, start) for c in "/?#") if i >= 0]
    end = min(ends, default=len(url))
    authority = url[start:end]
    if "@" not in authority:
        return url
    return f"{url[:start]}{REDACTED_USERINFO}@{authority.rpartition('@')[2]}{url[end:]}"
