"""Assemble a one-layer container image as a Docker archive (`docker save`'s
format), for `ctr -n k8s.io images import`, from files on this machine: no
registry, no Docker. Used by tests/gpu/k8s-node.sh to build, on the GPU
machine, the images the roles reference from carried binaries.

    mkimage.py OUT.tar --tag NAME:TAG [--entrypoint ARG]... [--env K=V]...
               [--workdir DIR] (--add SRC:DEST | --tree DIR)...

--add copies one file (or symbolic link) to DEST; --tree copies a directory's
contents to the image's root. Owners are root, times are 0: the same inputs
give the same image digest.
"""
from __future__ import annotations

import argparse
import hashlib
import io
import json
import os
import sys
import tarfile
from pathlib import PurePosixPath


def _dirs(dest: str) -> list[str]:
    parts = PurePosixPath(dest).parts[1:-1]
    return ["/".join(parts[: i + 1]) for i in range(len(parts))]


def _info(name: str, path: str | None, kind: str) -> tarfile.TarInfo:
    info = tarfile.TarInfo(name)
    info.uid = info.gid = 0
    info.uname = info.gname = "root"
    info.mtime = 0
    if kind == "dir":
        info.type, info.mode = tarfile.DIRTYPE, 0o755
    elif kind == "link":
        info.type, info.linkname, info.mode = tarfile.SYMTYPE, os.readlink(path), 0o777
    else:
        st = os.stat(path)
        info.size, info.mode = st.st_size, st.st_mode & 0o7777
    return info


def layer(files: list[tuple[str, str]]) -> bytes:
    """files: (source path, absolute destination) pairs -> an uncompressed layer tar."""
    buf = io.BytesIO()
    seen: set[str] = set()
    with tarfile.open(fileobj=buf, mode="w", format=tarfile.PAX_FORMAT) as tar:
        for src, dest in sorted(files, key=lambda f: f[1]):
            for d in _dirs(dest):
                if d not in seen:
                    seen.add(d)
                    tar.addfile(_info(d, None, "dir"))
            name = dest.lstrip("/")
            if os.path.islink(src):
                tar.addfile(_info(name, src, "link"))
            elif os.path.isdir(src):
                if name not in seen:
                    seen.add(name)
                    tar.addfile(_info(name, None, "dir"))
            else:
                with open(src, "rb") as f:
                    tar.addfile(_info(name, src, "file"), f)
    return buf.getvalue()


def collect(adds: list[str], trees: list[str]) -> list[tuple[str, str]]:
    files = []
    for spec in adds:
        src, sep, dest = spec.partition(":")
        if not sep or not dest.startswith("/"):
            raise SystemExit(f"--add {spec!r}: expected SRC:/ABSOLUTE/DEST")
        if not os.path.lexists(src):
            raise SystemExit(f"--add {spec!r}: {src} does not exist")
        files.append((src, dest))
    for tree in trees:
        if not os.path.isdir(tree):
            raise SystemExit(f"--tree {tree}: not a directory")
        for root, dirs, names in os.walk(tree):
            for n in dirs + names:
                p = os.path.join(root, n)
                files.append((p, "/" + os.path.relpath(p, tree)))
    return files


def main(argv: list[str]) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("out")
    ap.add_argument("--tag", required=True)
    ap.add_argument("--entrypoint", action="append", default=[])
    ap.add_argument("--env", action="append", default=[])
    ap.add_argument("--workdir", default="/")
    ap.add_argument("--add", action="append", default=[])
    ap.add_argument("--tree", action="append", default=[])
    a = ap.parse_args(argv[1:])
    data = layer(collect(a.add, a.tree))
    diff_id = hashlib.sha256(data).hexdigest()
    config = {
        "architecture": "amd64", "os": "linux", "created": "1970-01-01T00:00:00Z",
        "config": {"Env": ["PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin", *a.env],
                   "Entrypoint": a.entrypoint, "WorkingDir": a.workdir,
                   "Labels": {"org.opencontainers.image.source": "k8sgpu.nvidia tests/gpu/k8s-node/mkimage.py"}},
        "rootfs": {"type": "layers", "diff_ids": [f"sha256:{diff_id}"]},
        "history": [{"created": "1970-01-01T00:00:00Z", "created_by": "tests/gpu/k8s-node/mkimage.py"}],
    }
    config_bytes = json.dumps(config, sort_keys=True, separators=(",", ":")).encode()
    config_name = hashlib.sha256(config_bytes).hexdigest() + ".json"
    manifest = [{"Config": config_name, "RepoTags": [a.tag], "Layers": [f"{diff_id}/layer.tar"]}]
    tmp = a.out + ".tmp"
    with tarfile.open(tmp, "w", format=tarfile.PAX_FORMAT) as tar:
        for name, blob in ((f"{diff_id}/layer.tar", data), (config_name, config_bytes),
                           ("manifest.json", json.dumps(manifest).encode())):
            info = tarfile.TarInfo(name)
            info.size, info.mtime, info.mode = len(blob), 0, 0o644
            tar.addfile(info, io.BytesIO(blob))
    os.replace(tmp, a.out)
    print(f"{a.out}: {a.tag} layer sha256:{diff_id[:12]} ({len(data) // 1024} KiB)")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
