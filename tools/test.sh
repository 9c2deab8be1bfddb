#!/usr/bin/env bash
# The README's test command. On a fresh machine it installs what the suite needs (Debian's
# redis-server, postgresql, chromium and prometheus, whose promtool checks the chart's alerts;
# this package with its test extra), builds or reuses the local control plane and Helm (from the
# Go module proxy, cached in ~/.cache/hikyo-dev), then runs pytest with the 25 slowest tests
# printed. Each set-up step prints when it starts ("=== <step> (at Ns)"), like .ci/run.
#
#   bash tools/test.sh                      # every test, in parallel lanes (tools/lanes.py)
#   bash tools/test.sh --lanes 2            # the same with 2 integration lanes (default 4)
#   bash tools/test.sh --fast               # only the tests that need no cluster (a minute)
#   bash tools/test.sh --node               # the e2e lane on a real local node (root; builds
#                                           # the images and node binaries; see docs/development.md)
#   bash tools/test.sh tests/integration -k fault   # anything else goes to one pytest as is
#
# Set HIKYO_SKIP_SETUP=1 to skip the installs (a machine already set up); KUBEBUILDER_ASSETS,
# HELM, PROMTOOL and DOTENV_READER, when set, are used as they are.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

fail() { echo "tools/test.sh: $*" >&2; exit 1; }
t0=$SECONDS
# Where a fresh machine's set-up time goes (docs/development.md has the measured times).
step() { printf '\n=== %s (at %ds)\n' "$*" "$((SECONDS - t0))"; }

missing_packages() {
  local missing=()
  command -v redis-server >/dev/null 2>&1 || missing+=(redis-server)
  compgen -G '/usr/lib/postgresql/*/bin/initdb' >/dev/null || missing+=(postgresql)
  [ -x /usr/bin/chromium ] || missing+=(chromium)
  echo "${missing[@]:-}"
}

if [ "${HIKYO_SKIP_SETUP:-}" != "1" ]; then
  step "Debian packages"
  read -r -a needed <<<"$(missing_packages)"
  if [ "${#needed[@]}" -gt 0 ] && [ -n "${needed[0]}" ]; then
    if [ "$(id -u)" = 0 ]; then SUDO=(); elif command -v sudo >/dev/null; then SUDO=(sudo); else
      fail "needs the Debian packages ${needed[*]}: install them (apt-get install ${needed[*]}) or run as root"
    fi
    echo "installing ${needed[*]} (apt-get)" >&2
    "${SUDO[@]}" apt-get update -qq
    DEBIAN_FRONTEND=noninteractive "${SUDO[@]}" apt-get install -y -qq "${needed[@]}" >/dev/null
  fi
  step "Python package"
  python3 -m pip install --quiet --disable-pip-version-check --root-user-action=ignore -e '.[test]'
fi

# Each script prints its result's path as stdout's last line; tail reads all its input, so a
# pipe into it cannot SIGPIPE a build.
step "Local control plane"
KUBEBUILDER_ASSETS=${KUBEBUILDER_ASSETS:-$(bash tools/build-control-plane.sh | tail -n 1)}
step "Helm"
HELM=${HELM:-$(bash tools/build-helm.sh | tail -n 1)}
step "promtool"
# Debian's (package prometheus), installed when missing with no server left running; a PROMTOOL
# that is set is used as it is, once the script has checked it is an executable file.
PROMTOOL=$(bash tools/install-promtool.sh | tail -n 1)
promtool_version=$("$PROMTOOL" --version 2>&1 | sed -n 1p)  # sed reads all: no SIGPIPE
echo "promtool: $PROMTOOL ($promtool_version)"
step "dotenv-reader"
# Docker Compose's .env reader, for the S11.3 dotenv read-back tests (tests/support/dotenv_reader.py).
DOTENV_READER=${DOTENV_READER:-$(bash tools/build-dotenv-reader.sh | tail -n 1)}
export KUBEBUILDER_ASSETS HELM PROMTOOL DOTENV_READER

step "Tests"
case "${1:-}" in
  "" | --lanes) exec python3 tools/lanes.py "$@" ;;
  --fast) exec python3 -m pytest --durations=25 tests/unit tests/queue tests/chart tests/tooling \
    tests/bench tests/devserver "${@:2}" ;;
  --node)
    # The marker `node` (CI runs it in its image lane): the chart's pods on a real local node.
    HIKYO_NODE_BIN=${HIKYO_NODE_BIN:-$(bash tools/build-node.sh | tail -n 1)}
    COREDNS=${COREDNS:-$(bash tools/build-coredns.sh | tail -n 1)}
    if [ -z "${HIKYO_IMAGE_ARCHIVE:-}" ]; then
      bash tools/build-image.sh >/dev/null  # its digest goes beside the archive
      HIKYO_IMAGE_ARCHIVE=$PWD/var/image/hikyo-operator.oci.tar
    fi
    export HIKYO_NODE_BIN COREDNS HIKYO_IMAGE_ARCHIVE
    exec python3 -m pytest --durations=25 -m node tests/integration/test_real_node.py \
      tests/integration/test_real_node_scaled.py "${@:2}" ;;
  *) exec python3 -m pytest --durations=25 "$@" ;;
esac
