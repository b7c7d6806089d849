#!/bin/sh
# PID 1 of one testenv real node, started by testenv (src/real_node/) under
#   unshare --mount --pid --uts --ipc --net --fork --kill-child
# so the node has its own mount, PID, UTS, IPC and network namespaces: when this process dies,
# the kernel kills every process of the node (containerd, shims, containers, kubelet,
# kube-proxy), and the node's mounts, network namespace (iptables rules, the CNI bridge, its
# veth) go with them.
#
# It builds the node's root and pivots into it: a tmpfs with the machine's /usr read-only (and
# the merged-/usr links bin, sbin, lib, lib64), the node's own writable etc, var, run, tmp, root
# from $NODE_DIR/root (what testenv calls the node root), fresh /proc and /sys, the machine's
# /dev and cgroup hierarchies, the Kubernetes binaries and the OCI images read-only. Then it
# configures eth0 (moved in by testenv), starts containerd, imports the images, and supervises
# kubelet and kube-proxy: `systemctl restart kubelet` (the stand-in at /usr/local/sbin/systemctl)
# makes the supervisor start a new kubelet.
#
# Environment: NODE_NAME NODE_DIR NODE_IP NODE_PREFIX GATEWAY K8S_BIN IMAGES_DIR CGROUP_ROOT
# PAUSE_IMAGE
set -eu
R="$NODE_DIR/mnt"
mkdir -p "$R"
mount --make-rprivate /
mount -t tmpfs -o mode=0755 node-root "$R"
for d in usr etc var run tmp root proc sys dev opt/k8s/bin images; do mkdir -p "$R/$d"; done
for l in bin sbin lib lib64; do [ -L "/$l" ] && ln -s "usr/$l" "$R/$l"; done
mount --bind /usr "$R/usr" && mount -o remount,bind,ro "$R/usr"
mount --bind "$NODE_DIR/root/.pseudoflow/sbin" "$R/usr/local/sbin"
for d in etc var run tmp root; do mount --bind "$NODE_DIR/root/$d" "$R/$d"; done
mount --bind "$K8S_BIN" "$R/opt/k8s/bin" && mount -o remount,bind,ro "$R/opt/k8s/bin"
mount --bind "$IMAGES_DIR" "$R/images" && mount -o remount,bind,ro "$R/images"
mount -t proc proc "$R/proc"
mount -t sysfs sysfs "$R/sys"
mount --rbind /sys/fs/cgroup "$R/sys/fs/cgroup"
mount --rbind /dev "$R/dev"
cd "$R" && mkdir .old && pivot_root . .old && umount -l /.old && rmdir /.old && cd /
export PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin:/opt/k8s/bin
hostname "$NODE_NAME"

# The kubelet's and the pods' cgroups live under $CGROUP_ROOT in every hierarchy (cgroup v1; the
# hierarchies are the machine's, testenv removes these directories when the node goes).
for h in /sys/fs/cgroup/*/; do mkdir -p "$h${CGROUP_ROOT#/}" 2>/dev/null || true; done

# Network: eth0 is one end of a veth whose other end is on testenv's bridge on the machine.
ip link set lo up
i=0; while ! ip link show eth0 >/dev/null 2>&1; do i=$((i+1)); [ $i -lt 200 ] || { echo "no eth0" >&2; exit 1; }; sleep 0.05; done
ip addr add "$NODE_IP/$NODE_PREFIX" dev eth0
ip link set eth0 up
# No default route: a node reaches its bridge (the API server, the other nodes) and the Service
# range, nothing beyond this machine. An image that is not imported fails to pull at once
# (ErrImagePull), as on an offline cluster, instead of trying a registry.
ip route add 100.64.0.0/16 via "$GATEWAY"
echo 1 > /proc/sys/net/ipv4/ip_forward
echo 1 > /proc/sys/net/ipv4/conf/all/route_localnet 2>/dev/null || true

mkdir -p /run/pseudoflow /var/log
echo $$ > /run/pseudoflow/init.pid
containerd --config /etc/containerd/config.toml > /var/log/containerd.log 2>&1 &
i=0; while [ ! -S /run/containerd/containerd.sock ]; do i=$((i+1)); [ $i -lt 400 ] || { echo "containerd did not start" >&2; tail /var/log/containerd.log >&2; exit 1; }; sleep 0.05; done
for img in /images/*.oci.tar; do
  [ -f "$img" ] || continue
  ctr -n k8s.io images import --no-unpack=false "$img" >> /var/log/images.log 2>&1 \
    || { echo "importing $img failed" >&2; tail /var/log/images.log >&2; exit 1; }
done
# The declared stand-ins (testenv/src/standins.rs): the pause image under each workload's name.
if [ -f /etc/pseudoflow/stand-ins ]; then
  while read -r ref; do
    [ -n "$ref" ] || continue
    ctr -n k8s.io images tag --force "$PAUSE_IMAGE" "$ref" >> /var/log/images.log 2>&1 \
      || { echo "tagging stand-in $ref failed" >&2; tail /var/log/images.log >&2; exit 1; }
  done < /etc/pseudoflow/stand-ins
fi
echo images-imported > /run/pseudoflow/images

# Supervise a service: start it again when it exits (after `systemctl restart`, which kills it).
supervise() {
  name=$1; shift
  ( while :; do
      "$@" >> "/var/log/$name.log" 2>&1 &
      echo $! > "/run/pseudoflow/$name.pid"
      wait $! || true
      [ -f "/run/pseudoflow/$name.stopped" ] && while [ -f "/run/pseudoflow/$name.stopped" ]; do sleep 0.2; done
      sleep 0.2
    done ) &
}
supervise kubelet kubelet --config=/var/lib/kubelet/config.yaml --kubeconfig=/etc/kubernetes/kubelet.conf \
  --hostname-override="$NODE_NAME" --node-ip="$NODE_IP" $KUBELET_EXTRA_ARGS
supervise kube-proxy kube-proxy --config=/var/lib/kube-proxy/config.yaml --hostname-override="$NODE_NAME"
trap 'exit 0' TERM INT
while :; do sleep 3600 & wait $! || true; done
