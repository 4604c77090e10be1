#!/usr/bin/env bash
# Builds the extension module (debug) in place for the editable install in the virtual
# environment ENVRT_VENV (default /opt/envrt-venv), sharing the workspace's target dir.
set -euo pipefail
cd "$(dirname "$0")"
venv="${ENVRT_VENV:-/opt/envrt-venv}"
export VIRTUAL_ENV="$venv" CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-$(cd ../.. && pwd)/target}"
exec "$venv/bin/maturin" develop --quiet --skip-install "$@"
