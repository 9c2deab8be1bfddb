#!/usr/bin/env bash
# Builds the operator image (Containerfile) here, where there is no Docker engine and no
# registry for a base image: debootstrap makes the build stage's base (Debian bookworm minbase
# with python3 and pip, cached), buildah (storage driver vfs) builds the Containerfile on it,
# and the result is written as an OCI archive. Prints the image's manifest digest last.
#
#   bash tools/build-image.sh            # -> $HIKYO_IMAGE_OUT (default var/image/hikyo-operator.oci.tar)
#
# Reproducible: every timestamp is SOURCE_DATE_EPOCH (the commit's time); the same commit and
# the same cached base give the same digest. Environment:
#   HIKYO_IMAGE_CACHE   cache dir (default ~/.cache/hikyo-dev/image): the base root, buildah's
#                       storage, pip's downloads
#   HIKYO_IMAGE_OUT     the OCI archive to write
#   HIKYO_IMAGE_MIRROR  the Debian mirror (default http://deb.debian.org/debian)
#   HIKYO_IMAGE_REFRESH_BASE=1  rebuild the cached base (takes Debian's latest updates)
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

IMAGE=ghcr.io/hikyo-org/hikyo-operator  # the chart's operator.image.repository
SUITE=bookworm
CACHE=${HIKYO_IMAGE_CACHE:-$HOME/.cache/hikyo-dev/image}
MIRROR=${HIKYO_IMAGE_MIRROR:-http://deb.debian.org/debian}
OUT=${HIKYO_IMAGE_OUT:-$PWD/var/image/hikyo-operator.oci.tar}
BASE_TAR=$CACHE/base-$SUITE.tar
BASE_IMAGE=localhost/hikyo-build-base:$SUITE
VERSION=$(sed -n 's/^version = "\(.*\)"$/\1/p' pyproject.toml)
REVISION=$(git rev-parse HEAD)
if [ -n "$(git status --porcelain --untracked-files=no)" ]; then
  REVISION="$REVISION-dirty"
  echo "build-image: the work tree has uncommitted changes (revision label $REVISION)" >&2
fi
SOURCE_DATE_EPOCH=${SOURCE_DATE_EPOCH:-$(git log -1 --format=%ct)}
export SOURCE_DATE_EPOCH
CREATED=$(date -u -d "@$SOURCE_DATE_EPOCH" +%Y-%m-%dT%H:%M:%SZ)

for tool in buildah debootstrap; do
  command -v "$tool" >/dev/null || {
    echo "build-image: $tool is missing (apt-get install buildah debootstrap)" >&2
    exit 1
  }
done
mkdir -p "$CACHE" "$(dirname "$OUT")"
# Our own storage (vfs: no overlay mounts needed in this sandbox) and run root.
STORAGE=(--storage-driver vfs --root "$CACHE/storage" --runroot "$CACHE/run")
bah() { timeout 1200 buildah "${STORAGE[@]}" "$@"; }

# The base: minbase + python3 + pip, brought to the suite's security and point updates.
if [ "${HIKYO_IMAGE_REFRESH_BASE:-}" = 1 ] || [ ! -s "$BASE_TAR" ]; then
  echo "build-image: debootstrap $SUITE, then its updates (cold: 2-4 min)" >&2
  root=$(mktemp -d "$CACHE/base-root.XXXXXX")
  trap 'rm -rf "$root"' EXIT
  timeout 900 debootstrap --variant=minbase --include=python3,python3-pip,ca-certificates \
    "$SUITE" "$root" "$MIRROR" >"$CACHE/debootstrap.log" 2>&1 \
    || { tail -n 20 "$CACHE/debootstrap.log" >&2; exit 1; }
  cat >"$root/etc/apt/sources.list" <<EOF
deb $MIRROR $SUITE main
deb $MIRROR $SUITE-updates main
deb ${MIRROR%/debian}/debian-security $SUITE-security main
EOF
  timeout 600 chroot "$root" sh -c 'apt-get update -qq && DEBIAN_FRONTEND=noninteractive \
    apt-get upgrade -y -qq && apt-get clean && rm -rf /var/lib/apt/lists/*' \
    >>"$CACHE/debootstrap.log" 2>&1 || { tail -n 20 "$CACHE/debootstrap.log" >&2; exit 1; }
  tar -C "$root" --numeric-owner --sort=name -cf "$BASE_TAR.tmp" .
  mv "$BASE_TAR.tmp" "$BASE_TAR"
  rm -rf "$root"
  trap - EXIT
  bah rmi -f "$BASE_IMAGE" >/dev/null 2>&1 || true
fi
if ! bah inspect --type image "$BASE_IMAGE" >/dev/null 2>&1; then
  container=$(bah from scratch)
  bah add "$container" "$BASE_TAR" / >/dev/null
  bah commit --quiet --rm "$container" "$BASE_IMAGE" >/dev/null
fi

# The Containerfile, on that base. chroot isolation: no user namespaces or cgroups needed.
# The build stage trusts what this host trusts (e.g. a proxy's CA) for pip's downloads; a
# mount at build time, not a file of the image.
CA_BUNDLE=${SSL_CERT_FILE:-/etc/ssl/certs/ca-certificates.crt}
trust=()
[ -s "$CA_BUNDLE" ] && trust=(--volume "$CA_BUNDLE:/etc/ssl/certs/ca-certificates.crt:ro")
bah bud --quiet --isolation chroot --pull=never --layers=false "${trust[@]}" \
  --timestamp "$SOURCE_DATE_EPOCH" \
  --build-arg BUILD_BASE="$BASE_IMAGE" \
  --build-arg SOURCE_DATE_EPOCH="$SOURCE_DATE_EPOCH" \
  --build-arg VERSION="$VERSION" --build-arg REVISION="$REVISION" --build-arg CREATED="$CREATED" \
  -f Containerfile -t "$IMAGE:$VERSION" -t "localhost/hikyo-operator:$VERSION" . >/dev/null

# The previous build's image, now untagged: vfs keeps a full copy of each (~150 MB).
bah rmi --prune >/dev/null
rm -f "$OUT" "$OUT.digest"
bah push --quiet --digestfile "$OUT.digest" "$IMAGE:$VERSION" "oci-archive:$OUT:$IMAGE:$VERSION"
echo "build-image: $OUT ($(du -k "$OUT" | cut -f1) KiB compressed; image $IMAGE:$VERSION)" >&2
cat "$OUT.digest"
echo
