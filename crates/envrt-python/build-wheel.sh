#!/usr/bin/env bash
# Builds the wheel (release) with the reference sandbox worker and the process supervisor
# envrt-agent inside: both are built, copied into python/envrt/ (maturin packs every file of
# the package directory), and the package finds them there once installed. Arguments go to `maturin build` (e.g. --out DIR).
set -euo pipefail
cd "$(dirname "$0")"
venv="${ENVRT_VENV:-/opt/envrt-venv}"
export VIRTUAL_ENV="$venv" CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-$(cd ../.. && pwd)/target}"
cargo build --quiet --release -p envrt-sandbox-worker -p envrt-agent --bin envrt-sandbox-worker --bin envrt-agent
for bin in envrt-sandbox-worker envrt-agent; do
    rm -f "python/envrt/$bin"
    install -m 0755 "$CARGO_TARGET_DIR/release/$bin" "python/envrt/$bin"
done
exec "$venv/bin/maturin" build --release "$@"
