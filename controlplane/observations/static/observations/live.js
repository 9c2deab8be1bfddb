// Live dashboard pages (issue 35 item 3). The page names a JSON view that answers a stamp of
// what the page shows (#live: data-live-url, data-live-stamp, data-live-regions). Every few
// seconds the stamp is asked for (304 while it holds); when it moved, the page is fetched
// again and each region (an element id) is swapped for its new copy: no full reload, no
// framework. The relative times beside ISO ones ("(12 s ago)") are kept current in between.
(function () {
  "use strict";
  const live = document.getElementById("live");
  const UNITS = [[86400, "d"], [3600, "h"], [60, "min"], [1, "s"]];

  function relative(iso) {
    const seconds = Math.round((Date.now() - Date.parse(iso)) / 1000);
    if (seconds === 0) return "now";
    const span = Math.abs(seconds);
    for (const [size, unit] of UNITS) {
      if (span >= size) {
        const amount = Math.floor(span / size) + " " + unit;
        return seconds > 0 ? amount + " ago" : "in " + amount;
      }
    }
    return "now";
  }

  function refreshRelative() {
    document.querySelectorAll("[data-relative-to]").forEach(function (element) {
      const shown = relative(element.dataset.relativeTo);
      element.textContent = element.dataset.relativeBare ? shown : "(" + shown + ")";
    });
  }

  // Not under a user choosing rows for an action, reading an opened row or typing a search.
  function busyUser() {
    if (document.querySelector("#result_list input.action-select:checked")) return true;
    if (document.querySelector("#result_list details[open]")) return true;
    const active = document.activeElement;
    return Boolean(active && active.matches("input[type=text], input[type=search], select"));
  }

  async function swap(regions) {
    const response = await fetch(window.location.href, {credentials: "same-origin"});
    if (!response.ok) return false;
    const fresh = new DOMParser().parseFromString(await response.text(), "text/html");
    for (const id of regions) {
      const now = document.getElementById(id);
      const next = fresh.getElementById(id);
      if (now && next) now.replaceWith(document.importNode(next, true));
    }
    // The admin's action checkboxes are bound when a page loads: bind the new rows too.
    const rows = document.querySelectorAll("#result_list tr input.action-select");
    if (rows.length > 0 && typeof window.Actions === "function") window.Actions(rows);
    return true;
  }

  async function poll(state) {
    if (state.running) return;
    state.running = true;
    try {
      // The stamp this page shows as an ETag: the view answers 304 (no body) until it moves.
      const response = await fetch(live.dataset.liveUrl, {
        credentials: "same-origin",
        headers: {Accept: "application/json", "If-None-Match": '"' + state.stamp + '"'},
      });
      if (!response.ok) return;  // 304: unchanged; an error: ask again at the next tick
      const answer = await response.json();
      if (answer.stamp !== state.stamp && !busyUser() && (await swap(state.regions))) {
        state.stamp = answer.stamp;
        live.dataset.liveStamp = answer.stamp;
        live.dataset.liveSwaps = String(Number(live.dataset.liveSwaps || "0") + 1);
      }
    } catch (error) {
      // The operator restarting or the network gone: ask again at the next tick.
    } finally {
      state.running = false;
    }
  }

  // A remediation's command, copied as it stands: the clipboard API where the page is a secure
  // context (https, localhost), else a selection and the older copy command.
  async function copyCommand(button) {
    const code = button.previousElementSibling;
    if (!code) return;
    const text = code.textContent;
    try {
      await navigator.clipboard.writeText(text);
    } catch (error) {
      const range = document.createRange();
      range.selectNodeContents(code);
      const selection = window.getSelection();
      selection.removeAllRanges();
      selection.addRange(range);
      document.execCommand("copy");
    }
    button.classList.add("copied");
    setTimeout(function () { button.classList.remove("copied"); }, 2000);
  }

  document.addEventListener("click", function (event) {
    const button = event.target.closest && event.target.closest("button.copy");
    if (button) copyCommand(button);
  });

  setInterval(refreshRelative, 5000);
  if (!live) return;
  const state = {
    stamp: live.dataset.liveStamp,
    regions: (live.dataset.liveRegions || "").split(/\s+/).filter(Boolean),
    running: false,
  };
  setInterval(function () { poll(state); }, Number(live.dataset.livePoll || "2000"));
})();
