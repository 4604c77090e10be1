#!/usr/bin/env bash
# Builds the extension module (debug) in place for the editable install in the virtual
# environment ENVRT_VENV (default /opt/envrt-venv), sharing the workspace's target dir, and
# puts the reference sandbox worker (debug) beside it in python/envrt/, where the package
# looks for it (as in an installed wheel).
set -euo pipefail
cd "$(dirname "$0")"
venv="${ENVRT_VENV:-/opt/envrt-venv}"
export VIRTUAL_ENV="$venv" CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-$(cd ../.. && pwd)/target}"
cargo build --quiet --bin envrt-sandbox-worker
install -m 0755 "$CARGO_TARGET_DIR/debug/envrt-sandbox-worker" python/envrt/envrt-sandbox-worker
exec "$venv/bin/maturin" develop --quiet --skip-install "$@"
