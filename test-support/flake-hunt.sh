#!/bin/bash
# Runs one controller e2e test binary N times with CPU load beside it (stress-ng), to find tests
# that pass only when the machine is idle. Usage: test-support/flake-hunt.sh BINARY N [FILTER]
# (e.g. `test-support/flake-hunt.sh bound 5`, or `... bound 20 in_object::switching`).
# Needs CARGO_TARGET_DIR set as for any test run, stress-ng (apt-get install stress-ng) and the
# testenv binaries. Logs: $HUNT_DIR (default /tmp/flake-hunt)/BINARY-I.log; one line per run.
set -u
bin=$1 n=$2 filter=${3:-}
dir=${HUNT_DIR:-/tmp/flake-hunt}
mkdir -p "$dir"
stress-ng --cpu 2 --cpu-load "${HUNT_LOAD:-60}" --timeout 3600s >/dev/null 2>&1 &
load=$!
trap 'kill $load 2>/dev/null' EXIT
for i in $(seq 1 "$n"); do
  start=$(date +%s)
  cargo test --locked -p pseudoflow-controller --test "$bin" -- $filter >"$dir/$bin-$i.log" 2>&1
  rc=$?
  echo "$bin run $i: rc=$rc $(($(date +%s) - start))s $(grep -E '^test result' "$dir/$bin-$i.log")"
  grep -E '^test .* FAILED$' "$dir/$bin-$i.log"
done
