#!/usr/bin/env bash
# Builds tools/dotenv-reader (Docker Compose's .env reader: compose-go $COMPOSE_GO_VERSION of
# tools/versions.env, package dotenv) from the Go module proxy into the dev cache, like
# tools/build-helm.sh, and prints the binary's path on the last line of stdout. The S11.3
# dotenv tests (tests/unit/test_file_formats.py) read the operator's files back with it.
#
#   tools/build-dotenv-reader.sh                        build (or reuse the cache)
#   DOTENV_READER=/path/to/dotenv-reader tools/...      use a built reader, build nothing
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
# shellcheck source=tools/versions.env
source "$here/versions.env"

fail() { echo "build-dotenv-reader: $*" >&2; exit 1; }
hint="or set DOTENV_READER to a built dotenv-reader binary and skip the build"

if [[ -n "${DOTENV_READER:-}" ]]; then
  [[ -x "$DOTENV_READER" ]] || fail "DOTENV_READER=$DOTENV_READER is not an executable file"
  echo "using the dotenv-reader binary DOTENV_READER names" >&2
  echo "$DOTENV_READER"
  exit 0
fi

# versions.env names the version; go.mod is what the build uses: they must agree.
grep -Eq "^(require )?[[:space:]]*github.com/compose-spec/compose-go/v2 ${COMPOSE_GO_VERSION//./[.]}\$" \
  "$here/dotenv-reader/go.mod" ||
  fail "tools/dotenv-reader/go.mod does not require compose-go $COMPOSE_GO_VERSION (tools/versions.env)"

# shellcheck source=tools/go-build.sh
source "$here/go-build.sh"
require_go
BIN="$DEVCACHE/bin/dotenv-reader-$COMPOSE_GO_VERSION"
mkdir -p "$BIN"
ldflags="-s -w"

# main.go is the project's own source, so it is part of the stamp too.
stamp=$( { cat "$here/dotenv-reader/go.mod" "$here/dotenv-reader/go.sum" "$here/dotenv-reader/main.go"; echo "$ldflags"; go version; } | sha256sum | cut -d' ' -f1)
if [[ -f "$BIN/.stamp" && "$(cat "$BIN/.stamp")" == "$stamp" && -x "$BIN/dotenv-reader" ]]; then
  echo "dotenv-reader (compose-go $COMPOSE_GO_VERSION) is current in $BIN" >&2
  echo "$BIN/dotenv-reader"
  exit 0
fi

probe_proxy "$here/dotenv-reader" github.com/compose-spec/compose-go/v2
rm -f "$BIN/.stamp"
build "dotenv-reader (compose-go $COMPOSE_GO_VERSION)" dotenv-reader "$here/dotenv-reader" \
  "$BIN/dotenv-reader" "$ldflags" .

# A smoke read: an empty file reads as an empty map.
empty="$BIN/.smoke.env"
: >"$empty"
[[ "$("$BIN/dotenv-reader" "$empty")" == '{"values":{}}' ]] || fail "the built dotenv-reader does not run"
rm -f "$empty"
echo "$stamp" >"$BIN/.stamp"
echo "$BIN/dotenv-reader"
