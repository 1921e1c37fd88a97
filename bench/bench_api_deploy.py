"""A Slurm deploy through the API next to the same playbook run by hand, on identical fresh test hosts.

    .venv/bin/python bench/bench_api_deploy.py [--rounds 3]

The service runs as `gpuaas demo` starts it: `gpuaas serve` and one `gpuaas worker` (subprocesses,
embedded PostgreSQL), this checkout's collection registered by digest (`gpuaas apps register`),
a project service account. Each round starts two sets of fresh Slurm test hosts (ctl, w1, w2: podman
+ systemd, SSH, Slurm packages in the image) and deploys 1 controller + 2 workers on each set, the
order alternating from round to round so that a busier stretch of the machine falls on both:

- API: the hosts registered as an allocation, an instance created, then POST /deploy as the service
  account, timed from the POST until the operation's `finished_at` (the commit that recorded
  `succeeded`). The bench learns of the end by GET /v1/operations/{id} every 0.5 s but times the run by
  the service's own record, so that neither the poll's granularity nor the CPU its requests take from
  the run on this 2-core machine counts. From the operation and its timeline it also splits the run:
  accept -> `run.playbook_started`,
  the playbook (-> `run.playbook_stats`), and the outcome recorded (-> finished_at).
- by hand: `ansible-playbook gpuaas.apps.slurm_deploy` as tests/integration/slurm_harness.py runs it
  (its inventory of the test hosts, its forks), on exactly the content the worker runs (the worker's
  install of the registered digest) with the same variables (the catalog's `vars`, the test hosts'
  parameters, a munge key of the adapter's kind in a private file removed after the run), timed from
  the call until ansible-playbook exits.

Both runs end with the playbook's own check that `srun -N2 hostname` answers. It reports median and
min-max over the rounds and the ratio API / by hand (target: at most 1.1).
"""

from __future__ import annotations

import argparse
import base64
import json
import os
import secrets
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from datetime import datetime
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT), str(ROOT / "api")]

from gpuaas_api import testhosts  # noqa: E402
from gpuaas_api.content.collections import cache_root, installed_collection  # noqa: E402
from gpuaas_api.content.store import embedded_store  # noqa: E402
from gpuaas_api.demo import TEST_HOST_PARAMETERS, Demo  # noqa: E402

from tests.integration.slurm_harness import ANSIBLE_PLAYBOOK, Cluster, ansible_env  # noqa: E402

HOSTS = ["ctl", "w1", "w2"]
TERMINAL = ("succeeded", "failed", "canceled")
TARGET = 1.1
POLL_SECONDS = 0.5


def seconds_between(a: str, b: str) -> float:
    return (datetime.fromisoformat(b) - datetime.fromisoformat(a)).total_seconds()


def api_round(demo: Demo, prefix: str, n: int) -> dict:
    for host in testhosts.up(prefix, HOSTS, "slurm"):
        demo.hosts[host["name"]] = host
    allocation = demo.admin.post("/v1/allocations", {
        "project_id": demo.ids["project"], "name": f"bench-{n}", "capacity_shape": "baremetal", "gpu_count": 1,
        "region": "local", "hosts": [{"name": h, "address": demo.hosts[h]["address"], "ssh_user": "root"}
                                     for h in HOSTS]})
    instance = demo.sa.post(f"/v1/projects/{demo.ids['project']}/instances", {
        "name": f"bench-{n}", "app_slug": "slurm", "allocation_ids": [allocation["id"]],
        "topology": [{"role": "controller", "count": 1}, {"role": "worker", "count": 2}],
        "parameters": TEST_HOST_PARAMETERS})
    posted = time.time()
    op = demo.sa.post(f"/v1/instances/{instance['id']}/deploy")
    while op["status"] not in TERMINAL:
        time.sleep(POLL_SECONDS)
        op = demo.sa.get(f"/v1/operations/{op['id']}")
    wall = datetime.fromisoformat(op["finished_at"]).timestamp() - posted
    if op["status"] != "succeeded":
        raise SystemExit(f"API deploy {op['status']}: {json.dumps(op.get('error'))}")
    marks = {}
    for kind in ("run.playbook_started", "run.playbook_stats"):
        page = demo.sa.get(f"/v1/instances/{instance['id']}/events?type={kind}&correlation_id={op['correlation_id']}")
        marks[kind] = page["items"][0]["occurred_at"]
    nodes = demo.host_sh("ctl", "sinfo --noheader --Node --format='%N %t'")
    return {"wall": wall, "nodes": nodes,
            "accept -> playbook start": seconds_between(op["created_at"], marks["run.playbook_started"]),
            "playbook": seconds_between(marks["run.playbook_started"], marks["run.playbook_stats"]),
            "stats -> finished": seconds_between(marks["run.playbook_stats"], op["finished_at"])}


def by_hand_round(prefix: str, workdir: Path, collections: Path, catalog_vars: dict, munge_key: str) -> dict:
    cluster = Cluster.start(prefix, workdir, HOSTS)
    cluster.workers = ["w1", "w2"]
    inventory = cluster.inventory()
    private = Path(tempfile.mkdtemp(prefix="bench-secret-"))
    try:
        secret_vars = private / "secret.json"
        secret_vars.touch(mode=0o600)
        secret_vars.write_text(json.dumps({"munge_key": munge_key}))
        cmd = [ANSIBLE_PLAYBOOK, "-i", str(inventory), "--forks", str(max(5, len(cluster.hosts))),
               "-e", json.dumps(catalog_vars | TEST_HOST_PARAMETERS), "-e", f"@{secret_vars}",
               "gpuaas.apps.slurm_deploy"]
        env = ansible_env() | {"ANSIBLE_COLLECTIONS_PATH": str(collections),
                               "ANSIBLE_COLLECTIONS_SCAN_SYS_PATH": "False"}
        started = time.monotonic()
        proc = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=900, check=False)
        wall = time.monotonic() - started
    finally:
        for path in private.iterdir():
            path.unlink()
        private.rmdir()
    if proc.returncode != 0:
        (workdir / f"by-hand-{prefix}.log").write_text(proc.stdout + proc.stderr)
        raise SystemExit(f"by-hand deploy failed (rc {proc.returncode}): see {workdir}/by-hand-{prefix}.log")
    return {"wall": wall, "nodes": cluster.sh("ctl", "sinfo --noheader --Node --format='%N %t'")}


def spread(values: list[float]) -> str:
    return f"{statistics.median(values):.1f} s ({min(values):.1f}-{max(values):.1f})"


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    tag = secrets.token_hex(2)
    workdir = Path(tempfile.mkdtemp(prefix="gpuaas-bench-api-deploy-"))
    demo = Demo(prefix=f"bad{tag}a0", say=lambda line: None)
    api_runs, hand_runs = [], []
    try:
        demo.start_service()
        demo.setup_tenancy()
        demo.register_slurm_app()
        version = demo.admin.get("/v1/catalog/apps/slurm/versions")["items"][0]
        artifact = demo.admin.get(f"/v1/catalog/artifacts/{version['artifact_id']}")
        # The worker's install of the registered build: the by-hand runs execute the same files.
        collections = installed_collection(embedded_store(demo.state_dir), artifact["digest"],
                                           cache_root(demo.state_dir))
        catalog_vars = dict(version["adapter"].get("vars") or {})
        print(f"load average at start {os.getloadavg()[0]:.1f}; content {artifact['digest'][:19]}")
        for n in range(args.rounds):
            order = ("api", "hand") if n % 2 == 0 else ("hand", "api")
            for which in order:
                prefix = f"bad{tag}{which[0]}{n}"
                try:
                    if which == "api":
                        demo.hosts.clear()
                        demo.prefix = prefix
                        run = api_round(demo, prefix, n)
                        api_runs.append(run)
                    else:
                        munge_key = base64.b64encode(secrets.token_bytes(96)).decode()
                        run = by_hand_round(prefix, workdir, collections, catalog_vars, munge_key)
                        hand_runs.append(run)
                finally:
                    testhosts.down(prefix)
                print(f"round {n + 1} {which:4s}: {run['wall']:.1f} s; nodes {' '.join(run['nodes'].split())}; "
                      f"load average {os.getloadavg()[0]:.1f}", flush=True)
    finally:
        demo.prefix = f"bad{tag}a0"
        demo.close()
        # the service's state (database, runs) goes once its PostgreSQL has stopped
        deadline = time.monotonic() + 60
        while (demo.state_dir / "postgres" / "pgdata" / "postmaster.pid").exists() and time.monotonic() < deadline:
            time.sleep(0.5)
        shutil.rmtree(demo.state_dir, ignore_errors=True)
        if not any(workdir.glob("by-hand-*.log")):  # kept when a by-hand run failed
            shutil.rmtree(workdir, ignore_errors=True)
    api = [r["wall"] for r in api_runs]
    hand = [r["wall"] for r in hand_runs]
    ratio = statistics.median(api) / statistics.median(hand)
    print(f"\n| deploy 1 controller + 2 workers | median s (min-max), {args.rounds} rounds |")
    print("|---|---|")
    print(f"| through the API (POST /deploy -> finished_at) | {spread(api)} |")
    for part in ("accept -> playbook start", "playbook", "stats -> finished"):
        print(f"| - {part} | {spread([r[part] for r in api_runs])} |")
    print(f"| by hand (ansible-playbook, same content and variables) | {spread(hand)} |")
    print(f"| ratio API / by hand (medians) | {ratio:.2f} (target <= {TARGET}: "
          f"{'met' if ratio <= TARGET else 'not met'}) |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
