#!/usr/bin/env bash
# Tools the chart checks need, built or installed without downloading binaries:
# helm (from its Go module, cached), promtool (Debian's prometheus), lua (Debian's lua5.4).
set -euo pipefail
HELM_VERSION="${HELM_VERSION:-v3.19.5}"
TOOLS="${XDG_CACHE_HOME:-$HOME/.cache}/pseudoflow/tools"
mkdir -p "$TOOLS"
export PATH="/usr/local/go/bin:$PATH" GOTOOLCHAIN=local
if [ ! -x "$TOOLS/helm-$HELM_VERSION" ]; then
  echo "building helm $HELM_VERSION from its Go module"
  GOBIN="$TOOLS/gobin" GOMODCACHE="${XDG_CACHE_HOME:-$HOME/.cache}/pseudoflow/go/mod" \
    GOCACHE="${XDG_CACHE_HOME:-$HOME/.cache}/pseudoflow/go/build" CGO_ENABLED=0 \
    go install -trimpath -ldflags="-s -w" "helm.sh/helm/v3/cmd/helm@$HELM_VERSION"
  mv "$TOOLS/gobin/helm" "$TOOLS/helm-$HELM_VERSION"
fi
ln -sf "$TOOLS/helm-$HELM_VERSION" "$TOOLS/helm"
missing=()
command -v promtool >/dev/null || missing+=(prometheus)
command -v lua5.4 >/dev/null || missing+=(lua5.4)
if [ ${#missing[@]} -gt 0 ]; then
  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${missing[@]}"
fi
echo "tools: $TOOLS/helm, $(command -v promtool), $(command -v lua5.4)"
