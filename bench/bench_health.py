"""What one health pass costs the control plane, and what its remote part costs (issue 23).

    .venv/bin/python bench/bench_health.py [--sizes 10,100,1000,10000] [--passes 2] [--workers 4]
                                           [--remote-runs 3]

For each size N (running instances) and each tenant layout, a fresh database on the embedded
PostgreSQL (or DATABASE_URL's server) is loaded with real rows (tenants, projects, the Slurm app's
manifest, artifact and version with the adapter spec the collection ships, one allocation per
tenant, N running instances of 1 controller + `--workers` workers, plus instances no check takes:
stopped ones and ones an operation failed). Layouts:

- skewed: one tenant holds 80 % of the instances, the rest are tenants of 2 instances each;
- even: tenants of 10 instances each.

A pass is every running instance checked once, the way a worker's health thread does it, each step
its own transaction: `service.claim` (n=1), `planner.status_plan` (what the run would target),
`verdict.judge` of the hosts' answers (every 10th instance has a worker that its controller and its
own host report failed), `service.record` of the verdict, and `service.release`. The pass ends when
a claim finds nothing due. Pass 1 reads each failure once (waits for a second read); pass 2 confirms
it (member failed, instance degraded, events). The remote part (the ansible-runner run) is left out
here and measured apart: `runner.run` of the test app's status module (tests/apps/opsapp fake_nodes)
on 1 and on 1 + workers local hosts, as tests/operations/test_health.py runs it.

It prints, per size and layout, the ms per check of each step and the control-plane cost per
instance of a pass, the shape of the claim's plan (EXPLAIN ANALYZE: which scans, how many index
probes and buffers), and exits non-zero when the per-instance cost at 1,000 is more than 3x that at
100 in any layout (the flatness check).
"""

from __future__ import annotations

import argparse
import json
import math
import os
import random
import resource
import shutil
import statistics
import sys
import tempfile
import time
import uuid
from datetime import UTC, datetime, timedelta
from pathlib import Path

import psycopg
import yaml
from cryptography.fernet import Fernet
from gpuaas_api import db as dbmod
from gpuaas_api.catalog.adapter import AppDescriptor
from gpuaas_api.config import OperationSettings
from gpuaas_api.executor import plan as planner
from gpuaas_api.executor import runner
from gpuaas_api.health import service
from gpuaas_api.health.verdict import HostAnswer, judge
from psycopg.conninfo import make_conninfo

ROOT = Path(__file__).resolve().parents[1]
DIGEST = "sha256:" + "ef" * 32
SLURM_ADAPTER = AppDescriptor.model_validate(yaml.safe_load(
    (ROOT / "adapters" / "slurm.yml").read_text())).spec().model_dump(mode="json")
COMPAT = {"requires_capacity_shape": ["baremetal"], "min_gpu_count": 0, "requires_exclusive_node": False,
          "multi_node": True}
OPSAPP = ROOT / "tests" / "apps" / "opsapp"
INTERVAL = 20.0  # the default health_interval_seconds


def layout(kind: str, n: int) -> list[int]:
    """Running instances per tenant."""
    if kind == "skewed":
        big = max(1, round(n * 0.8))
        rest = n - big
        return [big] + [2] * (rest // 2) + ([rest % 2] if rest % 2 else [])
    return [10] * (n // 10) + ([n % 10] if n % 10 else [])


def seed(url: str, per_tenant: list[int], workers: int) -> dict:
    """Real rows by SQL (fixture rows) and COPY (bulk rows), satisfying the schema's constraints."""
    hosts = [{"name": f"h{i}", "address": f"10.79.0.{i + 1}", "ssh_user": "root", "ssh_port": 22}
             for i in range(workers + 1)]
    topology = json.dumps({"roles": [{"name": "controller", "desired_count": 1},
                                     {"name": "worker", "desired_count": workers}]})
    now = datetime.now(UTC)
    with psycopg.connect(url) as conn:
        conn.execute("""INSERT INTO app_manifests (slug, display_name, runtime_backend, operating_modes)
                        VALUES ('slurm', 'Slurm', 'slurm', '{tenant_dedicated}')""")
        artifact = conn.execute(
            """INSERT INTO artifacts (app_slug, kind, reference, registry, repository, digest, status)
               VALUES ('slurm', 'collection', %s, 'registry.example.com', 'gpuaas/apps', %s, 'active')
               RETURNING id""", (f"registry.example.com/gpuaas/apps@{DIGEST}", DIGEST)).fetchone()[0]
        version = conn.execute(
            """INSERT INTO app_versions (app_slug, version, artifact_id, compatibility, runtime_profile, adapter,
                   status) VALUES ('slurm', '1.0.0', %s, %s, '{}', %s, 'active') RETURNING id""",
            (artifact, json.dumps(COMPAT), json.dumps(SLURM_ADAPTER))).fetchone()[0]
        rows = []  # (instance id, tenant, project, allocation, status, reason)
        for t, count in enumerate(per_tenant):
            tenant = conn.execute("INSERT INTO tenants (name, display_name) VALUES (%s, %s) RETURNING id",
                                  (f"t{t}", f"t{t}")).fetchone()[0]
            project = conn.execute("""INSERT INTO projects (tenant_id, name, display_name) VALUES (%s, 'p', 'p')
                                      RETURNING id""", (tenant,)).fetchone()[0]
            allocation = conn.execute(
                """INSERT INTO allocations (tenant_id, project_id, name, capacity_shape, gpu_count, region,
                       exclusive, hosts) VALUES (%s, %s, 'a', 'baremetal', 8, 'eu-west-1', true, %s)
                   RETURNING id""", (tenant, project, json.dumps(hosts))).fetchone()[0]
            # instances no check takes beside the running ones: 1 stopped per 5, 1 failed by a run per 50
            statuses = (["running"] * count + ["stopped"] * (count // 5)
                        + ["failed"] * (count // 50))
            rows += [(uuid.uuid4(), tenant, project, allocation, s,
                      "deploy failed: run_failed" if s == "failed" else "") for s in statuses]
        with conn.cursor().copy(
            """COPY app_instances (id, tenant_id, project_id, name, app_slug, app_version_id, status, status_reason,
                   operating_mode, control_plane_scope, runtime_backend, tenant_boundary_mode,
                   bound_capacity_shape, topology, health_due_at) FROM STDIN""") as copy:
            for n, (iid, tenant, project, _, status, reason) in enumerate(rows):
                copy.write_row((iid, tenant, project, f"i{n}", "slurm", version, status, reason, "tenant_dedicated",
                                "project", "slurm", "tenant_isolated", "baremetal", topology,
                                now - timedelta(seconds=random.uniform(0, 60))))
        with conn.cursor().copy("""COPY app_instance_members (instance_id, role, allocation_id, host_name,
                                       node_name, status) FROM STDIN""") as copy:
            for iid, _, _, allocation, status, _ in rows:
                for i in range(workers + 1):
                    copy.write_row((iid, "controller" if i == 0 else "worker", allocation, f"h{i}", f"h{i}",
                                    "active" if status == "running" else "removed"))
        conn.commit()
        conn.autocommit = True
        conn.execute("VACUUM ANALYZE")
    return {"tenants": len(per_tenant), "running": sum(per_tenant), "rows": len(rows)}


def make_due(conn: psycopg.Connection) -> None:
    """Every checkable instance due, the order among them spread over the last minute."""
    conn.execute("""UPDATE app_instances SET health_due_at = now() - random() * interval '60 s'
                     WHERE deleted_at IS NULL AND status IN ('running', 'degraded', 'failed')""")


def answers(plan: planner.RunPlan, fail: bool) -> dict[str, HostAnswer]:
    """What the hosts say: the controller sees every worker, each worker answers for itself; with
    `fail`, the second worker is failed on both."""
    bad = sorted(plan.node_members)[1] if fail and len(plan.node_members) > 1 else None

    def state(node: str) -> dict:
        return {"state": "failed", "details": {"reason": f"slurmd is not running on {node}"}} if node == bad \
            else {"state": "active"}
    out = {}
    for host in plan.checked_hosts:
        nodes = plan.node_members if host in plan.view_hosts else [host]
        entries = {n: state(n) for n in nodes if n in plan.node_members}
        out[host] = HostAnswer(result={"member_states": {n: e["state"] for n, e in entries.items()},
                                       "member_details": {n: e["details"] for n, e in entries.items()
                                                          if "details" in e}})
    return out


def one_pass(database: dbmod.Database, settings: OperationSettings, slot: str) -> dict:
    """Check every due instance once, as a health thread does; ms per step."""
    steps = {"claim": [], "plan+judge": [], "record": [], "release": []}
    lease = settings.health_timeout_seconds + 30
    started = time.perf_counter()
    cpu_started = time.process_time()
    while True:
        t0 = time.perf_counter()
        with database.transaction() as conn:
            claimed = service.claim(conn, slot, 1, lease)
        t1 = time.perf_counter()
        steps["claim"].append((t1 - t0) * 1000)
        if not claimed:
            break
        instance = claimed[0]
        with database.transaction() as conn:
            plan = planner.status_plan(conn, settings, instance)
        verdict = judge(answers(plan, instance["name"].endswith("0")), set(plan.view_hosts), plan.member_views)
        t2 = time.perf_counter()
        checked = {"module": plan.module, "hosts": len(plan.checked_hosts), "members": len(verdict.members),
                   "seconds": 1.0}
        with database.transaction() as conn:
            service.record(conn, instance, verdict, checked=checked, correlation_id=f"health-{uuid.uuid4().hex[:16]}")
        t3 = time.perf_counter()
        with database.transaction() as conn:
            service.release(conn, instance["id"], slot, 3600)
        t4 = time.perf_counter()
        steps["plan+judge"].append((t2 - t1) * 1000)
        steps["record"].append((t3 - t2) * 1000)
        steps["release"].append((t4 - t3) * 1000)
    return {"steps": steps, "checks": len(steps["record"]), "seconds": time.perf_counter() - started,
            "cpu": time.process_time() - cpu_started}


def claim_plan(conn: psycopg.Connection) -> dict:
    """EXPLAIN ANALYZE of one claim (rolled back): its scans on app_instances and what they read."""
    with conn.transaction(force_rollback=True):
        (doc,) = conn.execute("EXPLAIN (ANALYZE, BUFFERS, FORMAT JSON) " + service.CLAIM,
                              {"n": 1, "lease": 60, "w": "explain"}).fetchone()
    scans, probes, rows = set(), 0, 0

    def walk(node: dict) -> None:
        nonlocal probes, rows
        if node["Node Type"] != "ModifyTable" and (node.get("Relation Name") == "app_instances"
                                                   or node.get("Index Name", "").startswith("app_instances")):
            scans.add(f"{node['Node Type']} {node.get('Index Name', '')}".strip())
            probes += node.get("Actual Loops", 0)
            rows += node.get("Actual Loops", 0) * (node.get("Actual Rows", 0) + node.get("Rows Removed by Filter", 0))
        for child in node.get("Plans", []):
            walk(child)
    top = doc[0]["Plan"]
    walk(top)
    return {"scans": sorted(scans), "probes": probes, "rows": rows, "ms": doc[0]["Execution Time"],
            "buffers": top.get("Shared Hit Blocks", 0) + top.get("Shared Read Blocks", 0),
            "seq": any(s.startswith("Seq Scan") for s in scans)}


def claim_plan_text(conn: psycopg.Connection) -> str:
    with conn.transaction(force_rollback=True):
        lines = [r[0] for r in conn.execute("EXPLAIN (ANALYZE, COSTS OFF, TIMING OFF, SUMMARY OFF) " + service.CLAIM,
                                            {"n": 1, "lease": 60, "w": "explain"}).fetchall()]
    return "\n".join(lines)


def measure_size(base: str, kind: str, n: int, workers: int, passes: int, settings: OperationSettings,
                 show_plan: bool) -> dict:
    name = f"bench_health_{uuid.uuid4().hex[:8]}"
    with psycopg.connect(base, autocommit=True) as conn:
        conn.execute(f"CREATE DATABASE {name}")
    url = make_conninfo(base, dbname=name)
    try:
        dbmod.upgrade(url)
        t0 = time.perf_counter()
        loaded = seed(url, layout(kind, n), workers)
        load_s = time.perf_counter() - t0
        database = dbmod.Database(url, min_size=1, max_size=2)
        database.open()
        try:
            out = {"kind": kind, "n": n, "tenants": loaded["tenants"], "rows": loaded["rows"], "load_s": load_s,
                   "passes": []}
            for p in range(passes):
                with psycopg.connect(url, autocommit=True) as conn:
                    if p > 0:  # the seed made every instance due
                        make_due(conn)
                    else:
                        out["plan"] = claim_plan(conn)
                        if show_plan:
                            out["plan_text"] = claim_plan_text(conn)
                result = one_pass(database, settings, "bench/health-0")
                if result["checks"] != loaded["running"]:
                    raise SystemExit(f"{kind} {n}: pass {p + 1} checked {result['checks']} of "
                                     f"{loaded['running']} running instances")
                out["passes"].append(result)
            with psycopg.connect(url) as conn:
                out["degraded"] = conn.execute(
                    "SELECT count(*) FROM app_instances WHERE status = 'degraded'").fetchone()[0]
            return out
        finally:
            database.close()
    finally:
        with psycopg.connect(base, autocommit=True) as conn:
            conn.execute(f"DROP DATABASE {name} WITH (FORCE)")


def remote(settings: OperationSettings, hosts: int, runs: int, tmp: Path) -> dict:
    """runner.run of the test app's status module on `hosts` local hosts (1 controller, the rest
    workers): wall seconds and the CPU seconds of the run's processes, per run."""
    collections = tmp / "collections"
    if not collections.exists():
        shutil.copytree(OPSAPP, collections / "ansible_collections" / "gpuaas_tests" / "opsapp")
    nodes = ["ctl"] + [f"w{i}" for i in range(1, hosts)]
    states = tmp / f"nodes-{hosts}.json"
    states.write_text(json.dumps({n: "active" for n in nodes}))
    inventory = {"all": {"hosts": {n: {"ansible_connection": "local", "ansible_python_interpreter": sys.executable}
                                   for n in nodes},
                         "children": {"slurm_controller": {"hosts": {"ctl": {}}},
                                      "slurm_workers": {"hosts": {n: {} for n in nodes[1:]}}}}}
    plan = planner.RunPlan(kind="refresh", inventory=inventory, extravars={}, secret_vars={},
                           module="gpuaas_tests.opsapp.fake_nodes", host_pattern="all",
                           module_args=json.dumps({"members": nodes, "path": str(states)}),
                           checked_hosts=nodes, view_hosts=["ctl"])
    wall, cpu = [], []
    for i in range(runs):
        run_dir = Path(runner.scratch_dir("bench-health"))
        before = resource.getrusage(resource.RUSAGE_CHILDREN)
        t0 = time.perf_counter()
        try:
            result = runner.run(settings, {"id": f"bench-health-{hosts}-{i}", "attempt": 1,
                                           "correlation_id": uuid.uuid4().hex, "kind": "health"},
                                plan, collections, on_event=lambda *_: None, should_stop=lambda: None,
                                run_dir=run_dir, connect_timeout=settings.health_connect_timeout_seconds)
        finally:
            shutil.rmtree(run_dir, ignore_errors=True)
        wall.append(time.perf_counter() - t0)
        after = resource.getrusage(resource.RUSAGE_CHILDREN)
        cpu.append(after.ru_utime + after.ru_stime - before.ru_utime - before.ru_stime)
        if result.status != "successful" or sorted(result.module_results) != sorted(nodes):
            raise SystemExit(f"the status run on {hosts} host(s) did not answer on every host: {result.status} "
                             f"{sorted(result.module_results)} {result.failure}")
    return {"hosts": hosts, "wall": statistics.median(wall), "wall_min": min(wall), "wall_max": max(wall),
            "cpu": statistics.median(cpu)}


def load_average() -> str:
    return "/".join(f"{x:.1f}" for x in os.getloadavg())


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="10,100,1000", help="running instances, comma-separated")
    parser.add_argument("--layouts", default="skewed,even")
    parser.add_argument("--workers", type=int, default=4, help="workers per instance (plus 1 controller)")
    parser.add_argument("--passes", type=int, default=2)
    parser.add_argument("--remote-runs", type=int, default=3, help="status runs per host count (0: none)")
    args = parser.parse_args()
    sizes = [int(s) for s in args.sizes.split(",")]

    results, remotes = [], []
    with tempfile.TemporaryDirectory(prefix="gpuaas-bench-health-") as tmp:
        settings = OperationSettings(state_dir=Path(tmp) / "state", ssh_private_key_file=None,
                                     ssh_host_key_checking=False, secret_key=Fernet.generate_key().decode())
        print(f"load average before: {load_average()}")
        base = os.environ.get("DATABASE_URL") or dbmod.embedded_server_uri(Path(tmp) / "pg")
        for kind in args.layouts.split(","):
            for n in sizes:
                r = measure_size(base, kind, n, args.workers, args.passes, settings, show_plan=(n == 1000))
                results.append(r)
                per = [p["seconds"] * 1000 / p["checks"] for p in r["passes"]]
                print(f"{kind:6} {n:6d} instances, {r['tenants']:5d} tenants ({r['rows']} instance rows, loaded in "
                      f"{r['load_s']:.1f} s): per instance {' / '.join(f'{x:.2f}' for x in per)} ms per pass; "
                      f"load {load_average()}", flush=True)
        for hosts in (1, args.workers + 1) if args.remote_runs else ():
            remotes.append(remote(settings, hosts, args.remote_runs, Path(tmp)))
        print(f"load average after: {load_average()}")

    print("\nControl plane, per check (ms, mean over all passes; pass = every running instance checked once):")
    print(f"{'layout':6} {'N':>6} {'tenants':>7} {'claim':>7} {'plan+judge':>10} {'record':>7} {'release':>7} "
          f"{'pass s':>7} {'ms/inst':>8} {'cpu ms/inst':>11}")
    per_instance = {}
    for r in results:
        steps = {k: [x for p in r["passes"] for x in p["steps"][k]] for k in r["passes"][0]["steps"]}
        pass_s = statistics.fmean(p["seconds"] for p in r["passes"])
        per = statistics.fmean(p["seconds"] * 1000 / p["checks"] for p in r["passes"])
        cpu = statistics.fmean(p["cpu"] * 1000 / p["checks"] for p in r["passes"])
        per_instance[(r["kind"], r["n"])] = per
        print(f"{r['kind']:6} {r['n']:6d} {r['tenants']:7d} {statistics.fmean(steps['claim']):7.2f} "
              f"{statistics.fmean(steps['plan+judge']):10.2f} {statistics.fmean(steps['record']):7.2f} "
              f"{statistics.fmean(steps['release']):7.2f} {pass_s:7.2f} {per:8.2f} {cpu:11.2f}")
    print("\nThe claim's plan (EXPLAIN ANALYZE of one claim, every instance due):")
    print(f"{'layout':6} {'N':>6} {'tenants':>7} {'ms':>6} {'probes':>6} {'rows read':>9} {'buffers':>7}  scans")
    for r in results:
        p = r["plan"]
        print(f"{r['kind']:6} {r['n']:6d} {r['tenants']:7d} {p['ms']:6.2f} {p['probes']:6d} {p['rows']:9d} "
              f"{p['buffers']:7d}  {', '.join(p['scans'])}{'  SEQ SCAN' if p['seq'] else ''}")
    for r in results:
        if "plan_text" in r:
            print(f"\n{r['kind']} 1000:\n{r['plan_text']}")
    if remotes:
        print("\nRemote part: one status run (ansible-runner ad hoc, local connection), median of "
              f"{args.remote_runs}:")
        for m in remotes:
            print(f"  {m['hosts']} host(s): {m['wall']:.2f} s wall ({m['wall_min']:.2f}-{m['wall_max']:.2f}), "
                  f"{m['cpu']:.2f} s CPU of the run's processes")
        check = remotes[-1]
        cp = per_instance.get(("skewed", 1000)) or next(iter(per_instance.values()))
        seconds = check["wall"] + cp / 1000
        print(f"  a pass of 1,000 instances of {check['hosts']} hosts within {INTERVAL:.0f} s: "
              f"{math.ceil(1000 * seconds / INTERVAL)} checker threads ({seconds:.2f} s per check), "
              f"{1000 * check['cpu'] / INTERVAL:.0f} CPU cores for the runs")

    failed = False
    for kind in {r["kind"] for r in results}:
        if (kind, 100) in per_instance and (kind, 1000) in per_instance:
            ratio = per_instance[(kind, 1000)] / per_instance[(kind, 100)]
            ok = ratio <= 3
            failed |= not ok
            print(f"flatness, {kind}: per instance at 1,000 / at 100 = {ratio:.2f} (<= 3): {'PASS' if ok else 'FAIL'}")
    return 1 if failed else 0


if __name__ == "__main__":
    raise SystemExit(main())
