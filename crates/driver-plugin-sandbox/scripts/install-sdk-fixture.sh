#!/usr/bin/env bash
# Installs the pinned @paperclipai/plugin-sdk for the SDK-built fixture worker used by
# this crate's interop tests (tests/fixtures/sdk-worker). Needs node and npm.
set -euo pipefail
cd "$(dirname "$0")/../tests/fixtures/sdk-worker"
if [ -f package-lock.json ]; then
  npm ci --no-audit --no-fund --loglevel=error
else
  npm install --no-audit --no-fund --loglevel=error
fi
