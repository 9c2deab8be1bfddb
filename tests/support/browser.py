"""Real headless Chromium for the dashboard's browser tests (issue 10 acceptance).

Debian's ``chromium`` at /usr/bin/chromium, driven by the ``playwright`` Python package; the
browser playwright would download is never used (no ``playwright install``). A missing
chromium or playwright is a test failure naming the fix, unless ``HIKYO_SKIP_BROWSER=1``
says to skip the browser tests.

``Pages`` is one test's browsing record: every page visited is screenshotted (full page) to
``var/screenshots/<test-name>/NN-<label>.png`` and its rendered HTML kept, with the raw
document bodies and every JSON the pages fetched, for the canary sweep.
"""

from __future__ import annotations

import os
import re
import shutil
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

CHROMIUM = Path(os.environ.get("HIKYO_TEST_CHROMIUM", "/usr/bin/chromium"))
CHROMIUM_ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]
SKIP_BROWSER = os.environ.get("HIKYO_SKIP_BROWSER") == "1"
REPO = Path(__file__).resolve().parents[2]
SCREENSHOTS = REPO / "var" / "screenshots"  # /var/ is git-ignored
NAVIGATION_TIMEOUT_MS = 30_000


def _unavailable(why: str) -> None:
    if SKIP_BROWSER:
        pytest.skip(f"HIKYO_SKIP_BROWSER=1 ({why})")
    pytest.fail(
        f"{why}; the dashboard's browser tests need Debian's chromium at {CHROMIUM} "
        "(apt-get install chromium) and the playwright package (pip install -e '.[test]'; "
        "never `playwright install`), or HIKYO_SKIP_BROWSER=1 to skip them",
        pytrace=False,
    )


@contextmanager
def chromium() -> Iterator[Any]:
    """A launched headless Chromium (a playwright ``Browser``), closed on exit."""
    if SKIP_BROWSER:
        pytest.skip("HIKYO_SKIP_BROWSER=1")
    try:
        from playwright.sync_api import sync_playwright
    except ImportError as error:
        _unavailable(f"the playwright package is missing ({error})")
    if not (CHROMIUM.is_file() and os.access(CHROMIUM, os.X_OK)):
        _unavailable(f"no chromium executable at {CHROMIUM}")
    with sync_playwright() as driver:
        try:
            browser = driver.chromium.launch(
                executable_path=str(CHROMIUM), headless=True, args=CHROMIUM_ARGS
            )
        except Exception as error:  # playwright's Error: the first line says why
            _unavailable(f"chromium at {CHROMIUM} did not start: {str(error).splitlines()[0]}")
        try:
            yield browser
        finally:
            browser.close()


def screenshot_dir(test_name: str) -> Path:
    """``var/screenshots/<test-name>/``, emptied (a rerun does not mix old pictures in)."""
    folder = SCREENSHOTS / re.sub(r"[^A-Za-z0-9_.-]+", "-", test_name).strip("-")
    shutil.rmtree(folder, ignore_errors=True)
    folder.mkdir(parents=True)
    return folder


@dataclass
class Pages:
    """One browser context (one user) of one test, and everything it saw."""

    context: Any
    folder: Path
    page: Any = None
    seen: list[tuple[str, str]] = field(default_factory=list)  # (where, text) for the sweep
    shots: list[Path] = field(default_factory=list)
    _responses: list[Any] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.page = self.context.new_page()
        self.page.set_default_timeout(NAVIGATION_TIMEOUT_MS)
        self.page.on("response", lambda response: self._responses.append(response))

    def goto(self, url: str) -> Any:
        response = self.page.goto(url, wait_until="load")
        self.collect()
        return response

    def collect(self) -> None:
        """The bodies of the documents and JSON fetched since the last call."""
        responses, self._responses[:] = list(self._responses), []
        for response in responses:
            kind = (response.headers.get("content-type") or "").split(";")[0].strip()
            wanted = kind == "application/json" or kind.endswith("+json")
            wanted = wanted or response.request.resource_type == "document"
            if not wanted or 300 <= response.status < 400:
                continue
            try:
                body = response.body().decode(errors="replace")
            except Exception:  # a body gone with a later navigation; the DOM is still swept
                continue
            self.seen.append((f"{kind or 'response'} {response.url}", body))

    def snap(self, label: str, full_page: bool = True) -> Path:
        """A screenshot (the full page, or what the window shows) and the rendered HTML of the
        current page."""
        self.collect()
        self.seen.append((f"rendered {self.page.url}", self.page.content()))
        number = len(list(self.folder.glob("*.png"))) + 1  # one numbering per folder
        path = self.folder / f"{number:02d}-{label}.png"
        self.page.screenshot(path=str(path), full_page=full_page)
        self.shots.append(path)
        return path

    def login(self, base: str, username: str, password: str) -> None:
        self.goto(f"{base}/admin/login/?next=/admin/")
        self.page.fill("#id_username", username)
        self.page.fill("#id_password", password)
        self.snap("login")
        with self.page.expect_navigation(wait_until="load"):
            self.page.click("input[type=submit]")
        self.collect()
        assert self.page.url.rstrip("/").endswith("/admin"), (self.page.url, self.text("body"))

    def text(self, selector: str) -> str:
        """The element's text as written (not as CSS shows it: captions are upper-cased)."""
        return " ".join((self.page.text_content(selector) or "").split())

    def leaks(self, secrets: Iterable[str]) -> list[tuple[str, str]]:
        """(where, the secret's first 14 characters) for every secret found: should be []."""
        wanted = sorted(s for s in secrets if s)
        return [(where, s[:14]) for where, text in self.seen for s in wanted if s in text]
