# Copyright: gpuaas.apps developers
# Apache License 2.0 (see https://www.apache.org/licenses/LICENSE-2.0)
"""What a metering pass (api/gpuaas_api/metering/service.py, docs/metering.md) costs per ended job, at 1,000 and
at 100,000 jobs: it must grow no worse than linearly.

    .venv/bin/python bench/bench_metering.py [--sizes 1000,100000] [--hours 24] [--repeat 2]

For each size N a fresh database on the embedded PostgreSQL (or DATABASE_URL's server) gets real rows: a tenant,
three projects, the Slurm app's version with the adapter spec the collection ships, and one running tenant-shared
runtime owned by the first project with the other two attached, a controller and 4 workers live (one contributed by
the second project, their moves on the timeline). Its scheduler gateway is the toy one (tests/operations/
toy_scheduler.py, a test double of the gateway's `GET /v1/usage` on loopback, in this process), holding N ended
jobs spread over the last `--hours` hours, in the three projects' accounts and one that no project has.

Then `run_pass` from the runtime's creation (the hour before the jobs) to now, timed: the first pass writes every
record (N jobs, the members' hours), a pass with the cursors rewound reads the same window again and writes
nothing (the records are already there). Each is run `--repeat` times on a fresh copy of the records and the best
is kept. It prints the pass's wall and CPU time (this process: the toy's answers are built here too), the part
spent in gateway calls (HTTP and JSON) and in the record upserts, and the time per job; it checks the records
(N jobs, charged as the attribution rule says), and exits non-zero when the time per job at the largest size is
more than 1.5x that at the smallest.
"""

from __future__ import annotations

import argparse
import json
import os
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
from gpuaas_api.metering import service
from gpuaas_api.metering.timeline import floor_hour
from gpuaas_api.secrets import service as secrets
from psycopg.conninfo import make_conninfo

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))
from operations.toy_scheduler import ToyScheduler, point_at  # noqa: E402 - the tests' gateway double

DIGEST = "sha256:" + "ef" * 32
SLURM_ADAPTER = AppDescriptor.model_validate(yaml.safe_load(
    (ROOT / "adapters" / "slurm.yml").read_text())).spec().model_dump(mode="json")
COMPAT = {"requires_capacity_shape": ["baremetal"], "min_gpu_count": 0, "requires_exclusive_node": False,
          "multi_node": True}
PROJECTS = ("owner", "vision", "speech")  # their accounts are their names
WORKERS = 4


def seed(url: str, created: datetime) -> dict:
    """The tenant, its projects, the Slurm app and one running shared runtime, by SQL."""
    hosts = [{"name": f"h{i}", "address": f"10.79.0.{i + 1}", "ssh_user": "root", "ssh_port": 22}
             for i in range(WORKERS + 1)]
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
        tenant = conn.execute("INSERT INTO tenants (name, display_name) VALUES ('t', 't') RETURNING id").fetchone()[0]
        projects = {name: conn.execute("""INSERT INTO projects (tenant_id, name, display_name) VALUES (%s, %s, %s)
                                          RETURNING id""", (tenant, name, name)).fetchone()[0] for name in PROJECTS}
        allocation = conn.execute(
            """INSERT INTO allocations (tenant_id, project_id, name, capacity_shape, gpu_count, region, exclusive,
                   hosts) VALUES (%s, %s, 'a', 'baremetal', 8, 'eu-west-1', true, %s) RETURNING id""",
            (tenant, projects["owner"], json.dumps(hosts))).fetchone()[0]
        topology = json.dumps({"roles": [{"name": "controller", "desired_count": 1},
                                         {"name": "worker", "desired_count": WORKERS}]})
        instance = conn.execute(
            """INSERT INTO app_instances (tenant_id, project_id, name, app_slug, app_version_id, status,
                   operating_mode, control_plane_scope, runtime_backend, tenant_boundary_mode, bound_capacity_shape,
                   topology, created_at)
               VALUES (%s, %s, 'shared', 'slurm', %s, 'running', 'tenant_dedicated', 'tenant', 'slurm',
                       'tenant_isolated', 'baremetal', %s, %s) RETURNING *""",
            (tenant, projects["owner"], version, topology, created)).fetchone()
        for name, project in projects.items():
            conn.execute("""INSERT INTO instance_attachments (instance_id, tenant_id, project_id, owner, status)
                            VALUES (%s, %s, %s, %s, 'attached')""", (instance[0], tenant, project, name == "owner"))
        for i in range(WORKERS + 1):
            member = conn.execute(
                """INSERT INTO app_instance_members (instance_id, role, allocation_id, host_name, node_name, status,
                       source_project_id) VALUES (%s, %s, %s, %s, %s, 'active', %s) RETURNING id""",
                (instance[0], "controller" if i == 0 else "worker", allocation, f"h{i}", f"h{i}",
                 projects["vision"] if i == WORKERS else None)).fetchone()[0]
            for step, (before, after) in enumerate((("pending", "joining"), ("joining", "active"))):
                conn.execute(
                    """INSERT INTO instance_events (app_instance_id, member_id, type, occurred_at, payload,
                           correlation_id, tenant_id, project_id, app_slug, operating_mode, control_plane_scope,
                           runtime_backend)
                       VALUES (%s, %s, %s, %s, %s, 'bench', %s, %s, 'slurm', 'tenant_dedicated', 'tenant', 'slurm')""",
                    (instance[0], member, f"member_{'joining' if after == 'joining' else 'added'}",
                     created + timedelta(minutes=step), json.dumps({"from": before, "to": after}), tenant,
                     projects["owner"]))
        conn.commit()
    return {"instance": instance[0], "projects": projects}


class Timed:
    """Wall time spent in a function or method, summed over its calls (a plain function as its stand-in, so a
    method stays a method)."""

    def __init__(self, owner: object, name: str):
        self.owner, self.name, self.real, self.seconds = owner, name, getattr(owner, name), 0.0

        def stand_in(*args, **kwargs):
            started = time.perf_counter()
            try:
                return self.real(*args, **kwargs)
            finally:
                self.seconds += time.perf_counter() - started

        setattr(owner, name, stand_in)

    def restore(self) -> None:
        setattr(self.owner, self.name, self.real)


def timed_pass(database: dbmod.Database, settings: OperationSettings, now: datetime) -> dict:
    calls = Timed(service.gateway.Gateway, "call")
    upserts = Timed(service, "_upsert_jobs")
    try:
        wall, cpu = time.perf_counter(), time.process_time()
        result = service.run_pass(database, settings, now)
        wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
    finally:
        calls.restore()
        upserts.restore()
    if result.failed:
        raise SystemExit(f"the pass failed: {result.failed}")
    return {"wall": wall, "cpu": cpu, "gateway": calls.seconds, "upsert": upserts.seconds, "records": result.records}


def measure(base: str, n: int, hours: int, repeat: int, settings: OperationSettings) -> dict:
    name = f"bench_metering_{uuid.uuid4().hex[:8]}"
    with psycopg.connect(base, autocommit=True) as conn:
        conn.execute(f"CREATE DATABASE {name}")
    url = make_conninfo(base, dbname=name)
    now = datetime.now(UTC).replace(microsecond=0)
    first_end = now - timedelta(hours=hours)
    created = floor_hour(first_end) - timedelta(hours=1)
    database = dbmod.Database(url, min_size=1, max_size=2)
    try:
        dbmod.upgrade(url)
        world = seed(url, created)
        database.open()
        key_name = SLURM_ADAPTER["scheduler"]["key"]
        with database.transaction() as conn:
            secrets.ensure(conn, settings, world["instance"], {key_name: {"kind": "token", "size": 32}})
            key = secrets.load(conn, settings, world["instance"])[key_name]

        def sql(query: str, params: tuple) -> list:
            with database.transaction() as conn:
                return conn.execute(query, params).fetchall()

        with ToyScheduler(key, str(world["instance"]), nodes=["n1"]) as toy:
            point_at(sql, world["instance"], toy.port)
            accounts = [*PROJECTS, "unknown"]
            toy.seed_ended_jobs(n, accounts, ["alice-1", "bob-2"], int(first_end.timestamp()),
                                int((now - service.SETTLE).timestamp()) - 1, cpus=8, gpus=2, memory_mb=16000)
            firsts, rereads = [], []
            for _ in range(repeat):
                with database.transaction() as conn:
                    conn.execute("DELETE FROM usage_records")
                    conn.execute("DELETE FROM metering_cursors")
                firsts.append(timed_pass(database, settings, now))
                with database.transaction() as conn:
                    conn.execute("UPDATE metering_cursors SET metered_until = %s", (created,))
                rereads.append(timed_pass(database, settings, now))
            with database.transaction() as conn:
                jobs = conn.execute(
                    """SELECT count(*) AS n, count(*) FILTER (WHERE unattributed) AS unattributed,
                              count(DISTINCT project_id) AS projects, sum(core_seconds) AS core_seconds,
                              sum(elapsed_seconds) AS elapsed FROM usage_records WHERE dimension = 'job'""").fetchone()
                hours_recorded = conn.execute(
                    "SELECT count(*) AS n FROM usage_records WHERE dimension = 'member_seconds'").fetchone()["n"]
        if jobs["n"] != n or jobs["unattributed"] != n // len(accounts) or jobs["projects"] != len(PROJECTS):
            raise SystemExit(f"{n} jobs seeded, records say {dict(jobs)}")
        if jobs["core_seconds"] != 8 * jobs["elapsed"]:
            raise SystemExit("core_seconds is not elapsed x cpus")
        best = min(firsts, key=lambda r: r["wall"])
        again = min(rereads, key=lambda r: r["wall"])
        if again["records"] != 0:
            raise SystemExit(f"re-reading the window wrote {again['records']} records")
        return {"n": n, "first": best, "reread": again, "member_hours": hours_recorded,
                "windows": len(range(0, int((now - service.SETTLE - created).total_seconds()),
                                     int(service.JOB_CHUNK.total_seconds())))}
    finally:
        database.close()
        with psycopg.connect(base, autocommit=True) as conn:
            conn.execute(f"DROP DATABASE {name} WITH (FORCE)")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="1000,100000", help="ended jobs, comma-separated")
    parser.add_argument("--hours", type=int, default=24, help="the jobs end over this many hours")
    parser.add_argument("--repeat", type=int, default=2, help="passes per size; the best is kept")
    args = parser.parse_args()
    sizes = [int(s) for s in args.sizes.split(",")]
    results = []
    with tempfile.TemporaryDirectory(prefix="gpuaas-bench-metering-") as tmp:
        settings = OperationSettings(state_dir=Path(tmp) / "state", ssh_private_key_file=None,
                                     secret_key=Fernet.generate_key().decode())
        print(f"load average before: {'/'.join(f'{x:.1f}' for x in os.getloadavg())}")
        base = os.environ.get("DATABASE_URL") or dbmod.embedded_server_uri(Path(tmp) / "pg")
        for n in sizes:
            results.append(measure(base, n, args.hours, args.repeat, settings))
            print(f"{n} jobs measured; load {'/'.join(f'{x:.1f}' for x in os.getloadavg())}", flush=True)

    print(f"\nA pass over N ended jobs in {args.hours} h ({results[0]['windows']} gateway windows of "
          f"{service.JOB_CHUNK.total_seconds() / 3600:.0f} h), best of {args.repeat}:")
    print(f"{'N':>7} {'pass':>6} {'wall s':>7} {'cpu s':>6} {'gateway s':>9} {'upsert s':>8} {'records':>8} "
          f"{'us/job':>7}")
    for r in results:
        for kind in ("first", "reread"):
            p = r[kind]
            print(f"{r['n']:7d} {kind:>6} {p['wall']:7.3f} {p['cpu']:6.3f} {p['gateway']:9.3f} {p['upsert']:8.3f} "
                  f"{p['records']:8d} {1e6 * p['wall'] / r['n']:7.1f}")
    small, large = results[0], results[-1]
    ratio = (large["first"]["wall"] / large["n"]) / (small["first"]["wall"] / small["n"])
    ok = ratio <= 1.5
    print(f"\nper job at {large['n']:,} / at {small['n']:,} (first pass): {ratio:.2f} (<= 1.5): "
          f"{'PASS' if ok else 'FAIL'}")
    return 0 if ok else 1


if __name__ == "__main__":
    raise SystemExit(main())
