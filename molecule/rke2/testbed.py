# Copyright: gpuaas.apps developers
# Apache License 2.0 (see https://www.apache.org/licenses/LICENSE-2.0)
"""What the scenario's prepare step takes from the project, on the control node: `testbed.py DIR` builds the RKE2
TEST DOUBLE's release, its first version (tests/rke2_double/release.py), into DIR/rke2/<version> (the layout the
server serves as the site mirror), makes sure the test hosts' SSH key exists (gpuaas_api.testhosts), and prints
{"version", "path", "sha256sum_sha256", "ssh_key"}: the version, the release's path under the mirror, the sha256 of
its sha256sum file (the scenario pins it as the catalog pins a real release) and the private key's path. Run by
prepare.yml with the project's Python."""

import json
import sys
from pathlib import Path

from gpuaas_api import testhosts

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "tests"))
from rke2_double import release  # noqa: E402 - the test double's release builder, beside the tests


def main(directory: str) -> None:
    version = release.VERSIONS[0]
    path = f"rke2/{version.replace('+', '-')}"
    pins = release.build(Path(directory) / path, version)
    print(json.dumps({"version": version, "path": path, "sha256sum_sha256": pins[release.SHA256SUM],
                      "ssh_key": str(testhosts.ensure_ssh_key())}))


if __name__ == "__main__":
    main(sys.argv[1])
