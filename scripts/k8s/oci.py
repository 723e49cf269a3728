#!/usr/bin/env python3
"""Writes a one-layer OCI image archive without a registry, for the test cluster.

usage: oci.py OUT.tar NAME:TAG ENTRYPOINT FILE=PATH_IN_IMAGE[:MODE] ...

The archive imports with `ctr -n k8s.io images import`; the image name is
carried in the io.containerd.image.name annotation.
"""
import hashlib
import io
import json
import sys
import tarfile


def blob(tar, data):
    digest = hashlib.sha256(data).hexdigest()
    info = tarfile.TarInfo("blobs/sha256/" + digest)
    info.size = len(data)
    tar.addfile(info, io.BytesIO(data))
    return "sha256:" + digest, len(data)


def main():
    out, name, entry, files = sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[4:]
    layer = io.BytesIO()
    with tarfile.open(fileobj=layer, mode="w", format=tarfile.PAX_FORMAT) as lt:
        for spec in files:
            src, dst = spec.split("=", 1)
            mode = 0o555
            if ":" in dst:
                dst, m = dst.rsplit(":", 1)
                mode = int(m, 8)
            data = open(src, "rb").read()
            info = tarfile.TarInfo(dst.lstrip("/"))
            info.size, info.mode = len(data), mode
            lt.addfile(info, io.BytesIO(data))
    layer = layer.getvalue()
    diff = "sha256:" + hashlib.sha256(layer).hexdigest()
    ref = name if "/" in name.split(":")[0] else "docker.io/library/" + name
    with tarfile.open(out, "w") as tar:
        ld, ls = blob(tar, layer)
        cfg = {"architecture": "amd64", "os": "linux",
               "config": {"Entrypoint": [entry]},
               "rootfs": {"type": "layers", "diff_ids": [diff]}}
        cd, cs = blob(tar, json.dumps(cfg).encode())
        man = {"schemaVersion": 2, "mediaType": "application/vnd.oci.image.manifest.v1+json",
               "config": {"mediaType": "application/vnd.oci.image.config.v1+json", "digest": cd, "size": cs},
               "layers": [{"mediaType": "application/vnd.oci.image.layer.v1.tar", "digest": ld, "size": ls}]}
        md, ms = blob(tar, json.dumps(man).encode())
        index = {"schemaVersion": 2, "manifests": [{
            "mediaType": "application/vnd.oci.image.manifest.v1+json", "digest": md, "size": ms,
            "annotations": {"io.containerd.image.name": ref, "org.opencontainers.image.ref.name": name.split(":")[-1]}}]}
        for fname, data in (("index.json", json.dumps(index).encode()),
                            ("oci-layout", b'{"imageLayoutVersion":"1.0.0"}')):
            info = tarfile.TarInfo(fname)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))


if __name__ == "__main__":
    main()
