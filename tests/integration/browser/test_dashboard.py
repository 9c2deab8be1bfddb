"""Issue 10 acceptance: the dashboard in real headless Chromium (Debian's, driven by playwright)
against the real kube-apiserver, the devserver over HTTPS and a running embedded operator.

Logged out, every dashboard URL sends to the login page; logged in, the overview's counts match
the cluster; the list filters to the not-Ready objects; the detail page of an
``UndeliveredSecrets`` object tells what to do, and after the fix on the devserver its
force-resync button makes it Ready; a ``hikyo-viewers`` user gets 403 on both force-resync
POSTs. Every page is screenshotted to ``var/screenshots/<test-name>/``, and its HTML (and
every JSON it fetched) swept for the run's canaries, tokens, cursors, stamps and passwords.
"""

from __future__ import annotations

import re
import subprocess
from collections.abc import Iterator
from typing import Any
from urllib.parse import urlencode

import pytest

from localcluster import locate_binaries
from tests.integration.conftest import SWEPT
from tests.support.browser import SKIP_BROWSER, Pages, screenshot_dir
from tests.support.factories import GROUP, VERSION
from tests.support.operator_harness import os_env
from tests.support.waiting import wait_for
from workers.engine.force_sync import FORCE_SYNC_ANNOTATION

from .conftest import (
    BAD_TEMPLATE,
    CLAIMED,
    DREW_429,
    EXPIRING,
    HANGS,
    KEYS_MISSING,
    MISMATCHED,
    MORE_REFUSED,
    NO_INSTANCE,
    NOT_READY,
    READY_NAMES,
    READY_WITH_WARNINGS,
    REFUSED,
    REVOKED,
    SERVER_DOWN,
    UNACKNOWLEDGED,
    UNDELIVERED,
    WAITS_429,
    Dashboard,
    _reason,
)

LIFECYCLES = ("Synced", "Retained", "Refused", "Scrubbed", "Unreconciled")  # the columns
OVERVIEW = "/admin/observations/trackedobject/overview/"
CHANGELIST = "/admin/observations/trackedobject/"
PAGE_POLL_TIMEOUT = 60.0  # the recorder writes in the background
READY_AFTER_FORCE_TIMEOUT = 180.0

pytestmark = [
    pytest.mark.timeout(600),
    # Said before any fixture runs; a missing browser without it fails (tests/support/browser.py).
    pytest.mark.skipif(SKIP_BROWSER, reason="HIKYO_SKIP_BROWSER=1"),
]


@pytest.fixture
def pages(browser, dashboard: Dashboard, request) -> Iterator[Any]:
    """``pages(user)``: a fresh browser context (logged in as that role, or not at all) whose
    pages are screenshotted to this test's folder; swept for the run's secrets afterwards."""
    folder = screenshot_dir(request.node.name)
    print(f"\nscreenshots: {folder}")
    opened: list[Pages] = []

    def open_as(role: str | None, width: int = 1280, height: int = 900) -> Pages:
        context = browser.new_context(viewport={"width": width, "height": height})
        visit = Pages(context, folder)
        opened.append(visit)
        if role is not None:
            visit.login(dashboard.base, *dashboard.users[role])
        return visit

    yield open_as
    seen = [item for visit in opened for item in visit.seen]
    for visit in opened:
        visit.context.close()
    SWEPT.setdefault("dashboard pages", []).extend(text for _, text in seen)  # the final sweep
    assert seen, "no page was swept"
    secrets = dashboard.secrets_of_the_run()
    assert dashboard.world.token in secrets and len(secrets) > 5
    leaks = [(where, s[:14]) for where, text in seen for s in sorted(secrets) if s in text]
    assert leaks == []


# --- helpers ------------------------------------------------------------------------------------


def cluster_tally(dashboard: Dashboard) -> dict[str, Any]:
    """What the cluster says: total, per lifecycle (the dashboard's columns), Ready."""
    counts = dict.fromkeys(LIFECYCLES, 0)
    ready = 0
    items = dashboard.hikyosecrets()
    for item in items:
        lifecycle = (item.get("status") or {}).get("lifecycle")
        counts[lifecycle if lifecycle in LIFECYCLES else "Unreconciled"] += 1
        ready += (_reason(item, "Ready") or ("",))[0] == "True"
    total = len(items)
    return {"total": total, "lifecycles": counts, "ready": f"{ready}/{total}"}


def page_tally(visit: Pages, row: str) -> dict[str, Any]:
    """One row of an overview tally table, read from the rendered page."""
    page = visit.page
    cells = [c.strip() for c in page.locator(f"{row} td.count-lifecycle").all_inner_texts()]
    return {
        "total": int(page.inner_text(f"{row} td.count-total")),
        "lifecycles": dict(zip(LIFECYCLES, map(int, cells), strict=True)),
        "ready": page.inner_text(f"{row} td.ready-ratio").split(" ")[0],
    }


def overview_matches(visit: Pages, dashboard: Dashboard) -> dict[str, Any] | None:
    visit.goto(dashboard.base + OVERVIEW)
    expected = cluster_tally(dashboard)
    namespace_row = f'#tally-namespaces tr[data-group="{dashboard.world.namespace}"]'
    if visit.page.locator(namespace_row).count() != 1:
        return None
    shown = page_tally(visit, "#tally-overall tbody tr")
    if shown == expected and page_tally(visit, namespace_row) == expected:
        return expected
    return None


def changelist_names(visit: Pages) -> list[str]:
    cells = visit.page.locator("#result_list tbody th.field-name").all_inner_texts()
    return sorted(cell.strip() for cell in cells)


def detail_pk(visit: Pages, dashboard: Dashboard, name: str) -> str:
    """The TrackedObject id of ``name``, from the overview's not-Ready table link."""
    visit.goto(dashboard.base + OVERVIEW)
    selector = f'#not-ready-table tr[data-object="{dashboard.world.namespace}/{name}"] a'
    href = visit.page.get_attribute(selector, "href") or ""
    found = re.search(r"/trackedobject/(\d+)/change/", href)
    assert found, href
    return found.group(1)


def post_form(visit: Pages, action: str, fields: dict[str, str]) -> int:
    """Submits a POST form built in the page (with the page's CSRF token, as the admin's own
    forms send it) and returns the HTTP status the browser got."""
    page = visit.page
    token = page.get_attribute("input[name=csrfmiddlewaretoken]", "value")
    assert token, "no CSRF token on the page"
    with page.expect_navigation(wait_until="load") as navigation:
        page.evaluate(
            """([action, fields]) => {
                const form = document.createElement("form");
                form.method = "post";
                form.action = action;
                for (const [name, value] of Object.entries(fields)) {
                    const input = document.createElement("input");
                    input.type = "hidden";
                    input.name = name;
                    input.value = value;
                    form.appendChild(input);
                }
                document.body.appendChild(form);
                form.submit();
            }""",
            [action, {"csrfmiddlewaretoken": token, **fields}],
        )
    visit.collect()
    return navigation.value.status


# --- the tests ----------------------------------------------------------------------------------


def test_logged_out_access_redirects_to_login(pages, dashboard: Dashboard):
    visit = pages(None)
    for label, path in (
        ("index", "/admin/"),
        ("overview", OVERVIEW),
        ("list", f"{CHANGELIST}?ready=not"),
        ("detail", f"{CHANGELIST}1/change/"),
    ):
        response = visit.goto(dashboard.base + path)
        assert response.status == 200  # the login page, after the redirect
        assert response.request.redirected_from is not None, path
        assert response.request.redirected_from.response().status == 302
        url = visit.page.url
        assert url.startswith(f"{dashboard.base}/admin/login/?next="), (path, url)
        assert visit.page.locator("#id_username").count() == 1
        assert dashboard.world.namespace not in visit.page.content()
        visit.snap(f"logged-out-{label}")


def test_login_and_the_overview_counts_match_the_cluster(pages, dashboard: Dashboard):
    visit = pages("admin")  # logs in through /admin/login/
    visit.snap("index")
    assert visit.page.locator("#overview-link").count() == 1
    visit.page.click("#overview-link")
    visit.page.wait_for_load_state("load")
    visit.collect()
    assert visit.page.url == dashboard.base + OVERVIEW

    expected = wait_for(
        lambda: overview_matches(visit, dashboard),
        timeout=PAGE_POLL_TIMEOUT,
        interval=1,
        what="the overview's counts equal to the cluster's",
    )
    visit.snap("overview")
    assert expected["total"] == len(READY_NAMES) + len(READY_WITH_WARNINGS) + len(NOT_READY)
    ready = len(READY_NAMES) + len(READY_WITH_WARNINGS)
    assert expected["ready"] == f"{ready}/{expected['total']}"
    # Every object has an instance row (or the not-fetched-yet one): the rows add up.
    per_instance = visit.page.locator("#tally-instances td.count-total").all_inner_texts()
    assert sum(map(int, per_instance)) == expected["total"]
    # The not-Ready objects, each with its blocking Type/Reason.
    ns = dashboard.world.namespace
    rows = visit.page.locator("#not-ready-table tbody tr[data-object]")
    assert sorted(rows.evaluate_all("rows => rows.map(r => r.dataset.object)")) == sorted(
        f"{ns}/{name}" for name in NOT_READY
    )
    # Ready ones with an informational problem are listed as warnings, not as "nothing to do".
    warned = visit.page.locator("#warnings-table tbody tr[data-object]")
    assert sorted(warned.evaluate_all("rows => rows.map(r => r.dataset.object)")) == sorted(
        f"{ns}/{name}" for name in READY_WITH_WARNINGS
    )
    blocking = visit.text(f'#not-ready-table tr[data-object="{ns}/{UNDELIVERED}"] td.blocking')
    assert "UndeliveredSecrets" in blocking
    blocking = visit.text(f'#not-ready-table tr[data-object="{ns}/{REFUSED}"] td.blocking')
    assert "SecretNotDesignated" in blocking
    # The operator this dashboard runs in.
    assert visit.text("#operator-mode") == "embedded"
    assert visit.text("#operator-leader") not in ("", "unknown")
    assert re.fullmatch(r"\d+ due now, \d+ scheduled", visit.text("#operator-queue-depth"))
    instance = f'#instances-table tr[data-instance="{dashboard.world.instance}"]'
    assert visit.page.locator(instance).count() == 1
    assert visit.text(f"{instance} td.paused") == "no"


def test_the_list_filters_to_not_ready(pages, dashboard: Dashboard):
    visit = pages("admin")
    everything = sorted([*READY_NAMES, *READY_WITH_WARNINGS, *NOT_READY])
    wait_for(
        lambda: visit.goto(dashboard.base + CHANGELIST) and changelist_names(visit) == everything,
        timeout=PAGE_POLL_TIMEOUT,
        interval=1,
        what="every HikyoSecret in the list",
    )
    visit.snap("list")
    with visit.page.expect_navigation(wait_until="load"):
        visit.page.click("#changelist-filter a:has-text('not Ready (False or Unknown)')")
    visit.collect()
    assert "ready=not" in visit.page.url
    visit.snap("list-not-ready")
    assert changelist_names(visit) == sorted(NOT_READY)
    states = visit.page.locator("#result_list tbody td.field-ready_shown .state").all_inner_texts()
    assert len(states) == len(NOT_READY), states
    assert {s.strip() for s in states} <= {"Blocked", "Paused"}, states  # none Ready
    # The index's shortcut is the same filter.
    visit.goto(dashboard.base + "/admin/")
    with visit.page.expect_navigation(wait_until="load"):
        visit.page.click("#not-ready-link")
    visit.collect()
    assert changelist_names(visit) == sorted(NOT_READY)


def explain_remediations(text: str) -> dict[str, str]:
    """``explain``'s remediation lines by what they are for: the outcome's ``Type/Reason``
    (``remediation:``) and each other condition's (``  for Type/Reason:``)."""
    found: dict[str, str] = {}
    main = ""
    for line in text.splitlines():
        outcome = re.match(r"outcome: (\w+)=\w+/(\w+)$", line) or re.match(
            r"outcome: (\w+) \(sets no condition\)$", line
        )
        if outcome:
            main = "/".join(outcome.groups())
        elif line.startswith("remediation: "):
            found[main] = " ".join(line.removeprefix("remediation: ").split())
        elif other := re.match(r"  for (\w+/\w+): (.*)$", line):
            found[other.group(1)] = " ".join(other.group(2).split())
    return found


def list_row(name: str) -> str:
    """The selector of the list's row of HikyoSecret ``name``."""
    return f"#result_list tbody tr:has(th.field-name a:text-is('{name}'))"


def test_every_problem_says_why_and_what_to_do_as_explain_does(pages, dashboard: Dashboard):
    """Issue 35 item 1: the list names each not-Ready CR's blocker with its message, and each
    Ready one's warning, with the remediation ``explain`` prints (the same function over the
    names the recorder kept), real names filled in."""
    world, broken = dashboard.world, dashboard.broken
    expected = {  # the Type/Reason shown, and names its remediation must carry
        REFUSED: ("Designation/SecretNotDesignated", ["absent-credential", world.instance]),
        UNDELIVERED: ("Delivery/UndeliveredSecrets", ["API_KEY", world.environment]),
        REVOKED: ("Synced/FetchFailed", ["revoked-credential"]),
        SERVER_DOWN: ("Synced/FetchFailed", [f"-n {world.namespace} annotate hksec {SERVER_DOWN}"]),
        NO_INSTANCE: ("Synced/FetchFailed", [f"HikyoInstance {broken.missing_instance} does not"]),
        DREW_429: ("Synced/FetchFailed", [broken.busy_instance, f"org {world.org}"]),
        KEYS_MISSING: ("Delivery/KeysMissing", ["NOT_PUBLISHED"]),
        EXPIRING: ("CredentialExpiry/ExpiresSoon", ["Secret expiring-credential"]),
    }
    explained = {
        name: explain_remediations(text) for name, text in dashboard.explain(*expected).items()
    }
    visit = pages("viewer")
    visit.goto(dashboard.base + CHANGELIST)
    visit.snap("list-why-and-what-to-do")
    for name, (problem, names) in expected.items():
        row = list_row(name)
        type_ = problem.split("/")[0]
        message = " ".join(world.message(type_, name).split())
        why = visit.text(f'{row} td.field-why_shown .why[data-problem="{problem}"]')
        assert problem in why and message in why, (name, why)
        todo = visit.text(f'{row} td.field-why_shown .todo .remediation[data-for="{problem}"]')
        assert todo == explained[name][problem], (name, todo, explained[name])
        for needed in names:
            assert needed in todo, (name, needed, todo)
        for placeholder in ("<credential>", "<instance>", "<namespace>", "<org>", "<keys>"):
            assert placeholder not in todo, (name, todo)
    # Informational problems are warnings, never "Nothing to do".
    for name in READY_WITH_WARNINGS:
        assert visit.page.locator(f"{list_row(name)} .why-warning").count() >= 1
        assert visit.page.locator(f"{list_row(name)} .remediation.nothing").count() == 0
    # The instance column names the instance the spec names, a missing one marked missing.
    instance_cell = visit.text(f"{list_row(NO_INSTANCE)} td.field-instance_shown")
    assert instance_cell == f"{broken.missing_instance} (missing)"
    # Search: namespace/name, instance, reason and message.
    for query, wanted in (
        (f"{world.namespace}/{REVOKED}", {REVOKED}),
        (broken.busy_instance, {DREW_429, WAITS_429, MISMATCHED}),  # its message names it
        ("SecretNotDesignated", {REFUSED}),
        ("status 503", {SERVER_DOWN}),
    ):
        visit.goto(f"{dashboard.base}{CHANGELIST}?{urlencode({'q': query})}")
        assert set(changelist_names(visit)) == wanted, query


@pytest.mark.parametrize("width", [1280, 1920])
def test_the_list_reads_one_line_per_row_with_what_to_do_one_click_away(
    pages, dashboard: Dashboard, width: int
):
    """Issue 49 item 4: at 1280x800 (and 1920) every row of the not-Ready list is one line
    (state, name, the first problem's reason and message, last checked), so the not-Ready rows
    fit one screen; a click on the line opens what to do, its commands in code blocks, each
    copied as it stands by its button."""
    visit = pages("operator", width=width, height=800)
    visit.goto(f"{dashboard.base}{CHANGELIST}?ready=not")
    wait_for(
        lambda: (
            visit.goto(f"{dashboard.base}{CHANGELIST}?ready=not")
            and changelist_names(visit) == sorted(NOT_READY)
        ),
        timeout=PAGE_POLL_TIMEOUT,
        interval=1,
        what="every not-Ready HikyoSecret in the list",
    )
    visit.snap(f"list-not-ready-{width}", full_page=False)  # one screen, as docs/dashboard.md
    rows = visit.page.locator("#result_list tbody tr")
    heights = rows.evaluate_all("rows => rows.map(r => r.getBoundingClientRect().height)")
    line = visit.page.evaluate(
        "() => parseFloat(getComputedStyle(document.querySelector("
        "'#result_list tbody td.field-why_shown')).lineHeight)"
    )
    assert len(heights) == len(NOT_READY) >= 10
    assert all(h < 2 * line + 12 for h in heights), (heights, line)  # one line and padding
    bottoms = rows.evaluate_all("rows => rows.map(r => r.getBoundingClientRect().bottom)")
    assert max(bottoms) <= 800, bottoms  # every not-Ready row on the first screen
    # The age column holds its longest text whatever this run's timing ("59 min ago").
    visit.page.evaluate(
        """() => document.querySelectorAll("#result_list td.field-last_checked_shown .relative")
            .forEach((age) => { age.textContent = "59 min ago"; })"""
    )
    clipped = visit.page.evaluate(
        """() => [...document.querySelectorAll(
                "#result_list th.field-name, #result_list td.field-namespace_shown, "
                + "#result_list td.field-ready_shown, #result_list td.field-last_checked_shown")]
            .filter((cell) => cell.scrollWidth > cell.clientWidth + 1)
            .map((cell) => cell.textContent.trim())"""
    )
    assert clipped == [], clipped  # this world's names, states and ages are not cut
    # What to do is one click away: the line opens, and its commands are code to copy.
    row = list_row(REFUSED)
    assert not visit.page.is_visible(f"{row} .todo")
    visit.page.click(f"{row} details.why-row summary")
    assert visit.page.is_visible(f"{row} .todo .remediation")
    visit.snap(f"list-opened-{width}", full_page=False)
    commands = visit.page.locator(f"{row} .todo code.command").all_text_contents()
    assert any(c.startswith("kubectl -n ") and " create secret generic " in c for c in commands)
    visit.context.grant_permissions(["clipboard-read", "clipboard-write"])
    visit.page.click(f"{row} .todo .cmd:first-child button.copy")
    copied = visit.page.evaluate("() => navigator.clipboard.readText()")
    assert copied == commands[0]


def test_one_hanging_token_fails_only_its_own_cr(pages, dashboard: Dashboard):
    """Issue 49 (S3.5, S4.1.9): one credential's token hangs 45 s while every other answers.
    Only its CR shows the timeout; every other CR of the instance keeps its own condition and
    Ready state, and kubectl and the list agree on each."""
    visit = pages("viewer")
    visit.goto(dashboard.base + CHANGELIST)
    items = {item["metadata"]["name"]: item for item in dashboard.hikyosecrets()}
    rows = visit.page.locator("#result_list tbody tr")
    listed = dict(
        rows.evaluate_all(
            """rows => rows.map(r => [r.querySelector("th.field-name").textContent.trim(),
                [r.querySelector("td.field-ready_shown .state").textContent.trim(),
                 r.querySelector("td.field-why_shown").textContent]])"""
        )
    )
    assert sorted(listed) == sorted(items)
    for name, item in items.items():
        state, why_text = listed[name]
        ready = _reason(item, "Ready")
        assert (state in ("Ready", "Warning")) == (ready == ("True", "Reconciled")), (name, state)
        messages = " ".join(
            c.get("message", "") for c in (item.get("status") or {}).get("conditions") or []
        )
        hung = "timeout" in messages or "did not answer" in messages
        assert hung == (name == HANGS), (name, messages)
        assert ("timeout" in why_text) == (name == HANGS), (name, why_text)
        assert "InstanceUnresponsive" not in why_text, (name, why_text)  # one credential only
        # Its own credential's later requests wait behind one probe; nobody else's do.
        assert name == HANGS or "CredentialUnanswered" not in why_text, (name, why_text)
    assert _reason(items[HANGS], "Synced") == ("False", "FetchFailed")
    assert listed[HANGS][0] in ("Blocked", "Paused")


def test_explain_the_list_the_cr_page_and_the_instance_page_say_the_same(
    pages, dashboard: Dashboard
):
    """Issue 49: for each breakage of the world, the remediation of its problem is the same
    text in ``explain --fetch``, the list, the HikyoSecret's page and its instance's page (all
    filled from the facts stored with the condition). The CR that only waits on the 429 pause
    is compared among the pages alone: ``explain`` has its own store, without the pause."""
    world, broken = dashboard.world, dashboard.broken
    problems = {
        REFUSED: "Designation/SecretNotDesignated",
        UNDELIVERED: "Delivery/UndeliveredSecrets",
        REVOKED: "Synced/FetchFailed",
        SERVER_DOWN: "Synced/FetchFailed",
        NO_INSTANCE: "Synced/FetchFailed",
        DREW_429: "Synced/FetchFailed",
        KEYS_MISSING: "Delivery/KeysMissing",
        EXPIRING: "CredentialExpiry/ExpiresSoon",
        MISMATCHED: "Designation/InstanceMismatch",
        UNACKNOWLEDGED: "Delivery/LoaderControlUnacknowledged",
        BAD_TEMPLATE: "Delivery/InvalidTemplate",
        CLAIMED: "Conflict/TargetClaimed",
        HANGS: "Synced/FetchFailed",
        WAITS_429: "InstancePaused",
    }
    instance_of = {
        DREW_429: broken.busy_instance,
        WAITS_429: broken.busy_instance,
        NO_INSTANCE: broken.missing_instance,
    }
    explained = dashboard.explain(*(name for name in problems if name != WAITS_429))
    visit = pages("viewer")
    visit.goto(dashboard.base + CHANGELIST)
    pks = dict(
        visit.page.locator("#result_list tbody th.field-name a").evaluate_all(
            r"""links => links.map(a => [a.textContent.trim(),
                a.getAttribute("href").match(/trackedobject\/(\d+)\/change/)[1]])"""
        )
    )
    for name, problem in problems.items():
        selector = f'.remediation[data-for="{problem}"]'
        in_list = visit.text(f"{list_row(name)} td.field-why_shown .todo {selector}")
        assert in_list, (name, problem)
        visit.goto(f"{dashboard.base}{CHANGELIST}{pks[name]}/change/")
        assert visit.text(f"#remediation {selector}") == in_list, name
        instance = instance_of.get(name, world.instance)
        visit.goto(f"{dashboard.base}/admin/observations/trackedobject/instances/{instance}/")
        row = f'#instance-objects-table tr[data-object="{world.namespace}/{name}"]'
        assert visit.text(f"{row} td.todo {selector}") == in_list, name
        if name != WAITS_429:
            assert explain_remediations(explained[name])[problem] == in_list, name
        visit.goto(dashboard.base + CHANGELIST)


def test_a_cr_waiting_on_a_429_pause_shows_the_pause(pages, dashboard: Dashboard):
    world, broken = dashboard.world, dashboard.broken
    visit = pages("viewer")
    served: list[str] = []  # the list's HTML as the server rendered it (before any script)

    def paused_row() -> bool:
        served[:] = [visit.goto(dashboard.base + CHANGELIST).text()]
        return visit.page.locator(f"{list_row(WAITS_429)} .why-paused").count() == 1

    wait_for(paused_row, timeout=PAGE_POLL_TIMEOUT, interval=1, what="the pause in the list")
    visit.snap("list-paused")
    row = list_row(WAITS_429)
    assert visit.text(f"{row} .why-paused .pause-instance") == broken.busy_instance
    assert visit.text(f"{row} .why-paused .pause-org") == world.org
    until, relative = _served_pause_end(served[0], WAITS_429)
    assert re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ", until), until
    # Still ahead as the page's own render judged it, from the one clock that rendered the
    # row: never this test's clock against the operator's (nor the browser's, which the
    # page's script uses to keep relative times current).
    assert relative.startswith("in "), relative
    assert "no delivery has been attempted" not in visit.text(row)
    todo = visit.text(f'{row} .remediation[data-for="InstancePaused"]')
    assert f"HikyoInstance {broken.busy_instance} answered 429 for org {world.org}" in todo
    # The overview's instance row and the instance page say the same.
    visit.goto(dashboard.base + OVERVIEW)
    paused = visit.text(f'#instances-table tr[data-instance="{broken.busy_instance}"] td.paused')
    assert paused.startswith(f"org {world.org} until"), paused
    visit.snap("overview-paused")


def _served_pause_end(html: str, name: str) -> tuple[str, str]:
    """The 429 pause's end in ``name``'s list row of the served ``html``: its ISO time and
    the relative form the same render put beside it ("in 4 min")."""
    (row,) = [chunk for chunk in html.split("<tr")[1:] if f">{name}</a>" in chunk]
    found = re.search(
        r'class="pause-until"><time datetime="([^"]+)">[^<]*</time> '
        r'<span class="relative"[^>]*>\(([^)]*)\)</span>',
        row,
    )
    assert found is not None, row
    return found[1], found[2]


def test_a_missing_instance_is_counted_under_its_name(pages, dashboard: Dashboard):
    missing = dashboard.broken.missing_instance
    visit = pages("viewer")
    visit.goto(dashboard.base + OVERVIEW)
    assert visit.text(f'#tally-instances tr[data-group="{missing}"] td.count-total') == "1"
    assert "(missing)" in visit.text(f'#instances-table tr[data-instance="{missing}"]')
    with visit.page.expect_navigation(wait_until="load"):
        visit.page.click(f'#instances-table tr[data-instance="{missing}"] a')
    visit.collect()
    visit.snap("instance-missing")
    assert "missing" in visit.text("#instance-found")
    objects = visit.page.locator("#instance-objects-table tr[data-object]")
    names = objects.evaluate_all("rows => rows.map(r => r.dataset.object)")
    assert names == [f"{dashboard.world.namespace}/{NO_INSTANCE}"]


def test_the_instance_page_shows_the_instance_and_lists_its_crs(pages, dashboard: Dashboard):
    world = dashboard.world
    visit = pages("viewer")
    visit.goto(dashboard.base + CHANGELIST)
    with visit.page.expect_navigation(wait_until="load"):
        visit.page.click(f"{list_row(READY_NAMES[0])} td.field-instance_shown a")
    visit.collect()
    visit.snap("instance")
    assert visit.text("#instance-found") == "yes"
    assert visit.text("#instance-url") == world.devserver.url
    assert visit.text("#instance-ca") == "present"
    assert re.match(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ \(", visit.text("#instance-last-ok"))
    rows = visit.page.locator("#instance-objects-table tr[data-object]")
    states = dict(
        rows.evaluate_all(
            "rows => rows.map(r => [r.dataset.object.split('/')[1], r.dataset.state])"
        )
    )
    on_it = [
        *READY_NAMES,
        *READY_WITH_WARNINGS,
        REFUSED,
        UNDELIVERED,
        REVOKED,
        SERVER_DOWN,
        HANGS,
        *MORE_REFUSED,
    ]
    assert sorted(states) == sorted(on_it)
    assert states[REVOKED] == "blocked" and states[KEYS_MISSING] == "warning"
    # From an object to its namespace and target, and back.
    link = visit.page.get_attribute(
        f'#instance-objects-table tr[data-object="{world.namespace}/{REVOKED}"] td.target a', "href"
    )
    assert link and "target=revoked-env" in link and f"namespace={world.namespace}" in link


def test_the_list_and_the_overview_refresh_themselves(pages, dashboard: Dashboard):
    """Issue 35 item 3: a run shows on an open page without a reload (live.js swaps regions),
    and the admin's action checkboxes still work on the swapped rows."""
    world = dashboard.world
    visit = pages("operator")
    for number, path in enumerate((OVERVIEW, CHANGELIST)):
        visit.goto(dashboard.base + path)
        visit.page.evaluate("window.hikyoNotReloaded = true")
        # A run to show: a forced resync of a healthy object, as kubectl annotate asks it.
        world.custom.patch_namespaced_custom_object(
            GROUP,
            VERSION,
            world.namespace,
            "hikyosecrets",
            READY_NAMES[0],
            {"metadata": {"annotations": {FORCE_SYNC_ANNOTATION: f"live-{number}"}}},
        )
        visit.page.wait_for_function(
            "() => Number(document.getElementById('live').dataset.liveSwaps || '0') >= 1",
            timeout=PAGE_POLL_TIMEOUT * 1000,
            polling=250,
        )
        assert visit.page.evaluate("window.hikyoNotReloaded") is True, path
        visit.collect()
    rows = visit.page.locator("#result_list tbody tr").count()
    visit.page.click("#action-toggle")
    assert visit.text("span.action-counter").startswith(f"{rows} of "), rows
    visit.snap("list-refreshed-and-selected")


@pytest.mark.parametrize("width", [1280, 1920])
def test_the_pages_fit_the_screen(pages, dashboard: Dashboard, width: int):
    """Screenshots at both widths; no page scrolls sideways."""
    visit = pages("admin", width)
    pk = detail_pk(visit, dashboard, REVOKED)
    for label, path in (
        ("overview", OVERVIEW),
        ("list", CHANGELIST),
        ("detail", f"{CHANGELIST}{pk}/change/"),
        ("instance", f"/admin/observations/trackedobject/instances/{dashboard.world.instance}/"),
    ):
        visit.goto(dashboard.base + path)
        visit.snap(f"{label}-{width}")
        # No cell sticks out of the window, and none overflows its own box (clipped text),
        # but for the list's one-line cells, which end in an ellipsis by design.
        sticking_out = visit.page.evaluate(
            """() => [...document.querySelectorAll("#content th, #content td")]
                .filter((cell) => cell.getBoundingClientRect().right
                    > document.documentElement.clientWidth + 0.5
                    || (cell.scrollWidth > cell.clientWidth + 1
                        && getComputedStyle(cell).textOverflow !== "ellipsis"))
                .map((cell) => `${cell.className || "-"} ${cell.scrollWidth}/${cell.clientWidth}: `
                    + cell.textContent.trim().slice(0, 30))"""
        )
        assert sticking_out == [], (label, width, sticking_out)
    # Identical refusals fold into one timeline row (the 401 repeats with backoff).
    visit.goto(f"{dashboard.base}{CHANGELIST}{pk}/change/")
    assert visit.page.locator("#timeline-table tr[data-count]").count() >= 1
    # "View site" leads to the overview.
    assert visit.page.get_attribute("#user-tools a:has-text('View site')", "href") == OVERVIEW


def test_undelivered_secrets_detail_remediation_and_force_resync_to_ready(
    pages, dashboard: Dashboard
):
    world = dashboard.world
    visit = pages("operator")  # a hikyo-operators member, not a superuser
    visit.goto(f"{dashboard.base}{CHANGELIST}?ready=not")
    with visit.page.expect_navigation(wait_until="load"):
        visit.page.click(f"#result_list th.field-name a:text-is('{UNDELIVERED}')")
    visit.collect()
    assert re.search(r"/trackedobject/\d+/change/(\?|$)", visit.page.url), visit.page.url
    visit.snap("detail-undelivered")
    assert "UndeliveredSecrets" in visit.text("#blocking")
    assert visit.text("#ready") != "True"
    remediation = visit.text("#remediation")
    assert "machine-reveal" in remediation and "API_KEY" in remediation, remediation
    kubectl = visit.page.input_value("#kubectl-describe")
    assert kubectl == f"kubectl describe hksec -n {world.namespace} {UNDELIVERED}"
    delivery = visit.text('#conditions-table tr[data-type="Delivery"]')
    assert "UndeliveredSecrets" in delivery

    # The fix on the server: the project's machine-reveal opt-in (the grant has reveal).
    world.devserver.set_machine_reveal(world.org, world.project, True)
    with visit.page.expect_navigation(wait_until="load"):
        visit.page.click("#force-resync")
    visit.collect()
    assert re.search(r"/trackedobject/\d+/change/(\?|$)", visit.page.url), visit.page.url
    visit.snap("force-resync-requested")
    assert "Force resync requested" in visit.text("ul.messagelist")
    value = (world.cr(UNDELIVERED)["metadata"].get("annotations") or {}).get(FORCE_SYNC_ANNOTATION)
    assert value and value in visit.text("ul.messagelist")

    # The page keeps itself current (live.js): no reload from here on, only the DOM changes.
    handled_at_first = "not handled yet" not in visit.text("#timeline-table")
    visit.page.evaluate("window.hikyoNotReloaded = true")
    visit.page.wait_for_function(
        """(value) => {
            const text = (id) => (document.getElementById(id) || {}).textContent || "";
            const rows = (kind) => [...document.querySelectorAll(`#timeline-table tr.${kind}`)];
            return text("ready").trim() === "True"
                && text("lifecycle").trim() === "Synced"
                && text("last-forced-sync").includes(value)
                && rows("timeline-run").some((row) => row.textContent.includes(value))
                && rows("timeline-force-resync").some((row) => row.textContent.includes(value)
                    && !row.textContent.includes("not handled"));
        }""",
        arg=value,
        timeout=READY_AFTER_FORCE_TIMEOUT * 1000,
        polling=250,
    )
    assert visit.page.evaluate("window.hikyoNotReloaded") is True  # the same document
    if not handled_at_first:
        assert int(visit.page.get_attribute("#live", "data-live-swaps") or "0") >= 1
    visit.snap("detail-ready")
    assert visit.text("#blocking") == "-"
    timeline = visit.page.locator("#timeline-table tr.timeline-force-resync").all_inner_texts()
    assert any(value in row and "handled" in row and "not handled" not in row for row in timeline)
    # The cluster agrees: the forced run handled the value and delivered the secret key.
    status = world.status(UNDELIVERED)
    assert status["lastForcedSync"]["value"] == value
    assert world.conditions(UNDELIVERED)["Ready"][0] == "True"
    target = world.target("reveal-env")
    assert target is not None and "API_KEY" in target.data


def test_a_viewer_gets_403_on_force_resync(pages, dashboard: Dashboard):
    world = dashboard.world
    visit = pages("viewer")  # a hikyo-viewers member
    pk = detail_pk(visit, dashboard, REFUSED)
    visit.snap("viewer-overview")
    visit.goto(f"{dashboard.base}{CHANGELIST}{pk}/change/")
    visit.snap("viewer-detail")
    assert visit.text("#summary caption") == f"{world.namespace}/{REFUSED}"
    assert visit.page.locator("#force-resync").count() == 0  # not offered
    status = post_form(visit, f"{CHANGELIST}{pk}/force-resync/", {})
    assert status == 403
    visit.snap("viewer-force-resync-403")

    visit.goto(dashboard.base + CHANGELIST)
    visit.snap("viewer-list")
    assert visit.page.locator("option[value=force_resync]").count() == 0  # no such action
    status = post_form(
        visit, CHANGELIST, {"action": "force_resync", "_selected_action": pk, "index": "0"}
    )
    assert status == 403
    visit.snap("viewer-action-403")
    annotations = world.cr(REFUSED)["metadata"].get("annotations") or {}
    assert FORCE_SYNC_ANNOTATION not in annotations


def test_zz_the_commands_on_the_page_fix_their_breakage(pages, dashboard: Dashboard, tmp_path):
    """Issue 49 item 6: the commands a row's "what to do" shows, pasted into a shell as they
    stand (kubectl on the PATH, the operator's kubeconfig, the minted token file in the working
    directory), fix their breakage: the CR becomes Ready with its next run. Last in the module:
    it repairs two of the world's breakages."""
    world = dashboard.world
    (tmp_path / "hikyo-token").write_text(
        world.token + "\n"
    )  # what `hikyo sa credential mint` wrote
    kubectl = locate_binaries().kubectl
    env = {
        **os_env(),
        "PATH": f"{kubectl.parent}:{os_env().get('PATH', '')}",
        "KUBECONFIG": dashboard.operator.env["KUBECONFIG"],
    }
    visit = pages("operator")
    for name in (UNACKNOWLEDGED, REFUSED):
        visit.goto(f"{dashboard.base}{CHANGELIST}?ready=not")
        row = list_row(name)
        visit.page.click(f"{row} details.why-row summary")
        commands = visit.page.locator(f"{row} .todo code.command").all_text_contents()
        assert commands, name
        for command in commands:
            done = subprocess.run(
                ["bash", "-c", command],
                cwd=tmp_path,
                env=env,
                capture_output=True,
                text=True,
                timeout=60,
            )
            assert done.returncode == 0, (name, command, done.stderr[-500:])
        wait_for(
            lambda name=name: world.conditions(name)["Ready"][0] == "True",
            timeout=PAGE_POLL_TIMEOUT,
            interval=1,
            what=f"{name} Ready after its remediation's commands",
        )
