#!/usr/bin/env bash
# Builds the node's binaries (kubelet, kube-scheduler, kube-proxy) from the same Kubernetes
# module as the control plane (tools/k8s-node pins it like tools/k8s) into the dev cache, and
# prints that directory on the last line of stdout. `python -m localcluster up --node` runs
# them beside the control plane (docs/development.md, "A node").
#
#   tools/build-node.sh                 build (or reuse the cache)
#   HIKYO_NODE_BIN=/dir tools/...       use prebuilt binaries, build nothing
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
# shellcheck source=tools/versions.env
source "$here/versions.env"

need_bins=(kubelet kube-scheduler kube-proxy)

fail() { echo "build-node: $*" >&2; exit 1; }
hint="or set HIKYO_NODE_BIN to a directory holding prebuilt ${need_bins[*]} and skip the build"

if [[ -n "${HIKYO_NODE_BIN:-}" ]]; then
  for b in "${need_bins[@]}"; do
    [[ -x "$HIKYO_NODE_BIN/$b" ]] || fail "HIKYO_NODE_BIN=$HIKYO_NODE_BIN has no executable $b"
  done
  echo "using prebuilt node binaries from HIKYO_NODE_BIN" >&2
  echo "$HIKYO_NODE_BIN"
  exit 0
fi

# shellcheck source=tools/go-build.sh
source "$here/go-build.sh"
require_go
BIN="$DEVCACHE/bin/k8s-node-$K8S_VERSION"
mkdir -p "$BIN"

ldflags=$(k8s_ldflags)

stamp=$( { cat "$here/k8s-node/go.mod" "$here/k8s-node/go.sum"; echo "$ldflags"; go version; } \
  | sha256sum | cut -d' ' -f1)
all_present() { for b in "${need_bins[@]}"; do [[ -x "$BIN/$b" ]] || return 1; done; }
if [[ -f "$BIN/.stamp" && "$(cat "$BIN/.stamp")" == "$stamp" ]] && all_present; then
  echo "node binaries are current in $BIN" >&2
  echo "$BIN"
  exit 0
fi

rm -f "$BIN/.stamp"
build "kubelet, kube-scheduler, kube-proxy" k8s-node "$here/k8s-node" "$BIN/" "$ldflags" \
  k8s.io/kubernetes/cmd/kubelet k8s.io/kubernetes/cmd/kube-scheduler k8s.io/kubernetes/cmd/kube-proxy

got=$("$BIN/kubelet" --version)
[[ "$got" == "Kubernetes $K8S_VERSION" ]] || fail "kubelet reports '$got', expected 'Kubernetes $K8S_VERSION'"
echo "$stamp" >"$BIN/.stamp"
echo "$got (kubelet, kube-scheduler, kube-proxy)" >&2
echo "$BIN"
