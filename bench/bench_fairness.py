"""Queue fairness: how long one tenant's operation waits behind another tenant's burst.

Tenant A queues a burst of deploys on --burst instances at once; right after, tenant B queues one
deploy. In-process workers (--workers, polling every 0.2 s) run real ansible-runner runs of
tests/operations/playbooks/step.yml on localhost. Reported for tenant B's deploy: the queue wait
(accept -> claim), accept -> `run.playbook_started`, and how many of tenant A's operations were
claimed between B's accept and B's claim. Repeated --rounds times on a fresh database each.

    .venv/bin/python bench/bench_fairness.py [--burst 15] [--workers 2] [--rounds 3]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

import psycopg
from cryptography.fernet import Fernet
from fastapi.testclient import TestClient
from psycopg.conninfo import make_conninfo

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT / "api"), str(ROOT / "tests")]

from api.world import build_world  # noqa: E402
from gpuaas_api import db as dbmod  # noqa: E402
from gpuaas_api.app import create_app  # noqa: E402
from gpuaas_api.config import DEFAULT_OPERATION_TIMEOUTS, OperationSettings  # noqa: E402
from gpuaas_api.executor.worker import Worker  # noqa: E402
from operations.helpers import TEST_APP, publish_test_app  # noqa: E402

PA = "platform_admin"


def allocation(w, project: str, name: str, net: int, hosts: int) -> str:
    """Hosts with addresses of their own (10.90.<net>.x), so no two tenants share one."""
    body = {"project_id": w.ids[project], "name": name, "capacity_shape": "baremetal", "gpu_count": 8,
            "region": "eu-west-1", "sku": "h100-8x",
            "hosts": [{"name": f"{name}-h{i}", "address": f"10.90.{net}.{i + 10}", "ssh_user": "root"}
                      for i in range(hosts)]}
    return w.call(PA, "POST", "/v1/allocations", 201, json=body).json()["id"]


def instance(w, actor: str, project: str, alloc: str, name: str, markers: Path) -> str:
    marker = markers / name
    marker.mkdir(parents=True)
    body = {"name": name, "app_slug": TEST_APP, "allocation_ids": [alloc],
            "topology": [{"role": "controller", "count": 1}, {"role": "worker", "count": 1}],
            "parameters": {"marker_dir": str(marker)}}
    return w.call(actor, "POST", f"/v1/projects/{w.ids[project]}/instances", 201, json=body).json()["id"]


def one_round(server_uri: str, tmp: Path, n: int, burst: int, workers: int) -> dict:
    dbname = f"bench_fair_{n}"
    with psycopg.connect(server_uri, autocommit=True) as conn:
        conn.execute(f"CREATE DATABASE {dbname}")
    url = make_conninfo(server_uri, dbname=dbname)
    dbmod.upgrade(url)
    settings = OperationSettings(state_dir=tmp / f"state{n}", collections_path=tmp / "collections",
                                 ssh_private_key_file=None, ssh_host_key_checking=False,
                                 secret_key=Fernet.generate_key().decode(), lease_seconds=10, max_attempts=2,
                                 poll_seconds=0.2, timeouts=dict(DEFAULT_OPERATION_TIMEOUTS))
    database = dbmod.Database(url, min_size=2, max_size=8)
    database.open()
    app = create_app(database)
    app.state.operation_settings = settings
    markers = tmp / f"markers{n}"
    with TestClient(app) as client:
        w = build_world(client, database)
        publish_test_app(w)
        for project in ("project_a1", "project_b1"):
            w.call(PA, "POST", f"/v1/projects/{w.ids[project]}/entitlements", 201, json={"app_slug": TEST_APP})
        alloc_a = allocation(w, "project_a1", "fair-a", 1, 2 * burst + 2)
        alloc_b = allocation(w, "project_b1", "fair-b", 2, 2)
        burst_ids = [instance(w, "service_account", "project_a1", alloc_a, f"a{i}", markers) for i in range(burst)]
        b_id = instance(w, "other_tenant_admin", "project_b1", alloc_b, "b0", markers)
        pools = []
        for i in range(workers):
            pool = dbmod.Database(url, min_size=1, max_size=5)
            pool.open()
            worker = Worker(pool, settings, name=f"fair{i}")
            worker.start()
            pools.append((worker, pool))
        for iid in burst_ids:
            w.call("service_account", "POST", f"/v1/instances/{iid}/deploy", 202)
        b_op = w.call("other_tenant_admin", "POST", f"/v1/instances/{b_id}/deploy", 202).json()["id"]
        deadline = time.monotonic() + 600
        while time.monotonic() < deadline:
            with database.transaction() as conn:
                left = conn.execute("SELECT count(*) AS n FROM operations WHERE status IN ('queued', 'running')"
                                    ).fetchone()["n"]
            if left == 0:
                break
            time.sleep(0.2)
        for worker, _ in pools:
            worker.stop.set()
        time.sleep(0.5)
        for _, pool in pools:
            pool.close()
        with database.transaction() as conn:
            row = conn.execute(
                """SELECT extract(epoch FROM b.started_at - b.created_at) AS wait_s,
                          extract(epoch FROM (SELECT min(e.occurred_at) FROM instance_events e
                                               WHERE e.correlation_id = b.correlation_id
                                                 AND e.type = 'run.playbook_started') - b.created_at) AS start_s,
                          (SELECT count(*) FROM operations a WHERE a.tenant_id <> b.tenant_id
                              AND a.started_at > b.created_at AND a.started_at < b.started_at) AS ahead,
                          (SELECT count(*) FROM operations WHERE status <> 'succeeded') AS not_ok
                     FROM operations b WHERE b.id = %s""", (b_op,)).fetchone()
    database.close()
    return {k: float(v) for k, v in row.items()}


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--burst", type=int, default=15, help="tenant A's operations queued at once")
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    import pgserver

    tmp = Path(tempfile.mkdtemp(prefix="gpuaas-bench-fair-"))
    server = pgserver.get_server(tmp / "pg", cleanup_mode="stop")
    coll = tmp / "collections" / "ansible_collections" / "gpuaas" / "apps"
    coll.mkdir(parents=True)
    (coll / "playbooks").symlink_to(ROOT / "tests" / "operations" / "playbooks")
    (coll / "plugins").mkdir()
    (coll / "plugins" / "modules").symlink_to(ROOT / "tests" / "operations" / "modules")
    rounds = []
    try:
        for n in range(args.rounds):
            r = one_round(server.get_uri(), tmp, n, args.burst, args.workers)
            rounds.append(r)
            print(f"round {n + 1}: tenant B waited {r['wait_s']:.1f} s for a claim, {r['start_s']:.1f} s to "
                  f"playbook start; {r['ahead']:.0f} of tenant A's operations were claimed ahead of it "
                  f"({r['not_ok']:.0f} operations did not succeed)")
    finally:
        server.cleanup()
    med = {k: statistics.median(r[k] for r in rounds) for k in rounds[0]}
    print(f"median over {args.rounds} rounds (burst {args.burst}, {args.workers} workers): queue wait "
          f"{med['wait_s']:.1f} s, accept -> playbook start {med['start_s']:.1f} s, "
          f"{med['ahead']:.0f} of tenant A's operations claimed ahead")
    return 1 if any(r["not_ok"] for r in rounds) else 0


if __name__ == "__main__":
    sys.exit(main())
