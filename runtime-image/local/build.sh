#!/usr/bin/env bash
# `make images`: builds the runtime image (runtime-image/Dockerfile's image), the controller
# image (controller/Dockerfile's) and the pause image of testenv's real nodes as OCI archives,
# here, without a registry or a container engine:
#   - the root filesystem from Debian packages with mmdebstrap: the minbase variant (what
#     debian:bookworm-slim is) plus every package runtime-image/tools.txt lists;
#   - kubectl from testenv/build-k8s.sh (`make k8s`), the Dockerfile's kubectl stage;
#   - pseudoflow-step, a static musl release build (the Dockerfile's build stage);
#   - user 65532:65532, entrypoint and cmd as the Dockerfile says (a test keeps them in sync:
#     testenv/tests/images.rs).
# Output: ${XDG_CACHE_HOME:-~/.cache}/pseudoflow/images/{runtime,controller,pause}.oci.tar (never in the
# repository), then their sizes. The Debian root filesystem is cached per tools.txt content.
set -euo pipefail
cd "$(dirname "$0")/../.."
ROOT="$PWD"
CACHE="${XDG_CACHE_HOME:-$HOME/.cache}/pseudoflow"
OUT="$CACHE/images"
WORK="$OUT/work"
K8S_BIN="$CACHE/k8s-${K8S_VERSION:-v1.34.4}/bin"
SUITE=bookworm
RUNTIME_NAME="${RUNTIME_IMAGE:-docker.io/pseudoflow/runtime:local}"
PAUSE_NAME="${PAUSE_IMAGE:-docker.io/pseudoflow/pause:local}"
CONTROLLER_NAME="${CONTROLLER_IMAGE:-docker.io/pseudoflow/controller:local}"
mkdir -p "$WORK"
start=$(date +%s)

bash testenv/real-node/install.sh
[ -x "$K8S_BIN/kubectl" ] || bash testenv/build-k8s.sh

# ---- the Debian root filesystem (cached by the package list and suite) ----
pkgs="$(sed -n 's/^\([a-z0-9.+-]*\):.*/\1/p' runtime-image/tools.txt | paste -sd, -)"
key="$(printf '%s %s minbase v1' "$SUITE" "$pkgs" | sha256sum | cut -c1-16)"
base="$WORK/base-$key.tar"
if [ ! -f "$base" ]; then
  echo "images: Debian $SUITE minbase + $pkgs (mmdebstrap)"
  mmdebstrap --quiet --variant=minbase --include="$pkgs" \
    --dpkgopt='path-exclude=/usr/share/doc/*' --dpkgopt='path-exclude=/usr/share/man/*' \
    --dpkgopt='path-exclude=/usr/share/locale/*' --dpkgopt='path-exclude=/usr/share/info/*' \
    --customize-hook='rm -rf "$1"/var/cache/* "$1"/var/log/*' \
    "$SUITE" "$WORK/partial.tar"   # the .tar suffix makes mmdebstrap write a tarball
  mv "$WORK/partial.tar" "$base"
fi

# ---- pseudoflow-step: static (musl) when the target is installed, as in the Dockerfile ----
export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-$CACHE/target}"
if rustup target list --installed 2>/dev/null | grep -qx x86_64-unknown-linux-musl; then
  CC_x86_64_unknown_linux_musl=musl-gcc cargo build --release --locked -q \
    --target x86_64-unknown-linux-musl -p pseudoflow-runtime --bin pseudoflow-step
  step="$CARGO_TARGET_DIR/x86_64-unknown-linux-musl/release/pseudoflow-step"
else
  echo "images: no musl target; pseudoflow-step is a glibc build (bookworm's libc is in the image)"
  cargo build --release --locked -q -p pseudoflow-runtime --bin pseudoflow-step
  step="$CARGO_TARGET_DIR/release/pseudoflow-step"
fi

# ---- the layer on top: /usr/local/bin/{kubectl,pseudoflow-step}, root-owned, fixed mtime ----
top="$WORK/runtime-top"
rm -rf "$top" && mkdir -p "$top/usr/local/bin"
install -m 0755 "$K8S_BIN/kubectl" "$top/usr/local/bin/kubectl"
install -m 0755 "$step" "$top/usr/local/bin/pseudoflow-step"
tar --sort=name --mtime=@0 --owner=0 --group=0 --numeric-owner -C "$top" -cf "$WORK/runtime-top.tar" .

# Packed again only when a layer or the name changed (gzip of 200 MiB takes ~10 s).
stamp="$key $(sha256sum < "$WORK/runtime-top.tar" | cut -c1-16) $RUNTIME_NAME $(sha256sum < runtime-image/local/oci-pack.py | cut -c1-16)"
if [ -f "$OUT/runtime.oci.tar" ] && [ "$(cat "$OUT/runtime.stamp" 2>/dev/null)" = "$stamp" ]; then
  echo "$RUNTIME_NAME: unchanged"
else
python3 runtime-image/local/oci-pack.py "$OUT/runtime.oci.tar" "$RUNTIME_NAME" \
  --user 65532:65532 \
  --entrypoint '["/usr/local/bin/pseudoflow-step"]' \
  --cmd '["run", "--input", "/etc/pseudoflow/input/input.json"]' \
  "$base" "$WORK/runtime-top.tar"
echo "$stamp" > "$OUT/runtime.stamp"
fi

# ---- controller: controller/Dockerfile's image (distroless/static:nonroot + the static binary).
# The distroless base's files, from the Debian root filesystem: CA certificates, a passwd and
# group naming nonroot (65532), a sticky /tmp. Without the musl target the binary is a glibc
# build, and the image gets the Debian root filesystem underneath (its libc) instead.
cdir="$WORK/controller" && rm -rf "$cdir" && mkdir -p "$cdir/usr/local/bin" "$cdir/etc/ssl/certs" "$cdir/tmp"
if rustup target list --installed 2>/dev/null | grep -qx x86_64-unknown-linux-musl; then
  CC_x86_64_unknown_linux_musl=musl-gcc cargo build --release --locked -q \
    --target x86_64-unknown-linux-musl -p pseudoflow-controller --bin pseudoflow-controller
  ctl="$CARGO_TARGET_DIR/x86_64-unknown-linux-musl/release/pseudoflow-controller"
  controller_layers=("$WORK/controller.tar")
  chmod 1777 "$cdir/tmp"
  tar -xOf "$base" ./etc/ssl/certs/ca-certificates.crt > "$cdir/etc/ssl/certs/ca-certificates.crt"
  printf 'root:x:0:0:root:/root:/sbin/nologin\nnonroot:x:65532:65532:nonroot:/home/nonroot:/sbin/nologin\n' > "$cdir/etc/passwd"
  printf 'root:x:0:\nnonroot:x:65532:\n' > "$cdir/etc/group"
else
  echo "images: no musl target: the controller is a glibc build on the Debian root filesystem"
  cargo build --release --locked -q -p pseudoflow-controller --bin pseudoflow-controller
  ctl="$CARGO_TARGET_DIR/release/pseudoflow-controller"
  controller_layers=("$base" "$WORK/controller.tar")
  rm -rf "$cdir/etc" "$cdir/tmp"
fi
install -m 0755 "$ctl" "$cdir/usr/local/bin/pseudoflow-controller"
tar --sort=name --mtime=@0 --owner=0 --group=0 --numeric-owner -C "$cdir" -cf "$WORK/controller.tar" .
python3 runtime-image/local/oci-pack.py "$OUT/controller.oci.tar" "$CONTROLLER_NAME" \
  --user 65532:65532 --entrypoint '["/usr/local/bin/pseudoflow-controller"]' "${controller_layers[@]}"
built="runtime pause controller"

# ---- pause: one static binary ----
pdir="$WORK/pause" && rm -rf "$pdir" && mkdir -p "$pdir"
musl-gcc -static -Os -s -o "$pdir/pause" runtime-image/local/pause.c
tar --sort=name --mtime=@0 --owner=0 --group=0 --numeric-owner -C "$pdir" -cf "$WORK/pause.tar" pause
python3 runtime-image/local/oci-pack.py "$OUT/pause.oci.tar" "$PAUSE_NAME" \
  --user 65535:65535 --entrypoint '["/pause"]' "$WORK/pause.tar"

# The names the real nodes import them under, for testenv.
printf 'runtime=%s\npause=%s\ncontroller=%s\n' "$RUNTIME_NAME" "$PAUSE_NAME" "$CONTROLLER_NAME" > "$OUT/names"
echo "images built in $(( $(date +%s) - start ))s into $OUT:"
for f in $built; do
  printf '  %-8s %s (%s compressed archive)\n' "$f" "$OUT/$f.oci.tar" \
    "$(numfmt --to=iec-i --suffix=B --format=%.1f "$(stat -c %s "$OUT/$f.oci.tar")")"
done
printf '  runtime root filesystem uncompressed: %s MiB\n' \
  "$(awk -v a="$(stat -c %s "$base")" -v b="$(stat -c %s "$WORK/runtime-top.tar")" 'BEGIN{printf "%.1f", (a+b)/1048576}')"
