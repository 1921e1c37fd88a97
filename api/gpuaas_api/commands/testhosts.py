from __future__ import annotations

import argparse


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("testhosts", help="start or remove local test hosts (podman + systemd, reachable over SSH)")
    from .. import testhosts

    testhosts.add_arguments(p)
    p.set_defaults(func=testhosts.run_command)
