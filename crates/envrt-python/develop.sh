#!/usr/bin/env bash
# Builds the extension module (debug) in place for the editable install in the virtual
# environment ENVRT_VENV (default /opt/envrt-venv), sharing the workspace's target dir, and
# puts the reference sandbox worker and the process supervisor envrt-agent (debug) beside it
# in python/envrt/, where the package looks for them (as in an installed wheel).
set -euo pipefail
cd "$(dirname "$0")"
venv="${ENVRT_VENV:-/opt/envrt-venv}"
export VIRTUAL_ENV="$venv" CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-$(cd ../.. && pwd)/target}"
cargo build --quiet -p envrt-sandbox-worker -p envrt-agent --bin envrt-sandbox-worker --bin envrt-agent
for bin in envrt-sandbox-worker envrt-agent; do
    rm -f "python/envrt/$bin"
    install -m 0755 "$CARGO_TARGET_DIR/debug/$bin" "python/envrt/$bin"
done
exec "$venv/bin/maturin" develop --quiet --skip-install "$@"
