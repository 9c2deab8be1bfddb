#!/usr/bin/env bash
# Prints the promtool that tests/chart/test_prometheus_rules.py runs (`promtool check rules`,
# `promtool test rules`) on the last line of stdout: PROMTOOL when set, else Debian's
# /usr/bin/promtool from the `prometheus` package, installed with apt-get (as root or through
# sudo) when missing. Debian's promtool (2.42 on bookworm) gives the chart's rules and their unit
# tests the same verdicts as the Prometheus 3.16 promtool this repo used to build from the Go
# module proxy (docs/development.md), and installs in seconds instead of a 37-minute build.
#
#   tools/install-promtool.sh                       install (or reuse) Debian's promtool
#   PROMTOOL=/path/to/promtool tools/...            use that promtool, install nothing
#   HIKYO_SKIP_SETUP=1 tools/...                    never install: a missing promtool fails
set -euo pipefail

fail() { echo "install-promtool: $*" >&2; exit 1; }
DEBIAN_PROMTOOL=/usr/bin/promtool
hint="install Debian's prometheus package (apt-get install --no-install-recommends prometheus) or set PROMTOOL to a promtool binary"

if [[ -n "${PROMTOOL:-}" ]]; then
  [[ -x "$PROMTOOL" ]] || fail "PROMTOOL=$PROMTOOL is not an executable file"
  echo "using the promtool binary PROMTOOL names" >&2
  echo "$PROMTOOL"
  exit 0
fi

# The package enables a Prometheus server (:9090) beside promtool; the tests need only promtool,
# so the server we just installed is stopped and not started at boot.
stop_the_server() {
  if [[ -d /run/systemd/system ]]; then
    "${SUDO[@]}" systemctl disable --now --quiet prometheus.service
  elif [[ -x /etc/init.d/prometheus ]]; then
    "${SUDO[@]}" update-rc.d prometheus disable >/dev/null
    "${SUDO[@]}" /etc/init.d/prometheus stop >/dev/null  # --oknodo: 0 when it never started
  fi
}

if [[ ! -x "$DEBIAN_PROMTOOL" ]]; then
  [[ "${HIKYO_SKIP_SETUP:-}" != "1" ]] || fail "no promtool and HIKYO_SKIP_SETUP=1: $hint"
  command -v apt-get >/dev/null 2>&1 || fail "no apt-get: $hint"
  if [[ "$(id -u)" == 0 ]]; then SUDO=(); elif command -v sudo >/dev/null 2>&1; then SUDO=(sudo); else
    fail "not root and no sudo: $hint"
  fi
  echo "installing prometheus (apt-get, for promtool)" >&2
  "${SUDO[@]}" apt-get update -qq
  # No recommends: they would add prometheus-node-exporter, another server, and its collectors.
  DEBIAN_FRONTEND=noninteractive "${SUDO[@]}" apt-get install -y -qq --no-install-recommends \
    prometheus >/dev/null
  stop_the_server
fi

"$DEBIAN_PROMTOOL" --version >/dev/null 2>&1 || fail "$DEBIAN_PROMTOOL does not run: $hint"
echo "$DEBIAN_PROMTOOL"
