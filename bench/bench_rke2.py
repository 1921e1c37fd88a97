"""Wall times of the RKE2 playbooks against the RKE2 TEST DOUBLE, and what each membership change restarted.

    .venv/bin/python bench/bench_rke2.py [--rounds 2] [--json PATH]

Each round starts fresh Debian 13 test hosts of the rke2 flavour (s1-s3, a1-a3 and a mirror serving the double's
release, tests/integration/rke2_harness.py) and runs, one after the other:
  rke2_deploy of 1 server + 2 agents (s1; a1, a2), then rke2_decommission;
  rke2_deploy of 3 servers + 2 agents (s1-s3; a1, a2);
  rke2_member_add of agent a3;
  rke2_member_remove of server s3 (quorum checked, its etcd member removed, drained, deleted, uninstalled);
  rke2_decommission.
For each membership change it keeps the hosts the run touched and the units whose main process changed on the
nodes the change left alone (restarted, started or stopped): the goal is none. The double runs a real etcd per
server and the real kubectl; what it cannot be is the Kubernetes API server and the container runtime (RKE2's
images are not pulled or started), so deploy times are the playbooks' and etcd's work, not a real RKE2's start.

It reports the median and spread (min-max) over the rounds; --json writes every figure.
"""

from __future__ import annotations

import argparse
import json
import secrets
import statistics
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT), str(ROOT / "api")]

from tests.integration.rke2_harness import start  # noqa: E402
from tests.integration.slurm_harness import restarted  # noqa: E402

STEPS = ("deploy 1+2", "decommission 1+2", "deploy 3+2", "member add (agent)", "server removal", "decommission 2+3")


def run(cluster, label: str, playbook: str, left_alone: list[str], **extra) -> dict:
    """Runs one playbook; returns its wall time, the hosts it touched and what restarted on the hosts left alone."""
    before = cluster.daemon_pids()
    result = cluster.playbook(playbook, **extra)
    if result.rc != 0:
        raise SystemExit(f"{label}: {playbook} failed (rc {result.rc}):\n{result.output[-4000:]}")
    after = cluster.daemon_pids()
    alone = {key for key in restarted(before, after) if key[0] in left_alone}
    print(f"  {label}: {result.seconds:.1f} s, touched {sorted(result.hosts_touched)}, "
          f"restarted on nodes left alone: {sorted(alone) or 'none'}", flush=True)
    return {"seconds": round(result.seconds, 3), "touched": sorted(result.hosts_touched),
            "restarted_left_alone": sorted(f"{h}:{u}" for h, u in alone)}


def one_round(workdir: Path) -> dict:
    cluster = start("rkb" + secrets.token_hex(2), workdir, ["s1"], ["a1", "a2"], ["s2", "s3", "a3"])
    figures = {}
    try:
        cluster.inventory()
        figures["deploy 1+2"] = run(cluster, "deploy 1+2", "rke2_deploy", [])
        figures["decommission 1+2"] = run(cluster, "decommission 1+2", "rke2_decommission", [])
        cluster.servers = ["s1", "s2", "s3"]
        cluster.inventory()
        figures["deploy 3+2"] = run(cluster, "deploy 3+2", "rke2_deploy", [])
        cluster.agents = ["a1", "a2", "a3"]
        cluster.inventory()
        figures["member add (agent)"] = run(cluster, "member add (agent)", "rke2_member_add",
                                            ["s2", "s3", "a1", "a2"], rke2_members="a3")
        figures["server removal"] = run(cluster, "server removal", "rke2_member_remove",
                                        ["s2", "a1", "a2", "a3"], rke2_members="s3")
        cluster.servers = ["s1", "s2"]
        cluster.inventory()
        figures["decommission 2+3"] = run(cluster, "decommission 2+3", "rke2_decommission", [])
    finally:
        cluster.stop()
    return figures


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    rounds = []
    for number in range(1, args.rounds + 1):
        print(f"round {number} of {args.rounds}", flush=True)
        with tempfile.TemporaryDirectory(prefix="bench-rke2-") as workdir:
            rounds.append(one_round(Path(workdir)))
    print("\nstep                      median s   min-max s        restarted on nodes left alone")
    summary = {}
    for step in STEPS:
        seconds = [r[step]["seconds"] for r in rounds]
        restarts = sorted({u for r in rounds for u in r[step]["restarted_left_alone"]})
        summary[step] = {"median_s": round(statistics.median(seconds), 1), "min_s": min(seconds),
                         "max_s": max(seconds), "restarted_left_alone": restarts,
                         "touched": rounds[0][step]["touched"]}
        print(f"{step:<25} {statistics.median(seconds):8.1f}   {min(seconds):5.1f}-{max(seconds):<8.1f}   "
              f"{', '.join(restarts) or 'none'}")
    if args.json:
        args.json.write_text(json.dumps({"summary": summary, "rounds": rounds}, indent=2))


if __name__ == "__main__":
    main()
