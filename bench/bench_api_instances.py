"""Latency of the instance read paths at scale, through the real HTTP app.

Loads 10,000 app instances with 100,000 members (COPY) into a fresh database, then measures p50/p99
of: instance list (first page and deep keyset pages), instance get, member list. Requests go through
the full ASGI stack (auth, permission check, SQL, response validation) with an in-process httpx
client; the database is the embedded PostgreSQL unless DATABASE_URL points elsewhere.

    .venv/bin/python bench/bench_api_instances.py [--instances 10000] [--members-per-instance 10]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import statistics
import tempfile
import time
import uuid

import httpx
import psycopg
from gpuaas_api import db as dbmod
from gpuaas_api.app import create_app
from gpuaas_api.iam.auth import new_token
from psycopg.conninfo import make_conninfo

DIGEST = "sha256:" + "cd" * 32
ADAPTER = {"roles": [{"name": "controller", "min": 1, "max": 1, "description": ""},
                     {"name": "worker", "min": 1, "max": 64, "description": ""}],
           "actions": {"deploy": "gpuaas.apps.slurm_deploy", "decommission": "gpuaas.apps.slurm_decommission"}}
COMPAT = {"requires_capacity_shape": ["baremetal"], "min_gpu_count": 1, "requires_exclusive_node": False,
          "multi_node": True}


def seed(url: str, instances: int, per_instance: int) -> dict:
    """Fixture rows by SQL, bulk rows by COPY. Returns ids and a project-admin token."""
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
        statuses = ["running", "running", "running", "created", "starting", "stopped", "failed"]
        with conn.cursor().copy(
            """COPY app_instances (id, tenant_id, project_id, name, app_slug, app_version_id, status, operating_mode,
                   control_plane_scope, runtime_backend, tenant_boundary_mode, bound_capacity_shape, topology)
               FROM STDIN""") as copy:
            for n, iid in enumerate(ids):
                copy.write_row((iid, tenant, project, f"inst-{n}", "slurm", version, statuses[n % len(statuses)],
                                "tenant_dedicated", "project", "slurm", "tenant_isolated", "baremetal", topology))
        with conn.cursor().copy(
            """COPY app_instance_members (instance_id, role, allocation_id, host_name, node_name, status)
               FROM STDIN""") as copy:
            for iid in ids:
                for i in range(per_instance):
                    copy.write_row((iid, "controller" if i == 0 else "worker", allocation, f"h{i}", f"h{i}", "active"))
        with conn.cursor().copy(
            """COPY instance_events (app_instance_id, type, correlation_id, tenant_id, project_id, app_slug,
                   operating_mode, control_plane_scope, runtime_backend) FROM STDIN""") as copy:
            for iid in ids:
                copy.write_row((iid, "apps.instance.requested", str(uuid.uuid4()), tenant, project, "slurm",
                                "tenant_dedicated", "project", "slurm"))
        conn.commit()
        conn.autocommit = True
        conn.execute("VACUUM ANALYZE")
        counts = conn.execute("""SELECT (SELECT count(*) FROM app_instances),
                                        (SELECT count(*) FROM app_instance_members)""").fetchone()
    return {"token": token, "project": project, "instances": ids, "counts": counts}


def pct(samples: list[float], p: float) -> float:
    ordered = sorted(samples)
    return ordered[min(len(ordered) - 1, round(p / 100 * (len(ordered) - 1)))]


async def measure(app, data: dict, requests: int) -> dict[str, list[float]]:
    headers = {"Authorization": f"Bearer {data['token']}"}
    rng = random.Random(7)
    project, ids = data["project"], data["instances"]
    transport = httpx.ASGITransport(app=app)
    results: dict[str, list[float]] = {}
    async with httpx.AsyncClient(transport=transport, base_url="http://bench", headers=headers) as client:
        first = (await client.get(f"/v1/projects/{project}/instances", params={"limit": 50})).json()
        cursors = [first["next_cursor"]]
        while len(cursors) < 100 and cursors[-1]:  # keyset cursors across the first 100 pages
            page = (await client.get(f"/v1/projects/{project}/instances",
                                     params={"limit": 50, "cursor": cursors[-1]})).json()
            cursors.append(page["next_cursor"])
        cursors = [c for c in cursors if c]
        cases = {
            "instance list (first page, 50)": lambda: client.get(f"/v1/projects/{project}/instances",
                                                                  params={"limit": 50}),
            "instance list (keyset page, 50)": lambda: client.get(f"/v1/projects/{project}/instances",
                                                                   params={"limit": 50, "cursor": rng.choice(cursors)}),
            "instance list (status filter)": lambda: client.get(f"/v1/projects/{project}/instances",
                                                                 params={"limit": 50, "status": "failed"}),
            "instance get": lambda: client.get(f"/v1/instances/{rng.choice(ids)}"),
            "member list (10 per instance)": lambda: client.get(f"/v1/instances/{rng.choice(ids)}/members"),
        }
        for name, call in cases.items():
            for _ in range(30):  # warm-up: pool connections, plan caches
                (await call()).raise_for_status()
            samples = []
            for _ in range(requests):
                t0 = time.perf_counter()
                response = await call()
                samples.append((time.perf_counter() - t0) * 1000)
                response.raise_for_status()
            results[name] = samples
    return results


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--instances", type=int, default=10_000)
    parser.add_argument("--members-per-instance", type=int, default=10)
    parser.add_argument("--requests", type=int, default=1000, help="timed requests per endpoint")
    args = parser.parse_args()

    with tempfile.TemporaryDirectory(prefix="gpuaas-bench-") as tmp:
        base = os.environ.get("DATABASE_URL") or dbmod.embedded_server_uri(__import__("pathlib").Path(tmp) / "pg")
        name = f"bench_{uuid.uuid4().hex[:8]}"
        with psycopg.connect(base, autocommit=True) as conn:
            conn.execute(f"CREATE DATABASE {name}")
        url = make_conninfo(base, dbname=name)
        try:
            dbmod.upgrade(url)
            t0 = time.perf_counter()
            data = seed(url, args.instances, args.members_per_instance)
            print(f"loaded {data['counts'][0]} instances and {data['counts'][1]} members "
                  f"in {time.perf_counter() - t0:.1f} s")
            database = dbmod.Database(url, min_size=2, max_size=4)
            database.open()
            try:
                results = asyncio.run(measure(create_app(database), data, args.requests))
            finally:
                database.close()
        finally:
            with psycopg.connect(base, autocommit=True) as conn:
                conn.execute(f"DROP DATABASE {name} WITH (FORCE)")

    print(f"\n{'endpoint':34} {'n':>5} {'p50 ms':>8} {'p99 ms':>8} {'mean ms':>8}")
    worst = 0.0
    for name, samples in results.items():
        p99 = pct(samples, 99)
        worst = max(worst, p99)
        print(f"{name:34} {len(samples):5d} {pct(samples, 50):8.2f} {p99:8.2f} {statistics.fmean(samples):8.2f}")
    print(f"\nworst p99 {worst:.2f} ms (target < 50 ms): {'PASS' if worst < 50 else 'FAIL'}")
    return 0 if worst < 50 else 1


if __name__ == "__main__":
    raise SystemExit(main())
