#!/usr/bin/env bash
# Builds the wheel (release) with the reference sandbox worker and the process supervisor
# envrt-agent (static) inside: both are built, copied into python/envrt/ (maturin packs every file of
# the package directory), and the package finds them there once installed. Arguments go to `maturin build` (e.g. --out DIR).
set -euo pipefail
cd "$(dirname "$0")"
venv="${ENVRT_VENV:-/opt/envrt-venv}"
export VIRTUAL_ENV="$venv" CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-$(cd ../.. && pwd)/target}"
cargo build --quiet --release -p envrt-sandbox-worker --bin envrt-sandbox-worker
# The supervisor static (glibc's crt-static on the host's gnu target), so that the Docker
# driver can mount it into images without a C library of their own (the busybox test image):
# Docker processes and executes through it then work from Python with no ENVRT_AGENT. The
# same binary serves the local, sandbox and ssh drivers.
host="$(rustc -vV | sed -n 's/^host: //p')"
case "$host" in
    *-linux-gnu) ;;
    *) echo "build-wheel.sh: a static envrt-agent needs a *-linux-gnu host, not $host" >&2; exit 1;;
esac
RUSTFLAGS='-C target-feature=+crt-static' \
    cargo build --quiet --release -p envrt-agent --bin envrt-agent --target "$host"
rm -f python/envrt/envrt-sandbox-worker python/envrt/envrt-agent
install -m 0755 "$CARGO_TARGET_DIR/release/envrt-sandbox-worker" python/envrt/envrt-sandbox-worker
install -m 0755 "$CARGO_TARGET_DIR/$host/release/envrt-agent" python/envrt/envrt-agent
if command -v file >/dev/null && ! file python/envrt/envrt-agent | grep -Eq 'statically linked|static-pie linked'; then
    echo "build-wheel.sh: python/envrt/envrt-agent is not static: $(file python/envrt/envrt-agent)" >&2
    exit 1
fi
exec "$venv/bin/maturin" build --release "$@"
