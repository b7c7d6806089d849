#!/usr/bin/env bash
# A venv with pinned ansible-core + kubernetes.core (bundled in the `ansible` package) + the
# `kubernetes` Python client, from PyPI, for the Ansible baseline of `make bench`.
# Output: ${XDG_CACHE_HOME:-$HOME/.cache}/pseudoflow/ansible-venv (bin/ansible-playbook).
# A second run with the same requirements returns at once.
set -euo pipefail

HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
REQ="$HERE/ansible/requirements.txt"
CACHE="${XDG_CACHE_HOME:-$HOME/.cache}/pseudoflow"
VENV="${PSEUDOFLOW_ANSIBLE_VENV:-$CACHE/ansible-venv}"
STAMP="$VENV/.stamp"
WANT="$(sha256sum "$REQ" | cut -d' ' -f1)"

if [ -x "$VENV/bin/ansible-playbook" ] && [ -f "$STAMP" ] && [ "$(cat "$STAMP")" = "$WANT" ]; then
  echo "ansible venv cached in $VENV"
  exit 0
fi

PY="${PYTHON:-$(command -v python3 || true)}"
[ -n "$PY" ] || { echo "error: python3 (>= 3.11, for ansible-core 2.19) is needed for the Ansible baseline" >&2; exit 1; }
start=$(date +%s)
rm -rf "$VENV"
"$PY" -m venv "$VENV"
"$VENV/bin/python" -m pip install -q --disable-pip-version-check --no-input -r "$REQ"
# The collection the playbook uses must be there (bundled by the `ansible` package).
"$VENV/bin/ansible-doc" -t module kubernetes.core.k8s >/dev/null
echo "$WANT" > "$STAMP"
echo "ansible venv built in $(( $(date +%s) - start ))s in $VENV: $("$VENV/bin/ansible-playbook" --version | head -1)"
