"""The control plane at scale (issue 28, item 5): separate worker processes, real runs of the tests' light app.

Everything runs on this machine: the embedded PostgreSQL, the API in this process (FastAPI's TestClient, so every
request goes through the whole app), and `gpuaas worker` processes started as separate hosts would run them, each
with its own state directory (content reaches each from the database by digest). The app is tests/apps/opsapp,
registered through the API and run by digest: a real ansible-runner run of its local playbook, or of its status
module for a health check. Its hosts are names only, reached with a local connection (the test double of SSH that
the operations tests use, operations.helpers.use_local_connection, applied in each worker process): what a run costs
here is ansible-playbook and its modules on the same 2 cores as everything else, and no network.

    .venv/bin/python bench/bench_control_plane.py latency [--instances 1000] [--ops 40] [--streams 2]
    .venv/bin/python bench/bench_control_plane.py throughput [--workers 1,2,4] [--ops 40]
    .venv/bin/python bench/bench_control_plane.py ingestion [--ops 24]
    .venv/bin/python bench/bench_control_plane.py all           # the three, each on a fresh database

latency: `--instances` running instances (1 controller + 1 worker each; made through the API, marked running with
their members active by SQL, except the `--streams` instances the lifecycle operations run on, which deploy for
real), 4 workers (each 1 operation slot and the default 2 health threads), health checks due every 30 s
(`--interval`). Each stream submits a reconfigure, waits until it finished, and submits the next. For each
operation: accept -> claim (operations.created_at, the 202's transaction, to claimed_at, the worker's claim
transaction) and accept -> the playbook's first event (ansible-runner's playbook_on_start as ansible-playbook
stamped it, read from the run's job events in its stored artifacts). The same streams then run again with health
checks off (the same workers restarted with health_concurrency 0): the baseline. It also reports the health
checks done during the window (from the workers' log lines) and how overdue the checks got.

throughput: 8 instances deployed, then for 1, 2 and 4 worker processes (1 slot each, no health checks, no
metering): `--ops` reconfigures queued at once round-robin over the 8 instances, operations per minute from the
first to the last finish, and where the CPU went (the machine's 2 cores: workers with their runs, PostgreSQL,
this process, and everything else on the machine).

ingestion: 4 worker processes, 4 instances of 1 controller + 8 workers (9 hosts: the most events a run of the app
makes), 4 streams running reconfigures back to back, so 4 runs at once. Events per second written to the timeline
over the phase, and the lag from each event (its created time in ansible-playbook) to its row (occurred_at: the
sink's transaction that wrote it), matched one to one by summarizing the run's job events again in order. Then
the sink alone: 4 event sinks in 4 threads of this process (as 4 runs of one worker) appending as fast as they
can, which is what ingestion can take.
"""

from __future__ import annotations

import argparse
import io
import json
import os
import re
import shutil
import signal
import statistics
import subprocess
import sys
import tarfile
import tempfile
import threading
import time
from datetime import UTC, datetime
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
from gpuaas_api.config import DEFAULT_OPERATION_TIMEOUTS, OperationSettings, Settings  # noqa: E402
from gpuaas_api.embedded_db import EmbeddedPostgres  # noqa: E402
from gpuaas_api.executor.runner import summarize  # noqa: E402
from gpuaas_api.executor.worker import _EventSink  # noqa: E402
from operations.helpers import TEST_APP, publish_test_app  # noqa: E402

SA = "service_account"
TICK = os.sysconf("SC_CLK_TCK")
FINISHED = ("succeeded", "failed", "canceled")
HOSTS_PER_ALLOCATION = 100  # the tests' world numbers an allocation's addresses 10.77.<n>.10 and up


def percentile(values: list[float], p: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(round(p / 100 * (len(ordered) - 1))))]


def spread(values: list[float], unit: float = 1000, fmt: str = ".0f") -> str:
    """p50, p99 and max, in ms by default."""
    if not values:
        return "-"
    return (f"p50 {statistics.median(values) * unit:{fmt}}, p99 {percentile(values, 99) * unit:{fmt}}, "
            f"max {max(values) * unit:{fmt}}")


def load_average() -> str:
    return "/".join(f"{x:.1f}" for x in os.getloadavg())


# CPU accounting ------------------------------------------------------------------------------------------------

def _stat(pid: int) -> list[str] | None:
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            return f.read().decode().rsplit(")", 1)[1].split()
    except OSError:
        return None


def process_cpu(pid: int, children: bool = True) -> float:
    """CPU seconds of a process (with `children`: and of its children that ended and were waited for: a worker's
    runs, through the run guard and ansible-runner)."""
    fields = _stat(pid)
    if fields is None:
        return 0.0
    # fields[0] is field 3 of proc(5): utime 14, stime 15, cutime 16, cstime 17
    ticks = int(fields[11]) + int(fields[12]) + ((int(fields[13]) + int(fields[14])) if children else 0)
    return ticks / TICK


def children_of(pid: int) -> list[int]:
    out = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            fields = _stat(int(entry.name))
            if fields and int(fields[1]) == pid:
                out.append(int(entry.name))
    return out


def machine_cpu() -> tuple[float, float]:
    """(busy, total) CPU seconds of the whole machine since boot."""
    with open("/proc/stat") as f:
        values = [int(v) for v in f.readline().split()[1:]]
    idle = values[3] + values[4]
    return (sum(values[:8]) - idle) / TICK, sum(values[:8]) / TICK


class CpuMeter:
    """Where the CPU went between start() and stop(): the workers (their runs included), PostgreSQL (the
    postmaster, its live backends and the ones that ended), this process, and the rest of the machine."""

    def __init__(self, postmaster: int, workers: list[int]):
        self.postmaster, self.workers = postmaster, workers

    def _sample(self) -> dict[str, float]:
        busy, total = machine_cpu()
        postgres = process_cpu(self.postmaster) + sum(process_cpu(p, False) for p in children_of(self.postmaster))
        workers = sum(process_cpu(p) + sum(process_cpu(c) for c in children_of(p)) for p in self.workers)
        return {"busy": busy, "total": total, "postgres": postgres, "workers": workers,
                "bench": process_cpu(os.getpid(), False), "wall": time.monotonic()}

    def start(self) -> CpuMeter:
        self.before = self._sample()
        return self

    def stop(self) -> dict[str, float]:
        after = self._sample()
        d = {k: after[k] - self.before[k] for k in after}
        d["other"] = max(0.0, d["busy"] - d["postgres"] - d["workers"] - d["bench"])
        d["cores"] = d["total"] / d["wall"]
        return d


def cpu_line(d: dict[str, float]) -> str:
    wall = d["wall"]
    return (f"{d['busy'] / wall:.2f} of {d['cores']:.0f} cores busy: workers and their runs {d['workers'] / wall:.2f}, "
            f"PostgreSQL {d['postgres'] / wall:.2f}, this process (API, bench) {d['bench'] / wall:.2f}, "
            f"the rest of the machine {d['other'] / wall:.2f}")


# The world -----------------------------------------------------------------------------------------------------

class _Setattr:
    """What operations.helpers.use_local_connection needs of pytest's monkeypatch, for a worker process."""
    setattr = staticmethod(setattr)


def worker_process(name: str) -> int:
    """A `gpuaas worker` whose runs reach the test app's hosts with a local connection (see the module's doc)."""
    from gpuaas_api.cli import main
    from operations.helpers import use_local_connection

    use_local_connection(_Setattr())
    return main(["worker", "--name", name])


class Worker:
    def __init__(self, plane: Plane, name: str, health_threads: int):
        self.name = name
        self.state_dir = plane.tmp / "workers" / name  # kept between phases: its content copy stays warm
        self.state_dir.mkdir(parents=True, exist_ok=True)
        self.log = plane.tmp / "logs" / f"{name}-{time.monotonic_ns()}.jsonl"
        self.log.parent.mkdir(exist_ok=True)
        env = {k: v for k, v in os.environ.items() if not k.startswith("GPUAAS_")} | {
            "DATABASE_URL": plane.url, "GPUAAS_STATE_DIR": str(self.state_dir),
            "GPUAAS_SECRET_KEY": plane.secret_key, "GPUAAS_SSH_HOST_KEY_CHECKING": "false",
            "GPUAAS_HEALTH_CONCURRENCY": str(health_threads),
            "GPUAAS_HEALTH_INTERVAL_SECONDS": str(plane.interval),
            "GPUAAS_METERING_INTERVAL_SECONDS": "0", "GPUAAS_LOG_LEVEL": "INFO", "GPUAAS_LOG_FORMAT": "json"}
        with self.log.open("w") as out:
            self.process = subprocess.Popen([sys.executable, __file__, "worker-process", name], env=env,
                                            stdout=out, stderr=subprocess.STDOUT, cwd=ROOT)

    def started(self) -> bool:
        if self.process.poll() is not None:
            raise SystemExit(f"worker {self.name} exited with {self.process.returncode}:\n"
                             f"{self.log.read_text()[-3000:]}")
        return "started (concurrency" in self.log.read_text()

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)  # finish the runs in flight, claim nothing new
        try:
            self.process.wait(60)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait(10)

    def health_checks(self, since: float, until: float) -> list[float]:
        """Seconds each health check took, of the checks that ended between `since` and `until` (epoch)."""
        out = []
        for line in self.log.read_text().splitlines():
            if '"health: instance' not in line or "checked in" not in line:
                continue
            entry = json.loads(line)
            at = datetime.fromisoformat(entry["time"]).timestamp()
            if since <= at <= until:
                out.append(float(re.search(r"checked in ([0-9.]+) s", entry["message"]).group(1)))
        return out


class Plane:
    """The embedded PostgreSQL, the API in this process, the test app registered, allocations, instances."""

    def __init__(self, tmp: Path, interval: float = 30.0):
        self.tmp, self.interval = tmp, interval
        self.server = EmbeddedPostgres(tmp / "pg")
        uri = self.server.start()
        with psycopg.connect(uri, autocommit=True) as conn:
            conn.execute("CREATE DATABASE bench_plane")
        self.url = make_conninfo(uri, dbname="bench_plane")
        dbmod.upgrade(self.url)
        self.postmaster = int((tmp / "pg" / "pgdata" / "postmaster.pid").read_text().split()[0])
        self.secret_key = Fernet.generate_key().decode()
        self.database = dbmod.Database(self.url, min_size=2, max_size=8)
        self.database.open()
        # No quota in the way of a thousand instances in one project, or of a queue of operations.
        settings = OperationSettings(state_dir=tmp / "api-state", ssh_private_key_file=None,
                                     ssh_host_key_checking=False, secret_key=self.secret_key,
                                     timeouts=dict(DEFAULT_OPERATION_TIMEOUTS), max_open_operations_per_project=0)
        app = create_app(self.database, settings=Settings(max_instances_per_project=0))
        app.state.operation_settings = settings
        self.client = TestClient(app)
        self.client.__enter__()
        self.lock = threading.Lock()  # one request at a time through the TestClient
        self.w = build_world(self.client, self.database)
        self.version = publish_test_app(self.w)
        self.w.call("platform_admin", "POST", f"/v1/projects/{self.w.ids['project_a1']}/entitlements", 201,
                    json={"app_slug": TEST_APP})
        self.free: list[tuple[str, int]] = []  # (allocation id, hosts left) with room
        self.workers: list[Worker] = []
        self.nodes = self.tmp / "nodes.json"
        self.sql("""UPDATE app_versions SET adapter = jsonb_set(adapter, '{status,options}',
                                                              jsonb_build_object('path', %s::text))
                     WHERE id = %s RETURNING id""", (str(self.nodes), self.version["id"]))

    def close(self) -> None:
        self.stop_workers()
        self.client.__exit__(None, None, None)
        self.database.close()
        self.server.stop()

    def sql(self, query: str, params=()) -> list[dict]:
        with self.database.transaction() as conn:
            return conn.execute(query, params).fetchall()

    def call(self, method: str, url: str, expect: int, **kwargs):
        with self.lock:
            return self.w.call(SA, method, url, expect, **kwargs).json()

    def allocation(self, hosts: int) -> str:
        """An allocation of the project with `hosts` free hosts (a host serves one instance)."""
        if not self.free or self.free[-1][1] < hosts:
            name = f"alloc-{len(self.free)}"
            self.free.append((register_allocation(self.w, "project_a1", name, hosts=HOSTS_PER_ALLOCATION)["id"],
                              HOSTS_PER_ALLOCATION))
        alloc, left = self.free[-1]
        self.free[-1] = (alloc, left - hosts)
        return alloc

    def create(self, name: str, workers: int = 1) -> dict:
        marker = self.tmp / "markers" / name
        marker.mkdir(parents=True)
        return self.call("POST", f"/v1/projects/{self.w.ids['project_a1']}/instances", 201, json={
            "name": name, "app_slug": TEST_APP, "allocation_ids": [self.allocation(1 + workers)],
            "topology": [{"role": "controller", "count": 1}, {"role": "worker", "count": workers}],
            "parameters": {"marker_dir": str(marker)}})

    def mark_running(self, ids: list[str]) -> None:
        """Running, members active, without a run (as a deploy leaves them); the status module's answers say
        every member is active."""
        self.sql("UPDATE app_instances SET status = 'running' WHERE id = ANY(%s::uuid[]) RETURNING id", (ids,))
        self.sql("""UPDATE app_instance_members SET status = 'active' WHERE instance_id = ANY(%s::uuid[])
                    RETURNING id""", (ids,))
        self.write_nodes()

    def write_nodes(self) -> None:
        names = [r["node_name"] for r in self.sql("SELECT node_name FROM app_instance_members")]
        self.nodes.write_text(json.dumps(dict.fromkeys(names, "active")))

    def start_workers(self, count: int, health_threads: int) -> list[Worker]:
        self.workers = [Worker(self, f"w{i}", health_threads) for i in range(count)]
        deadline = time.monotonic() + 120
        while not all(w.started() for w in self.workers):
            if time.monotonic() > deadline:
                raise SystemExit("the workers did not start within 120 s")
            time.sleep(0.2)
        time.sleep(2.0)  # each worker's listener is up, Ansible's reserved names imported
        return self.workers

    def stop_workers(self) -> None:
        for w in self.workers:
            if w.process.poll() is None:
                w.process.send_signal(signal.SIGTERM)
        for w in self.workers:
            w.stop()
        self.workers = []

    def submit(self, instance_id: str, kind: str) -> str:
        return self.call("POST", f"/v1/instances/{instance_id}/{kind}", 202)["id"]

    def wait(self, op_ids: list[str], timeout: float = 1800) -> list[dict]:
        deadline = time.monotonic() + timeout
        while True:
            rows = self.sql("SELECT * FROM operations WHERE id = ANY(%s::uuid[])", (op_ids,))
            if all(r["status"] in FINISHED for r in rows):
                bad = [r for r in rows if r["status"] != "succeeded"]
                if bad:
                    raise SystemExit(f"{len(bad)} operations did not succeed; first: {bad[0]['error']}")
                return rows
            if time.monotonic() > deadline:
                raise SystemExit(f"operations still open after {timeout} s")
            time.sleep(0.1)

    def ran_by(self, ops: list[dict]) -> set[str]:
        """The workers that ran these operations (their operation.started events name the slot)."""
        rows = self.sql("""SELECT DISTINCT payload->>'worker' AS slot FROM instance_events
                            WHERE type = 'operation.started' AND payload->>'operation_id' = ANY(%s)""",
                        ([str(r["id"]) for r in ops],))
        return {r["slot"].rpartition("/")[0] for r in rows}

    def job_events(self, op: dict) -> list[dict]:
        """The run's ansible-runner job events, in order, from its stored artifacts."""
        (row,) = self.sql("SELECT tarball FROM operation_artifacts WHERE operation_id = %s AND attempt = %s",
                          (op["id"], op["attempt"]))
        events = []
        with tarfile.open(fileobj=io.BytesIO(row["tarball"]), mode="r:gz") as tar:
            for member in tar.getmembers():
                if "/job_events/" in member.name and member.name.endswith(".json"):
                    events.append(json.loads(tar.extractfile(member).read()))
        return sorted(events, key=lambda e: e["counter"])


def created(event: dict) -> float:
    """An event's time as ansible-playbook's callback stamped it (UTC, without a zone)."""
    return datetime.fromisoformat(event["created"]).replace(tzinfo=UTC).timestamp()


def deploy(plane: Plane, instances: list[dict]) -> list[dict]:
    return plane.wait([plane.submit(i["id"], "deploy") for i in instances])


def streams(plane: Plane, instances: list[dict], per_stream: int) -> list[dict]:
    """Each instance a stream: a reconfigure, wait until it finished, the next."""
    done: list[str] = []

    def one(instance: dict) -> None:
        for _ in range(per_stream):
            op = plane.submit(instance["id"], "reconfigure")
            plane.wait([op])
            done.append(op)

    threads = [threading.Thread(target=one, args=(i,)) for i in instances]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return plane.wait(done)


def starts(plane: Plane, ops: list[dict]) -> tuple[list[float], list[float]]:
    """(accept -> claim, accept -> the playbook's first event) in seconds, per operation."""
    claim, first = [], []
    for op in ops:
        accepted = op["created_at"].timestamp()
        claim.append(op["claimed_at"].timestamp() - accepted)
        started = next(created(e) for e in plane.job_events(op) if e["event"] == "playbook_on_start")
        first.append(started - accepted)
    return claim, first


# latency --------------------------------------------------------------------------------------------------------

def latency(tmp: Path, args) -> dict:
    plane = Plane(tmp, args.interval)
    try:
        t0 = time.monotonic()
        lifecycle = [plane.create(f"life-{i}") for i in range(args.streams)]
        bulk = [plane.create(f"inst-{i}")["id"] for i in range(args.instances - args.streams)]
        plane.mark_running(bulk)
        print(f"{args.instances} instances made through the API in {time.monotonic() - t0:.0f} s; "
              f"load {load_average()}", flush=True)
        out = {}
        for phase, health in (("health on", 2), ("health off", 0)):
            workers = plane.start_workers(4, health)
            if phase == "health on":
                deploy(plane, lifecycle)
                plane.write_nodes()
                time.sleep(args.warmup)  # every worker's health threads at work (and its content copy made)
            meter = CpuMeter(plane.postmaster, [w.process.pid for w in workers]).start()
            since, load_before = time.time(), load_average()
            ops = streams(plane, lifecycle, args.ops // args.streams)
            until = time.time()
            cpu = meter.stop()
            overdue = plane.sql("""SELECT count(*) AS n, extract(epoch FROM now() - min(health_due_at)) AS oldest
                                     FROM app_instances WHERE status = 'running' AND health_due_at < now()""")[0]
            checks = [s for w in workers for s in w.health_checks(since, until)]
            plane.stop_workers()
            claim, first = starts(plane, ops)
            out[phase] = {"claim": claim, "first": first, "cpu": cpu, "checks": checks, "seconds": until - since,
                          "overdue": overdue, "load": f"{load_before} -> {load_average()}"}
            print(f"\n{phase}: {len(ops)} reconfigures in {args.streams} streams over {until - since:.0f} s, "
                  f"4 workers; load {out[phase]['load']}")
            print(f"  accept -> claim:                  {spread(claim)} ms")
            print(f"  accept -> playbook's first event: {spread(first)} ms")
            print(f"  CPU: {cpu_line(cpu)}")
            if checks:
                print(f"  health: {len(checks)} checks in the window ({len(checks) / (until - since) * 60:.0f} per "
                      f"minute; {args.instances / args.interval * 60:.0f} per minute would hold the "
                      f"{args.interval:.0f} s interval), each {spread(checks, 1, '.1f')} s; at the end "
                      f"{overdue['n']} running instances overdue, the oldest by {float(overdue['oldest'] or 0):.0f} s")
        on = out["health on"]
        ok = percentile(on["claim"], 99) < 1.0
        print(f"\naccept -> claim p99 with health checks on: {percentile(on['claim'], 99) * 1000:.0f} ms "
              f"(target < 1 s): {'PASS' if ok else 'FAIL'}")
        out["pass"] = ok
        return out
    finally:
        plane.close()


# throughput -----------------------------------------------------------------------------------------------------

def throughput(tmp: Path, args) -> dict:
    plane = Plane(tmp)
    try:
        instances = [plane.create(f"tp-{i}") for i in range(8)]
        plane.write_nodes()
        counts = [int(c) for c in args.workers.split(",")]
        # Every worker's first run copies the content from the database and installs it: done here, not timed.
        plane.start_workers(max(counts), 0)
        ran = plane.ran_by(deploy(plane, instances))
        while len(ran) < max(counts):
            ran |= plane.ran_by(plane.wait([plane.submit(i["id"], "reconfigure") for i in instances]))
        plane.stop_workers()
        out = {}
        for n in counts:
            workers = plane.start_workers(n, 0)
            load_before = load_average()
            meter = CpuMeter(plane.postmaster, [w.process.pid for w in workers]).start()
            ops = plane.wait([plane.submit(instances[k % len(instances)]["id"], "reconfigure")
                              for k in range(args.ops)])
            cpu = meter.stop()
            plane.stop_workers()
            finishes = sorted(r["finished_at"].timestamp() for r in ops)
            per_minute = (len(ops) - 1) / (finishes[-1] - finishes[0]) * 60
            run_seconds = [(r["finished_at"] - r["claimed_at"]).total_seconds() for r in ops]
            cpu_per_op = (cpu["workers"] + cpu["postgres"] + cpu["bench"]) / len(ops)
            out[n] = {"per_minute": per_minute, "cpu": cpu, "run": run_seconds, "cpu_per_op": cpu_per_op,
                      "load": f"{load_before} -> {load_average()}"}
            print(f"\n{n} worker(s): {len(ops)} reconfigures, {per_minute:.1f} per minute (first to last finish); "
                  f"claim -> finished {spread(run_seconds, 1, '.2f')} s; load {out[n]['load']}")
            print(f"  CPU: {cpu_line(cpu)}; {cpu_per_op:.2f} CPU s per operation (workers, PostgreSQL, API)")
        print("\n| workers | operations per minute | claim -> finished p50 | cores busy | CPU s per operation |")
        print("|---|---|---|---|---|")
        for n, r in out.items():
            print(f"| {n} | {r['per_minute']:.1f} | {statistics.median(r['run']):.2f} s | "
                  f"{r['cpu']['busy'] / r['cpu']['wall']:.2f} | {r['cpu_per_op']:.2f} |")
        return out
    finally:
        plane.close()


# ingestion ------------------------------------------------------------------------------------------------------

def sink_capacity(plane: Plane, sinks: int, events: int) -> float:
    """Events per second through `sinks` event sinks appending at once, each in a thread of its own."""
    rows = plane.sql("SELECT * FROM app_instances WHERE status = 'running' LIMIT %s", (sinks,))
    barrier = threading.Barrier(sinks + 1)

    def append(instance: dict, n: int) -> None:
        sink = _EventSink(plane.database, instance, f"bench-ingest-{n}")
        barrier.wait()
        for i in range(events):
            sink.append("run.task_ok", {"host": f"h{i % 9}", "task": "Bench task", "play": "Bench", "changed": False,
                                        "duration": 0.01})
        sink.close()  # returns once its writer has committed every event

    threads = [threading.Thread(target=append, args=(rows[n % len(rows)], n)) for n in range(sinks)]
    for t in threads:
        t.start()
    barrier.wait()
    started = time.monotonic()
    for t in threads:
        t.join()
    return sinks * events / (time.monotonic() - started)


def ingestion(tmp: Path, args) -> dict:
    plane = Plane(tmp)
    try:
        instances = [plane.create(f"ing-{i}", workers=8) for i in range(4)]
        plane.write_nodes()
        workers = plane.start_workers(4, 0)
        deploy(plane, instances)  # each worker's content copy made, not timed
        load_before = load_average()
        meter = CpuMeter(plane.postmaster, [w.process.pid for w in workers]).start()
        ops = streams(plane, instances, args.ops // 4)
        cpu = meter.stop()
        plane.stop_workers()
        lags, written, unmatched = [], [], 0
        for op in ops:
            expected = [(created(e), summarize(e)) for e in plane.job_events(op)]
            expected = [(at, s[0]) for at, s in expected if s]
            rows = plane.sql("""SELECT type, occurred_at FROM instance_events
                                 WHERE correlation_id = %s AND type LIKE 'run.%%' ORDER BY id""",
                             (op["correlation_id"],))
            if [t for _, t in expected] != [r["type"] for r in rows]:
                unmatched += 1
                continue
            for (at, _), row in zip(expected, rows, strict=True):
                lags.append(row["occurred_at"].timestamp() - at)
                written.append(row["occurred_at"].timestamp())
        per_run = len(written) / max(1, len(ops) - unmatched)
        rate = len(written) / (max(written) - min(written))
        overlap = concurrency(ops)
        print(f"\n4 workers, {len(ops)} reconfigures in 4 streams (9 hosts each), {per_run:.0f} timeline events per "
              f"run; runs at once: {overlap:.2f} on average; load {load_before} -> {load_average()}")
        print(f"  timeline rows written: {rate:.0f} events/s over the phase ({len(written)} events)")
        print(f"  lag, the event in ansible-playbook -> its row: {spread(lags)} ms")
        if unmatched:
            print(f"  ({unmatched} runs whose events did not match their rows one to one were left out)")
        print(f"  CPU: {cpu_line(cpu)}")
        capacity = sink_capacity(plane, 4, args.sink_events)
        single = sink_capacity(plane, 1, args.sink_events)
        print(f"  the sink alone: 4 sinks at once {capacity:.0f} events/s, one sink {single:.0f} events/s "
              f"({args.sink_events} events each)")
        return {"rate": rate, "lags": lags, "per_run": per_run, "capacity": capacity, "single": single, "cpu": cpu,
                "overlap": overlap}
    finally:
        plane.close()


def concurrency(ops: list[dict]) -> float:
    """Runs in flight on average between the first claim and the last finish."""
    start = min(r["claimed_at"] for r in ops)
    end = max(r["finished_at"] for r in ops)
    busy = sum((r["finished_at"] - r["claimed_at"]).total_seconds() for r in ops)
    return busy / (end - start).total_seconds()


def main() -> int:
    if len(sys.argv) == 3 and sys.argv[1] == "worker-process":
        return worker_process(sys.argv[2])
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("what", choices=("latency", "throughput", "ingestion", "all"))
    parser.add_argument("--instances", type=int, default=200, help="latency: running instances (issue: 1000)")
    parser.add_argument("--interval", type=float, default=30.0, help="latency: health_interval_seconds")
    parser.add_argument("--streams", type=int, default=2, help="latency: lifecycle operation streams")
    parser.add_argument("--warmup", type=float, default=20.0, help="latency: seconds of health checks before timing")
    parser.add_argument("--workers", default="1,2,4", help="throughput: worker processes, comma-separated")
    parser.add_argument("--ops", type=int, default=24, help="operations per phase")
    parser.add_argument("--sink-events", type=int, default=3000, help="ingestion: events per sink, sink alone")
    args = parser.parse_args()
    print(f"{os.cpu_count()} CPUs; load average at start {load_average()}", flush=True)
    failed = False
    for what in ("latency", "throughput", "ingestion") if args.what == "all" else (args.what,):
        tmp = Path(tempfile.mkdtemp(prefix=f"gpuaas-bench-{what}-"))
        try:
            print(f"\n== {what}", flush=True)
            result = globals()[what](tmp, args)
            failed |= result.get("pass") is False
        finally:
            shutil.rmtree(tmp, ignore_errors=True)  # runs, markers (the test app writes its munge key there)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
