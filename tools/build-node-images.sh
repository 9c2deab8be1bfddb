#!/usr/bin/env bash
# Builds the local node's own images, since no registry is reachable here: the pod sandbox's
# pause image (tools/node-images/pause, Go, static) and a tiny application image (Debian's
# busybox-static: a shell that prints the delivered value from its environment and from a
# mounted file, for the real-node tests) and the chart's bundled Redis for scaled mode
# (Debian's redis-server and redis-cli with only the shared libraries they load; the chart
# names it by the digest in redis.oci.tar.digest). Each is written as an OCI archive that
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

# The image from a scratch root holding what $1 (a directory) holds, run as $3 (a JSON array),
# written to $OUT/$4.oci.tar; further arguments are more `buildah config` options.
image_of() {
  local root=$1 name=$2 entrypoint=$3 archive=$OUT/$4.oci.tar container
  shift 4
  container=$(bah from --quiet scratch)
  bah copy --quiet "$container" "$root" / >/dev/null
  bah config --entrypoint "$entrypoint" --cmd '' --user 65532:65532 "$@" "$container"
  bah commit --quiet --rm --timestamp "$SOURCE_DATE_EPOCH" "$container" "$name" >/dev/null
  rm -f "$archive" "$archive.digest"
  bah push --quiet --digestfile "$archive.digest" "$name" "oci-archive:$archive:$name"
  echo "build-node-images: $name -> $archive ($(cat "$archive.digest"))" >&2
}

# The newest cached .deb of package $1, downloaded once into the cache.
deb_of() {
  local found
  found=$(find "$CACHE" -maxdepth 1 -name "$1_*.deb" | sort | tail -n 1)
  if [ -z "$found" ]; then
    # As root into root's cache: apt's _apt sandbox user could not write there (a warning a line).
    (cd "$CACHE" && timeout 300 apt-get -o APT::Sandbox::User=root download "$1" >/dev/null) \
      || fail "apt-get download $1 failed"
    found=$(find "$CACHE" -maxdepth 1 -name "$1_*.deb" | sort | tail -n 1)
  fi
  echo "$found"
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

# The bundled Redis (charts/hikyo-operator/templates/redis.yaml): the chart passes only args
# (--requirepass ...), so the entrypoint is redis-server, as the official image's entrypoint
# does for args starting with --. redis-cli is there for `redis-cli ping`. The libraries are
# those Debian's loader resolves for the two binaries among the packages they depend on
# (directly or through libsystemd0), not the host's, so the same packages give the same image.
REDIS_DEBS=(redis-tools redis-server libc6 libgcc-s1 libstdc++6 libatomic1 liblzf1 libjemalloc2
  libssl3 libsystemd0 libcap2 libgcrypt20 libgpg-error0 liblzma5 libzstd1 liblz4-1)
mkdir -p "$work/redis-debs" "$work/redis/usr/bin" "$work/redis/data" "$work/redis/tmp"
for package in "${REDIS_DEBS[@]}"; do
  dpkg-deb -x "$(deb_of "$package")" "$work/redis-debs"
done
cp "$work/redis-debs/usr/bin/redis-check-rdb" "$work/redis-debs/usr/bin/redis-cli" "$work/redis/usr/bin/"
ln -s redis-check-rdb "$work/redis/usr/bin/redis-server"  # Redis picks its mode by argv[0]
loader=lib64/ld-linux-x86-64.so.2
libdirs="$work/redis-debs/lib/x86_64-linux-gnu:$work/redis-debs/usr/lib/x86_64-linux-gnu"
mkdir -p "$work/redis/lib64" "$work/redis/lib/x86_64-linux-gnu"
# libc6's /lib64 link is absolute (it would name the host's loader): the file it names, from the package.
cp "$work/redis-debs/lib/x86_64-linux-gnu/ld-linux-x86-64.so.2" "$work/redis/$loader"
for binary in redis-check-rdb redis-cli; do
  # "libfoo.so.1 => /path (0x...)": each library the binary loads, found in the packages.
  listed=$("$work/redis/$loader" --list --library-path "$libdirs" "$work/redis/usr/bin/$binary") \
    || fail "the loader cannot list the libraries of $binary"
  while read -r soname arrow path _; do
    [[ "$arrow" == "=>" && "$soname" != /* ]] || continue  # the loader itself is there already
    [[ "$path" == "$work/redis-debs/"* ]] || fail "$binary needs $soname, in none of: ${REDIS_DEBS[*]}"
    cp -L "$path" "$work/redis/lib/x86_64-linux-gnu/$soname"
  done <<<"$listed"
done
chroot "$work/redis" /usr/bin/redis-server --version >/dev/null \
  || fail "redis-server does not start in its image root (a library missing?)"
chmod 1777 "$work/redis/tmp"
image_of "$work/redis" localhost/hikyo-redis:local '["/usr/bin/redis-server"]' redis \
  --workingdir /data --env PATH=/usr/bin --port 6379/tcp
echo "$OUT"
