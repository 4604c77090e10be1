#!/usr/bin/env bash
# Idempotent: build `envrt-test-glibc:latest` (no registry pulls), the test image that
# meets the prerequisites of Inspect AI's injected tools (text_editor, bash_session,
# exec_remote; see crates/envrt-python/README.md): the busybox test image
# (scripts/docker-test-image.sh) plus the host's glibc (the loader and libc6's shared
# libraries, libgcc_s, libz, libtinfo), the host's bash and /etc/os-release, via
# `docker import`.
#
#   usage: scripts/docker-glibc-image.sh [--force]
#   needs: a running engine and envrt-test:latest (scripts/docker-test-image.sh).
#
# Why this and not debootstrap: debootstrap takes minutes and ~260 MB (that image is
# scripts/docker-debian-image.sh, for the rows and tests that need a real userland); this
# takes seconds and adds ~15 MB, and the libraries are the
# very ones the host runs (Inspect's tools binary is built for glibc, so any glibc of the
# same architecture works).
# Label envrt.test.stamp=<script rev + base image id + libc sha256> lets re-runs skip.
set -euo pipefail

IMAGE="${ENVRT_TEST_GLIBC_IMAGE:-envrt-test-glibc:latest}"
BASE="${ENVRT_TEST_IMAGE:-envrt-test:latest}"
FORCE=0
[ "${1:-}" = "--force" ] && FORCE=1

# The host's loader and libc, as the loader of /bin/sh names them.
LOADER="$(ldd /bin/sh | awk '$1 ~ /^\/.*ld-linux/ {print $1}')"
LIBC="$(ldd /bin/sh | awk '$1 == "libc.so.6" {print $3}')"
if [ -z "$LOADER" ] || [ -z "$LIBC" ]; then
    echo "cannot find the host's glibc (ldd /bin/sh)" >&2
    exit 1
fi
LIBDIR="$(dirname "$(readlink -f "$LIBC")")"
OS_RELEASE=/etc/os-release
[ -e "$OS_RELEASE" ] || OS_RELEASE=/usr/lib/os-release

if ! docker image inspect "$BASE" >/dev/null 2>&1; then
    bash "$(dirname "$0")/docker-test-image.sh"
fi
SCRIPT_REV=2
BASE_ID="$(docker image inspect -f '{{.Id}}' "$BASE" | cut -d: -f2 | cut -c1-12)"
STAMP="r${SCRIPT_REV}-${BASE_ID}-$(sha256sum "$(readlink -f "$LIBC")" | cut -c1-12)"

if [ "$FORCE" = 0 ] && docker image inspect "$IMAGE" >/dev/null 2>&1; then
    have="$(docker image inspect -f '{{ index .Config.Labels "envrt.test.stamp" }}' "$IMAGE" 2>/dev/null || true)"
    if [ "$have" = "$STAMP" ]; then
        echo "$IMAGE already built"
        exit 0
    fi
fi

ROOT="$(mktemp -d /tmp/envrt-glibc-rootfs.XXXXXX)"
CONTAINER=""
cleanup() {
    rm -rf "$ROOT"
    if [ -n "$CONTAINER" ]; then docker rm -f "$CONTAINER" >/dev/null 2>&1 || true; fi
}
trap cleanup EXIT

CONTAINER="$(docker create "$BASE")"
docker export "$CONTAINER" | tar -C "$ROOT" -xf -

# The libraries go where the host has them (/usr/lib/<triplet>, reached as /lib/<triplet>
# through the merged-/usr links a Debian system has), and the loader where programs
# name it (/lib64/ld-linux-x86-64.so.2).
TRIPLET="$(basename "$LIBDIR")"
mkdir -p "$ROOT/usr/lib/$TRIPLET" "$ROOT/usr/lib64"
[ -e "$ROOT/lib" ] || ln -s usr/lib "$ROOT/lib"
[ -e "$ROOT/lib64" ] || ln -s usr/lib64 "$ROOT/lib64"
copy_lib() {
    # A library and the name it is reached by (the file behind a symlink keeps its name).
    local lib="$1"
    [ -e "$lib" ] || return 0
    cp -L "$lib" "$ROOT/usr/lib/$TRIPLET/$(basename "$lib")"
}
for lib in "$LIBDIR"/ld-linux*.so* "$LIBDIR"/libc.so.6 "$LIBDIR"/libm.so.6 "$LIBDIR"/libdl.so.2 \
    "$LIBDIR"/libpthread.so.0 "$LIBDIR"/librt.so.1 "$LIBDIR"/libutil.so.1 "$LIBDIR"/libresolv.so.2 \
    "$LIBDIR"/libnss_files.so.2 "$LIBDIR"/libnss_dns.so.2 "$LIBDIR"/libanl.so.1 \
    "$LIBDIR"/libgcc_s.so.1 "$LIBDIR"/libz.so.1 "$LIBDIR"/libtinfo.so.6; do
    copy_lib "$lib"
done
# bash_session runs bash: the host's (it needs only libc and libtinfo).
cp -L /bin/bash "$ROOT/bin/bash"
cp -L "$LOADER" "$ROOT/usr/lib64/$(basename "$LOADER")"
cp -L "$OS_RELEASE" "$ROOT/etc/os-release"
chmod 0644 "$ROOT/etc/os-release"

tar --numeric-owner --owner=0 --group=0 -C "$ROOT" -cf - . |
    docker import \
        --change 'ENV PATH=/bin:/sbin:/usr/bin:/usr/sbin' \
        --change 'WORKDIR /workspace' \
        --change 'CMD ["sleep","infinity"]' \
        --change "LABEL envrt.test.stamp=$STAMP" \
        --message "envrt test image with the host's glibc and os-release" \
        - "$IMAGE" >/dev/null

echo "built $IMAGE ($BASE + glibc from $LIBDIR)"
