#!/bin/sh
# The main job on the embedded default (the local driver, no configuration needed):
# acquire a lease, sync a folder in, run a command there, sync the results out, show the
# capability matrix, release. Set ENVRT to the binary (default: envrt on PATH) and
# ENVRT_STATE_DIR to keep its state somewhere else than ~/.local/state/envrt.
set -eu
ENVRT=${ENVRT:-envrt}

work=$(mktemp -d)
lease=
cleanup() {
    if [ -n "$lease" ]; then "$ENVRT" lease release "$lease" >/dev/null 2>&1 || true; fi
    rm -rf "$work"
}
trap cleanup EXIT INT TERM

mkdir -p "$work/project/data"
printf 'pear\napple\nfig\n' > "$work/project/data/fruit.txt"

# The lease is held by this script's shell: if the script dies, `envrt gc` cleans up.
lease=$("$ENVRT" lease acquire)
echo "lease: $lease"
"$ENVRT" cp --quiet "$work/project" "lease:$lease:project"
"$ENVRT" exec --lease "$lease" --cwd project -- \
    sh -c 'mkdir -p out && sort data/fruit.txt > out/sorted.txt && wc -l < out/sorted.txt'
"$ENVRT" cp --quiet "lease:$lease:project/out" "$work/out"
echo "sorted:"
cat "$work/out/sorted.txt"
"$ENVRT" caps
"$ENVRT" lease release "$lease"
lease=
