#!/usr/bin/env bash
# Builds a real Argo CD for testenv's GitOps e2e (controller/tests/argocd/main.rs) from its pinned
# upstream Go module (no binary downloads), plus redis-server from Debian if it is missing.
# Output: ${XDG_CACHE_HOME:-$HOME/.cache}/pseudoflow/argocd-$ARGOCD_VERSION/
#   bin/argocd (one binary that picks its role from its name) and the symlinks
#   argocd-server, argocd-repo-server, argocd-application-controller;
#   bin/git-verify-wrapper.sh, bin/git-ask-pass.sh (the repo-server needs them on its PATH);
#   crds/ (the module's manifests/crds); bin/.stamp.
# A second run with the binary present and the stamp matching returns at once.
set -euo pipefail

ARGOCD_VERSION="${ARGOCD_VERSION:-v3.6.1}"
# Argo CD v3.6's go.mod says go 1.27.0: the toolchain comes from the Go module proxy.
ARGOCD_GOTOOLCHAIN="${ARGOCD_GOTOOLCHAIN:-go1.27.3}"
CACHE="${XDG_CACHE_HOME:-$HOME/.cache}/pseudoflow"
OUT="$CACHE/argocd-$ARGOCD_VERSION"
BIN="$OUT/bin"
STAMP="$BIN/.stamp"
WANT_STAMP="argocd=$ARGOCD_VERSION go=$ARGOCD_GOTOOLCHAIN layout=1"
ROLES=(argocd-server argocd-repo-server argocd-application-controller)

install_redis() {
  command -v redis-server >/dev/null && return 0
  echo "installing redis-server from Debian (Argo CD's cache)"
  apt-get update -qq && apt-get install -y -qq redis-server
}

have_all() {
  [ -f "$STAMP" ] && [ "$(cat "$STAMP")" = "$WANT_STAMP" ] || return 1
  [ -x "$BIN/argocd" ] && [ -x "$BIN/git-verify-wrapper.sh" ] && [ -x "$BIN/git-ask-pass.sh" ] || return 1
  [ -d "$OUT/crds" ] || return 1
  for r in "${ROLES[@]}"; do [ -L "$BIN/$r" ] || return 1; done
}

install_redis
if have_all; then
  echo "argocd ($WANT_STAMP) cached in $BIN"
  exit 0
fi

GO="$(command -v go || true)"
[ -n "$GO" ] || { [ -x /usr/local/go/bin/go ] && GO=/usr/local/go/bin/go; }
if [ -z "$GO" ]; then
  echo "error: no Go toolchain found (need go in PATH or /usr/local/go/bin) to build Argo CD $ARGOCD_VERSION" >&2
  exit 1
fi

export GOMODCACHE="$CACHE/go/mod" GOCACHE="$CACHE/go/build" CGO_ENABLED=0
export GOFLAGS="-mod=mod" GOTOOLCHAIN="$ARGOCD_GOTOOLCHAIN"
mkdir -p "$BIN"
start=$(date +%s)

echo "downloading github.com/argoproj/argo-cd/v3@$ARGOCD_VERSION (toolchain $ARGOCD_GOTOOLCHAIN)"
moddir="$("$GO" mod download -json "github.com/argoproj/argo-cd/v3@$ARGOCD_VERSION" | sed -n 's/.*"Dir": "\(.*\)",/\1/p')"
[ -d "$moddir" ] || { echo "error: go mod download gave no module directory for argo-cd $ARGOCD_VERSION" >&2; exit 1; }

# The module cache is read-only, and its go.mod points gitops-engine at ./gitops-engine, which
# the published module lacks: copy it out and take gitops-engine/v3 from the proxy instead.
SRC="$OUT/src"
rm -rf "$SRC"
cp -r "$moddir" "$SRC"
chmod -R u+w "$SRC"
cd "$SRC"
"$GO" mod edit -dropreplace=github.com/argoproj/argo-cd/gitops-engine/v3
"$GO" mod download
echo "building argocd $ARGOCD_VERSION (first time: ~15 min on 2 cores)"
"$GO" build -trimpath -ldflags="-s -w -X github.com/argoproj/argo-cd/v3/common.version=${ARGOCD_VERSION#v}" \
  -o "$BIN/argocd" ./cmd

rm -rf "$OUT/crds"
cp -r "$SRC/manifests/crds" "$OUT/crds"
install -m 0755 "$SRC/hack/git-verify-wrapper.sh" "$BIN/git-verify-wrapper.sh"
install -m 0755 "$SRC/hack/git-ask-pass.sh" "$BIN/git-ask-pass.sh"
for r in "${ROLES[@]}"; do ln -sfn argocd "$BIN/$r"; done
# The source is kept for reading (server/application actions, impersonation) only while small.
if [ "$(du -sm "$SRC" | cut -f1)" -gt 200 ]; then rm -rf "$SRC"; fi

echo "$WANT_STAMP" > "$STAMP"
echo "argocd built in $(( $(date +%s) - start ))s into $BIN"
