#!/usr/bin/env bash
# Builds External Secrets Operator ($ESO_VERSION of tools/versions.env) from the Go module
# proxy into the dev cache, like tools/build-helm.sh, and prints the binary's path on the
# last line of stdout. Its CRDs (config/crds/bases of the same module) are copied to
# crds/ beside the binary, so the bench and its test install the ones of the built version.
#
#   tools/build-eso.sh                          build (or reuse the cache)
#   ESO=/path/to/external-secrets tools/...     use a prebuilt binary, build nothing
#                                               (ESO_CRDS names its CRD directory)
#
# ESO's controller is its module's root package (main.go -> cmd/controller, cobra, the
# controller is the default command). v0.16.2 has no build tags per provider, so every
# provider SDK (AWS, Azure, GCP, ...) is compiled: a cold build is the heaviest of the
# tools here. Progress goes to stderr every HIKYO_BUILD_PROGRESS_SECONDS (default 20).
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
# shellcheck source=tools/versions.env
source "$here/versions.env"

fail() { echo "build-eso: $*" >&2; exit 1; }
hint="or set ESO to a prebuilt external-secrets binary (and ESO_CRDS to its CRD directory) and skip the build"
module=github.com/external-secrets/external-secrets

if [[ -n "${ESO:-}" ]]; then
  [[ -x "$ESO" ]] || fail "ESO=$ESO is not an executable file"
  crds=${ESO_CRDS:-$(dirname "$ESO")/crds}
  [[ -f "$crds/external-secrets.io_externalsecrets.yaml" ]] ||
    fail "no external-secrets.io_externalsecrets.yaml in $crds (set ESO_CRDS to ESO's config/crds/bases)"
  echo "using the external-secrets binary ESO names" >&2
  echo "$ESO"
  exit 0
fi

# shellcheck source=tools/go-build.sh
source "$here/go-build.sh"
require_go
BIN="$DEVCACHE/bin/eso-$ESO_VERSION"
mkdir -p "$BIN"

got_version=$(while read -r m v _; do
  if [[ "$m" == "$module" ]]; then echo "$v"; fi; done <"$here/eso/go.mod")
[[ "$got_version" == "$ESO_VERSION" ]] ||
  fail "tools/eso/go.mod requires $module ${got_version:-nothing}, versions.env says $ESO_VERSION; run: cd tools/eso && go get $module@$ESO_VERSION"

ldflags="-s -w"
stamp=$( { cat "$here/eso/go.mod" "$here/eso/go.sum"; echo "$ldflags"; go version; } | sha256sum | cut -d' ' -f1)
if [[ -f "$BIN/.stamp" && "$(cat "$BIN/.stamp")" == "$stamp" && -x "$BIN/external-secrets" ]]; then
  echo "external-secrets $ESO_VERSION is current in $BIN" >&2
  echo "$BIN/external-secrets"
  exit 0
fi

probe_proxy "$here/eso" "$module"
rm -f "$BIN/.stamp"
build "external-secrets $ESO_VERSION" eso "$here/eso" "$BIN/external-secrets" "$ldflags" "$module"

src=$(cd "$here/eso" && go list -m -f '{{.Dir}}' "$module")
[[ -d "$src/config/crds/bases" ]] || fail "no config/crds/bases in $src"
rm -rf "$BIN/crds"
mkdir -p "$BIN/crds"
cp "$src"/config/crds/bases/*.yaml "$BIN/crds/"
chmod -R u+w "$BIN/crds"
"$BIN/external-secrets" --help >/dev/null 2>&1 || fail "$BIN/external-secrets --help failed"
echo "$stamp" >"$BIN/.stamp"
echo "$BIN/external-secrets"
