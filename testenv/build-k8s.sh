#!/usr/bin/env bash
# Builds the real control plane for testenv from pinned upstream Go modules (no binary
# downloads): etcd, kube-apiserver, kube-controller-manager, kube-scheduler and kubectl, and
# kubelet and kube-proxy for testenv's real nodes.
# Output: ${XDG_CACHE_HOME:-$HOME/.cache}/pseudoflow/k8s-$K8S_VERSION/bin. A second run with
# the binaries present and the stamp matching returns at once.
# `build-k8s.sh --kubectl-only DIR` builds only kubectl, into DIR: the runtime image's kubectl
# (runtime-image/Dockerfile), the same version and build as testenv's.
set -euo pipefail

KUBECTL_ONLY=""
if [ "${1:-}" = "--kubectl-only" ]; then
  KUBECTL_ONLY="${2:?usage: build-k8s.sh --kubectl-only DIR}"
fi

K8S_VERSION="${K8S_VERSION:-v1.34.4}"   # matches k8s-openapi's v1_34 feature in Cargo.toml
ETCD_VERSION="${ETCD_VERSION:-v3.6.4}"  # the etcd that Kubernetes $K8S_VERSION requires
CACHE="${XDG_CACHE_HOME:-$HOME/.cache}/pseudoflow"
OUT="$CACHE/k8s-$K8S_VERSION"
BIN="$OUT/bin"
STAMP="$BIN/.stamp"
WANT_STAMP="k8s=$K8S_VERSION etcd=$ETCD_VERSION layout=3"
# A binary missing here (or an older stamp: layout 2 had no kubelet/kube-proxy) rebuilds; with
# the Go build cache warm that is mostly linking.
BINARIES=(etcd kube-apiserver kube-controller-manager kube-scheduler kubectl kubelet kube-proxy)

have_all() {
  [ -f "$STAMP" ] && [ "$(cat "$STAMP")" = "$WANT_STAMP" ] || return 1
  for b in "${BINARIES[@]}"; do [ -x "$BIN/$b" ] || return 1; done
}

if [ -z "$KUBECTL_ONLY" ] && have_all; then
  echo "k8s binaries ($WANT_STAMP) cached in $BIN"
  exit 0
fi

GO="$(command -v go || true)"
[ -n "$GO" ] || { [ -x /usr/local/go/bin/go ] && GO=/usr/local/go/bin/go; }
if [ -z "$GO" ]; then
  echo "error: no Go toolchain found (need go >= 1.24 in PATH or /usr/local/go/bin) to build Kubernetes $K8S_VERSION" >&2
  exit 1
fi
GOVER="$("$GO" env GOVERSION | sed 's/^go//')"
if [ "$(printf '%s\n1.24\n' "$GOVER" | sort -V | head -1)" != "1.24" ]; then
  echo "error: Go $GOVER is too old; Kubernetes $K8S_VERSION needs Go >= 1.24" >&2
  exit 1
fi

export GOMODCACHE="$CACHE/go/mod" GOCACHE="$CACHE/go/build" GOFLAGS="-trimpath -mod=mod" CGO_ENABLED=0
export GOTOOLCHAIN=local
mkdir -p "$BIN" "$OUT/src"
start=$(date +%s)

# kube-* from k8s.io/kubernetes: each staging module (k8s.io/api, ...) is published as its own
# v0.X.Y module; k8s.io/kubernetes' go.mod points them at ./staging, so map them to releases.
SRC="$OUT/src/kube"
mkdir -p "$SRC" && cd "$SRC"
if [ ! -f go.mod ]; then
  "$GO" mod init pseudoflow.local/k8s-build >/dev/null 2>&1
  "$GO" mod edit -go=1.24.0 -require="k8s.io/kubernetes@$K8S_VERSION"
  modfile="$("$GO" mod download -json "k8s.io/kubernetes@$K8S_VERSION" | sed -n 's/.*"GoMod": "\(.*\)",/\1/p')"
  minor="v0.${K8S_VERSION#v1.}"
  for m in $(sed -n 's#^\s*\(k8s.io/[a-z0-9-]*\) => ./staging/.*#\1#p' "$modfile"); do
    "$GO" mod edit -replace="$m=$m@$minor"
  done
  cat > tools.go <<'GO'
//go:build tools

package tools
GO
fi
minor_num="${K8S_VERSION#v1.}"; minor_num="${minor_num%%.*}"
VERSION_FLAGS="-X k8s.io/component-base/version.gitVersion=$K8S_VERSION -X k8s.io/component-base/version.gitMajor=1 -X k8s.io/component-base/version.gitMinor=$minor_num -X k8s.io/component-base/version.gitTreeState=clean"
VERSION_FLAGS="$VERSION_FLAGS -X k8s.io/client-go/pkg/version.gitVersion=$K8S_VERSION -X k8s.io/client-go/pkg/version.gitMajor=1 -X k8s.io/client-go/pkg/version.gitMinor=$minor_num"
if [ -n "$KUBECTL_ONLY" ]; then
  echo "building kubectl $K8S_VERSION into $KUBECTL_ONLY"
  mkdir -p "$KUBECTL_ONLY"
  "$GO" build -ldflags="-s -w $VERSION_FLAGS" -o "$KUBECTL_ONLY/kubectl" k8s.io/kubernetes/cmd/kubectl
  exit 0
fi
echo "building kube-apiserver, kube-controller-manager, kube-scheduler, kubectl, kubelet, kube-proxy $K8S_VERSION (first time: ~20-40 min on 2 cores)"
"$GO" build -ldflags="-s -w $VERSION_FLAGS" -o "$BIN/" \
  k8s.io/kubernetes/cmd/kube-apiserver \
  k8s.io/kubernetes/cmd/kube-controller-manager \
  k8s.io/kubernetes/cmd/kube-scheduler \
  k8s.io/kubernetes/cmd/kubectl \
  k8s.io/kubernetes/cmd/kubelet \
  k8s.io/kubernetes/cmd/kube-proxy

# etcd: the server module's own main package, in a module of its own (its go.mod has no
# replace directives, so it builds as published).
ESRC="$OUT/src/etcd"
mkdir -p "$ESRC" && cd "$ESRC"
if [ ! -f go.mod ]; then
  "$GO" mod init pseudoflow.local/etcd-build >/dev/null 2>&1
  "$GO" mod edit -require="go.etcd.io/etcd/server/v3@$ETCD_VERSION"
fi
echo "building etcd $ETCD_VERSION"
"$GO" build -ldflags="-s -w" -o "$BIN/etcd" go.etcd.io/etcd/server/v3

echo "$WANT_STAMP" > "$STAMP"
echo "k8s binaries built in $(( $(date +%s) - start ))s into $BIN"
