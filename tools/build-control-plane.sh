#!/usr/bin/env bash
# Builds the local control plane (kube-apiserver, kube-controller-manager,
# kubectl, etcd, etcdctl) from the Go module proxy into a cache directory
# outside the repo, and prints that directory on the last line of stdout.
#
#   tools/build-control-plane.sh            build (or reuse the cache)
#   KUBEBUILDER_ASSETS=/dir tools/...       use prebuilt binaries, build nothing
#
# A stamp file (hash of the wrapper go.mod/go.sum, ldflags and `go version`)
# makes a warm run a no-op.
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
# shellcheck source=tools/versions.env
source "$here/versions.env"

need_bins=(kube-apiserver kube-controller-manager kubectl etcd)

fail() { echo "build-control-plane: $*" >&2; exit 1; }
hint="or set KUBEBUILDER_ASSETS to a directory holding prebuilt ${need_bins[*]} and skip the build"

if [[ -n "${KUBEBUILDER_ASSETS:-}" ]]; then
  for b in "${need_bins[@]}"; do
    [[ -x "$KUBEBUILDER_ASSETS/$b" ]] || fail "KUBEBUILDER_ASSETS=$KUBEBUILDER_ASSETS has no executable $b"
  done
  echo "using prebuilt binaries from KUBEBUILDER_ASSETS" >&2
  echo "$KUBEBUILDER_ASSETS"
  exit 0
fi

command -v go >/dev/null 2>&1 || fail "no Go toolchain on PATH (need go >= 1.26); install Go, $hint"

DEVCACHE="${HIKYO_DEV_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/hikyo-dev}"
export GOMODCACHE="$DEVCACHE/go/mod" GOCACHE="$DEVCACHE/go/build"
export GOFLAGS=-modcacherw GOTOOLCHAIN=local CGO_ENABLED=0
BIN="$DEVCACHE/bin/k8s-$K8S_VERSION-etcd-$ETCD_VERSION"
mkdir -p "$BIN"

minor=$(echo "$K8S_VERSION" | cut -d. -f2)
ldflags="-s -w"
for p in k8s.io/component-base/version k8s.io/client-go/pkg/version; do
  ldflags="$ldflags -X $p.gitVersion=$K8S_VERSION -X $p.gitMajor=1 -X $p.gitMinor=$minor -X $p.gitTreeState=clean"
done

stamp=$( { cat "$here/k8s/go.mod" "$here/k8s/go.sum" "$here/etcd/go.mod" "$here/etcd/go.sum";
           echo "$ldflags"; go version; } | sha256sum | cut -d' ' -f1)
all_present() { for b in "${need_bins[@]}"; do [[ -x "$BIN/$b" ]] || return 1; done; }
if [[ -f "$BIN/.stamp" && "$(cat "$BIN/.stamp")" == "$stamp" ]] && all_present; then
  echo "control plane binaries are current in $BIN" >&2
  echo "$BIN"
  exit 0
fi

go_version=$(go env GOVERSION)
case "$go_version" in
  go1.2[6-9]*|go1.[3-9]*) ;;
  *) fail "Go $go_version is too old (need go >= 1.26); $hint" ;;
esac

# One cheap request first, so an unreachable proxy is one clear line, not a wall of errors.
if ! (cd "$here/etcd" && go mod download -x go.etcd.io/etcd/server/v3 >/dev/null 2>"$DEVCACHE/probe.log"); then
  fail "cannot download Go modules (GOPROXY=$(go env GOPROXY)): $(tail -n 1 "$DEVCACHE/probe.log"); $hint"
fi

build() {  # build <module dir> <go build args...>
  local dir=$1; shift
  local log="$DEVCACHE/build-$(basename "$dir").log"
  local t0=$SECONDS
  if ! (cd "$dir" && go build -p 2 -trimpath "$@") >"$log" 2>&1; then
    tail -n 20 "$log" >&2
    fail "go build in tools/$(basename "$dir") failed (full log: $log); $hint"
  fi
  echo "built tools/$(basename "$dir") in $((SECONDS - t0)) s" >&2
}

rm -f "$BIN/.stamp"
build "$here/etcd" -ldflags "-s -w" -o "$BIN/etcd" go.etcd.io/etcd/server/v3
build "$here/etcd" -ldflags "-s -w" -o "$BIN/etcdctl" go.etcd.io/etcd/etcdctl/v3
build "$here/k8s" -ldflags "$ldflags" -o "$BIN/" \
  k8s.io/kubernetes/cmd/kube-apiserver k8s.io/kubernetes/cmd/kube-controller-manager k8s.io/kubernetes/cmd/kubectl

got=$("$BIN/kube-apiserver" --version)
[[ "$got" == "Kubernetes $K8S_VERSION" ]] || fail "kube-apiserver reports '$got', expected 'Kubernetes $K8S_VERSION'"
"$BIN/etcd" --version | grep -q "etcd Version: ${ETCD_VERSION#v}" || fail "etcd does not report ${ETCD_VERSION}"
echo "$stamp" >"$BIN/.stamp"
echo "$got; etcd ${ETCD_VERSION}" >&2
echo "$BIN"
