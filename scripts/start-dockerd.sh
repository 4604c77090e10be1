#!/usr/bin/env bash
# Idempotent: install docker.io if missing, start dockerd in the background unless an engine already answers,
# then wait (bounded) until `docker info` succeeds.
#
#   usage: start-dockerd.sh [timeout_seconds]   (default 60)
#   env:   DOCKERD_LOG (default /tmp/dockerd.log)
#
# Machine notes: no systemd (PID 1 is not an init), no internet, so dockerd is
# run by hand with --iptables=false --bridge=none (containers must use
# --network none). dockerd spawns its own containerd if none is running.
set -euo pipefail

TIMEOUT="${1:-60}"
LOG="${DOCKERD_LOG:-/tmp/dockerd.log}"

# Installs docker.io (which brings docker-init/tini) when missing; needs root and apt.
if ! command -v dockerd >/dev/null 2>&1 || ! command -v docker >/dev/null 2>&1; then
    echo "installing docker.io"
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -qq >/dev/null
    apt-get install -y -qq docker.io tini >/dev/null
fi

engine_up() { timeout 10 docker info >/dev/null 2>&1; }

if engine_up; then
    echo "dockerd already answering"
    exit 0
fi

# The default engine may exist but not answer yet (still starting) -> only wait. Only its
# pid file counts: a test's own dockerd (own --pidfile and socket) is not the default one.
if [ -f /var/run/docker.pid ] && kill -0 "$(cat /var/run/docker.pid)" 2>/dev/null; then
    echo "dockerd process exists (pid $(cat /var/run/docker.pid)), waiting for it"
else
    # Stale pid file from a killed dockerd prevents start-up.
    rm -f /var/run/docker.pid
    echo "starting dockerd (log: $LOG)"
    nohup setsid dockerd --iptables=false --bridge=none >>"$LOG" 2>&1 </dev/null &
fi

deadline=$(( $(date +%s) + TIMEOUT ))
until engine_up; do
    if [ "$(date +%s)" -ge "$deadline" ]; then
        echo "dockerd did not answer within ${TIMEOUT}s; tail of $LOG:" >&2
        tail -n 30 "$LOG" >&2 || true
        exit 1
    fi
    sleep 1
done
echo "dockerd up: server $(docker version --format '{{.Server.Version}} (API {{.Server.APIVersion}})')"
