#!/usr/bin/env bash
# Builds CoreDNS ($COREDNS_VERSION of tools/versions.env) from the Go module proxy into the dev
# cache, like tools/build-helm.sh, and prints the coredns binary's path on the last line of
# stdout. tools/coredns/main.go compiles in only the plugins a local cluster's DNS needs
# (kubernetes, forward, cache, health, ready, ...), not CoreDNS's cloud backends.
#
#   tools/build-coredns.sh                      build (or reuse the cache)
#   COREDNS=/path/to/coredns tools/...          use a built coredns, build nothing
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
# shellcheck source=tools/versions.env
source "$here/versions.env"

fail() { echo "build-coredns: $*" >&2; exit 1; }
hint="or set COREDNS to a built coredns binary and skip the build"

if [[ -n "${COREDNS:-}" ]]; then
  [[ -x "$COREDNS" ]] || fail "COREDNS=$COREDNS is not an executable file"
  echo "using the coredns binary COREDNS names" >&2
  echo "$COREDNS"
  exit 0
fi

# versions.env names the version; go.mod is what the build uses: they must agree.
grep -Eq "^(require )?[[:space:]]*github.com/coredns/coredns ${COREDNS_VERSION//./[.]}\$" \
  "$here/coredns/go.mod" ||
  fail "tools/coredns/go.mod does not require github.com/coredns/coredns $COREDNS_VERSION (tools/versions.env)"

# shellcheck source=tools/go-build.sh
source "$here/go-build.sh"
require_go
BIN="$DEVCACHE/bin/coredns-$COREDNS_VERSION"
mkdir -p "$BIN"
ldflags="-s -w"

# main.go (the plugin list) is the project's own source, so it is part of the stamp too.
stamp=$( { cat "$here/coredns/go.mod" "$here/coredns/go.sum" "$here/coredns/main.go"; echo "$ldflags"; go version; } | sha256sum | cut -d' ' -f1)
if [[ -f "$BIN/.stamp" && "$(cat "$BIN/.stamp")" == "$stamp" && -x "$BIN/coredns" ]]; then
  echo "coredns $COREDNS_VERSION is current in $BIN" >&2
  echo "$BIN/coredns"
  exit 0
fi

probe_proxy "$here/coredns" github.com/coredns/coredns
rm -f "$BIN/.stamp"
build "coredns $COREDNS_VERSION" coredns "$here/coredns" "$BIN/coredns" "$ldflags" .

# The built binary must be the pinned release and hold the kubernetes plugin.
got=$("$BIN/coredns" -version 2>&1) || fail "the built coredns does not run: $got"
got=${got%%$'\n'*}
[[ "$got" == "CoreDNS-${COREDNS_VERSION#v}" ]] || fail "coredns reports '$got', expected 'CoreDNS-${COREDNS_VERSION#v}'"
plugins=$("$BIN/coredns" -plugins 2>&1) || fail "the built coredns does not list its plugins"
[[ $'\n'"$plugins"$'\n' == *$'\n'kubernetes$'\n'* ]] || fail "the built coredns lacks the kubernetes plugin"
echo "$stamp" >"$BIN/.stamp"
echo "$BIN/coredns"
