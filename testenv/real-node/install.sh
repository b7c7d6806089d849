#!/usr/bin/env bash
# Installs what testenv's real nodes and `make images` need from Debian's packages, if missing:
# containerd + runc (the container runtime), the CNI plugins (bridge, host-local, loopback),
# iptables and conntrack (kube-proxy), iproute2 (veth, bridge, netns), mmdebstrap (the image
# root filesystems, from Debian packages, no base image pulled) and musl-tools (the static
# pseudoflow-step). Idempotent: with everything present it only checks and returns.
set -euo pipefail

need=()
have() { command -v "$1" >/dev/null 2>&1 || [ -x "/usr/sbin/$1" ] || [ -x "/usr/bin/$1" ]; }
have containerd || need+=(containerd)
have runc || need+=(runc)
[ -x /usr/lib/cni/bridge ] || [ -x /opt/cni/bin/bridge ] || need+=(containernetworking-plugins)
have iptables || need+=(iptables)
have conntrack || need+=(conntrack)
have ip || need+=(iproute2)
have nsenter || need+=(util-linux)
have mmdebstrap || need+=(mmdebstrap)
have musl-gcc || need+=(musl-tools)
have openssl || need+=(openssl)

if [ ${#need[@]} -gt 0 ]; then
  echo "real-node setup: installing ${need[*]}"
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  apt-get install -y -qq --no-install-recommends "${need[@]}" >/dev/null
fi

# kube-proxy and the bridge plugin use iptables; Debian's default is the nft backend, which
# works in a fresh network namespace like the legacy one. Nothing to switch.

# The static musl target for pseudoflow-step (the Dockerfile's build stage does the same).
if command -v rustup >/dev/null 2>&1; then
  rustup target list --installed 2>/dev/null | grep -qx x86_64-unknown-linux-musl \
    || rustup target add x86_64-unknown-linux-musl >/dev/null 2>&1 \
    || echo "real-node setup: rustup could not add x86_64-unknown-linux-musl; images use glibc" >&2
fi
