"""The worker: claims operations from the PostgreSQL queue, runs them, records what they proved.

Any number of workers (threads here, processes, machines) may share one database. A claim takes a
lease; a heartbeat thread extends it while the run lasts and watches for cancel requests. A worker
that dies stops heartbeating; any other worker re-queues (or, after max_attempts, fails) the
operation once the lease has expired."""

from __future__ import annotations

import logging
import os
import socket
import threading
import time
import uuid

import psycopg

from .. import correlation
from ..audit import service as audit
from ..config import OperationSettings
from ..db import Database
from ..errors import ApiError
from ..instances import service as instances
from ..operations import rules, truth
from ..operations import service as ops
from . import plan as planner
from . import runner

log = logging.getLogger(__name__)


class Worker:
    def __init__(self, database: Database, settings: OperationSettings | None = None, *,
                 name: str | None = None, concurrency: int = 1):
        self.db = database
        self.settings = settings or OperationSettings()
        self.name = name or f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:6]}"
        self.concurrency = concurrency
        self.stop = threading.Event()

    # The loop -----------------------------------------------------------------------------------

    def serve(self) -> None:
        """Run `concurrency` claim loops until stop is set; returns after in-flight runs end."""
        threads = [threading.Thread(target=self._loop, args=(f"{self.name}/{i}",), name=f"worker-{i}", daemon=True)
                   for i in range(self.concurrency)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()

    def start(self) -> list[threading.Thread]:
        """Run in the background of this process (tests, `gpuaas demo`); stop with .stop.set()."""
        t = threading.Thread(target=self.serve, name=f"worker-{self.name}", daemon=True)
        t.start()
        return [t]

    def _loop(self, slot: str) -> None:
        while not self.stop.is_set():
            try:
                worked = self.run_once(slot)
            except psycopg.OperationalError:
                log.exception("database unavailable; retrying")
                worked = False
            if not worked:
                self.stop.wait(self.settings.poll_seconds)

    def run_once(self, slot: str | None = None) -> bool:
        """Recover expired leases, then claim and run one operation. False when the queue was empty."""
        slot = slot or f"{self.name}/0"
        with self.db.transaction() as conn:
            for op in ops.recover_expired(conn):
                log.warning("operation %s: worker lease expired -> %s", op["id"], op["status"])
        with self.db.transaction() as conn:
            op = ops.claim(conn, slot, self.settings.lease_seconds)
            if op is not None:
                instance = instances.get_instance(conn, op["instance_id"], include_deleted=True)
                audit.append_event(conn, instance, "operation.started",
                                   {"operation_id": str(op["id"]), "kind": op["kind"], "attempt": op["attempt"],
                                    "worker": slot}, correlation_id=op["correlation_id"])
        if op is None:
            return False
        token = correlation.use(op["correlation_id"])
        try:
            self._execute(op, slot)
        except Exception as exc:  # noqa: BLE001 - a bug must fail the operation, not kill the worker
            log.exception("operation %s: unexpected error", op["id"])
            self._finish(op, slot, "failed", {"code": "internal_error", "message": type(exc).__name__})
        finally:
            correlation._current.reset(token)
        return True

    # One operation ------------------------------------------------------------------------------

    def _execute(self, op: dict, slot: str) -> None:
        with self.db.transaction() as conn:
            instance = instances.get_instance(conn, op["instance_id"], include_deleted=True)
            try:
                rules.check_instance(op["kind"], instance, accepting=False)
                truth.on_start(conn, op)
                plan = planner.build(conn, self.settings, op, instance)
            except ApiError as exc:
                conn.rollback()
                self._finish(op, slot, "failed", {"code": exc.code, "message": exc.message, "details": exc.details})
                return
        sink = _EventSink(self.db, instance, op["correlation_id"])
        watch = _Heartbeat(self.db, op, slot, self.settings)
        watch.start()
        try:
            result = runner.run(self.settings, op, plan, on_event=sink.append, should_stop=watch.stop_reason)
        finally:
            watch.done.set()
            sink.close()
        if result.status == "lost":
            log.warning("operation %s: lease lost to another worker; outcome left to it", op["id"])
            return
        outcome: dict = {"rc": result.rc, "stats": result.stats}
        if result.status == "successful":
            if op["kind"] == "refresh":
                outcome["observed"] = observe(plan, result.module_results)
            self._finish(op, slot, "succeeded", None, outcome, result.tarball)
        elif result.status == "canceled":
            self._finish(op, slot, "canceled", {"code": "canceled", "message": "canceled while running; the run "
                                                "was stopped, hosts may be partly changed"}, outcome, result.tarball)
        elif result.status == "timeout":
            self._finish(op, slot, "failed", {"code": "timeout", "message": f"no result within {op['timeout_s']} s; "
                                              "the run was stopped"}, outcome, result.tarball)
        else:
            failure = result.failure or {}
            message = (f"task {failure.get('task')!r} failed on {failure.get('host')}: {failure.get('message')}"
                       if failure else f"the run ended with {result.status} (rc={result.rc})")
            self._finish(op, slot, "failed", {"code": "run_failed", "message": message, "details": failure},
                         outcome, result.tarball)

    def _finish(self, op: dict, slot: str, status: str, error: dict | None, outcome: dict | None = None,
                tarball: bytes = b"") -> None:
        with self.db.transaction() as conn:
            final = ops.finish(conn, op["id"], slot, status, error=error, result=outcome)
            if final is None:
                log.warning("operation %s: lease lost before completion; outcome left to its new owner", op["id"])
                return
            if tarball:
                ops.store_artifacts(conn, op["id"], op["attempt"], tarball)
            instance = instances.get_instance(conn, op["instance_id"], include_deleted=True)
            payload = {"operation_id": str(op["id"]), "kind": op["kind"], "attempt": op["attempt"]}
            if error:
                payload |= {"code": error["code"], "reason": error["message"]}
            audit.append_event(conn, instance, f"operation.{status}", payload, correlation_id=op["correlation_id"])
            if status == "succeeded":
                truth.on_success(conn, final, outcome or {})
            else:
                truth.on_failure(conn, final, error["message"] if error else status)


def observe(plan: planner.RunPlan, module_results: dict[str, dict]) -> dict[str, str | None]:
    """Member id -> status from the status module's node list (first host that answered); members
    whose node the scheduler does not know are failed."""
    status = plan.profile.get("status") or {}
    res = next(iter(module_results.values()), {})
    nodes = {n.get(status.get("name_key", "name")): n for n in res.get(status.get("nodes_key", "nodes"), [])}
    observed: dict[str, str | None] = {}
    for node_name, member_id in plan.node_members.items():
        node = nodes.get(node_name)
        state = "" if node is None else str(node.get(status.get("state_key", "state"), ""))
        observed[member_id] = "failed" if node is None else rules.node_status(plan.profile, state)
    return observed


class _EventSink:
    """Appends run summaries to the timeline on one connection of its own, committed per event so the
    live stream shows progress while the run goes on."""

    def __init__(self, db: Database, instance: dict, cid: str):
        self.instance, self.cid = instance, cid
        self._ctx = db.pool.connection()
        self.conn = self._ctx.__enter__()
        self.conn.autocommit = True
        self.count = 0

    def append(self, name: str, payload: dict) -> None:
        audit.append_event(self.conn, self.instance, name, payload, correlation_id=self.cid)
        self.count += 1

    def close(self) -> None:
        self.conn.autocommit = False
        self._ctx.__exit__(None, None, None)


class _Heartbeat(threading.Thread):
    """Extends the lease every few seconds and turns a cancel request, the timeout or a lost lease
    into a stop reason that the runner acts on (it SIGKILLs the run's process group)."""

    def __init__(self, db: Database, op: dict, slot: str, settings: OperationSettings):
        super().__init__(name=f"heartbeat-{op['id']}", daemon=True)
        self.db, self.op, self.slot, self.settings = db, op, slot, settings
        self.done = threading.Event()
        self.reason: str | None = None
        self.deadline = time.monotonic() + op["timeout_s"]
        self.interval = max(0.2, min(1.0, settings.lease_seconds / 3))

    def stop_reason(self) -> str | None:
        if self.reason is None and time.monotonic() > self.deadline:
            self.reason = "timeout"
        return self.reason

    def run(self) -> None:
        while not self.done.wait(self.interval):
            try:
                with self.db.transaction() as conn:
                    beat = ops.heartbeat(conn, self.op["id"], self.slot, self.settings.lease_seconds)
            except psycopg.Error:
                log.exception("heartbeat failed for operation %s", self.op["id"])
                continue
            if beat is None:
                self.reason = self.reason or "lost"
            elif beat["cancel_requested"]:
                self.reason = self.reason or "canceled"
