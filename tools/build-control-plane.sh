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
#
# A cold build takes many minutes, so it reports on stderr which component is
# building and how far along it is (packages compiled of the total, elapsed
# time) every HIKYO_BUILD_PROGRESS_SECONDS (default 20; 0 turns the ticker off).
# stdout carries only the binaries directory, on its last line.
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

source "$here/go-build.sh"
require_go
BIN="$DEVCACHE/bin/k8s-$K8S_VERSION-etcd-$ETCD_VERSION"
mkdir -p "$BIN"

ldflags=$(k8s_ldflags)

stamp=$( { cat "$here/k8s/go.mod" "$here/k8s/go.sum" "$here/etcd/go.mod" "$here/etcd/go.sum";
           echo "$ldflags"; go version; } | sha256sum | cut -d' ' -f1)
all_present() { for b in "${need_bins[@]}"; do [[ -x "$BIN/$b" ]] || return 1; done; }
if [[ -f "$BIN/.stamp" && "$(cat "$BIN/.stamp")" == "$stamp" ]] && all_present; then
  echo "control plane binaries are current in $BIN" >&2
  echo "$BIN"
  exit 0
fi

probe_proxy "$here/etcd" go.etcd.io/etcd/server/v3

rm -f "$BIN/.stamp"
build etcd etcd "$here/etcd" "$BIN/etcd" "-s -w" go.etcd.io/etcd/server/v3
build etcdctl etcdctl "$here/etcd" "$BIN/etcdctl" "-s -w" go.etcd.io/etcd/etcdctl/v3
build "kube-apiserver, kube-controller-manager, kubectl" k8s "$here/k8s" "$BIN/" "$ldflags" \
  k8s.io/kubernetes/cmd/kube-apiserver k8s.io/kubernetes/cmd/kube-controller-manager k8s.io/kubernetes/cmd/kubectl

got=$("$BIN/kube-apiserver" --version)
[[ "$got" == "Kubernetes $K8S_VERSION" ]] || fail "kube-apiserver reports '$got', expected 'Kubernetes $K8S_VERSION'"
# Captured, not piped into grep -q: under pipefail an early-exiting reader SIGPIPEs etcd.
etcd_says=$("$BIN/etcd" --version)
[[ "$etcd_says" == *"etcd Version: ${ETCD_VERSION#v}"* ]] || fail "etcd does not report ${ETCD_VERSION}"
echo "$stamp" >"$BIN/.stamp"
echo "$got; etcd ${ETCD_VERSION}" >&2
echo "$BIN"
