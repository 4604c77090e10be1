#!/usr/bin/env bash
# Idempotent: build `envrt-debian:bookworm` (no registry pulls), a real Debian userland for
# the bench's agent-shaped rows and for tests that need one: `debootstrap --variant=minbase
# bookworm` from Debian's own packages (deb.debian.org, or $DEBIAN_MIRROR) with python3 and
# git, then `docker import`. The busybox test image (scripts/docker-test-image.sh) stays
# for the fast tests.
#
#   usage: scripts/docker-debian-image.sh [--force]
#   needs: root, a running engine, debootstrap (installed with apt-get when missing) and
#          the Debian mirror.
#
# Label envrt.debian.stamp=<script rev + suite + package list> lets re-runs skip; --force
# rebuilds. The root file system is built under a fresh temp dir that is removed on exit,
# on error too.
set -euo pipefail

IMAGE="${ENVRT_DEBIAN_IMAGE:-envrt-debian:bookworm}"
SUITE=bookworm
MIRROR="${DEBIAN_MIRROR:-http://deb.debian.org/debian}"
PACKAGES="python3,git,ca-certificates,patch"
FORCE=0
[ "${1:-}" = "--force" ] && FORCE=1

SCRIPT_REV=1
STAMP="r${SCRIPT_REV}-${SUITE}-${PACKAGES}"

if [ "$FORCE" = 0 ] && docker image inspect "$IMAGE" >/dev/null 2>&1; then
    have="$(docker image inspect -f '{{ index .Config.Labels "envrt.debian.stamp" }}' "$IMAGE" 2>/dev/null || true)"
    if [ "$have" = "$STAMP" ]; then
        echo "$IMAGE already built"
        exit 0
    fi
fi

if ! command -v debootstrap >/dev/null 2>&1; then
    if [ "$(id -u)" != 0 ]; then
        echo "docker-debian-image: debootstrap is missing; run as root or: sudo apt-get install debootstrap" >&2
        exit 1
    fi
    apt-get install -y -qq debootstrap >/dev/null 2>&1 || {
        apt-get update -qq
        DEBIAN_FRONTEND=noninteractive apt-get install -y -qq debootstrap >/dev/null
    }
fi

ROOT="$(mktemp -d /tmp/envrt-debian-rootfs.XXXXXX)"
cleanup() {
    # debootstrap mounts proc and sys inside the root while it runs; unmount before removing.
    for m in proc sys dev/pts dev; do
        if mountpoint -q "$ROOT/$m" 2>/dev/null; then umount -l "$ROOT/$m" || true; fi
    done
    rm -rf --one-file-system "$ROOT"
}
trap cleanup EXIT

started=$(date +%s)
debootstrap --variant=minbase --include="$PACKAGES" "$SUITE" "$ROOT" "$MIRROR" >"$ROOT.log" 2>&1 || {
    echo "docker-debian-image: debootstrap failed; its log:" >&2
    tail -n 30 "$ROOT.log" >&2
    rm -f "$ROOT.log"
    exit 1
}
rm -f "$ROOT.log"
# Nothing of the build host's apt state is needed in the image.
rm -rf "$ROOT"/var/cache/apt/archives/*.deb "$ROOT"/var/lib/apt/lists/*
mkdir -p "$ROOT/workspace"

tar --numeric-owner -C "$ROOT" -cf - . |
    docker import \
        --change 'ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin' \
        --change 'WORKDIR /workspace' \
        --change 'CMD ["sleep","infinity"]' \
        --change "LABEL envrt.debian.stamp=$STAMP" \
        --message "envrt Debian $SUITE minbase with python3 and git (debootstrap)" \
        - "$IMAGE" >/dev/null

echo "built $IMAGE (debootstrap $SUITE minbase + $PACKAGES) in $(($(date +%s) - started)) s"
