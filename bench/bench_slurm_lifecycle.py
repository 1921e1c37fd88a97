"""Wall time and blast radius of the Slurm lifecycle playbooks on real test hosts.

    .venv/bin/python bench/bench_slurm_lifecycle.py [--rounds N]

Each round starts four fresh test hosts (podman + systemd, over SSH), then times:
  slurm_deploy (1 controller + 2 workers), a second slurm_deploy (no change),
  slurm_member_add (a third worker), slurm_member_drain and slurm_member_remove of that worker,
and reports, for each membership change, the hosts the run touched and the daemons whose process
changed (restarted, started or stopped). Hosts are removed at the end of each round.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import uuid
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from tests.integration.slurm_harness import Cluster, restarted  # noqa: E402

STEPS = [
    ("slurm_deploy (1+2)", "slurm_deploy", ["w1", "w2"], {}),
    ("slurm_deploy again", "slurm_deploy", ["w1", "w2"], {}),
    ("slurm_member_add", "slurm_member_add", ["w1", "w2", "w3"], {"slurm_members": "w3"}),
    ("slurm_member_drain", "slurm_member_drain", ["w1", "w2", "w3"], {"slurm_members": "w3"}),
    ("slurm_member_remove", "slurm_member_remove", ["w1", "w2", "w3"], {"slurm_members": "w3"}),
]


def one_round(workdir: Path) -> dict[str, dict]:
    cluster = Cluster.start(f"bench{uuid.uuid4().hex[:6]}", workdir, ["ctl", "w1", "w2", "w3"])
    results = {}
    try:
        for label, playbook, workers, extra in STEPS:
            cluster.workers = workers
            before = cluster.daemon_pids()
            run = cluster.playbook(playbook, **extra)
            if run.rc != 0:
                raise SystemExit(f"{label} failed:\n{run.output[-3000:]}")
            results[label] = {"seconds": run.seconds, "touched": sorted(run.hosts_touched),
                              "restarted": sorted(f"{h}:{d}" for h, d in restarted(before, cluster.daemon_pids())),
                              "changed": sum(run.changed.values())}
    finally:
        cluster.stop()
    return results


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rounds", type=int, default=1)
    args = parser.parse_args()
    rounds = []
    with tempfile.TemporaryDirectory(prefix="gpuaas-bench-") as tmp:
        for i in range(args.rounds):
            workdir = Path(tmp) / f"round{i}"
            workdir.mkdir()
            rounds.append(one_round(workdir))
    print(f"{'step':<22} {'median s':>9} {'min s':>7}  changed  hosts touched / daemons restarted, started or stopped")
    for label, *_ in STEPS:
        times = [r[label]["seconds"] for r in rounds]
        last = rounds[-1][label]
        print(f"{label:<22} {statistics.median(times):>9.1f} {min(times):>7.1f}  {last['changed']:>7}  "
              f"{','.join(last['touched'])} / {','.join(last['restarted']) or '-'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
