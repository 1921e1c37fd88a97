"""Builds a release of the RKE2 TEST DOUBLE in RKE2's air-gap layout (README.md in this folder).

    rke2.linux-amd64.tar.gz           bin/rke2, bin/rke2-killall.sh, bin/rke2-uninstall.sh,
                                      lib/systemd/system/rke2-{server,agent}.service, share/rke2/LICENSE.txt
    rke2-images.linux-amd64.tar.gz    the images archive (the double's holds a manifest and no image)
    sha256sum-amd64.txt               "<sha256>  <file>" for both, as RKE2 publishes it

The archives are reproducible (fixed times, owners and order), so a version's digests are the same on every
build and the tests pin them like a release's.

    python tests/rke2_double/release.py OUTDIR [VERSION]
"""

from __future__ import annotations

import gzip
import hashlib
import io
import json
import sys
import tarfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
TARBALL = "rke2.linux-amd64.tar.gz"
IMAGES = "rke2-images.linux-amd64.tar.gz"
SHA256SUM = "sha256sum-amd64.txt"
# Two versions, so that upgrade and rollback can be proven.
VERSIONS = ("v1.32.3+rke2r1", "v1.32.5+rke2r1")


def _tar_gz(entries: list[tuple[str, bytes, int]]) -> bytes:
    raw = io.BytesIO()
    with tarfile.open(fileobj=raw, mode="w", format=tarfile.GNU_FORMAT) as tar:
        for name, data, mode in entries:
            info = tarfile.TarInfo(name)
            info.size, info.mode, info.mtime, info.uname, info.gname = len(data), mode, 0, "root", "root"
            tar.addfile(info, io.BytesIO(data))
    packed = io.BytesIO()
    with gzip.GzipFile(fileobj=packed, mode="wb", mtime=0, filename="") as gz:
        gz.write(raw.getvalue())
    return packed.getvalue()


def build(outdir: Path, version: str = VERSIONS[0]) -> dict[str, str]:
    """Writes the three files into outdir; returns {file name: sha256 hex} of all three."""
    outdir.mkdir(parents=True, exist_ok=True)
    rke2 = (HERE / "rke2").read_text().replace("@VERSION@", version).encode()
    tarball = _tar_gz([
        ("bin/rke2", rke2, 0o755),
        ("bin/rke2-killall.sh", (HERE / "rke2-killall.sh").read_bytes(), 0o755),
        ("bin/rke2-uninstall.sh", (HERE / "rke2-uninstall.sh").read_bytes(), 0o755),
        ("lib/systemd/system/rke2-server.service", (HERE / "rke2-server.service").read_bytes(), 0o644),
        ("lib/systemd/system/rke2-agent.service", (HERE / "rke2-agent.service").read_bytes(), 0o644),
        ("share/rke2/LICENSE.txt", b"RKE2 TEST DOUBLE of gpuaas.apps: not RKE2. Apache License 2.0\n", 0o644),
    ])
    manifest = json.dumps([{"Config": "", "RepoTags": [], "Comment": f"RKE2 TEST DOUBLE {version}: no images; etcd and "
                            "kubectl come from the test host's Debian packages"}]).encode()
    images = _tar_gz([("manifest.json", manifest, 0o644)])
    digests = {TARBALL: hashlib.sha256(tarball).hexdigest(), IMAGES: hashlib.sha256(images).hexdigest()}
    (outdir / TARBALL).write_bytes(tarball)
    (outdir / IMAGES).write_bytes(images)
    sums = "".join(f"{digest}  {name}\n" for name, digest in sorted(digests.items())).encode()
    (outdir / SHA256SUM).write_bytes(sums)
    digests[SHA256SUM] = hashlib.sha256(sums).hexdigest()
    return digests


if __name__ == "__main__":
    print(json.dumps(build(Path(sys.argv[1]), *sys.argv[2:3]), indent=2))
