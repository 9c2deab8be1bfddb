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

progress_every=${HIKYO_BUILD_PROGRESS_SECONDS:-20}
[[ "$progress_every" =~ ^[0-9]+([.][0-9]+)?$ ]] ||
  fail "HIKYO_BUILD_PROGRESS_SECONDS=$progress_every is not a number of seconds"

took() {  # took <t0>: elapsed since t0 as people read it ("45 s", "5 min 20 s")
  local s=$((SECONDS - $1))
  if ((s < 60)); then echo "$s s"; else echo "$((s / 60)) min $((s % 60)) s"; fi
}

compiled=0
count_compiled() {  # count_compiled <log>: sets $compiled to the package lines `go build -v` wrote
  # Plain bash over the file, no pipeline: nothing here can SIGPIPE under pipefail.
  # Import paths have no spaces; go's own notes ("go: downloading ...") and errors do.
  local line n=0
  if [[ -f "$1" ]]; then
    while IFS= read -r line || [[ -n "$line" ]]; do
      if [[ -n "$line" && "$line" != *" "* ]]; then n=$((n + 1)); fi
    done <"$1"
  fi
  compiled=$n
}

# The ticker is a background subshell; every exit path (success, fail, set -e, INT,
# TERM) stops and reaps it, so no stray process outlives the script.
ticker_pid=
stop_ticker() {
  [[ -n "$ticker_pid" ]] || return 0
  kill "$ticker_pid" 2>/dev/null || true
  wait "$ticker_pid" 2>/dev/null || true
  ticker_pid=
}
trap 'rc=$?; stop_ticker; exit "$rc"' EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

start_ticker() {  # start_ticker <label> <t0> <log or ""> <total or "">: a line every $progress_every s
  if [[ "$progress_every" =~ ^0*([.]0*)?$ ]]; then return 0; fi
  local label=$1 t0=$2 log=$3 total=$4 parent=$$
  (
    set +e  # a failed report must not end the ticker early; it only ever writes stderr
    # jobs -p, not a saved $!: TERM may land between starting the sleep and saving its pid.
    # Waiting for the sleep means that once the ticker is reaped, nothing of it is left.
    trap 'kill $(jobs -p) 2>/dev/null; wait; exit 0' TERM
    while :; do
      # Sleep in the background and wait on it, so TERM interrupts at once and the
      # trap ends the sleep instead of orphaning it.
      sleep "$progress_every" &
      wait $!
      kill -0 "$parent" 2>/dev/null || exit 0  # the script was SIGKILLed: do not linger
      if [[ -z "$log" ]]; then
        echo "building $label: downloading modules and listing packages, $(took "$t0") elapsed" >&2
      else
        count_compiled "$log"
        echo "building $label: $compiled${total:+ of $total} packages compiled, $(took "$t0") elapsed" >&2
      fi
    done
  ) &
  ticker_pid=$!
}

build() {  # build <label> <log name> <module dir> <-o target> <ldflags> <packages...>
  local label=$1 name=$2 dir=$3 out=$4 flags=$5; shift 5
  local log="$DEVCACHE/build-$name.log" t0=$SECONDS total=
  echo "building $label from tools/$(basename "$dir") (a cold build takes minutes)..." >&2
  : >"$log"
  # The package total comes from `go list -deps` (std included, as `go build -v` lists
  # them); on a cold cache this step downloads the modules, so it gets a ticker too.
  start_ticker "$label" "$t0" "" ""
  if (cd "$dir" && go list -deps "$@") >"$log.deps" 2>>"$log"; then
    local line n=0
    while IFS= read -r line; do n=$((n + 1)); done <"$log.deps"
    total=$n
  fi  # no total is fine: the build below reports the real error, if any
  stop_ticker
  start_ticker "$label" "$t0" "$log" "$total"
  if ! (cd "$dir" && go build -p 2 -trimpath -v -ldflags "$flags" -o "$out" "$@") >>"$log" 2>&1; then
    stop_ticker
    tail -n 20 "$log" >&2
    fail "go build of $label in tools/$(basename "$dir") failed (full log: $log); $hint"
  fi
  stop_ticker
  count_compiled "$log"
  echo "built $label in $(took "$t0") ($compiled${total:+ of $total} packages compiled)" >&2
}

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
