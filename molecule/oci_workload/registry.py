# Copyright: gpuaas.apps developers
# Apache License 2.0 (see https://www.apache.org/licenses/LICENSE-2.0)
"""The scenario's registry: `up FILE` starts a registry test host (gpuaas_api.testregistry), pushes a test
image signed with a fresh key and writes {image, public_key, registry} to FILE; `down` removes the host.
Run by prepare.yml and cleanup.yml with the project's Python."""

import json
import sys

from gpuaas_api import testhosts
from gpuaas_api import testregistry as tr

PREFIX = "gpuaas-molecule-oci"


def main(argv: list[str]) -> None:
    if argv[0] == "down":
        testhosts.down(PREFIX)
        return
    registry = tr.Registry.start(PREFIX)
    key = tr.SigningKey.generate()
    image = tr.push(registry, "molecule/web", "v1", tr.build_image("v1"), sign_with=key)
    with open(argv[1], "w") as f:
        json.dump({"image": image, "public_key": key.public_pem.decode(), "registry": registry.address}, f)


if __name__ == "__main__":
    main(sys.argv[1:])
