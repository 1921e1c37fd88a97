"""Latency of the instance read paths at scale, through the real HTTP app.

Loads app instances with their members, operations and timeline events (COPY) into a fresh database,
then measures p50/p99 of the read paths: the instance list (first page, keyset pages near the top and
anywhere, status filters dense, rare and empty), instance get, member list and get, the instance's
timeline, operation list and get, and its inventory. Requests go through the full ASGI stack (auth,
permission check, SQL, response validation) with an in-process httpx client; the database is the
embedded PostgreSQL unless DATABASE_URL points elsewhere. It exits non-zero if any p99 reaches 50 ms.

    .venv/bin/python bench/bench_api_instances.py [--scale small|large] [--instances N]
                                                  [--members-per-instance 10] [--requests 1000]

`--scale small` (the default): 10,000 instances, 100,000 members; `--scale large`: 100,000 instances,
1,000,000 members (issue 28). `--explain` prints EXPLAIN (ANALYZE, BUFFERS) of the list queries.
    .venv/bin/python bench/bench_api_instances.py --observability compare [--rounds 20] [--requests 100]

`--observability compare` measures the same requests with logging, metrics and tracing off and on,
in alternating rounds (the order swapped each round), and reports the p50 ratio (on / off) per
endpoint and over all, the spread of the per-round ratios, and the bench process's CPU time per
request in each mode (steadier than wall time on a shared machine). Off: metrics_enabled=false, log
level WARNING (no access lines), no tracer. On: the serve defaults plus tracing: JSON access lines at
INFO written to a file, the request histogram, and every request's span batched and exported over
OTLP/HTTP to a collector stand-in (its own process, on loopback) that reads and acknowledges each export.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import os
import random
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path

import httpx
import psycopg
from gpuaas_api import db as dbmod
from gpuaas_api.app import create_app
from gpuaas_api.common import encode_cursor
from gpuaas_api.config import Settings
from gpuaas_api.iam.auth import new_token
from gpuaas_api.instances import service as instances_service
from gpuaas_api.observability import logs, tracing
from psycopg import sql
from psycopg.conninfo import make_conninfo

DIGEST = "sha256:" + "cd" * 32
ADAPTER = {"roles": [{"name": "controller", "min": 1, "max": 1, "description": ""},
                     {"name": "worker", "min": 1, "max": 64, "description": ""}],
           "actions": {"deploy": "gpuaas.apps.slurm_deploy", "decommission": "gpuaas.apps.slurm_decommission"}}
COMPAT = {"requires_capacity_shape": ["baremetal"], "min_gpu_count": 1, "requires_exclusive_node": False,
          "multi_node": True}


SCALES = {"small": 10_000, "large": 100_000}
# One instance in 7 of each of these (the dense status filter reads "failed"); every 1,000th is degraded
# instead (the rare filter), and no instance is stopping (the empty filter).
STATUSES = ["running", "running", "running", "created", "starting", "stopped", "failed"]


def status_of(n: int) -> str:
    return "degraded" if n % 1000 == 999 else STATUSES[n % len(STATUSES)]


def seed(url: str, instances: int, per_instance: int, operations: int = 2, events: int = 10) -> dict:
    """Fixture rows by SQL, bulk rows by COPY: the instances, `per_instance` members each, `operations`
    finished operations each (a deploy, then reconfigures) and `events` timeline events each (the
    request, then run events of the operations). Returns ids and a project-admin token."""
    hosts = [{"name": f"h{i}", "address": f"10.78.0.{i + 1}", "ssh_user": "root", "ssh_port": 22}
             for i in range(per_instance)]
    token, digest = new_token()
    with psycopg.connect(url) as conn:
        one = lambda sql, params=(): conn.execute(sql, params).fetchone()[0]  # noqa: E731
        tenant = one("INSERT INTO tenants (name, display_name) VALUES ('bench', 'bench') RETURNING id")
        project = one("INSERT INTO projects (tenant_id, name, display_name) VALUES (%s, 'p', 'p') RETURNING id",
                      (tenant,))
        user = one("INSERT INTO users (tenant_id, email, display_name) VALUES (%s, 'b@x.io', 'b') RETURNING id",
                   (tenant,))
        conn.execute("""INSERT INTO role_bindings (principal_kind, principal_id, role, scope_kind, tenant_id,
                            project_id) VALUES ('user', %s, 'project_admin', 'project', %s, %s)""",
                     (user, tenant, project))
        conn.execute("""INSERT INTO api_tokens (token_hash, principal_kind, principal_id, name, expires_at)
                        VALUES (%s, 'user', %s, 'bench', now() + interval '1 day')""", (digest, user))
        conn.execute("""INSERT INTO app_manifests (slug, display_name, runtime_backend, operating_modes)
                        VALUES ('slurm', 'Slurm', 'slurm', '{tenant_dedicated}')""")
        artifact = conn.execute(
            """INSERT INTO artifacts (app_slug, kind, reference, registry, repository, digest, status)
               VALUES ('slurm', 'controller', %s, 'registry.example.com', 'gpuaas/slurm', %s, 'active')
               RETURNING id""",
            (f"registry.example.com/gpuaas/slurm@{DIGEST}", DIGEST)).fetchone()[0]
        version = conn.execute(
            """INSERT INTO app_versions (app_slug, version, artifact_id, compatibility, runtime_profile, adapter,
                   status) VALUES ('slurm', '1.0.0', %s, %s, '{}', %s, 'active') RETURNING id""",
            (artifact, json.dumps(COMPAT), json.dumps(ADAPTER))).fetchone()[0]
        allocation = conn.execute(
            """INSERT INTO allocations (tenant_id, project_id, name, capacity_shape, gpu_count, region, exclusive,
                   hosts) VALUES (%s, %s, 'a', 'baremetal', 8, 'eu-west-1', true, %s) RETURNING id""",
            (tenant, project, json.dumps(hosts))).fetchone()[0]
        topology = json.dumps({"roles": [{"name": "controller", "desired_count": 1},
                                         {"name": "worker", "desired_count": per_instance - 1}]})
        ids = [uuid.uuid4() for _ in range(instances)]
        with conn.cursor().copy(
            """COPY app_instances (id, tenant_id, project_id, name, app_slug, app_version_id, status, operating_mode,
                   control_plane_scope, runtime_backend, tenant_boundary_mode, bound_capacity_shape, topology)
               FROM STDIN""") as copy:
            for n, iid in enumerate(ids):
                copy.write_row((iid, tenant, project, f"inst-{n}", "slurm", version, status_of(n),
                                "tenant_dedicated", "project", "slurm", "tenant_isolated", "baremetal", topology))
        with conn.cursor().copy(
            """COPY app_instance_members (instance_id, role, allocation_id, host_name, node_name, status)
               FROM STDIN""") as copy:
            for iid in ids:
                for i in range(per_instance):
                    copy.write_row((iid, "controller" if i == 0 else "worker", allocation, f"h{i}", f"h{i}", "active"))
        op_ids = []
        with conn.cursor().copy(
            """COPY operations (id, instance_id, tenant_id, project_id, kind, status, correlation_id,
                   requested_by_kind, requested_by, attempt, max_attempts, timeout_s, result, created_at,
                   claimed_at, started_at, finished_at) FROM STDIN""") as copy:
            for iid in ids:
                for k in range(operations):
                    oid, cid = uuid.uuid4(), uuid.uuid4().hex
                    op_ids.append((oid, iid, cid))
                    copy.write_row((oid, iid, tenant, project, "deploy" if k == 0 else "reconfigure", "succeeded",
                                    cid, "user", user, 1, 3, 3600, '{"rc": 0}', "2026-01-01 00:00:00+00",
                                    "2026-01-01 00:00:01+00", "2026-01-01 00:00:01+00", "2026-01-01 00:00:09+00"))
        run_events = ["run.playbook_started", "run.play_started", "run.task_started", "run.task_ok"]
        with conn.cursor().copy(
            """COPY instance_events (app_instance_id, type, payload, correlation_id, tenant_id, project_id,
                   app_slug, operating_mode, control_plane_scope, runtime_backend) FROM STDIN""") as copy:
            per_op = max(1, (events - 1) // max(1, operations))
            for n, iid in enumerate(ids):
                copy.write_row((iid, "apps.instance.requested", "{}", str(uuid.uuid4()), tenant, project, "slurm",
                                "tenant_dedicated", "project", "slurm"))
                for e in range(events - 1):
                    _, _, cid = op_ids[n * operations + min(operations - 1, e // per_op)] if operations else \
                        (None, None, "none")
                    payload = json.dumps({"host": f"h{e % per_instance}", "task": "Bench task", "play": "Bench",
                                          "changed": False, "duration": 0.01})
                    copy.write_row((iid, run_events[e % len(run_events)], payload, cid, tenant, project, "slurm",
                                    "tenant_dedicated", "project", "slurm"))
        conn.commit()
        conn.autocommit = True
        conn.execute("VACUUM ANALYZE")
        counts = conn.execute("""SELECT (SELECT count(*) FROM app_instances),
                                        (SELECT count(*) FROM app_instance_members),
                                        (SELECT count(*) FROM operations),
                                        (SELECT count(*) FROM instance_events)""").fetchone()
        seqs = conn.execute("SELECT min(seq), max(seq) FROM app_instances").fetchone()
        members = [r[0] for r in conn.execute(
            "SELECT id FROM app_instance_members TABLESAMPLE SYSTEM (1) LIMIT 2000").fetchall()]
        member_of = dict(conn.execute("SELECT id, instance_id FROM app_instance_members WHERE id = ANY(%s)",
                                      (members,)).fetchall())
    return {"token": token, "project": project, "instances": ids, "counts": counts, "seqs": seqs,
            "members": list(member_of.items()), "operations": [o for o, _, _ in op_ids]}


def pct(samples: list[float], p: float) -> float:
    ordered = sorted(samples)
    return ordered[min(len(ordered) - 1, round(p / 100 * (len(ordered) - 1)))]


async def keyset_cursors(app, data: dict) -> list[str]:
    """Keyset cursors across the first 100 pages of the instance list."""
    transport = httpx.ASGITransport(app=app)
    headers = {"Authorization": f"Bearer {data['token']}"}
    path = f"/v1/projects/{data['project']}/instances"
    async with httpx.AsyncClient(transport=transport, base_url="http://bench", headers=headers) as client:
        cursors = [(await client.get(path, params={"limit": 50})).json()["next_cursor"]]
        while len(cursors) < 100 and cursors[-1]:
            cursors.append((await client.get(path, params={"limit": 50, "cursor": cursors[-1]})).json()["next_cursor"])
    return [c for c in cursors if c]


# The read paths the observability comparison measures (the first five, as it always has).
OBSERVED = ("instance list (first page, 50)", "instance list (keyset page, 50)", "instance list (status filter)",
            "instance get", "member list (10 per instance)")


def read_paths(client: httpx.AsyncClient, data: dict, rng: random.Random, cursors: list[str]) -> dict:
    """Each read path: a name and a call that makes one request of it."""
    project, ids = data["project"], data["instances"]
    low, high = data["seqs"]
    instances = f"/v1/projects/{project}/instances"
    return {
        "instance list (first page, 50)": lambda: client.get(instances, params={"limit": 50}),
        "instance list (keyset page, 50)": lambda: client.get(instances, params={"limit": 50,
                                                                                  "cursor": rng.choice(cursors)}),
        # a cursor is the seq of the page's last row: any seq is a page somewhere in the list
        "instance list (any keyset page, 50)": lambda: client.get(instances, params={
            "limit": 50, "cursor": encode_cursor(rng.randint(low + 50, high))}),
        "instance list (status filter)": lambda: client.get(instances, params={"limit": 50, "status": "failed"}),
        "instance list (rare status, 1 in 1,000)": lambda: client.get(instances, params={"limit": 50,
                                                                                          "status": "degraded"}),
        "instance list (status none has)": lambda: client.get(instances, params={"limit": 50, "status": "stopping"}),
        "instance list (app none has)": lambda: client.get(instances, params={"limit": 50, "app_slug": "opsapp"}),
        "instance get": lambda: client.get(f"/v1/instances/{rng.choice(ids)}"),
        "member list (10 per instance)": lambda: client.get(f"/v1/instances/{rng.choice(ids)}/members"),
        "member get": lambda: client.get("/v1/instances/{1}/members/{0}".format(*rng.choice(data["members"]))),
        "instance events (first page, 100)": lambda: client.get(f"/v1/instances/{rng.choice(ids)}/events"),
        "operation list": lambda: client.get(f"/v1/instances/{rng.choice(ids)}/operations"),
        "operation get": lambda: client.get(f"/v1/operations/{rng.choice(data['operations'])}"),
        "instance inventory": lambda: client.get(f"/v1/instances/{rng.choice(ids)}/inventory"),
    }


async def measure(app, data: dict, requests: int, seed: int = 7, warmup: int = 30,
                  cursors: list[str] | None = None, cpu: dict[str, float] | None = None,
                  only: tuple[str, ...] | None = None) -> dict[str, list[float]]:
    """Wall-clock ms per request, by endpoint (`only`: these read paths); with `cpu`, also adds up this
    process's CPU seconds (all its threads: the event loop, the handler threads, the log handler, the
    span exporter)."""
    headers = {"Authorization": f"Bearer {data['token']}"}
    rng = random.Random(seed)
    cursors = cursors or await keyset_cursors(app, data)
    transport = httpx.ASGITransport(app=app)
    results: dict[str, list[float]] = {}
    async with httpx.AsyncClient(transport=transport, base_url="http://bench", headers=headers) as client:
        cases = read_paths(client, data, rng, cursors)
        for name, call in cases.items():
            if only and name not in only:
                continue
            for _ in range(warmup):  # warm-up: pool connections, plan caches
                (await call()).raise_for_status()
            samples = []
            cpu_started = time.process_time()
            for _ in range(requests):
                t0 = time.perf_counter()
                response = await call()
                samples.append((time.perf_counter() - t0) * 1000)
                response.raise_for_status()
            results[name] = samples
            if cpu is not None:
                cpu[name] = cpu.get(name, 0.0) + time.process_time() - cpu_started
    return results


# An OTLP/HTTP collector stand-in, in a process of its own as a real collector is: it reads each
# export, answers 200 with an empty response, and tells on GET how many exports and bytes it read.
COLLECTOR = """
import http.server, json, sys
seen = {"exports": 0, "bytes": 0}
class Handler(http.server.BaseHTTPRequestHandler):
    def do_POST(self):
        seen["bytes"] += len(self.rfile.read(int(self.headers.get("Content-Length") or 0)))
        seen["exports"] += 1
        self.send_response(200)
        self.send_header("Content-Type", "application/x-protobuf")
        self.send_header("Content-Length", "0")
        self.end_headers()
    def do_GET(self):
        body = json.dumps(seen).encode()
        self.send_response(200)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)
    def log_message(self, *args):
        pass
server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
print(server.server_port, flush=True)
server.serve_forever()
"""


class Observability:
    """Switches logging and tracing between the bench's two modes (metrics go with the app's settings)."""

    def __init__(self, log_file: Path):
        self.log_file = log_file.open("a")
        # The bench's own HTTP client logs every request at INFO: that is not the service's cost.
        logging.getLogger("httpx").setLevel(logging.WARNING)
        self.collector = subprocess.Popen([sys.executable, "-c", COLLECTOR], stdout=subprocess.PIPE, text=True)
        self.endpoint = f"http://127.0.0.1:{int(self.collector.stdout.readline())}"

    def on(self) -> None:
        logs.configure("INFO", "json", stream=self.log_file)
        tracing.configure("otlp", self.endpoint, service_name="gpuaas-bench")

    def off(self) -> None:
        tracing.uninstall()  # flushes what is batched, outside the timed requests
        logs.configure("WARNING", "json", stream=self.log_file)

    def close(self) -> dict:
        self.off()
        seen = httpx.get(self.endpoint).json()
        self.collector.terminate()
        self.collector.wait(10)
        self.log_file.close()
        return seen


def compare(database, data: dict, requests: int, rounds: int, log_file: Path) -> tuple[dict, dict, list, dict]:
    """Alternating rounds of off and on (the order swapped each round), `requests` per endpoint each.
    Short rounds, many of them: on a shared machine the load drifts, and each round's pair sees the
    same load. Returns the samples by mode and endpoint, what the collector read, and the p50 ratio
    of each round (geometric mean over endpoints), which shows the noise."""
    apps = {"off": create_app(database, settings=Settings(metrics_enabled=False)),
            "on": create_app(database, settings=Settings(metrics_enabled=True))}
    cursors = asyncio.run(keyset_cursors(apps["off"], data))
    switch = Observability(log_file)
    samples: dict[str, dict[str, list[float]]] = {"off": {}, "on": {}}
    cpu: dict[str, dict[str, float]] = {"off": {}, "on": {}}
    per_round = []
    try:
        for n in range(rounds):
            got = {}
            for mode in ("off", "on") if n % 2 == 0 else ("on", "off"):
                getattr(switch, mode)()
                got[mode] = asyncio.run(measure(apps[mode], data, requests, seed=n, warmup=30 if n < 2 else 5,
                                                cursors=cursors, cpu=cpu[mode], only=OBSERVED))
                for name, values in got[mode].items():
                    samples[mode].setdefault(name, []).extend(values)
            per_round.append(statistics.geometric_mean(pct(got["on"][k], 50) / pct(got["off"][k], 50)
                                                       for k in got["off"]))
    finally:
        exported = switch.close()
    return samples, exported, per_round, cpu


def report_comparison(samples: dict[str, dict[str, list[float]]], exported: dict, per_round: list[float],
                      cpu: dict[str, dict[str, float]], log_file: Path) -> float:
    print(f"\n{'endpoint':40} {'n':>5} {'p50 off':>8} {'p50 on':>8} {'ratio':>6} {'p99 off':>8} {'p99 on':>8} "
          f"{'cpu off':>8} {'cpu on':>8} {'ratio':>6}")
    ratios, cpu_ratios = [], []
    for name, off in samples["off"].items():
        on = samples["on"][name]
        ratio = pct(on, 50) / pct(off, 50)
        ratios.append(ratio)
        cpu_off, cpu_on = (cpu[m][name] * 1000 / len(samples[m][name]) for m in ("off", "on"))
        cpu_ratios.append(cpu_on / cpu_off)
        print(f"{name:34} {len(on):5d} {pct(off, 50):8.2f} {pct(on, 50):8.2f} {ratio:6.3f} "
              f"{pct(off, 99):8.2f} {pct(on, 99):8.2f} {cpu_off:8.3f} {cpu_on:8.3f} {cpu_on / cpu_off:6.3f}")
    print("(ms; cpu: this process's CPU time per request, all threads; PostgreSQL's is not in it)")
    overall = statistics.geometric_mean(ratios)
    lines = sum(1 for _ in log_file.open())
    print(f"\np50 ratio, logging + metrics + tracing on / off: {overall:.3f} (geometric mean over endpoints)")
    quartiles = statistics.quantiles(per_round, n=4) if len(per_round) > 1 else per_round * 3
    print(f"per round ({len(per_round)}): median {statistics.median(per_round):.3f}, quartiles "
          f"{quartiles[0]:.3f} .. {quartiles[2]:.3f}, range {min(per_round):.3f} .. {max(per_round):.3f}")
    print(f"CPU per request, on / off: {statistics.geometric_mean(cpu_ratios):.3f} (geometric mean over endpoints)")
    print(f"on: {lines} JSON log lines written, {exported['exports']} OTLP exports "
          f"({exported['bytes'] / 1024:.0f} KiB) read by the collector stand-in")
    return overall


def load_average() -> str:
    return "/".join(f"{x:.1f}" for x in os.getloadavg())


class _Explaining:
    """A connection that runs each query under EXPLAIN and keeps the plans (the service's own SQL)."""

    def __init__(self, conn):
        self.conn, self.plans = conn, []

    def execute(self, query, params=()):
        rows = self.conn.execute("EXPLAIN (ANALYZE, BUFFERS) " + query, params).fetchall()
        self.plans.append("\n".join(next(iter(r.values())) for r in rows))
        return self.conn.execute("SELECT 1 WHERE false")


def explain_lists(database: dbmod.Database, data: dict) -> None:
    """How the list's filters read app_instances (the scan and the rows it threw away) and PostgreSQL's time."""
    print("\nThe instance list's query (EXPLAIN ANALYZE; the app_instances scan, PostgreSQL's execution time):")
    for label, filters in (("no filter", {}), ("status failed", {"status": "failed"}),
                           ("status degraded", {"status": "degraded"}), ("status stopping", {"status": "stopping"}),
                           ("app opsapp", {"app_slug": "opsapp"})):
        with database.transaction() as conn:
            explaining = _Explaining(conn)
            instances_service.list_instances(explaining, project_id=data["project"], limit=50, **filters)
        lines = explaining.plans[0].splitlines()
        scan = next(i for i, line in enumerate(lines) if " on app_instances i " in line)
        removed = next((line.strip() for line in lines[scan + 1:scan + 4] if "Rows Removed by Filter" in line), "")
        took = next(line for line in lines if line.startswith("Execution Time"))
        print(f"  {label:16} {lines[scan].strip().split('  (')[0].lstrip('-> ')}; {removed or 'no row removed'}; "
              f"{took}")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--scale", choices=sorted(SCALES), default="small",
                        help="small: 10,000 instances; large: 100,000 (with 10 members each: 1,000,000 members)")
    parser.add_argument("--instances", type=int, help="instances to load (default: the scale's)")
    parser.add_argument("--members-per-instance", type=int, default=10)
    parser.add_argument("--operations-per-instance", type=int, default=2)
    parser.add_argument("--events-per-instance", type=int, default=10)
    parser.add_argument("--explain", action="store_true", help="print how the list queries read (EXPLAIN ANALYZE)")
    parser.add_argument("--drop-index", action="append", default=[], metavar="NAME",
                        help="drop this index after migrating (to measure the schema without it)")
    parser.add_argument("--requests", type=int, default=1000, help="timed requests per endpoint (per round)")
    parser.add_argument("--observability", choices=("default", "compare"), default="default",
                        help="compare: logging, metrics and tracing off against on (see above)")
    parser.add_argument("--rounds", type=int, default=20, help="with --observability compare: rounds of each mode")
    args = parser.parse_args()
    instances = args.instances or SCALES[args.scale]

    print(f"load average at start {load_average()}")
    with tempfile.TemporaryDirectory(prefix="gpuaas-bench-") as tmp:
        base = os.environ.get("DATABASE_URL") or dbmod.embedded_server_uri(__import__("pathlib").Path(tmp) / "pg")
        name = f"bench_{uuid.uuid4().hex[:8]}"
        with psycopg.connect(base, autocommit=True) as conn:
            conn.execute(f"CREATE DATABASE {name}")
        url = make_conninfo(base, dbname=name)
        try:
            dbmod.upgrade(url)
            with psycopg.connect(url, autocommit=True) as conn:
                for index in args.drop_index:
                    conn.execute(sql.SQL("DROP INDEX {}").format(sql.Identifier(index)))
            t0 = time.perf_counter()
            data = seed(url, instances, args.members_per_instance, args.operations_per_instance,
                        args.events_per_instance)
            print("loaded {:,} instances, {:,} members, {:,} operations and {:,} events".format(*data["counts"])
                  + f" in {time.perf_counter() - t0:.1f} s; load average {load_average()}")
            database = dbmod.Database(url, min_size=2, max_size=4)
            database.open()
            try:
                if args.observability == "compare":
                    log_file = Path(tmp) / "access.jsonl"
                    samples, exported, per_round, cpu = compare(database, data, args.requests, args.rounds, log_file)
                    report_comparison(samples, exported, per_round, cpu, log_file)
                    results = samples["on"]
                else:
                    results = asyncio.run(measure(create_app(database), data, args.requests))
                if args.explain:
                    explain_lists(database, data)
            finally:
                database.close()
        finally:
            with psycopg.connect(base, autocommit=True) as conn:
                conn.execute(f"DROP DATABASE {name} WITH (FORCE)")

    print(f"\n{'endpoint':40} {'n':>5} {'p50 ms':>8} {'p99 ms':>8} {'mean ms':>8}")
    worst = 0.0
    for name, samples in results.items():
        p99 = pct(samples, 99)
        worst = max(worst, p99)
        print(f"{name:40} {len(samples):5d} {pct(samples, 50):8.2f} {p99:8.2f} {statistics.fmean(samples):8.2f}")
    print(f"load average at the end {load_average()}")
    print(f"\nworst p99 {worst:.2f} ms (target < 50 ms): {'PASS' if worst < 50 else 'FAIL'}")
    return 0 if worst < 50 else 1


if __name__ == "__main__":
    raise SystemExit(main())
