from __future__ import annotations

import argparse

# Listed under "development and testing" in `gpuaas --help` (gpuaas_api.cli): no help=, a description=.
DEVELOPMENT = True


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("demo", description="the whole product on this machine: service, worker, test hosts, a "
                                           "Slurm cluster and an OCI workload deployed and operated through the API")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from ..demo import run_demo

    return run_demo(say=lambda line: print(line, flush=True))
