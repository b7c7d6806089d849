#!/usr/bin/env python3
"""Packs layer tarballs into an OCI image archive (oci-layout, index.json, blobs/sha256/...) that
`ctr images import` and `docker load`/`podman load` accept, with no registry and no image tool.

usage: oci-pack.py OUT.tar NAME --user U --entrypoint JSON --cmd JSON [--env K=V ...] LAYER.tar...
Layers are plain tars, applied in order; each is stored gzip-compressed (deterministically:
no timestamp in the gzip header), so the same inputs give the same image digest.
"""
import argparse, gzip, hashlib, io, json, os, tarfile

p = argparse.ArgumentParser()
p.add_argument("out")
p.add_argument("name", help="reference, e.g. docker.io/pseudoflow/runtime:local")
p.add_argument("--user", default="")
p.add_argument("--entrypoint", default="null")
p.add_argument("--cmd", default="null")
p.add_argument("--env", action="append", default=[])
p.add_argument("--workdir", default="/")
p.add_argument("layers", nargs="+")
a = p.parse_args()

blobs = {}

def add(data: bytes, media: str):
    d = hashlib.sha256(data).hexdigest()
    blobs[d] = data
    return {"mediaType": media, "digest": "sha256:" + d, "size": len(data)}

layers, diff_ids = [], []
for path in a.layers:
    raw = open(path, "rb").read()
    diff_ids.append("sha256:" + hashlib.sha256(raw).hexdigest())
    buf = io.BytesIO()
    with gzip.GzipFile(fileobj=buf, mode="wb", mtime=0, compresslevel=6) as g:
        g.write(raw)
    layers.append(add(buf.getvalue(), "application/vnd.oci.image.layer.v1.tar+gzip"))

env = ["PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"] + a.env
config = {
    "architecture": "amd64",
    "os": "linux",
    "created": "1970-01-01T00:00:00Z",
    "config": {
        "User": a.user,
        "Env": env,
        "Entrypoint": json.loads(a.entrypoint),
        "Cmd": json.loads(a.cmd),
        "WorkingDir": a.workdir,
    },
    "rootfs": {"type": "layers", "diff_ids": diff_ids},
    "history": [{"created": "1970-01-01T00:00:00Z", "created_by": "pseudoflow make images"}],
}
cfg = add(json.dumps(config, sort_keys=True, separators=(",", ":")).encode(),
          "application/vnd.oci.image.config.v1+json")
manifest = {"schemaVersion": 2, "mediaType": "application/vnd.oci.image.manifest.v1+json",
            "config": cfg, "layers": layers}
man = add(json.dumps(manifest, sort_keys=True, separators=(",", ":")).encode(),
          "application/vnd.oci.image.manifest.v1+json")
tag = a.name.rsplit(":", 1)[1] if ":" in a.name.rsplit("/", 1)[-1] else "latest"
man["annotations"] = {"io.containerd.image.name": a.name, "org.opencontainers.image.ref.name": tag}
man["platform"] = {"architecture": "amd64", "os": "linux"}
index = {"schemaVersion": 2, "mediaType": "application/vnd.oci.image.index.v1+json",
         "manifests": [man]}

tmp = a.out + ".tmp"
with tarfile.open(tmp, "w") as t:
    def put(name, data):
        info = tarfile.TarInfo(name)
        info.size, info.mtime, info.mode = len(data), 0, 0o644
        t.addfile(info, io.BytesIO(data))
    put("oci-layout", b'{"imageLayoutVersion":"1.0.0"}')
    put("index.json", json.dumps(index, sort_keys=True).encode())
    for d in sorted(blobs):
        put("blobs/sha256/" + d, blobs[d])
os.replace(tmp, a.out)
print(f"{a.name}: {os.path.getsize(a.out)} bytes compressed ({man['digest']})")
