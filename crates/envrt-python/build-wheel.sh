#!/usr/bin/env bash
# Builds the wheel (release) with the reference sandbox worker inside: the worker is built,
# copied into python/envrt/ (maturin packs every file of the package directory), and the
# package finds it there once installed. Arguments go to `maturin build` (e.g. --out DIR).
set -euo pipefail
cd "$(dirname "$0")"
venv="${ENVRT_VENV:-/opt/envrt-venv}"
export VIRTUAL_ENV="$venv" CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-$(cd ../.. && pwd)/target}"
cargo build --quiet --release --bin envrt-sandbox-worker
install -m 0755 "$CARGO_TARGET_DIR/release/envrt-sandbox-worker" python/envrt/envrt-sandbox-worker
exec "$venv/bin/maturin" build --release "$@"
