#!/usr/bin/env bash
# Idempotent: build the local test image `envrt-test:latest` (no registry pulls)
# from Debian's busybox-static, via `docker import`.
#
#   usage: scripts/docker-test-image.sh [--force]
#   needs: a running engine (scripts/start-dockerd.sh); installs busybox-static if missing.
#
# Result: rootfs with /bin/busybox + a symlink per applet in /bin, and one more in
# the applet's usual directory (/usr/bin/env, /sbin/..., as `busybox --install -s`
# places them) so that images' usual paths exist, /tmp and
# /workspace (1777), /etc/passwd|group with root(0) and nobody(65534),
# CMD ["sleep","infinity"], WORKDIR /workspace, PATH set.
# Label envrt.test.stamp=<script rev + busybox sha256> lets re-runs skip the rebuild.
set -euo pipefail

IMAGE="${ENVRT_TEST_IMAGE:-envrt-test:latest}"
BUSYBOX="${BUSYBOX:-/bin/busybox}"
FORCE=0
[ "${1:-}" = "--force" ] && FORCE=1

if ! "$BUSYBOX" --list >/dev/null 2>&1 || ldd "$BUSYBOX" >/dev/null 2>&1; then
    if [ "$BUSYBOX" = /bin/busybox ]; then
        echo "installing busybox-static"
        export DEBIAN_FRONTEND=noninteractive
        apt-get update -qq >/dev/null
        apt-get install -y -qq busybox-static >/dev/null
    fi
fi
if ! "$BUSYBOX" --list >/dev/null 2>&1; then
    echo "$BUSYBOX missing (apt-get install busybox-static)" >&2
    exit 1
fi
if ldd "$BUSYBOX" >/dev/null 2>&1; then   # ldd fails on static binaries
    echo "$BUSYBOX is dynamically linked; need busybox-static" >&2
    exit 1
fi

# Bump SCRIPT_REV when the rootfs layout below changes.
SCRIPT_REV=2
# awk reads everything (no early exit): `| head -n1` would SIGPIPE busybox and,
# with pipefail + set -e, abort the script silently.
BB_VERSION="$({ "$BUSYBOX" 2>&1 || true; } | awk 'NR==1{print $2}')"
STAMP="r${SCRIPT_REV}-$(sha256sum "$BUSYBOX" | cut -c1-16)"

if [ "$FORCE" = 0 ] && docker image inspect "$IMAGE" >/dev/null 2>&1; then
    have="$(docker image inspect -f '{{ index .Config.Labels "envrt.test.stamp" }}' "$IMAGE" 2>/dev/null || true)"
    if [ "$have" = "$STAMP" ]; then
        echo "$IMAGE already built (busybox $BB_VERSION)"
        exit 0
    fi
fi

ROOT="$(mktemp -d /tmp/envrt-rootfs.XXXXXX)"
trap 'rm -rf "$ROOT"' EXIT

mkdir -p "$ROOT"/{bin,sbin,usr/bin,usr/sbin,etc,root,dev,proc,sys,var/tmp,home}
install -m 0755 "$BUSYBOX" "$ROOT/bin/busybox"

# One symlink per applet; all in /bin (busybox --list gives bare names).
# (--list-full would give the canonical dirs; a flat /bin is simpler and
# PATH covers it.)
for applet in $("$ROOT/bin/busybox" --list); do
    [ "$applet" = busybox ] && continue
    ln -sf busybox "$ROOT/bin/$applet"
done
# And where a real system has it (usr/bin/env, sbin/ifconfig, ...): programs and tests
# that name /usr/bin/... find it, as in any distribution image.
for full in $("$ROOT/bin/busybox" --list-full); do
    case "$full" in bin/*) continue ;; esac
    ln -sf /bin/busybox "$ROOT/$full"
done

install -d -m 1777 "$ROOT/tmp" "$ROOT/var/tmp" "$ROOT/workspace"
install -d -m 0700 "$ROOT/root"

cat >"$ROOT/etc/passwd" <<'EOF'
root:x:0:0:root:/root:/bin/sh
nobody:x:65534:65534:nobody:/nonexistent:/bin/false
EOF
cat >"$ROOT/etc/group" <<'EOF'
root:x:0:
nogroup:x:65534:
EOF
# Docker bind-mounts over these at run time, but have them for `docker export`
# and for tools that read them.
: >"$ROOT/etc/hosts"
: >"$ROOT/etc/resolv.conf"
echo envrt-test >"$ROOT/etc/hostname"

tar --numeric-owner --owner=0 --group=0 -C "$ROOT" -cf - . |
    docker import \
        --change 'ENV PATH=/bin:/sbin:/usr/bin:/usr/sbin' \
        --change 'WORKDIR /workspace' \
        --change 'CMD ["sleep","infinity"]' \
        --change "LABEL envrt.test.stamp=$STAMP" \
        --message "envrt test image (busybox-static $BB_VERSION)" \
        - "$IMAGE" >/dev/null

echo "built $IMAGE (busybox $BB_VERSION, $(ls "$ROOT/bin" | wc -l) entries in /bin)"
