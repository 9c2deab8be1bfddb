#!/usr/bin/env bash
# Builds the local node's own images, since no registry is reachable here: the pod sandbox's
# pause image (tools/node-images/pause, Go, static) and a tiny application image (Debian's
# busybox-static: a shell that prints the delivered value from its environment and from a
# mounted file, for the real-node tests). Each is written as an OCI archive that
# `python -m localcluster up --node` imports into the node's containerd. Prints the output
# directory on the last line of stdout.
#
#   bash tools/build-node-images.sh     # -> $HIKYO_NODE_IMAGES (default var/node-images)
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

OUT=${HIKYO_NODE_IMAGES:-$PWD/var/node-images}
CACHE=${HIKYO_IMAGE_CACHE:-$HOME/.cache/hikyo-dev/image}/node
fail() { echo "build-node-images: $*" >&2; exit 1; }
for tool in buildah go apt-get dpkg-deb; do
  command -v "$tool" >/dev/null || fail "$tool is missing"
done
mkdir -p "$OUT" "$CACHE"
# Reproducible: every timestamp is the last commit's time (the same sources give the same images).
SOURCE_DATE_EPOCH=${SOURCE_DATE_EPOCH:-$(git log -1 --format=%ct)}
export SOURCE_DATE_EPOCH
STORAGE=(--storage-driver vfs --root "$CACHE/storage" --runroot "$CACHE/run")
bah() { timeout 600 buildah "${STORAGE[@]}" "$@"; }

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

# The image from a scratch root holding what $1 (a directory) holds, run as $3 (a JSON array).
image_of() {
  local root=$1 name=$2 entrypoint=$3 container
  container=$(bah from --quiet scratch)
  bah copy --quiet "$container" "$root" / >/dev/null
  bah config --entrypoint "$entrypoint" --cmd '' --user 65532:65532 "$container"
  bah commit --quiet --rm --timestamp "$SOURCE_DATE_EPOCH" "$container" "$name" >/dev/null
  rm -f "$OUT/$4.oci.tar"
  bah push --quiet "$name" "oci-archive:$OUT/$4.oci.tar:$name"
  echo "build-node-images: $name -> $OUT/$4.oci.tar" >&2
}

mkdir -p "$work/pause"
(cd tools/node-images/pause && CGO_ENABLED=0 timeout 300 go build -trimpath -ldflags "-s -w" \
  -o "$work/pause/pause" .) || fail "go build of the pause program failed"
image_of "$work/pause" localhost/hikyo-pause:local '["/pause"]' pause

deb=$(find "$CACHE" -maxdepth 1 -name 'busybox-static_*.deb' | sort | tail -n 1)
if [ -z "$deb" ]; then
  (cd "$CACHE" && timeout 300 apt-get download busybox-static >/dev/null) \
    || fail "apt-get download busybox-static failed"
  deb=$(find "$CACHE" -maxdepth 1 -name 'busybox-static_*.deb' | sort | tail -n 1)
fi
mkdir -p "$work/deb" "$work/app/bin" "$work/app/tmp"
dpkg-deb -x "$deb" "$work/deb"
cp "$work/deb/bin/busybox" "$work/app/bin/busybox"
for applet in sh cat sleep echo date; do ln -s busybox "$work/app/bin/$applet"; done
cp tools/node-images/app/print-value.sh "$work/app/bin/print-value"
chmod 0755 "$work/app/bin/print-value"
chmod 1777 "$work/app/tmp"
image_of "$work/app" localhost/hikyo-node-app:local '["/bin/print-value"]' app
echo "$OUT"
