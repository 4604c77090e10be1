#!/usr/bin/env bash
# The peer baseline of the bench's `peers` rows: SWE-ReX (swe-rex from PyPI) at a pinned
# version in its own virtual environment (ENVRT_SWEREX_VENV, default
# /opt/envrt-swerex-venv) on the system python3, so its dependencies never meet the envrt
# package's. Idempotent: later runs only check the pin.
set -euo pipefail

venv="${ENVRT_SWEREX_VENV:-/opt/envrt-swerex-venv}"
# swe-rex 1.4.0 imports aiohttp in swerex.runtime.remote (its RemoteRuntime client) without
# declaring it, so it is pinned beside it.
pins=(swe-rex==1.4.0 aiohttp==3.14.5)

if ! [ -x /usr/bin/python3 ] || ! /usr/bin/python3 -c 'import ensurepip, venv' >/dev/null 2>&1; then
    echo "swerex-venv: python3 with venv is missing (scripts/python-venv.sh installs it)" >&2
    exit 1
fi
if ! [ -x "$venv/bin/python" ] || [ "$("$venv/bin/python" -c 'import sys; print(sys.base_prefix)')" != /usr ]; then
    echo "swerex-venv: creating $venv"
    rm -rf "$venv"
    /usr/bin/python3 -m venv "$venv"
fi
stamp="$venv/.envrt-pins"
if [ "$(cat "$stamp" 2>/dev/null)" != "${pins[*]}" ]; then
    echo "swerex-venv: pip install ${pins[*]}"
    "$venv/bin/pip" install --quiet --disable-pip-version-check "${pins[@]}"
    echo "${pins[*]}" >"$stamp"
fi
"$venv/bin/python" -c 'import swerex.runtime.local, swerex.runtime.remote, swerex.server' || {
    echo "swerex-venv: swe-rex did not import" >&2
    exit 1
}
[ -x "$venv/bin/swerex-remote" ] || {
    echo "swerex-venv: the swerex-remote server entry point is missing" >&2
    exit 1
}
echo "swerex-venv: $venv ready (swe-rex $("$venv/bin/python" -c 'import importlib.metadata as m; print(m.version("swe-rex"))'))"
