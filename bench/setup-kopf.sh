#!/usr/bin/env bash
# A venv with pinned kopf + the `kubernetes` Python client, from PyPI, for the kopf baseline of
# `make bench` (section `kopf`: the operator of bench/kopf/operator.py).
# Output: ${XDG_CACHE_HOME:-$HOME/.cache}/pseudoflow/kopf-venv (bin/kopf).
# A second run with the same requirements returns at once.
set -euo pipefail

HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
REQ="$HERE/kopf/requirements.txt"
CACHE="${XDG_CACHE_HOME:-$HOME/.cache}/pseudoflow"
VENV="${PSEUDOFLOW_KOPF_VENV:-$CACHE/kopf-venv}"
STAMP="$VENV/.stamp"
WANT="$(sha256sum "$REQ" | cut -d' ' -f1)"

if [ -x "$VENV/bin/kopf" ] && [ -f "$STAMP" ] && [ "$(cat "$STAMP")" = "$WANT" ]; then
  echo "kopf venv cached in $VENV"
  exit 0
fi

PY="${PYTHON:-$(command -v python3 || true)}"
[ -n "$PY" ] || { echo "error: python3 (>= 3.10, for kopf 1.45) is needed for the kopf baseline" >&2; exit 1; }
start=$(date +%s)
rm -rf "$VENV"
"$PY" -m venv "$VENV"
"$VENV/bin/python" -m pip install -q --disable-pip-version-check --no-input -r "$REQ"
"$VENV/bin/kopf" --version >/dev/null
echo "$WANT" > "$STAMP"
echo "kopf venv built in $(( $(date +%s) - start ))s in $VENV: $("$VENV/bin/kopf" --version)"
