#!/usr/bin/env bash
# Builds promtool (Prometheus $PROMETHEUS_VERSION of tools/versions.env, cmd/promtool) from the
# Go module proxy into the dev cache, like tools/build-helm.sh, and prints the promtool
# binary's path on the last line of stdout. tests/chart/test_prometheus_rules.py runs it
# (`promtool check rules`, `promtool test rules`).
#
#   tools/build-promtool.sh                    build (or reuse the cache)
#   PROMTOOL=/path/to/promtool tools/...       use an installed promtool, build nothing
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
# shellcheck source=tools/versions.env
source "$here/versions.env"

fail() { echo "build-promtool: $*" >&2; exit 1; }
hint="or set PROMTOOL to an installed promtool binary and skip the build"

if [[ -n "${PROMTOOL:-}" ]]; then
  [[ -x "$PROMTOOL" ]] || fail "PROMTOOL=$PROMTOOL is not an executable file"
  echo "using the promtool binary PROMTOOL names" >&2
  echo "$PROMTOOL"
  exit 0
fi

# shellcheck source=tools/go-build.sh
source "$here/go-build.sh"
require_go
BIN="$DEVCACHE/bin/promtool-$PROMETHEUS_VERSION"
mkdir -p "$BIN"
# The Go module's version (v0.316.0) is Prometheus 3.16.0; promtool prints it with --version.
ldflags="-s -w -X github.com/prometheus/common/version.Version=$PROMETHEUS_VERSION"

stamp=$( { cat "$here/promtool/go.mod" "$here/promtool/go.sum"; echo "$ldflags"; go version; } | sha256sum | cut -d' ' -f1)
if [[ -f "$BIN/.stamp" && "$(cat "$BIN/.stamp")" == "$stamp" && -x "$BIN/promtool" ]]; then
  echo "promtool $PROMETHEUS_VERSION is current in $BIN" >&2
  echo "$BIN/promtool"
  exit 0
fi

probe_proxy "$here/promtool" github.com/prometheus/prometheus
rm -f "$BIN/.stamp"
build "promtool $PROMETHEUS_VERSION" promtool "$here/promtool" "$BIN/promtool" "$ldflags" \
  github.com/prometheus/prometheus/cmd/promtool

"$BIN/promtool" --version >/dev/null 2>&1 || fail "the built promtool does not run"
echo "$stamp" >"$BIN/.stamp"
echo "$BIN/promtool"
