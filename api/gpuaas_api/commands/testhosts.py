from __future__ import annotations

import argparse

# Listed under "development and testing" in `gpuaas --help` (gpuaas_api.cli): no help=, a description=.
DEVELOPMENT = True


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("testhosts", description="start or remove local test hosts (podman + systemd, reachable "
                                                "over SSH)")
    from .. import testhosts

    testhosts.add_arguments(p)
    p.set_defaults(func=testhosts.run_command)
