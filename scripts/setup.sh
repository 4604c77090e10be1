#!/usr/bin/env bash
# Idempotent set-up of everything the tests need on a fresh Debian machine:
# Debian packages (docker.io with its tini init, bubblewrap, busybox-static, iproute2), a running
# Docker engine, the local test images (busybox, busybox + glibc, and a debootstrapped
# Debian with python3 and git), the npm fixture of the plugin SDK interop test, and
# the test sshd of the ssh driver (scripts/start-sshd.sh), the Python virtual
# environment with the envrt package and inspect-ai (python-venv.sh), and the SWE-ReX
# virtual environment the bench's peer rows compare against (swerex-venv.sh).
# Run as root; later runs only check.
set -euo pipefail
cd "$(dirname "$0")/.."

need=()
command -v dockerd >/dev/null 2>&1 || need+=(docker.io)
[ -e /usr/bin/docker-init ] || need+=(tini)
command -v bwrap >/dev/null 2>&1 || need+=(bubblewrap)
if ! [ -x /bin/busybox ] || ldd /bin/busybox >/dev/null 2>&1; then need+=(busybox-static); fi
command -v node >/dev/null 2>&1 || need+=(nodejs npm)
# The egress proxy's tests build their test hosts from network namespaces and veth pairs.
command -v ip >/dev/null 2>&1 || need+=(iproute2)
# The clock-jump tests run envrt under a faked wall clock (crates/envrt-cli/tests/fault_clock_jump.rs).
[ -e /usr/lib/x86_64-linux-gnu/faketime/libfaketime.so.1 ] || need+=(faketime)
# The service bench row loads the lease listing with wrk (crates/bench/src/scenario/service.rs).
command -v wrk >/dev/null 2>&1 || need+=(wrk)
if ((${#need[@]})); then
    if [ "$(id -u)" != 0 ]; then
        echo "setup: missing ${need[*]}; run as root or: sudo apt-get install ${need[*]}" >&2
        exit 1
    fi
    echo "setup: apt-get install ${need[*]}"
    apt-get update -qq
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${need[@]}" >/dev/null
fi

bash scripts/start-dockerd.sh 120
bash scripts/docker-test-image.sh
bash scripts/docker-glibc-image.sh
# A real Debian userland (python3, git) for the bench's agent-shaped rows and the tests
# that need one: debootstrap from deb.debian.org, about 4 minutes the first time
# (measured 2026-12-07: 214 s on 2 loaded cores), a label check afterwards.
bash scripts/docker-debian-image.sh
bash scripts/start-sshd.sh
if [ ! -d crates/driver-plugin-sandbox/tests/fixtures/sdk-worker/node_modules/@paperclipai ]; then
    bash crates/driver-plugin-sandbox/scripts/install-sdk-fixture.sh
fi
bash scripts/python-venv.sh
bash scripts/swerex-venv.sh
echo "setup: ready"
