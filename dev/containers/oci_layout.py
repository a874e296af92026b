"""An OCI image layout of one layer with an environment in its config, for `skopeo copy oci:DIR:TAG`.

    python dev/containers/oci_layout.py OUT ROOTFS_TAR TAG ENV_FILE

skopeo's `tarball:` source (dev/containers/image.sh) writes a config with no environment; an image
whose Python is a venv's (NVIDIA's nemo-rl image: PATH starts with /opt/nemo_rl_venv/bin) needs its
`ENV` in the config, where pyxis and `ch-run --set-env` read it. ENV_FILE holds K=V lines
(dockerfile_env.py). The layer is the tar gzip'd at level 1 (`gzip -n`: no name or time, so the same
tar gives the same digest).
"""
from __future__ import annotations

import hashlib
import json
import subprocess
import sys
from pathlib import Path

LAYER = "application/vnd.oci.image.layer.v1.tar+gzip"
CONFIG = "application/vnd.oci.image.config.v1+json"
MANIFEST = "application/vnd.oci.image.manifest.v1+json"


def _digest(path: Path) -> str:
    h = hashlib.sha256()
    with path.open("rb") as f:
        while chunk := f.read(1 << 20):
            h.update(chunk)
    return f"sha256:{h.hexdigest()}"


def _blob(out: Path, data: bytes) -> dict:
    digest = f"sha256:{hashlib.sha256(data).hexdigest()}"
    (out / "blobs" / "sha256" / digest[7:]).write_bytes(data)
    return {"digest": digest, "size": len(data)}


def layout(out: Path, rootfs_tar: Path, tag: str, env: list[str]) -> None:
    blobs = out / "blobs" / "sha256"
    blobs.mkdir(parents=True, exist_ok=True)
    diff_id = _digest(rootfs_tar)
    packed = out / "layer.tar.gz"
    with packed.open("wb") as f:
        subprocess.run(["gzip", "-1", "-n", "-c", str(rootfs_tar)], stdout=f, check=True)
    layer = {"mediaType": LAYER, "digest": _digest(packed), "size": packed.stat().st_size}
    packed.rename(blobs / layer["digest"][7:])
    config = {"architecture": "amd64", "os": "linux", "config": {"Env": env},
              "rootfs": {"type": "layers", "diff_ids": [diff_id]},
              "history": [{"created_by": f"ADD {rootfs_tar.name} /", "comment": "one layer"}]}   # ch-image requires it
    config_ref = {"mediaType": CONFIG, **_blob(out, json.dumps(config, sort_keys=True).encode())}
    manifest = {"schemaVersion": 2, "mediaType": MANIFEST, "config": config_ref, "layers": [layer]}
    manifest_ref = {"mediaType": MANIFEST, **_blob(out, json.dumps(manifest, sort_keys=True).encode()),
                    "annotations": {"org.opencontainers.image.ref.name": tag}}
    (out / "index.json").write_text(json.dumps({"schemaVersion": 2, "manifests": [manifest_ref]}))
    (out / "oci-layout").write_text(json.dumps({"imageLayoutVersion": "1.0.0"}))


if __name__ == "__main__":
    out, tar, tag, env_file = sys.argv[1:5]
    layout(Path(out), Path(tar), tag, Path(env_file).read_text().splitlines())
