"""Chaos soak (issue 23, item 5): random lifecycle operations on a Slurm and an OCI instance on real test
hosts while faults hit the platform and the hosts; then, once every fault is undone and the platform has
settled, the checks that nothing is stuck, lost, untruthful or left behind.

    .venv/bin/python bench/chaos_soak.py [--operations 100] [--seed N] [--summary PATH]

The world is `gpuaas demo`'s (gpuaas_api.demo.Demo): `gpuaas serve` on an embedded PostgreSQL, two
`gpuaas worker` processes (2 operation slots each), a registry host that takes only the service's tokens,
a Slurm instance (1 controller + `--slurm-workers` workers from pool-a, `--slurm-spares` spare hosts in
pool-b) and an OCI instance (`--oci-replicas` replicas and `--oci-spares` spare hosts in pool-oci), both
deployed first. A project service account drives everything through the HTTP API.

Operations: at most `--concurrency` in flight, each chosen at random among those that make sense for the
statuses the API shows right then (member_add, member_drain, member_resume, member_remove, member_replace,
reconfigure with a valid parameter, refresh; deploy once per instance). The API may refuse some: a 409,
422 or 429 with the error envelope is counted as a refusal; a 5xx other than 503 is a violation. A
request that gets no answer (serve is down) is sent again with the same Idempotency-Key.

Faults, one every `--fault-every` seconds on average (`--faults` picks the kinds, `--first-faults` the
first ones in order; `--faults none` after them is a fixed schedule), from the main thread, drawn from a
generator of their own (the seed gives the same faults however fast the operations go):
- worker_kill: SIGKILL of the worker that holds a running operation's lease, then a new worker;
- pg_restart: the embedded PostgreSQL's fast shutdown, a few seconds down, started again (Demo.restart_postgres);
- serve_term: SIGTERM to `serve` (it stops the PostgreSQL it started), started again on the same port;
- host_kill, host_pause, host_netcut: `podman kill` / `pause` / `network disconnect` of a test host of an
  instance, undone after `--host-fault-seconds` (`podman start`, which keeps its address / `unpause` /
  `network connect --ip`); one host fault at a time (`--host-faults-at-once`), each on a host no other holds.

At the end every fault is undone, operations still in flight are followed to their end, the platform gets
a settle time (3 health intervals plus the health confirmation, after the last host came back), and the
soak checks and prints the counts:
- stuck_operations: operations of the instances still queued or running;
- transitional: instances in starting/stopping, members in pending/joining/draining/removing;
- truth_mismatches: members (and instances) whose API status differs from what the adapter's check reads
  on the hosts now (read here: `scontrol show node` and the daemons through podman exec, the workload's unit
  and probe, SSH reachability), judged with the Slurm module's own mapping; a mismatch must last a confirm
  window (two health intervals) to count;
- orphan_processes: processes carrying GPUAAS_OPERATION_ID of this soak's operations (or, once the workers
  are stopped, of its health checks);
- secrets_left: scratch directories (gpuaas-secrets-*, gpuaas-cp-*, gpuaas-health-*) of this soak's worker
  processes, the MUNGE key or an issued pull password in any file of the state dir (runs, artifacts, logs),
  and pull credentials not revoked;
- unaccounted: accepted operations not found, or not succeeded / failed with a reason / canceled;
- server_errors: 5xx answers other than 503.
Detection latency: for each host fault of a host carrying an active member, the seconds from the fault to
the member's `member_failed` event (p50, max; undetected ones counted).

Exit status 0 when every count is 0; 1 on a violation; 2 when the world could not be set up. The summary
(JSON) goes to `--summary` and, as the last line, to stdout.
"""

from __future__ import annotations

import argparse
import base64
import contextlib
import hashlib
import importlib.util
import json
import logging
import random
import re
import secrets
import signal
import socket
import statistics
import sys
import tempfile
import threading
import time
import traceback
import uuid
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path

import httpx

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT / "api")]

from gpuaas_api.demo import OCI_CONTAINER, OCI_PORT, Demo  # noqa: E402
from gpuaas_api.embedded_db import EmbeddedPostgres  # noqa: E402

FAULT_KINDS = ("worker_kill", "pg_restart", "serve_term", "host_kill", "host_pause", "host_netcut")
HOST_FAULTS = {"host_kill": ("kill", "start"), "host_pause": ("pause", "unpause"),
               "host_netcut": ("disconnect", "connect")}
TERMINAL = ("succeeded", "failed", "canceled")
TRANSITIONAL_INSTANCE = ("starting", "stopping")
TRANSITIONAL_MEMBER = ("pending", "joining", "draining", "removing")
SCRATCH_KINDS = ("secrets", "cp", "health")
SLURM, OCI = "instance", "web"  # the Demo's ids keys of the two instances
# token_urlsafe(32): the shape of an issued pull password (registry/credentials.py)
PASSWORD_RUN = re.compile(rb"[A-Za-z0-9_-]{43,}")


def _slurm_mapping():
    """The collection's own Slurm state mapping (plugins/module_utils/slurm.py: pure Python), so that the
    soak judges a node exactly as the adapter's check does."""
    spec = importlib.util.spec_from_file_location("gpuaas_slurm_utils", ROOT / "plugins/module_utils/slurm.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


slurm_utils = _slurm_mapping()


@dataclass
class Op:
    instance: str
    kind: str
    path: str
    body: dict | None
    members: tuple[str, ...]
    id: str | None = None
    status: str | None = None
    error: dict | None = None
    submitted: float = 0.0
    ended: float | None = None


@dataclass
class HostFault:
    kind: str
    host: str
    started: float  # time.time()
    until: float  # time.monotonic() when it is undone
    members: list[tuple[str, str]]  # (instance key, member id) active on the host at the fault
    healed: float | None = None


@dataclass
class Counts:
    accepted: int = 0
    refused: Counter = field(default_factory=Counter)
    unavailable: int = 0  # requests answered 503 or not at all, sent again
    server_errors: list[str] = field(default_factory=list)


class Soak:
    def __init__(self, args: argparse.Namespace):
        self.args = args
        self.rng = random.Random(args.seed)  # the operations' draws
        # The faults' draws (kind, gaps, durations, hosts) from a generator of their own: the drivers draw from
        # theirs as fast as the operations end, so with one generator the same seed gave another fault schedule
        # whenever the machine was slower or faster.
        self.fault_rng = random.Random(f"{args.seed}/faults")
        self.started = time.monotonic()
        self.lock = threading.Lock()  # counters and lists
        self.choosing = threading.Lock()  # one driver chooses at a time: two never pick one member
        self.ops: list[Op] = []
        self.counts = Counts()
        self.busy_members: set[str] = set()
        self.busy_instances: set[str] = set()
        self.open_ops = Counter()  # the soak's operations in flight, per instance key
        self.in_flight = 0
        self.stop_ops = threading.Event()
        # The faults that come first (--first-faults): operations go on past --operations until each has hit the
        # platform, so that a soak whose operations finish early (fast playbooks) still meets them.
        self.first_faults_left = list(args.first_faults)
        self.faults: list[dict] = []
        self.host_faults: list[HostFault] = []
        self.workers: list = []  # every worker Popen started, live or dead
        self.log_lines: list[str] = []
        self.demo = Demo(prefix=f"soak{uuid.uuid4().hex[:6]}", say=self.say, worker_env={
            "GPUAAS_HEALTH_INTERVAL_SECONDS": str(args.health_interval),
            "GPUAAS_WORKER_CONCURRENCY": "2"})

    # -- output ------------------------------------------------------------------------------------------

    def say(self, text: str) -> None:
        line = f"[{time.monotonic() - self.started:7.1f}s] {text}"
        self.log_lines.append(line)
        print(line, file=sys.stderr, flush=True)

    # -- the world ---------------------------------------------------------------------------------------

    def setup(self) -> None:
        a, d = self.args, self.demo
        d.start_service(registry=True)
        self.workers.append(d.processes[-1])
        d.setup_tenancy()
        self.slurm_hosts = ["ctl"] + [f"w{i + 1}" for i in range(a.slurm_workers)]
        self.slurm_spares = [f"w{a.slurm_workers + i + 1}" for i in range(a.slurm_spares)]
        self.oci_hosts = [f"web{i + 1}" for i in range(a.oci_replicas + a.oci_spares)]
        with ThreadPoolExecutor(1) as background:  # the OCI hosts and image get ready meanwhile
            oci_ready = background.submit(d.prepare_oci, self.oci_hosts, ("v1",))
            pools = {"pool-a": self.slurm_hosts} | ({"pool-b": self.slurm_spares} if self.slurm_spares else {})
            d.register_hosts(pools)
            d.register_slurm_app()
        oci_ready.result()
        d.register_oci_hosts("pool-oci", self.oci_hosts)
        version = d.register_oci_app("v1")
        d.create_instance("pool-a", workers=a.slurm_workers)
        d.create_oci_instance("pool-oci", version["version"], replicas=a.oci_replicas)
        self.instance_ids = {SLURM: d.ids[SLURM], OCI: d.ids[OCI]}
        self.http = httpx.Client(base_url=d.sa.base_url, timeout=60,
                                 headers={"Authorization": f"Bearer {d.sa.token}"})
        self.start_worker()  # the second worker
        # The deploys are operations of the soak too, before any fault: the rest needs both instances.
        deploys = [self.op(SLURM, "deploy", "/deploy"), self.op(OCI, "deploy", "/deploy")]
        with ThreadPoolExecutor(2) as pool:
            for op in pool.map(self.run_op, deploys):
                if op.status != "succeeded":
                    raise RuntimeError(f"deploy of {op.instance} ended {op.status}: {op.error}")
        self.munge_key = d.host_sh("ctl", "cat /etc/munge/munge.key")

    def start_worker(self):
        n = len(self.workers) + 1
        worker = self.demo.start_worker(f"worker-{n}.log")
        self.demo.processes.append(worker)
        self.workers.append(worker)
        return worker

    def live_workers(self) -> list:
        return [w for w in self.workers if w.poll() is None]

    # -- the API -----------------------------------------------------------------------------------------

    def request(self, method: str, path: str, body: dict | None = None, key: str | None = None,
                give_up: float = 300) -> httpx.Response | None:
        """One request, sent again while the service is down or answers 503; None when it never answered."""
        deadline = time.monotonic() + give_up
        headers = {"Idempotency-Key": key} if key else {}
        while time.monotonic() < deadline:
            try:
                response = self.http.request(method, path, json=body, headers=headers)
            except httpx.TransportError:
                response = None
            if response is not None and response.status_code != 503:
                if response.status_code >= 500:
                    with self.lock:
                        self.counts.server_errors.append(f"{method} {path} -> {response.status_code}: "
                                                         f"{response.text[:300]}")
                return response
            with self.lock:
                self.counts.unavailable += 1
            time.sleep(1.0)
        return None

    def get(self, path: str) -> dict:
        response = self.request("GET", path)
        if response is None or response.status_code != 200:
            raise RuntimeError(f"GET {path}: {response.status_code if response else 'no answer'}")
        return response.json()

    def pages(self, path: str) -> list[dict]:
        items, cursor = [], None
        while True:
            page = self.get(f"{path}{'&' if '?' in path else '?'}limit=200" + (f"&cursor={cursor}" if cursor else ""))
            items += page["items"]
            cursor = page.get("next_cursor")
            if not cursor:
                return items

    def instance(self, key: str) -> dict:
        return self.get(f"/v1/instances/{self.instance_ids[key]}")

    def members(self, key: str) -> list[dict]:
        return self.pages(f"/v1/instances/{self.instance_ids[key]}/members")

    # -- operations --------------------------------------------------------------------------------------

    def op(self, instance: str, kind: str, path: str, body: dict | None = None, members: tuple = ()) -> Op:
        return Op(instance, kind, path, body, tuple(members))

    def run_op(self, op: Op) -> Op:
        """Submits the operation and follows it to its end (or --op-timeout)."""
        key = secrets.token_hex(8)
        op.submitted = time.monotonic()
        response = self.request("POST", f"/v1/instances/{self.instance_ids[op.instance]}{op.path}", op.body, key)
        if response is None:
            with self.lock:
                self.counts.server_errors.append(f"POST {op.path}: no answer for 300 s")
            return op
        if response.status_code == 202:
            op.id, op.status = response.json()["id"], response.json()["status"]
            with self.lock:
                self.ops.append(op)
                self.counts.accepted += 1
            self.say(f"-> {op.kind} {op.instance} {'/'.join(m[:8] for m in op.members)} accepted ({op.id[:8]})")
        else:
            try:
                code = response.json()["error"]["code"]
            except (ValueError, KeyError, TypeError):
                code = None
            if response.status_code in (409, 422, 429) and code:
                with self.lock:
                    self.counts.refused[f"{op.kind}: {code}"] += 1
                op.status = "refused"
            elif response.status_code < 500:
                with self.lock:
                    self.counts.server_errors.append(f"POST {op.path} -> {response.status_code} without the "
                                                     f"error envelope: {response.text[:300]}")
            return op
        deadline = time.monotonic() + self.args.op_timeout
        while time.monotonic() < deadline:
            time.sleep(1.5)
            response = self.request("GET", f"/v1/operations/{op.id}")
            if response is not None and response.status_code == 200:
                got = response.json()
                op.status, op.error = got["status"], got.get("error")
                if op.status in TERMINAL:
                    op.ended = time.monotonic()
                    message = f": {(op.error or {}).get('message', '')[:160]}" if op.status != "succeeded" else ""
                    self.say(f"<- {op.kind} {op.instance} {op.id[:8]} {op.status} in "
                             f"{op.ended - op.submitted:.0f} s{message}")
                    return op
        self.say(f"!! {op.kind} {op.id} still {op.status} after {self.args.op_timeout} s")
        return op

    def choose(self) -> Op | None:
        """An operation that makes sense for the statuses the API shows now (None: nothing does)."""
        choices: list[tuple[float, Op]] = []
        for key in (SLURM, OCI):
            status = self.instance(key)["status"]
            if status == "failed" and key not in self.busy_instances:
                choices.append((1, self.op(key, "refresh", "/refresh")))
            if status not in ("running", "degraded"):
                continue
            members = [m for m in self.members(key) if m["status"] != "removed"]
            workers = [m for m in members if m["role"] in ("worker", "replica")]
            free = [m for m in workers if m["id"] not in self.busy_members]
            pools = (["pool-a"] + (["pool-b"] if self.slurm_spares else [])) if key == SLURM else ["pool-oci"]
            hosts = len(self.slurm_hosts) - 1 + len(self.slurm_spares) if key == SLURM else len(self.oci_hosts)
            role = "worker" if key == SLURM else "replica"
            if len(workers) < hosts:
                choices.append((3, self.op(key, "member_add", "/members",
                                           {"role": role, "allocation_id": self.demo.ids[self.rng.choice(pools)]})))
            # Members that serve and no operation of the soak targets: a remove keeps one of them.
            serving = [m for m in free if m["status"] in ("active", "drained", "draining")]
            for m in free:
                mid, st = m["id"], m["status"]
                if key == SLURM and st == "active":
                    choices.append((2, self.op(key, "member_drain", f"/members/{mid}/drain", members=(mid,))))
                if key == SLURM and st in ("drained", "draining"):
                    choices.append((3, self.op(key, "member_resume", f"/members/{mid}/resume", members=(mid,))))
                if st == "failed" or (st in ("active", "drained") and len(serving) > 1):
                    choices.append((3 if st == "failed" else 1.5,
                                    self.op(key, "member_remove", f"/members/{mid}/remove", members=(mid,))))
                if key == SLURM and st in ("active", "drained", "failed"):
                    choices.append((2 if st == "failed" else 1, self.op(
                        key, "member_replace", f"/members/{mid}/replace",
                        {"allocation_id": self.demo.ids[self.rng.choice(pools)]}, members=(mid,))))
            if key not in self.busy_instances:
                if key == SLURM:
                    parameters = {"slurm_controller_return_to_service": self.rng.choice([1, 2])}
                else:
                    parameters = {"oci_workload_env": {"SOAK_ROUND": str(self.rng.randrange(1000))}}
                choices.append((2, self.op(key, "reconfigure", "/reconfigure", {"parameters": parameters})))
                choices.append((1, self.op(key, "refresh", "/refresh")))
        if not choices:
            return None
        # An instance runs its operations one at a time: one with an operation in flight is chosen less often, so
        # that both instances work at once rather than the drivers queueing behind one of them.
        choices = [(w if not self.open_ops[op.instance] else w / 4, op) for w, op in choices]
        weights, ops = zip(*choices, strict=True)
        return self.rng.choices(ops, weights)[0]

    def driver(self) -> None:
        """One of --concurrency threads: choose, run, repeat until --operations were accepted."""
        while not self.stop_ops.is_set():
            with self.lock:
                if self.counts.accepted + self.in_flight >= self.args.operations and not self.first_faults_left:
                    return
                self.in_flight += 1
            op = None
            try:
                with self.choosing:
                    op = self.choose()
                    if op is not None:
                        self.open_ops[op.instance] += 1
                        self.busy_members.update(op.members)
                        if not op.members:
                            self.busy_instances.add(op.instance)
                if op is not None:
                    self.run_op(op)
            except Exception as exc:  # noqa: BLE001 - a driver keeps driving; the reason is logged
                self.say(f"driver: {exc!r}")
            finally:
                with self.lock:
                    self.in_flight -= 1
                with self.choosing:
                    if op is not None:
                        self.open_ops[op.instance] -= 1
                    if op is not None and op.members:
                        self.busy_members.difference_update(op.members)
                    elif op is not None:
                        self.busy_instances.discard(op.instance)
            time.sleep(self.rng.uniform(0.5, 3.0) if op is not None else 3.0)

    # -- faults ------------------------------------------------------------------------------------------

    def inject(self, kind: str) -> bool:
        """Injects one fault of `kind`; False when it cannot be done now (try again later)."""
        d = self.demo
        if kind == "worker_kill":
            running = self.running_op_owner()
            if running is None:
                return False
            op_id, worker = running
            worker.send_signal(signal.SIGKILL)
            worker.wait()
            self.record(kind, f"worker pid {worker.pid} holding operation {op_id[:8]}")
            self.start_worker()
        elif kind == "pg_restart":
            down = self.fault_rng.uniform(2, 8)
            d.restart_postgres(down)
            self.record(kind, f"down {down:.1f} s")
        elif kind == "serve_term":
            started = time.monotonic()
            code = d.stop_serve()
            time.sleep(self.fault_rng.uniform(1, 5))
            d.start_serve()
            self.record(kind, f"exit status {code}, answering again after {time.monotonic() - started:.1f} s")
        else:
            faulted = {f.host for f in self.host_faults if f.healed is None}
            if len(faulted) >= self.args.host_faults_at_once:
                return False
            # Hosts that carry an active member are picked three times as often: they measure detection.
            active = {(m["host_name"], key, m["id"]) for key in (SLURM, OCI) for m in self.members(key)
                      if m["status"] == "active"}
            hosts = [h for h in self.slurm_hosts + self.slurm_spares + self.oci_hosts if h not in faulted]
            carrying = {h for h, _, _ in active}
            host = self.fault_rng.choices(hosts, [3 if h in carrying else 1 for h in hosts])[0]
            members = [(key, mid) for h, key, mid in sorted(active) if h == host]
            d.podman_host(HOST_FAULTS[kind][0], host)
            seconds = self.fault_rng.uniform(*self.args.host_fault_seconds)
            self.host_faults.append(HostFault(kind, host, time.time(), time.monotonic() + seconds, members))
            self.record(kind, f"{host} for {seconds:.0f} s ({len(members)} active member(s))")
        return True

    def record(self, kind: str, what: str) -> None:
        self.faults.append({"kind": kind, "at": round(time.monotonic() - self.started, 1), "what": what})
        self.say(f"** fault {kind}: {what}")

    def heal(self, fault: HostFault) -> None:
        self.demo.podman_host(HOST_FAULTS[fault.kind][1], fault.host)
        fault.healed = time.time()
        self.say(f"** undone {fault.kind} of {fault.host}")

    def running_op_owner(self) -> tuple[str, object] | None:
        """A running operation of the soak and the live worker that holds its lease, from the database: a worker
        that holds no other, so that the kill holds one instance's queue for a lease, not both. None when none
        runs, or while the only worker running them holds two (the fault is tried again 3 s later)."""
        pids = {w.pid: w for w in self.live_workers()}
        rows = self.sql("SELECT id::text, lease_owner FROM operations WHERE status = 'running' "
                        "AND instance_id = ANY(%s::uuid[]) ORDER BY seq", [list(self.instance_ids.values())])
        held = [(op_id, int(owner.split(":")[1])) for op_id, owner in rows or [] if owner and owner.count(":") >= 2]
        held = [(op_id, pid) for op_id, pid in held if pid in pids]
        count = Counter(pid for _, pid in held)
        alone = [(op_id, pid) for op_id, pid in held if count[pid] == 1]
        if not alone:
            return None
        op_id, pid = alone[0]
        return op_id, pids[pid]

    def sql(self, query: str, params: list | None = None) -> list | None:
        import psycopg

        uri = EmbeddedPostgres(self.demo.state_dir / "postgres").attach()
        if uri is None:
            return None
        try:
            with psycopg.connect(uri, connect_timeout=5) as conn:
                return conn.execute(query, params).fetchall()
        except psycopg.OperationalError:
            return None

    def fault_loop(self, drivers: list) -> None:
        a = self.args
        first = self.first_faults_left
        next_at = time.monotonic() + self.fault_rng.uniform(0.3, 1.0) * a.fault_every
        while any(not t.done() for t in drivers):
            now = time.monotonic()
            for fault in self.host_faults:
                if fault.healed is None and now >= fault.until:
                    self.heal(fault)
            if now >= next_at and (first or a.faults) and not self.stop_ops.is_set():  # SIGTERM: no new fault
                kind = first[0] if first else self.fault_rng.choice(a.faults)
                try:
                    done = self.inject(kind)
                except Exception as exc:  # noqa: BLE001 - a fault that could not be injected is reported
                    self.say(f"fault {kind} could not be injected: {exc!r}")
                    done = True
                if done:
                    if first:
                        first.pop(0)
                    next_at = now + self.fault_rng.uniform(0.5, 1.5) * a.fault_every
                else:
                    next_at = now + 3
            time.sleep(0.5)

    # -- the end: undo, settle, check ----------------------------------------------------------------------

    def settle(self) -> None:
        for fault in self.host_faults:
            if fault.healed is None:
                self.heal(fault)
        if self.demo.serve.poll() is not None:
            self.demo.start_serve()
        if not self.live_workers():
            self.start_worker()
        last_heal = max([f.healed for f in self.host_faults if f.healed] or [time.time()])
        settle = 3 * self.args.health_interval + 5
        deadline = time.monotonic() + self.args.op_timeout
        while time.monotonic() < deadline and self.open_operations():
            time.sleep(3)
        wait = max(0.0, last_heal + settle - time.time())
        self.say(f"settling {wait:.0f} s (3 health intervals and the confirmation after the last host came back)")
        time.sleep(wait)

    def api_operations(self) -> list[dict]:
        return [op for key in (SLURM, OCI) for op in self.pages(f"/v1/instances/{self.instance_ids[key]}/operations")]

    def open_operations(self) -> list[dict]:
        return [op for op in self.api_operations() if op["status"] not in TERMINAL]

    def check(self) -> dict:
        result: dict = {}
        api_ops = {op["id"]: op for op in self.api_operations()}
        result["stuck_operations"] = sorted(f"{op['kind']} {op['id']} {op['status']}" for op in api_ops.values()
                                            if op["status"] not in TERMINAL)
        transitional = []
        for key in (SLURM, OCI):
            instance = self.instance(key)
            if instance["status"] in TRANSITIONAL_INSTANCE:
                transitional.append(f"instance {key} {instance['status']}")
            transitional += [f"{key} member {m['host_name']} {m['status']}" for m in self.members(key)
                             if m["status"] in TRANSITIONAL_MEMBER]
        result["transitional"] = transitional
        result["truth_mismatches"] = self.truth_mismatches()
        unaccounted = []
        outcomes = Counter()
        for op in self.ops:
            got = api_ops.get(op.id)
            if got is None:
                unaccounted.append(f"{op.kind} {op.id}: not in the API")
                continue
            outcomes[f"{got['kind']} {got['status']}"] += 1
            if got["status"] == "failed" and not ((got.get("error") or {}).get("message") or "").strip():
                unaccounted.append(f"{op.kind} {op.id}: failed without a reason")
            elif got["status"] not in TERMINAL:
                unaccounted.append(f"{op.kind} {op.id}: {got['status']}")
        ours = {op.id for op in self.ops}
        unaccounted += [f"{op['kind']} {op['id']}: not requested by the soak" for op in api_ops.values()
                        if op["id"] not in ours]
        result["unaccounted"] = unaccounted
        result["operations"] = dict(sorted(outcomes.items()))
        result["failures"] = [{"id": op["id"], "kind": op["kind"], "attempt": op.get("attempt"),
                               "message": (op.get("error") or {}).get("message", "")[:400]}
                              for op in api_ops.values() if op["status"] != "succeeded"]
        result["orphan_processes"] = self.orphans(set(api_ops), health=False)
        # The last checks need the workers gone: SIGTERM, as systemd stops them (runs in flight finish).
        for worker in self.live_workers():
            worker.terminate()
        for worker in self.workers:
            try:
                worker.wait(60)
            except Exception:  # noqa: BLE001 - one that does not stop is killed, and the check says so
                worker.kill()
                result["orphan_processes"].append(f"worker {worker.pid} did not stop in 60 s on SIGTERM")
        result["orphan_processes"] += self.orphans(set(api_ops), health=True)
        result["secrets_left"] = self.secrets_left()
        result["pending_host_cleanups"] = [f"{r[0]} {r[1]} ({r[2]} attempts): {r[3]}" for r in self.sql(
            "SELECT host_name, node_name, attempts, coalesce(last_error, '') FROM host_cleanups "
            "WHERE status = 'pending'") or []]
        return result

    def truth_mismatches(self) -> list[str]:
        """Members (and instances) whose API status is not what the hosts show; a mismatch must still be
        there after a confirm window (two health intervals and the confirmation) to count."""
        first = self.compare()
        if not first:
            return []
        self.say(f"{len(first)} mismatch(es), read again after a confirm window: {first}")
        time.sleep(2 * self.args.health_interval + 10)
        return self.compare()

    def compare(self) -> list[str]:
        mismatches = []
        for key, truth in ((SLURM, self.slurm_truth), (OCI, self.oci_truth)):
            instance = self.instance(key)
            members = [m for m in self.members(key) if m["status"] != "removed"]
            expected_instance, expected = truth(members)
            for m in members:
                if m["id"] in expected and expected[m["id"]][0] != m["status"]:
                    mismatches.append(f"{key} member {m['host_name']} ({m['role']}): API {m['status']} "
                                      f"({m['status_reason'][:120]}), hosts {expected[m['id']][0]} "
                                      f"({expected[m['id']][1]})")
            if expected_instance != instance["status"]:
                mismatches.append(f"instance {key}: API {instance['status']} ({instance.get('status_reason', '')}),"
                                  f" hosts {expected_instance}")
        return mismatches

    def reachable(self, host: str) -> bool:
        with contextlib.suppress(OSError), socket.create_connection((self.demo.hosts[host]["address"], 22), 5):
            return True
        return False

    def sh(self, host: str, command: str) -> tuple[int, str]:
        import subprocess

        done = subprocess.run(["podman", "exec", self.demo.hosts[host]["container"], "bash", "-c", command],
                              capture_output=True, text=True, timeout=60)
        return done.returncode, done.stdout.strip()

    def slurm_truth(self, members: list[dict]) -> tuple[str, dict[str, tuple[str, str]]]:
        """What the Slurm adapter's check reads: slurmctld's node states (judged with the module's own
        mapping), each worker's own daemons, SSH reachability."""
        expected: dict[str, tuple[str, str]] = {}
        ctl = next(m for m in members if m["role"] == "controller")
        rc, out = self.sh(ctl["host_name"], "scontrol show node -o") if self.reachable(ctl["host_name"]) else (1, "")
        if rc != 0:
            return "failed", {ctl["id"]: ("failed", "slurmctld does not answer")}
        expected[ctl["id"]] = ("active", "slurmctld answers")
        nodes = {n.get("NodeName"): n for n in slurm_utils.parse_nodes(out)}
        _, busy = self.sh(ctl["host_name"], "squeue -h -t R -o %N")
        for m in members:
            if m["role"] != "worker":
                continue
            node = nodes.get(m["node_name"])
            if node is None:
                expected[m["id"]] = ("failed", "not a node of the cluster")
                continue
            state = slurm_utils.member_state(node.get("State"), int(m["node_name"] in busy.split()))
            why = f"State={node.get('State')}"
            if not self.reachable(m["host_name"]):
                state, why = "failed", "SSH does not answer"
            else:
                rc, _ = self.sh(m["host_name"], "pgrep -x slurmd >/dev/null && pgrep -x munged >/dev/null")
                if rc != 0:
                    state, why = "failed", "slurmd or munged not running"
            expected[m["id"]] = (state, why)
        failed = any(state == "failed" for state, _ in expected.values())
        return ("degraded" if failed else "running"), expected

    def oci_truth(self, members: list[dict]) -> tuple[str, dict[str, tuple[str, str]]]:
        """What the OCI adapter's check reads: the workload's unit on the replica's host and its probe."""
        expected = {}
        for m in members:
            host = m["host_name"]
            if not self.reachable(host):
                expected[m["id"]] = ("failed", "SSH does not answer")
                continue
            rc, unit = self.sh(host, f"systemctl is-active {OCI_CONTAINER}")
            try:
                answer = httpx.get(f"http://{self.demo.hosts[host]['address']}:{OCI_PORT}/version.txt", timeout=5)
                probe = answer.status_code == 200
            except httpx.HTTPError:
                probe = False
            expected[m["id"]] = (("active", "unit active, probe answers") if unit == "active" and probe else
                                 ("failed", f"unit {unit or 'unknown'}, probe {'answers' if probe else 'fails'}"))
        answering = [s for s, _ in expected.values() if s == "active"]
        status = "failed" if not answering else "degraded" if len(answering) < len(expected) else "running"
        return status, expected

    def orphans(self, op_ids: set[str], health: bool) -> list[str]:
        """Processes that carry GPUAAS_OPERATION_ID of this soak's ended operations (and, with `health`, of
        its instances' health checks)."""
        markers = set(op_ids) | ({f"health-{i}" for i in self.instance_ids.values()} if health else set())
        found = []
        for proc in Path("/proc").iterdir():
            if not proc.name.isdigit():
                continue
            try:
                environ = (proc / "environ").read_bytes().split(b"\0")
                command = (proc / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")[:160]
            except OSError:
                continue
            for entry in environ:
                if entry.startswith(b"GPUAAS_OPERATION_ID=") and entry.split(b"=", 1)[1].decode() in markers:
                    found.append(f"pid {proc.name} ({entry.split(b'=', 1)[1].decode()}): {command}")
        return found

    def secrets_left(self) -> list[str]:
        left = []
        pids = {str(w.pid) for w in self.workers}
        for kind in SCRATCH_KINDS:
            for path in Path(tempfile.gettempdir()).glob(f"gpuaas-{kind}-*"):
                if path.name.split("-")[2].partition(".")[0] in pids:
                    left.append(f"scratch directory {path}")
        needles = [self.munge_key.encode()]
        with contextlib.suppress(ValueError):
            needles.append(base64.b64decode(self.munge_key, validate=True))
        rows = self.sql("SELECT secret_sha256, revoked_at, operation_id::text FROM runtime_secrets "
                        "WHERE instance_id = ANY(%s::uuid[])", [list(self.instance_ids.values())])
        if rows is None:
            left.append("runtime_secrets could not be read")
            rows = []
        digests = {bytes(r[0]) for r in rows}
        left += [f"pull credential of operation {r[2]} not revoked" for r in rows if r[1] is None]
        pgdata = self.demo.state_dir / "postgres" / "pgdata"
        for path in self.demo.state_dir.rglob("*"):
            if not path.is_file() or pgdata in path.parents or path.stat().st_size > 64 << 20:
                continue
            data = path.read_bytes()
            if any(n in data for n in needles):
                left.append(f"the MUNGE key in {path}")
            if any(hashlib.sha256(run[i:i + 43]).digest() in digests
                   for run in PASSWORD_RUN.findall(data) for i in range(len(run) - 42)):
                left.append(f"a pull password in {path}")
        return left

    def latencies(self) -> dict:
        """Seconds from each host fault to the `member_failed` event of every member active on the host."""
        seconds, undetected = [], []
        for fault in self.host_faults:
            for key, member in fault.members:
                events = self.pages(f"/v1/instances/{self.instance_ids[key]}/events?type=member_failed")
                times = [datetime.fromisoformat(e["occurred_at"]).timestamp() for e in events
                         if e["member_id"] == member]
                end = fault.healed or time.time()
                hits = [t for t in times if fault.started <= t <= end]
                if hits:
                    seconds.append(min(hits) - fault.started)
                else:
                    undetected.append(f"{fault.kind} {fault.host} ({key}, down {end - fault.started:.0f} s)")
        return {"count": len(seconds), "p50_s": round(statistics.median(seconds), 1) if seconds else None,
                "max_s": round(max(seconds), 1) if seconds else None,
                "all_s": sorted(round(s, 1) for s in seconds), "undetected": undetected}

    # -- the whole run -------------------------------------------------------------------------------------

    def run(self) -> int:
        summary: dict = {"seed": self.args.seed, "operations_target": self.args.operations}
        code = 0
        try:
            try:
                self.setup()
            except Exception:
                self.say(f"setup failed:\n{traceback.format_exc()}")
                summary["setup_failed"] = traceback.format_exc()[-2000:]
                return 2
            summary["setup_s"] = round(time.monotonic() - self.started, 1)
            self.say(f"world ready in {summary['setup_s']} s; soak starts")
            soak_started = time.monotonic()
            with ThreadPoolExecutor(self.args.concurrency, thread_name_prefix="driver") as pool:
                drivers = [pool.submit(self.driver) for _ in range(self.args.concurrency)]
                self.fault_loop(drivers)
            summary["soak_s"] = round(time.monotonic() - soak_started, 1)
            self.settle()
            checked = self.check()
            summary |= {
                "accepted": self.counts.accepted, "refused": sum(self.counts.refused.values()),
                "refusals": dict(sorted(self.counts.refused.items())), "unavailable_retries": self.counts.unavailable,
                "server_errors": self.counts.server_errors, "faults": dict(Counter(f["kind"] for f in self.faults)),
                "fault_log": self.faults, "detection": self.latencies()} | checked
            violations = {k: len(summary[k]) for k in ("stuck_operations", "transitional", "truth_mismatches",
                                                       "orphan_processes", "secrets_left", "unaccounted",
                                                       "server_errors")}
            summary["violations"] = violations
            code = 1 if any(violations.values()) else 0
        except Exception:
            self.say(f"soak failed:\n{traceback.format_exc()}")
            summary["error"] = traceback.format_exc()[-2000:]
            code = 1
        finally:
            summary["wall_s"] = round(time.monotonic() - self.started, 1)
            summary["state_dir"] = str(self.demo.state_dir)
            with contextlib.suppress(Exception):
                self.print_counts(summary)
            self.demo.close()
            if self.args.summary:
                Path(self.args.summary).write_text(json.dumps(summary, indent=2, default=str))
            print(json.dumps(summary, default=str), flush=True)
        return code

    def print_counts(self, s: dict) -> None:
        lines = [f"operations accepted {s.get('accepted')}, refused {s.get('refused')} {s.get('refusals')}",
                 f"outcomes {s.get('operations')}",
                 f"faults {s.get('faults')}"]
        detection = s.get("detection") or {}
        lines.append(f"detection latency: {detection.get('count')} member(s), p50 {detection.get('p50_s')} s, "
                     f"max {detection.get('max_s')} s, undetected {len(detection.get('undetected') or [])}")
        for k in ("stuck_operations", "transitional", "truth_mismatches", "orphan_processes", "secrets_left",
                  "unaccounted", "server_errors"):
            items = s.get(k) or []
            lines.append(f"{k}: {len(items)}" + "".join(f"\n    {i}" for i in items[:20]))
        lines.append(f"pending host cleanups (not a violation): {len(s.get('pending_host_cleanups') or [])}")
        lines.append(f"wall time {s.get('wall_s')} s (setup {s.get('setup_s')} s, soak {s.get('soak_s')} s)")
        print("\n".join(lines), flush=True)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--operations", type=int, default=100, help="accepted operations to drive (deploys included)")
    p.add_argument("--seed", type=int, default=None, help="random seed (default: a new one, printed)")
    p.add_argument("--concurrency", type=int, default=3, help="operations in flight at most")
    p.add_argument("--fault-every", type=float, default=45.0, help="mean seconds between faults")
    p.add_argument("--faults", default=",".join(FAULT_KINDS),
                   help=f"kinds to choose from at random (comma-separated; 'none'): {', '.join(FAULT_KINDS)}")
    p.add_argument("--first-faults", default="", help="kinds injected first, in this order")
    p.add_argument("--host-fault-seconds", default="60,100", help="MIN,MAX seconds a host fault lasts")
    p.add_argument("--host-faults-at-once", type=int, default=1, help="host faults in effect at once, at most")
    p.add_argument("--health-interval", type=float, default=15.0,
                   help="GPUAAS_HEALTH_INTERVAL_SECONDS of the workers (the service's default)")
    p.add_argument("--op-timeout", type=float, default=900.0, help="seconds the soak follows one operation")
    p.add_argument("--slurm-workers", type=int, default=2)
    p.add_argument("--slurm-spares", type=int, default=2)
    p.add_argument("--oci-replicas", type=int, default=2)
    p.add_argument("--oci-spares", type=int, default=1)
    p.add_argument("--summary", help="write the summary JSON here")
    args = p.parse_args(argv)
    args.seed = args.seed if args.seed is not None else random.SystemRandom().randrange(1 << 31)

    def kinds(text: str) -> list[str]:
        chosen = [k for k in text.split(",") if k and k != "none"]
        unknown = set(chosen) - set(FAULT_KINDS)
        if unknown:
            p.error(f"unknown fault kind(s): {', '.join(sorted(unknown))}")
        return chosen

    args.faults, args.first_faults = kinds(args.faults), kinds(args.first_faults)
    low, _, high = args.host_fault_seconds.partition(",")
    args.host_fault_seconds = (float(low), float(high or low))
    logging.getLogger("httpx").setLevel(logging.WARNING)
    print(f"chaos soak: seed {args.seed}, {args.operations} operations", file=sys.stderr, flush=True)
    soak = Soak(args)
    # SIGTERM ends the soak early: no new operation or fault; the ones in flight end, then the checks run as usual.
    signal.signal(signal.SIGTERM, lambda *_: soak.stop_ops.set())
    return soak.run()


if __name__ == "__main__":
    sys.exit(main())
