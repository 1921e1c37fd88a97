"""How close the Slurm lifecycle playbooks come to the raw-SSH floor, on identical fresh test hosts.

    .venv/bin/python bench/bench_slurm_speed.py [--rounds 3] [--json PATH] [--quick]

Each round starts fresh test hosts (podman + systemd, reached over SSH, Slurm packages in the image, so
only configuration work counts) for four groups, one after the other, and tears them down after each:
the floor (bench/slurm_floor.py) and the playbooks at N = 2 and at N = 8 workers. The order of floor and
playbooks alternates from round to round, so that a busier stretch of the machine falls on both.

Playbooks at N (at most 1 + N hosts at once):
  slurm_deploy of 1 + N, until `srun -N<N> hostname` answers (the playbook's own last check);
  at N = 2 the same deploy again (nothing to change);
  slurm_member_drain of wN, then slurm_member_remove of wN (N workers -> N - 1);
  slurm_member_replace of w1 by a fresh host (N - 1 workers, N while both are in);
  slurm_member_add of a fresh host (N - 1 -> N).
So every membership change at N runs on a cluster of at most N workers. The floor does deploy (and the
no-change run at N = 2), removes wN and adds a fresh host, the same way.

For each membership change it keeps the hosts the run touched and the daemons whose process changed
(restarted, started or stopped): the blast radius. The playbooks run with the collection's callback
plugin gpuaas.apps.task_timing; for deploy 1 + 2 and member add it prints, from the median round, each
play's wall time and the tasks with the longest time on one host.

It reports median and spread (min-max) over the rounds, and the issue's targets as ratios, met or not.
--json writes every figure, with each run's profile. --quick: one round, N = 2 only (a smoke run).
"""

from __future__ import annotations

import argparse
import json
import os
import secrets
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
# This checkout's harness and test hosts, also when the bench runs from another worktree.
sys.path[:0] = [str(ROOT), str(ROOT / "api"), str(ROOT / "bench")]

from slurm_floor import Floor  # noqa: E402

from tests.integration.slurm_harness import Cluster, restarted  # noqa: E402

CALLBACK = "gpuaas.apps.task_timing"
MEMBER_STEPS = ("drain", "remove", "replace", "add")
TOP_TASKS = 12


def prefix() -> str:
    return "spd" + secrets.token_hex(2)


def swap(cluster: Cluster, old: str, new: str) -> None:
    """Replaces the test host `old` (out of the cluster now) by a fresh one named `new`."""
    container = cluster.hosts.pop(old)["container"]
    # A second try removes a container whose systemd was halting while podman killed it.
    for _ in range(2):
        if subprocess.run(["podman", "rm", "-f", "--ignore", "-t", "2", container], capture_output=True,
                          check=False).returncode == 0:
            break
    else:
        raise SystemExit(f"could not remove test host {container}")
    cluster.add_hosts([new])


class Runner:
    def __init__(self, workdir: Path):
        self.workdir = workdir
        self.count = 0

    def playbook(self, cluster: Cluster, label: str, name: str, **extra) -> dict:
        """Runs one playbook, timed and profiled; returns its figures and its blast radius."""
        self.count += 1
        profile = self.workdir / f"profile-{self.count}.json"
        os.environ["ANSIBLE_CALLBACKS_ENABLED"] = CALLBACK
        os.environ["GPUAAS_TASK_TIMING_PATH"] = str(profile)
        before = cluster.daemon_runs()
        run = cluster.playbook(name, **extra)
        if run.rc != 0:
            raise SystemExit(f"{label}: {name} failed (rc {run.rc}):\n{run.output[-4000:]}")
        after = cluster.daemon_runs()
        print(f"  {label}: {run.seconds:.1f} s", flush=True)
        return {
            "seconds": round(run.seconds, 3),
            "touched": sorted(run.hosts_touched),
            "restarted": sorted(f"{h}:{d}" for h, d in restarted(before, after)),
            "changed": sum(run.changed.values()),
            "profile": json.loads(profile.read_text()) if profile.exists() else None,
        }


def timed(label: str, step) -> dict:
    started = time.monotonic()
    step()
    seconds = time.monotonic() - started
    print(f"  {label}: {seconds:.1f} s", flush=True)
    return {"seconds": round(seconds, 3)}


def workers(n: int) -> list[str]:
    return [f"w{i}" for i in range(1, n + 1)]


def playbooks_group(n: int, workdir: Path) -> dict[str, dict]:
    runner = Runner(workdir)
    cluster = Cluster.start(prefix(), workdir, ["ctl", *workers(n)])
    figures = {}
    try:
        cluster.workers = workers(n)
        figures[f"deploy 1+{n}"] = runner.playbook(cluster, f"deploy 1+{n}", "slurm_deploy")
        if n == 2:
            figures["no-change 1+2"] = runner.playbook(cluster, "no-change 1+2", "slurm_deploy")
        last = f"w{n}"
        figures[f"drain N={n}"] = runner.playbook(cluster, f"drain N={n}", "slurm_member_drain", slurm_members=last)
        figures[f"remove N={n}"] = runner.playbook(cluster, f"remove N={n}", "slurm_member_remove",
                                                   slurm_members=last)
        cluster.workers = workers(n - 1)
        swap(cluster, last, "n1")
        cluster.workers = [*workers(n - 1), "n1"]
        figures[f"replace N={n}"] = runner.playbook(cluster, f"replace N={n}", "slurm_member_replace",
                                                    slurm_member_old="w1", slurm_member_new="n1")
        cluster.workers = [w for w in cluster.workers if w != "w1"]
        swap(cluster, "w1", "n2")
        cluster.workers = [*cluster.workers, "n2"]
        figures[f"add N={n}"] = runner.playbook(cluster, f"add N={n}", "slurm_member_add", slurm_members="n2")
    finally:
        cluster.stop()
    return figures


def floor_group(n: int, workdir: Path) -> dict[str, dict]:
    cluster = Cluster.start(prefix(), workdir, ["ctl", *workers(n)])
    figures = {}
    try:
        floor = Floor(cluster.hosts["ctl"], [cluster.hosts[w] for w in workers(n)])
        figures[f"deploy 1+{n}"] = timed(f"floor deploy 1+{n}", floor.deploy)
        if n == 2:
            figures["no-change 1+2"] = timed("floor no-change 1+2", floor.again)
        last = f"w{n}"
        figures[f"remove N={n}"] = timed(f"floor remove N={n}", lambda: floor.remove(cluster.hosts[last]))
        swap(cluster, last, "n1")
        figures[f"add N={n}"] = timed(f"floor add N={n}", lambda: floor.add(cluster.hosts["n1"]))
    finally:
        cluster.stop()
    return figures


def one_round(index: int, sizes: list[int], workdir: Path) -> dict:
    result = {"playbooks": {}, "floor": {}, "load": [os.getloadavg()[0]]}
    for n in sizes:
        order = [("floor", floor_group), ("playbooks", playbooks_group)]
        if index % 2:
            order.reverse()
        for kind, group in order:
            print(f"round {index + 1}: {kind}, N={n}", flush=True)
            where = workdir / f"round{index}-{kind}-{n}"
            where.mkdir()
            result[kind].update(group(n, where))
            result["load"].append(os.getloadavg()[0])
    return result


# Summaries ----------------------------------------------------------------------------------------------


def spread(values: list[float]) -> dict:
    return {"median": round(statistics.median(values), 3), "min": round(min(values), 3),
            "max": round(max(values), 3), "values": [round(v, 3) for v in values]}


def steps_of(rounds: list[dict], kind: str) -> list[str]:
    return list(rounds[0][kind])


def summarize(rounds: list[dict]) -> dict:
    summary = {}
    for kind in ("playbooks", "floor"):
        summary[kind] = {step: spread([r[kind][step]["seconds"] for r in rounds]) for step in steps_of(rounds, kind)}
    return summary


def ratio(rounds: list[dict], num: tuple[str, str], den: tuple[str, str]) -> dict | None:
    """Ratio of medians, with the spread of the per-round ratios (each round's pair ran minutes apart)."""
    try:
        pairs = [(r[num[0]][num[1]]["seconds"], r[den[0]][den[1]]["seconds"]) for r in rounds]
    except KeyError:
        return None
    per_round = [a / b for a, b in pairs]
    median = statistics.median(a for a, _ in pairs) / statistics.median(b for _, b in pairs)
    return {"ratio": round(median, 2), "min": round(min(per_round), 2), "max": round(max(per_round), 2)}


FLAT = 1.2  # "flat in N": member add at N = 8 within 1.2x of N = 2


def targets(rounds: list[dict], summary: dict) -> list[dict]:
    pb = summary["playbooks"]
    rows = []

    def row(name, target, value, met, detail=""):
        rows.append({"step": name, "target": target, "value": value, "met": met, "detail": detail})

    r = ratio(rounds, ("playbooks", "deploy 1+2"), ("floor", "deploy 1+2"))
    row("deploy 1+2 vs floor", "<= 3x", r, r["ratio"] <= 3)
    r = ratio(rounds, ("playbooks", "no-change 1+2"), ("floor", "no-change 1+2"))
    seconds = pb["no-change 1+2"]["median"]
    row("no-change 1+2", "<= 8 s", seconds, seconds <= 8)
    row("no-change 1+2 vs floor's no-change", "<= 10x", r, r["ratio"] <= 10)
    r = ratio(rounds, ("playbooks", "deploy 1+8"), ("playbooks", "deploy 1+2"))
    if r:
        row("deploy 1+8 vs deploy 1+2", "<= 1.5x", r, r["ratio"] <= 1.5)
    for n in (2, 8):
        if f"add N={n}" in pb:
            seconds = pb[f"add N={n}"]["median"]
            row(f"member add N={n}", "<= 10 s", seconds, seconds <= 10)
    r = ratio(rounds, ("playbooks", "add N=8"), ("playbooks", "add N=2"))
    if r:
        row("member add N=8 vs N=2 (flat)", f"<= {FLAT}x", r, r["ratio"] <= FLAT)
    return rows


def median_round(rounds: list[dict], step: str) -> dict:
    ranked = sorted(rounds, key=lambda r: r["playbooks"][step]["seconds"])
    return ranked[(len(ranked) - 1) // 2]["playbooks"][step]


def top_tasks(profile: dict, top: int = TOP_TASKS) -> list[dict]:
    """Tasks ranked by their longest time on one host (a task run twice on a host counts both times)."""
    per_host: dict[tuple[str, str], dict[str, float]] = {}
    for t in profile["tasks"]:
        hosts = per_host.setdefault((t["play"], t["task"]), {})
        hosts[t["host"]] = hosts.get(t["host"], 0.0) + t["seconds"]
    ranked = sorted(per_host.items(), key=lambda item: max(item[1].values()), reverse=True)
    return [
        {"play": play, "task": task, "seconds": round(max(hosts.values()), 2),
         "host": max(hosts, key=hosts.get), "hosts": len(hosts)}
        for (play, task), hosts in ranked[:top]
    ]


# Actions that run on the controller only: they cost no round trip to the host.
CONTROLLER_ACTIONS = {"assert", "set_fact", "include_role", "import_role", "include_tasks", "import_tasks",
                      "validate_argument_spec", "meta", "debug", "fail", "add_host", "group_by"}


def host_runs(profile: dict) -> dict[str, dict]:
    """Per host: how many tasks ran on it (not skipped), how many of them with `raw`, and the seconds they
    took. Each is one SSH round trip, and one module start on the host unless it is raw: the cost the
    remaining time is made of."""
    runs: dict[str, dict] = {}
    for t in profile["tasks"]:
        action = t["action"].split(".")[-1]
        if t["status"] == "skipped" or t["host"] == "localhost" or action in CONTROLLER_ACTIONS:
            continue
        host = runs.setdefault(t["host"], {"runs": 0, "raw": 0, "seconds": 0.0})
        host["runs"] += 1
        host["raw"] += action == "raw"
        host["seconds"] += t["seconds"]
    return runs


# Output -------------------------------------------------------------------------------------------------


def fmt(s: dict | None) -> str:
    return f"{s['median']:6.1f} ({s['min']:.1f}-{s['max']:.1f})" if s else f"{'-':>6}"


def report(rounds: list[dict], summary: dict, rows: list[dict]) -> None:
    pb, fl = summary["playbooks"], summary["floor"]
    print(f"\nSeconds, median (min-max) over {len(rounds)} round(s)")
    print(f"{'step':<16} {'playbooks':>20} {'floor':>20} {'ratio':>6}")
    for step in pb:
        r = ratio(rounds, ("playbooks", step), ("floor", step)) if step in fl else None
        shown = f"{r['ratio']:.1f}x" if r else "-"
        print(f"{step:<16} {fmt(pb[step]):>20} {fmt(fl.get(step)):>20} {shown:>6}")

    if "no-change 1+2" in pb:
        changed = [r["playbooks"]["no-change 1+2"]["changed"] for r in rounds]
        print(f"\nno-change 1+2: changed tasks per round {changed} (idempotence: 0 each time)")
    print("\nBlast radius of the membership changes (median round)")
    for step in pb:
        if step.split()[0] not in MEMBER_STEPS:
            continue
        m = median_round(rounds, step)
        varies = {(tuple(r["playbooks"][step]["touched"]), tuple(r["playbooks"][step]["restarted"])) for r in rounds}
        note = "" if len(varies) == 1 else "  (differs between rounds: see --json)"
        print(f"  {step:<13} touched {','.join(m['touched'])}; changed {m['changed']}; "
              f"daemons restarted/started/stopped: {', '.join(m['restarted']) or 'none'}{note}")

    print("\nTargets")
    for row in rows:
        value = row["value"]
        shown = f"{value['ratio']:.2f}x ({value['min']:.2f}-{value['max']:.2f})" if isinstance(value, dict) \
            else f"{value:.1f} s"
        print(f"  {row['step']:<36} {shown:>20}  target {row['target']:<7} {'met' if row['met'] else 'NOT MET'}")

    for step in ("deploy 1+2", "add N=2", "add N=8"):
        if step not in pb:
            continue
        profile = median_round(rounds, step)["profile"]
        if not profile:
            print(f"\nProfile of {step}: none (callback {CALLBACK} not found)")
            continue
        print(f"\nProfile of {step} (median round, {profile['seconds']:.1f} s in the playbook)")
        print("  play wall times (tasks in the play, skipped ones included):")
        for play in profile["plays"]:
            tasks = len({t["task"] for t in profile["tasks"] if t["play"] == play["name"]})
            print(f"    {play.get('seconds', 0.0):6.1f}  {play['name']} ({tasks})")
        print("  tasks run on each host (one SSH round trip each, and one module start unless raw): "
              + ", ".join(f"{h} {r['runs']} ({r['raw']} raw) in {r['seconds']:.1f} s "
                          f"({r['seconds'] / r['runs']:.2f} s each)" for h, r in sorted(host_runs(profile).items())))
        print(f"  top {TOP_TASKS} tasks by longest time on one host:")
        for t in top_tasks(profile):
            print(f"    {t['seconds']:6.1f}  {t['host']:<4} ({t['hosts']} host{'s' if t['hosts'] > 1 else ''})"
                  f"  {t['play']} : {t['task']}")
    load = [x for r in rounds for x in r["load"]]
    print(f"\nLoad average (1 min) during the run: {min(load):.1f}-{max(load):.1f}")


def commit() -> str:
    out = subprocess.run(["git", "-C", str(ROOT), "rev-parse", "--short", "HEAD"], capture_output=True, text=True,
                         check=False)
    return out.stdout.strip()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--json", type=Path, help="write every figure (and each run's profile) here")
    parser.add_argument("--quick", action="store_true", help="one round, N = 2 only")
    args = parser.parse_args()
    rounds_n, sizes = (1, [2]) if args.quick else (args.rounds, [2, 8])
    # Hosts are removed in `finally`: make a TERM from outside unwind like Ctrl-C.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))

    started = time.time()
    rounds = []
    with tempfile.TemporaryDirectory(prefix="gpuaas-bench-speed-") as tmp:
        for i in range(rounds_n):
            rounds.append(one_round(i, sizes, Path(tmp)))
    summary = summarize(rounds)
    rows = targets(rounds, summary)
    report(rounds, summary, rows)
    if args.json:
        args.json.write_text(json.dumps({
            "commit": commit(), "started": time.strftime("%Y-%m-%dT%H:%M:%S", time.localtime(started)),
            "minutes": round((time.time() - started) / 60, 1), "summary": summary, "targets": rows,
            "rounds": rounds,
        }, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
