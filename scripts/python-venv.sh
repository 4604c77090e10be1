#!/usr/bin/env bash
# The Python side: a virtual environment (ENVRT_VENV, default /opt/envrt-venv) on the
# system python3 (readable by every user, so the tests can run unprivileged), with maturin,
# pytest and inspect-ai at pinned versions, and the envrt package built from
# crates/envrt-python (debug, editable, sharing the workspace's target directory).
# Idempotent: later runs only check the pins and rebuild what changed.
set -euo pipefail
cd "$(dirname "$0")/.."

venv="${ENVRT_VENV:-/opt/envrt-venv}"
pins=(maturin==1.16.0 pytest==9.2.0 pytest-asyncio==1.5.0 inspect-ai==0.3.285)

need=()
[ -x /usr/bin/python3 ] || need+=(python3)
/usr/bin/python3 -c 'import ensurepip, venv' >/dev/null 2>&1 || need+=(python3-venv)
if ((${#need[@]})); then
    if [ "$(id -u)" != 0 ]; then
        echo "python-venv: missing ${need[*]}; run as root or: sudo apt-get install ${need[*]}" >&2
        exit 1
    fi
    echo "python-venv: apt-get install ${need[*]}"
    apt-get update -qq
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${need[@]}" >/dev/null
fi

if ! [ -x "$venv/bin/python" ] || [ "$("$venv/bin/python" -c 'import sys; print(sys.base_prefix)')" != /usr ]; then
    echo "python-venv: creating $venv"
    rm -rf "$venv"
    /usr/bin/python3 -m venv "$venv"
fi
stamp="$venv/.envrt-pins"
if [ "$(cat "$stamp" 2>/dev/null)" != "${pins[*]}" ]; then
    echo "python-venv: pip install ${pins[*]}"
    "$venv/bin/pip" install --quiet --disable-pip-version-check "${pins[@]}"
    echo "${pins[*]}" >"$stamp"
fi

export VIRTUAL_ENV="$venv" CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-$PWD/target}"
(cd crates/envrt-python && "$venv/bin/maturin" develop --quiet 2>&1 | grep -v '^Ignoring ' || true)
"$venv/bin/python" -c 'import envrt, envrt._inspect' || {
    echo "python-venv: the envrt package did not build or import" >&2
    exit 1
}
echo "python-venv: $venv ready (envrt, inspect-ai $("$venv/bin/python" -c 'import inspect_ai; print(inspect_ai.__version__)'))"
