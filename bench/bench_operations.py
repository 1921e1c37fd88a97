"""Operations: API-accept-to-playbook-start latency, where it goes, and timeline event ingestion.

Latency: from an operation's accept (its created_at, the 202's transaction) to the run's
`run.playbook_started` event (ansible-runner's playbook_on_start: ansible-playbook has started and
is running the playbook), for real runs of the operations tests' app (tests/apps/opsapp, registered
through the API and run by digest like any app) on localhost, with one and with two in-process
workers at the service's default poll interval. Each worker stream submits its next operation when
the previous one finished, so the figure is pickup + claim + ansible start, not queue wait. It is
split into
- pickup: accept -> claim (the worker's claim transaction),
- prepare: claim -> ansible-playbook spawned (the run's checks, plan, secrets, content verify,
  ansible-runner setup; the spawn is when ansible-runner wrote the run's `command` file),
- ansible start: spawned -> playbook_on_start (ansible-playbook's own start-up: Python imports,
  configuration, plugin documentation, inventory, the playbook).
The floor is the same playbook from the same installed collection with the same inventory, run by
hand through ansible-runner (no service): call -> playbook_on_start, one after each operation of
the one-worker configuration (interleaved, so both see the same machine load).

Ingestion: events/s appended to the timeline through the worker's event sink (the run queues them, the
sink's writer thread commits what has queued in one transaction at a time), and the events per real run.

    .venv/bin/python bench/bench_operations.py [--ops 30] [--poll SECONDS]
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path

import ansible_runner
import psycopg
from cryptography.fernet import Fernet
from fastapi.testclient import TestClient
from psycopg.conninfo import make_conninfo

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))

from api.world import build_world, register_allocation  # noqa: E402
from gpuaas_api import db as dbmod  # noqa: E402
from gpuaas_api.app import create_app  # noqa: E402
from gpuaas_api.catalog.service import get_version_by_id  # noqa: E402
from gpuaas_api.config import DEFAULT_OPERATION_TIMEOUTS, GpuaasSettings, OperationSettings  # noqa: E402
from gpuaas_api.content.collections import cache_root, installed_collection  # noqa: E402
from gpuaas_api.content.store import embedded_store  # noqa: E402
from gpuaas_api.embedded_db import EmbeddedPostgres  # noqa: E402
from gpuaas_api.executor.worker import Worker, _EventSink  # noqa: E402
from operations.helpers import TEST_APP, publish_test_app  # noqa: E402

SA = "service_account"
SPANS = ("pickup", "prepare", "ansible start", "total")


def percentile(values: list[float], p: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(round(p / 100 * (len(ordered) - 1))))]


def ms(values: list[float]) -> str:
    return (f"{statistics.median(values) * 1000:.0f} ms (p99 {percentile(values, 99) * 1000:.0f}, "
            f"min {min(values) * 1000:.0f}, max {max(values) * 1000:.0f})")


def spans_of(database: dbmod.Database, settings: OperationSettings, op_id: str) -> dict[str, float]:
    with database.transaction() as conn:
        row = conn.execute(
            """SELECT extract(epoch FROM o.created_at) AS accepted, extract(epoch FROM o.claimed_at) AS claimed,
                      o.correlation_id, o.status,
                      (SELECT extract(epoch FROM min(e.occurred_at)) FROM instance_events e
                        WHERE e.correlation_id = o.correlation_id AND e.type = 'run.playbook_started') AS started
                 FROM operations o WHERE o.id = %s""", (op_id,)).fetchone()
    assert row["status"] == "succeeded", row
    command = settings.state_dir / "runs" / op_id / "attempt-1" / "artifacts" / row["correlation_id"] / "command"
    spawned = command.stat().st_mtime
    accepted, claimed, started = float(row["accepted"]), float(row["claimed"]), float(row["started"])
    return {"pickup": claimed - accepted, "prepare": spawned - claimed, "ansible start": started - spawned,
            "total": started - accepted}


def by_hand(settings: OperationSettings, collections: Path, op_id: str, scratch: Path) -> float:
    """The same playbook through ansible-runner without the service: call -> playbook_on_start."""
    inventory = settings.state_dir / "runs" / op_id / "attempt-1" / "inventory" / "hosts.json"
    marker = scratch / "marker"
    marker.mkdir(parents=True)
    (scratch / "pdd").mkdir()
    started: list[float] = []

    def handler(event: dict) -> bool:
        if event.get("event") == "playbook_on_start" and not started:
            started.append(time.monotonic())
        return True

    t0 = time.monotonic()
    run = ansible_runner.run(
        private_data_dir=str(scratch / "pdd"), playbook="gpuaas_tests.opsapp.step", inventory=str(inventory),
        extravars={"marker_dir": str(marker), "step": "reconfigure", "munge_key": "bench-not-a-secret"},
        envvars={"ANSIBLE_COLLECTIONS_PATH": str(collections), "ANSIBLE_COLLECTIONS_SCAN_SYS_PATH": "False",
                 "PATH": os.pathsep.join([str(Path(sys.executable).parent), os.environ.get("PATH", "")])},
        quiet=True, event_handler=handler, suppress_env_files=True)
    assert run.status == "successful", run.status
    return started[0] - t0


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--ops", type=int, default=30, help="operations per configuration")
    parser.add_argument("--poll", type=float, default=GpuaasSettings.model_fields["poll_seconds"].default,
                        help="the workers' fallback poll interval (default: the service's)")
    args = parser.parse_args()

    tmp = Path(tempfile.mkdtemp(prefix="gpuaas-bench-ops-"))
    server = EmbeddedPostgres(tmp / "pg")
    uri = server.start()
    with psycopg.connect(uri, autocommit=True) as conn:
        conn.execute("CREATE DATABASE bench_ops")
    url = make_conninfo(uri, dbname="bench_ops")
    dbmod.upgrade(url)
    settings = OperationSettings(state_dir=tmp / "state", ssh_private_key_file=None, ssh_host_key_checking=False,
                                 secret_key=Fernet.generate_key().decode(), lease_seconds=10, max_attempts=2,
                                 poll_seconds=args.poll, timeouts=dict(DEFAULT_OPERATION_TIMEOUTS))
    database = dbmod.Database(url, min_size=2, max_size=12)
    database.open()
    app = create_app(database)
    app.state.operation_settings = settings
    print(f"poll {args.poll} s; load average at start {os.getloadavg()[0]:.1f}")
    with TestClient(app) as client:
        w = build_world(client, database)
        version = publish_test_app(w)
        with database.transaction() as conn:
            digest = get_version_by_id(conn, version["id"])["artifact_digest"]
        collections = installed_collection(embedded_store(settings.state_dir, database), digest,
                                           cache_root(settings.state_dir))
        w.call("platform_admin", "POST", f"/v1/projects/{w.ids['project_a1']}/entitlements", 201,
               json={"app_slug": TEST_APP})
        # a host serves one instance: two hosts for each of the 1 + 2 streams' instances
        alloc = register_allocation(w, "project_a1", "bench", hosts=6)["id"]
        lock = threading.Lock()

        def stream(name: str, n: int, out: list[dict], events: list[int], floor: list[float] | None):
            marker = tmp / "markers" / name
            marker.mkdir(parents=True)
            with lock:
                inst = w.call(SA, "POST", f"/v1/projects/{w.ids['project_a1']}/instances", 201, json={
                    "name": name, "app_slug": TEST_APP, "allocation_ids": [alloc],
                    "topology": [{"role": "controller", "count": 1}, {"role": "worker", "count": 1}],
                    "parameters": {"marker_dir": str(marker)}}).json()
            for i in range(n):
                kind = "deploy" if i == 0 else "reconfigure"
                with lock:
                    op = w.call(SA, "POST", f"/v1/instances/{inst['id']}/{kind}", 202).json()
                while True:
                    with database.transaction() as conn:
                        row = conn.execute("SELECT status FROM operations WHERE id = %s", (op["id"],)).fetchone()
                    if row["status"] in ("succeeded", "failed", "canceled"):
                        break
                    time.sleep(0.05)
                out.append(spans_of(database, settings, op["id"]))
                with database.transaction() as conn:
                    events.append(conn.execute(
                        """SELECT count(*) AS n FROM instance_events e JOIN operations o USING (correlation_id)
                            WHERE o.id = %s AND e.type LIKE 'run.%%'""", (op["id"],)).fetchone()["n"])
                if floor is not None:
                    floor.append(by_hand(settings, collections, op["id"], tmp / "by-hand" / f"{name}-{i}"))

        table = []
        for workers in (1, 2):
            pools = []
            for i in range(workers):
                pool = dbmod.Database(url, min_size=1, max_size=5)
                pool.open()
                worker = Worker(pool, settings, name=f"bench{workers}-{i}")
                worker.start()
                pools.append((worker, pool))
            time.sleep(1.0)  # the listeners are up
            runs: list[dict] = []
            per_run: list[int] = []
            floor: list[float] | None = [] if workers == 1 else None
            per_stream = args.ops // workers
            threads = [threading.Thread(target=stream, args=(f"b{workers}-{i}", per_stream, runs, per_run,
                                                             floor if i == 0 else None))
                       for i in range(workers)]
            for t in threads:
                t.start()
            for t in threads:
                t.join()
            for worker, _pool in pools:
                worker.stop.set()
            time.sleep(1.5)
            for _, pool in pools:
                pool.close()
            print(f"{workers} worker(s): {len(runs)} operations; {statistics.mean(per_run):.0f} run events per "
                  f"operation; load average {os.getloadavg()[0]:.1f}")
            for span in SPANS:
                print(f"  {span:14s} {ms([r[span] for r in runs])}")
            totals = [r["total"] for r in runs]
            table.append((f"{workers}", [statistics.median([r[s] for r in runs]) for s in SPANS]
                          + [percentile(totals, 99)]))
            if floor:
                print(f"  by hand (ansible-runner, same playbook, interleaved): {ms(floor)}")
                table.append(("by hand", [None, None, statistics.median(floor), statistics.median(floor),
                                          percentile(floor, 99)]))

        print("\n| workers | pickup | prepare | ansible start | accept -> playbook start p50 | p99 |")
        print("|---|---|---|---|---|---|")
        for label, row in table:
            cells = ["-" if v is None else f"{v * 1000:.0f} ms" for v in row]
            print(f"| {label} | " + " | ".join(cells) + " |")

        with database.transaction() as conn:
            instance = conn.execute("SELECT * FROM app_instances LIMIT 1").fetchone()
        sink = _EventSink(database, instance, "bench-ingest")
        count, started = 3000, time.monotonic()
        for i in range(count):
            sink.append("run.task_ok", {"host": f"h{i % 8}", "task": "Bench task", "play": "Bench", "changed": False,
                                        "duration": 0.01})
        sink.close()  # returns once the writer has committed every event
        elapsed = time.monotonic() - started
        print(f"\ntimeline ingestion: {count} events in {elapsed:.2f}s = {count / elapsed:.0f} events/s "
              "(the worker's event sink: queued by the run, committed in batches by its writer thread)")
    database.close()
    server.stop()
    shutil.rmtree(tmp, ignore_errors=True)  # runs, markers (the test app writes its munge key there)
    return 0


if __name__ == "__main__":
    sys.exit(main())
