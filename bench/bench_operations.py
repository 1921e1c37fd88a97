"""Operations: API-accept-to-playbook-start latency and timeline event ingestion rate.

Latency: from the operation's accept (its created_at, the 202's transaction) to the run's
`run.playbook_started` event (ansible-runner's playbook_on_start, i.e. ansible-playbook is running
the playbook), for real runs of tests/operations/playbooks/step.yml on localhost, with one and with
two in-process workers (poll interval 0.2 s). Each worker stream submits its next operation when the
previous one finished, so the figure is pickup + claim + ansible start, not queue wait.

Ingestion: events/s appended to the timeline through the worker's event sink (one committed INSERT
per event, as during a run), and the events per real run.

    .venv/bin/python bench/bench_operations.py [--ops 50]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path

import psycopg
from cryptography.fernet import Fernet
from fastapi.testclient import TestClient
from psycopg.conninfo import make_conninfo

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))

from api.world import build_world, register_allocation  # noqa: E402
from gpuaas_api import db as dbmod  # noqa: E402
from gpuaas_api.app import create_app  # noqa: E402
from gpuaas_api.config import DEFAULT_OPERATION_TIMEOUTS, OperationSettings  # noqa: E402
from gpuaas_api.executor.worker import Worker, _EventSink  # noqa: E402
from operations.helpers import TEST_APP, publish_test_app  # noqa: E402


def percentile(values: list[float], p: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(round(p / 100 * (len(ordered) - 1))))]


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--ops", type=int, default=50, help="operations per configuration")
    args = parser.parse_args()
    import pgserver

    tmp = Path(tempfile.mkdtemp(prefix="gpuaas-bench-ops-"))
    server = pgserver.get_server(tmp / "pg", cleanup_mode="stop")
    with psycopg.connect(server.get_uri(), autocommit=True) as conn:
        conn.execute("CREATE DATABASE bench_ops")
    url = make_conninfo(server.get_uri(), dbname="bench_ops")
    dbmod.upgrade(url)
    coll = tmp / "collections" / "ansible_collections" / "gpuaas" / "apps"
    coll.mkdir(parents=True)
    (coll / "playbooks").symlink_to(ROOT / "tests" / "operations" / "playbooks")
    settings = OperationSettings(state_dir=tmp / "state", collections_path=tmp / "collections",
                                 ssh_private_key_file=None, ssh_host_key_checking=False,
                                 secret_key=Fernet.generate_key().decode(), lease_seconds=10, max_attempts=2,
                                 poll_seconds=0.2, timeouts=dict(DEFAULT_OPERATION_TIMEOUTS))
    database = dbmod.Database(url, min_size=2, max_size=12)
    database.open()
    app = create_app(database)
    app.state.operation_settings = settings
    results = {}
    with TestClient(app) as client:
        w = build_world(client, database)
        publish_test_app(w)
        w.call("platform_admin", "POST", f"/v1/projects/{w.ids['project_a1']}/entitlements", 201,
               json={"app_slug": TEST_APP})
        # a host serves one instance: two hosts for each of the 1 + 2 streams' instances
        alloc = register_allocation(w, "project_a1", "bench", hosts=6)["id"]
        lock = threading.Lock()

        def stream(name: str, n: int, out: list[float], events: list[int]):
            marker = tmp / "markers" / name
            marker.mkdir(parents=True)
            with lock:
                inst = w.call("service_account", "POST", f"/v1/projects/{w.ids['project_a1']}/instances", 201, json={
                    "name": name, "app_slug": TEST_APP, "allocation_ids": [alloc],
                    "topology": [{"role": "controller", "count": 1}, {"role": "worker", "count": 1}],
                    "parameters": {"marker_dir": str(marker)}}).json()
            kinds = ["deploy"] + ["reconfigure"] * (n - 1)
            for kind in kinds:
                with lock:
                    op = w.call("service_account", "POST", f"/v1/instances/{inst['id']}/{kind}", 202).json()
                while True:
                    with database.transaction() as conn:
                        row = conn.execute("SELECT status FROM operations WHERE id = %s", (op["id"],)).fetchone()
                    if row["status"] in ("succeeded", "failed", "canceled"):
                        break
                    time.sleep(0.05)
                with database.transaction() as conn:
                    row = conn.execute(
                        """SELECT extract(epoch FROM (SELECT min(e.occurred_at) FROM instance_events e
                                WHERE e.correlation_id = o.correlation_id AND e.type = 'run.playbook_started')
                                - o.created_at) AS s,
                                  (SELECT count(*) FROM instance_events e WHERE e.correlation_id = o.correlation_id
                                      AND e.type LIKE 'run.%%') AS n
                             FROM operations o WHERE o.id = %s""", (op["id"],)).fetchone()
                out.append(float(row["s"]))
                events.append(row["n"])

        for workers in (1, 2):
            pools = []
            for i in range(workers):
                pool = dbmod.Database(url, min_size=1, max_size=5)
                pool.open()
                worker = Worker(pool, settings, name=f"bench{workers}-{i}")
                worker.start()
                pools.append((worker, pool))
            latencies: list[float] = []
            per_run: list[int] = []
            started = time.monotonic()
            per_stream = args.ops // workers
            threads = [threading.Thread(target=stream, args=(f"b{workers}-{i}", per_stream, latencies, per_run))
                       for i in range(workers)]
            for t in threads:
                t.start()
            for t in threads:
                t.join()
            elapsed = time.monotonic() - started
            for worker, _pool in pools:
                worker.stop.set()
            time.sleep(0.5)
            for _, pool in pools:
                pool.close()
            results[workers] = (latencies, per_run, elapsed)
            print(f"{workers} worker(s): {len(latencies)} ops in {elapsed:.1f}s "
                  f"({len(latencies) / elapsed:.2f} ops/s); accept->playbook start p50 "
                  f"{statistics.median(latencies) * 1000:.0f} ms, p99 {percentile(latencies, 99) * 1000:.0f} ms, "
                  f"max {max(latencies) * 1000:.0f} ms; {statistics.mean(per_run):.0f} run events per op")

        with database.transaction() as conn:
            instance = conn.execute("SELECT * FROM app_instances LIMIT 1").fetchone()
        sink = _EventSink(database, instance, "bench-ingest")
        count, started = 3000, time.monotonic()
        for i in range(count):
            sink.append("run.task_ok", {"host": f"h{i % 8}", "task": "Bench task", "play": "Bench", "changed": False,
                                        "duration": 0.01})
        elapsed = time.monotonic() - started
        sink.close()
        print(f"timeline ingestion: {count} events in {elapsed:.2f}s = {count / elapsed:.0f} events/s "
              "(one committed INSERT per event, as during a run)")
    database.close()
    server.cleanup()
    return 0


if __name__ == "__main__":
    sys.exit(main())
