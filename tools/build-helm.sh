#!/usr/bin/env bash
# Builds Helm ($HELM_VERSION of tools/versions.env) from the Go module proxy into the dev
# cache, like tools/build-control-plane.sh, and prints the helm binary's path on the last
# line of stdout.
#
#   tools/build-helm.sh                build (or reuse the cache)
#   HELM=/path/to/helm tools/...       use an installed helm, build nothing
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
# shellcheck source=tools/versions.env
source "$here/versions.env"

fail() { echo "build-helm: $*" >&2; exit 1; }
hint="or set HELM to an installed helm binary and skip the build"

if [[ -n "${HELM:-}" ]]; then
  [[ -x "$HELM" ]] || fail "HELM=$HELM is not an executable file"
  echo "using the helm binary HELM names" >&2
  echo "$HELM"
  exit 0
fi

# shellcheck source=tools/go-build.sh
source "$here/go-build.sh"
require_go
BIN="$DEVCACHE/bin/helm-$HELM_VERSION"
mkdir -p "$BIN"
# As Helm's Makefile does: the Kubernetes version `helm template` and `helm lint` assume is the
# one of its client-go (v0.37.x is Kubernetes 1.37), not the fallback 1.20.
client_go=$(while read -r module version _; do
  if [[ "$module" == k8s.io/client-go ]]; then echo "$version"; fi; done <"$here/helm/go.mod")
[[ "$client_go" =~ ^v0\.([0-9]+)\. ]] || fail "tools/helm/go.mod names no k8s.io/client-go v0.N version"
k8s_minor=${BASH_REMATCH[1]}
ldflags="-s -w -X helm.sh/helm/v3/internal/version.version=$HELM_VERSION -X helm.sh/helm/v3/internal/version.gitTreeState=clean"
for p in helm.sh/helm/v3/pkg/lint/rules helm.sh/helm/v3/pkg/chartutil; do
  ldflags="$ldflags -X $p.k8sVersionMajor=1 -X $p.k8sVersionMinor=$k8s_minor"
done

stamp=$( { cat "$here/helm/go.mod" "$here/helm/go.sum"; echo "$ldflags"; go version; } | sha256sum | cut -d' ' -f1)
if [[ -f "$BIN/.stamp" && "$(cat "$BIN/.stamp")" == "$stamp" && -x "$BIN/helm" ]]; then
  echo "helm $HELM_VERSION is current in $BIN" >&2
  echo "$BIN/helm"
  exit 0
fi

probe_proxy "$here/helm" helm.sh/helm/v3
rm -f "$BIN/.stamp"
build "helm $HELM_VERSION" helm "$here/helm" "$BIN/helm" "$ldflags" helm.sh/helm/v3/cmd/helm

got=$("$BIN/helm" version --template '{{.Version}}')
[[ "$got" == "$HELM_VERSION" ]] || fail "helm reports '$got', expected '$HELM_VERSION'"
echo "$stamp" >"$BIN/.stamp"
echo "$BIN/helm"
