# Shared by the scripts that build Go tools from the Go module proxy into the dev cache
# (tools/build-control-plane.sh, tools/build-helm.sh, tools/build-dotenv-reader.sh, tools/build-eso.sh). Sourced, never run; the caller
# defines fail() and $hint first.
# shellcheck shell=bash

DEVCACHE="${HIKYO_DEV_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/hikyo-dev}"
export GOMODCACHE="$DEVCACHE/go/mod" GOCACHE="$DEVCACHE/go/build"
export GOFLAGS=-modcacherw GOTOOLCHAIN=local CGO_ENABLED=0

require_go() {  # require_go: fails unless a Go >= 1.26 is on PATH
  command -v go >/dev/null 2>&1 || fail "no Go toolchain on PATH (need go >= 1.26); install Go, $hint"
  local go_version
  go_version=$(go env GOVERSION)
  case "$go_version" in
    go1.2[6-9]*|go1.[3-9]*) ;;
    *) fail "Go $go_version is too old (need go >= 1.26); $hint" ;;
  esac
}

probe_proxy() {  # probe_proxy <module dir> <module>: one cheap request, so an unreachable proxy is one clear line
  if ! (cd "$1" && go mod download -x "$2" >/dev/null 2>"$DEVCACHE/probe.log"); then
    fail "cannot download Go modules (GOPROXY=$(go env GOPROXY)): $(tail -n 1 "$DEVCACHE/probe.log"); $hint"
  fi
}

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


# The -ldflags of a Kubernetes binary built from tools/k8s or tools/k8s-node: --version then
# reports $K8S_VERSION (tools/versions.env), as a release binary does.
k8s_ldflags() {
  local minor flags="-s -w" p
  minor=$(echo "$K8S_VERSION" | cut -d. -f2)
  for p in k8s.io/component-base/version k8s.io/client-go/pkg/version; do
    flags="$flags -X $p.gitVersion=$K8S_VERSION -X $p.gitMajor=1 -X $p.gitMinor=$minor -X $p.gitTreeState=clean"
  done
  echo "$flags"
}
