"""The worker: claims operations from the PostgreSQL queue, runs them, records what they proved.

Any number of workers (threads here, processes, machines) may share one database. A claim takes a
lease; a heartbeat thread extends it while the run lasts and watches for cancel requests. A worker
that dies stops heartbeating; any other worker re-queues (or, after max_attempts, fails) the
operation once the lease has expired.

Fencing: a run may not outlive its worker's lease, or two runs of one operation would act on the hosts at
once. The lease runs lease_seconds from a renewal's transaction, which starts after the worker noted the
time it sent it; the run guard (guard.py --fence) stops the run fence_seconds after that noted time, a margin
of at least a second before the lease can end. So a worker that is paused, starved or cut off from the
database (it cannot tell a cut from an outage) has stopped its run before any other worker may recover the
operation, and the operation runs again as a new attempt. A database outage shorter than fence_seconds costs
a run nothing.

A worker wakes on the event, not on a timer: accepting an operation sends a notification on the
queue's channel (operations.service.QUEUE_CHANNEL) when its transaction commits, and one listener
thread per worker wakes every idle claim loop at once. The poll (poll_seconds) stays as the
fallback for what sends no notification: a notification lost while the listener was reconnecting, a
lease that expired, an operation that became the head of its instance's queue."""

from __future__ import annotations

import contextvars
import logging
import os
import shutil
import socket
import threading
import time
import uuid
from pathlib import Path

import psycopg
from psycopg import sql
from psycopg.types.json import Jsonb

from .. import correlation
from ..audit import service as audit
from ..catalog import parameters
from ..catalog.gate_worker import GateWorker
from ..config import OperationSettings
from ..db import Database, retrying
from ..errors import ApiError
from ..health.checker import HealthChecker
from ..instances import service as instances
from ..metering.loop import Metering
from ..observability import logs, metrics, tracing
from ..operations import rules, truth
from ..operations import service as ops
from . import guard, runner
from . import plan as planner
from .content import ContentRefused, run_content

log = logging.getLogger(__name__)
# The machine a worker runs on: a run's processes live there, and only a worker there can end them.
HOST = socket.gethostname()


def fence_seconds(lease_seconds: float) -> float:
    """How long after its last renewal a run may go on: the lease less a margin for stopping it (a
    quarter of the lease, at least a second)."""
    return lease_seconds - max(1.0, lease_seconds / 4)


def end_run(operation_id) -> None:
    """Kill whatever is left on this machine of a run of the operation (its guard, if it still lives,
    and anything that escaped it): two runs of one operation must never act on the same hosts at once,
    and a run must not outlive its operation."""
    killed = runner.kill_leftovers(str(operation_id))
    if killed:
        log.warning("operation %s: killed %d processes of its earlier run", operation_id, killed)


class Wakeup:
    """Counts wake-up calls (a notification, a reconnect, stop); a claim loop reads the count before it
    looks at the queue and then waits until the count moves past it, so a call that comes while the
    loop is claiming is never missed."""

    def __init__(self) -> None:
        self._cond = threading.Condition()
        self.count = 0

    def __call__(self) -> None:
        with self._cond:
            self.count += 1
            self._cond.notify_all()

    def wait(self, seen: int, timeout: float) -> bool:
        """True when woken, False when `timeout` passed first."""
        with self._cond:
            return self._cond.wait_for(lambda: self.count != seen, timeout)


class _Stop(threading.Event):
    """The worker's stop event; setting it also wakes the idle claim loops."""

    def __init__(self, wakeup: Wakeup):
        super().__init__()
        self._wakeup = wakeup

    def set(self) -> None:
        super().set()
        self._wakeup()


class Worker:
    # How often the listener looks at `stop` while no notification comes.
    LISTEN_SLICE_SECONDS = 1.0

    def __init__(self, database: Database, settings: OperationSettings | None = None, *,
                 name: str | None = None, concurrency: int = 1):
        self.db = database
        self.settings = settings or OperationSettings()
        self.name = name or f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:6]}"
        self.concurrency = concurrency
        self.wakeup = Wakeup()
        self.stop = _Stop(self.wakeup)

    # The loop -----------------------------------------------------------------------------------

    def serve(self) -> None:
        """Run `concurrency` claim loops (and the listener that wakes them) until stop is set; returns
        after in-flight runs end."""
        # Every run's plan checks variable names against Ansible's reserved ones, which takes importing
        # Ansible's playbook classes (0.3-0.7 s): done here, it does not delay the first operation's start.
        parameters.ansible_reserved()
        left = runner.sweep_scratch()
        if left:
            log.warning("removed %d run directories that stopped workers left in the temp dir", left)
        server = None
        if self.settings.worker_metrics_port is not None:
            server, _ = metrics.start_http_server(self.settings.worker_metrics_port, self.settings.worker_metrics_host)
        threading.Thread(target=self._listen, name=f"listener-{self.name}", daemon=True).start()
        # Health checks run on threads of their own: they never take an operation slot.
        checkers = HealthChecker(self.db, self.settings, self.name, self.stop).start()
        # Usage metering too (metering/): a pass every metering_interval_seconds.
        meters = Metering(self.db, self.settings, self.stop).start()
        # Promotion gates too (catalog/gate_worker.py): staging checks of publishers' builds, smoke runs' steps.
        meters += GateWorker(self.db, self.settings, self.stop, self.name).start()
        threads = [threading.Thread(target=self._loop, args=(f"{self.name}/{i}",), name=f"worker-{i}", daemon=True)
                   for i in range(self.concurrency)]
        for t in threads:
            t.start()
        # Joined too: a check in flight stops its run when stop is set and removes its scratch directory.
        for t in threads + checkers + meters:
            t.join()
        if server is not None:
            server.shutdown()

    def start(self) -> list[threading.Thread]:
        """Run in the background of this process (tests, `gpuaas demo`); stop with .stop.set()."""
        t = threading.Thread(target=self.serve, name=f"worker-{self.name}", daemon=True)
        t.start()
        return [t]

    def _loop(self, slot: str) -> None:
        while not self.stop.is_set():
            seen = self.wakeup.count
            metrics.heartbeat(self.name, "loop")
            try:
                worked = self.run_once(slot)
            except psycopg.OperationalError as exc:
                log.warning("database unavailable (%s); retrying", type(exc).__name__)
                worked = False
            except Exception:  # noqa: BLE001 - nothing one operation does may end the loop
                log.exception("worker loop error; going on")
                worked = False
            if not worked:
                self.wakeup.wait(seen, self.settings.poll_seconds)

    def _listen(self) -> None:
        """LISTEN on the queue's channel on a connection of its own and wake the claim loops on every
        notification. When the database goes away, connect again (the poll covers the gap); each
        (re)connect wakes the loops too, for what was accepted while nobody listened."""
        delay = 0.2
        while not self.stop.is_set():
            try:
                with psycopg.connect(self.db.conninfo, autocommit=True, connect_timeout=5) as conn:
                    conn.execute(sql.SQL("LISTEN {}").format(sql.Identifier(ops.QUEUE_CHANNEL)))
                    delay = 0.2
                    self.wakeup()
                    while not self.stop.is_set():
                        for _ in conn.notifies(timeout=self.LISTEN_SLICE_SECONDS):
                            self.wakeup()
            except psycopg.OperationalError as exc:
                if self.stop.is_set():
                    return
                log.warning("queue listener: database unavailable (%s); polling every %.1f s until it is back",
                            type(exc).__name__, self.settings.poll_seconds)
            except Exception:  # noqa: BLE001 - the poll goes on without the listener; keep trying
                log.exception("queue listener failed; listening again")
            self.stop.wait(delay)
            delay = min(delay * 2, 5.0)

    def run_once(self, slot: str | None = None) -> bool:
        """Recover expired leases, then claim and run one operation. False when the queue was empty.
        The claim commits on its own: whatever happens to the operation after it is recorded on it."""
        slot = slot or f"{self.name}/0"
        with self.db.transaction() as conn:
            for op in ops.recover_expired(conn):
                log.warning("operation %s: worker lease expired -> %s", op["id"], op["status"])
            # In the same transaction: a re-queued operation stays locked until its earlier run is gone.
            for operation_id in ops.sweep_runs(conn, HOST, end_run):
                log.warning("operation %s: its earlier run on this machine is ended", operation_id)
        claim_started, started, claimed_from = time.time_ns(), time.monotonic(), guard.fence_clock()
        with self.db.transaction() as conn:
            op = ops.claim(conn, slot, self.settings.lease_seconds, HOST)
        if op is None:
            return False
        token = correlation.use(op["correlation_id"])
        try:
            # Every line about this run carries its ids; its span continues the accepting request's trace.
            with logs.bind(operation_id=op["id"], tenant_id=op["tenant_id"], project_id=op["project_id"],
                           instance_id=op["instance_id"]), tracing.operation_span(op, claim_started) as span:
                # From the claim on, the lease is renewed and the fence moves with it (the claim's lease counts
                # from its own transaction, which began after `started`); started here, its lines carry the ids.
                watch = _Heartbeat(self.db, op, slot, self.settings, renewed=claimed_from)
                watch.start()
                log.info("operation %s %s: claimed by %s (attempt %d of %d)", op["id"], op["kind"], slot,
                         op["attempt"], op["max_attempts"])
                try:
                    result = self._execute(op, slot, watch)
                except Exception as exc:  # noqa: BLE001 - a bug must fail the operation, not kill the worker
                    log.exception("operation %s: unexpected error", op["id"])
                    result = self._finish(op, slot, "failed", {
                        "code": "internal_error", "message": f"the worker failed running it ({type(exc).__name__})"})
                finally:
                    watch.close()  # only now: the lease covers recording the outcome too
                span.set_attribute("gpuaas.operation.result", result)
                log.info("operation %s %s: %s after %.1f s", op["id"], op["kind"], result, time.monotonic() - started)
        finally:
            correlation._current.reset(token)
        metrics.operation_finished(op["kind"], result, time.monotonic() - started)
        return True

    # One operation ------------------------------------------------------------------------------

    def _execute(self, op: dict, slot: str, watch: _Heartbeat) -> str:
        """Run one claimed operation; returns what was recorded (succeeded, failed, canceled) or lost."""
        with tracing.span("prepare"):
            prepared = retrying(self.db, f"operation {op['id']}: start",
                                lambda conn: self._prepare(conn, op, slot), self.stop)
            if prepared is None:
                log.warning("operation %s: the lease passed to another worker before the run began", op["id"])
                return "lost"
            instance, plan, refusal = prepared
            if refusal is not None:
                return self._finish(op, slot, "failed", {"code": refusal.code, "message": refusal.message,
                                                         "details": refusal.details})
            try:
                collections_path = run_content(self.settings, self.db, plan)
            except ContentRefused as exc:
                return self._finish(op, slot, "failed", {"code": exc.code, "message": str(exc)})
        if watch.stop_reason() in ("lost", "fenced"):  # the lease may be another worker's: no run may start
            log.warning("operation %s: the lease was lost or not renewed before the run began", op["id"])
            return "lost"
        sink = _EventSink(self.db, instance, op["correlation_id"], self.stop)
        with tracing.span("run", **{"gpuaas.hosts": len(plan.inventory.get("all", {}).get("hosts", {}))}) as run:
            try:
                result = runner.run(self.settings, op, plan, collections_path, on_event=sink.append,
                                    should_stop=watch.stop_reason, fence=watch.fence_file)
            finally:
                sink.close()
            run.set_attribute("gpuaas.run.status", result.status)
        if result.status == "lost":
            log.warning("operation %s: lease lost to another worker; outcome left to it", op["id"])
            return "lost"
        if result.status == "fenced" or result.rc == guard.FENCED_RC:
            # Its end may not be recorded: the lease may be another worker's by now.
            log.warning("operation %s: the lease was not renewed for %.1f s; the run was stopped and the operation "
                        "runs again once the lease has ended", op["id"], fence_seconds(self.settings.lease_seconds))
            return "lost"
        return self._finish(op, slot, *self._outcome(op, plan, result))

    def _prepare(self, conn: psycopg.Connection, op: dict, slot: str):
        """The started event, then the checks, status moves and plan; a refusal (ApiError) undoes the
        moves and is returned for the caller to record. None when this worker no longer holds the lease (it
        was paused or cut off past it, and another worker recovered the operation): nothing is moved then."""
        if conn.execute("""SELECT 1 FROM operations WHERE id = %s AND lease_owner = %s AND status = 'running'
                            FOR UPDATE""", (op["id"], slot)).fetchone() is None:
            return None
        instance = instances.get_instance(conn, op["instance_id"], include_deleted=True)
        audit.append_event(conn, instance, "operation.started", {"operation_id": str(op["id"]), "kind": op["kind"],
                           "attempt": op["attempt"], "worker": slot}, correlation_id=op["correlation_id"])
        try:
            with conn.transaction():
                rules.check_instance(op["kind"], instance, accepting=False)
                truth.on_start(conn, op)
                plan = planner.build(conn, self.settings, op, instance)
                if plan.forced:  # kept on the operation: its success marks those hosts for cleanup
                    conn.execute("""UPDATE operations SET params = params || jsonb_build_object('forced', %s::jsonb)
                                     WHERE id = %s""", (Jsonb(plan.forced), op["id"]))
                return instance, plan, None
        except ApiError as exc:
            return instance, None, exc

    def _outcome(self, op: dict, plan: planner.RunPlan, result) -> tuple:
        """(status, error, outcome, tarball) of a finished run."""
        outcome: dict = {"rc": result.rc, "stats": result.stats}
        if op["kind"] == "refresh" and result.status in ("successful", "failed"):
            # An unreachable worker or a failed module on one host is part of what a refresh reads; only a
            # control plane that did not answer leaves it nothing to tell.
            verdict = planner.read_back(plan, result)
            if verdict.control_plane:
                outcome["observed"] = {mid: v.observed for mid, v in verdict.members.items() if v.observed}
                return "succeeded", None, outcome, result.tarball
            return "failed", {"code": "run_failed", "message": "the status read-back got no answer from the "
                              f"control plane: {verdict.control_plane_message}"}, outcome, result.tarball
        if result.status == "successful":
            return "succeeded", None, outcome, result.tarball
        if result.status == "canceled":
            return "canceled", {"code": "canceled", "message": "canceled while running; the run was stopped, "
                                "hosts may be partly changed"}, outcome, result.tarball
        if result.status == "timeout":
            return "failed", {"code": "timeout", "message": f"no result within {op['timeout_s']} s; the run was "
                              "stopped"}, outcome, result.tarball
        failure = result.failure or {}
        message = (f"task {failure.get('task')!r} failed on {failure.get('host')}: {failure.get('message')}"
                   if failure else f"the run ended with {result.status} (rc={result.rc})")
        if result.host_failures and not result.aborted:
            # Every other host ran to the end: the failure belongs to these hosts (truth.on_failure).
            outcome["failed_hosts"] = result.host_failures
            if len(result.host_failures) > 1:
                message = f"failed on {len(result.host_failures)} hosts ({', '.join(sorted(result.host_failures))}); " \
                          f"first: {message}"
        return "failed", {"code": "run_failed", "message": message, "details": failure}, outcome, result.tarball

    def _finish(self, op: dict, slot: str, status: str, error: dict | None, outcome: dict | None = None,
                tarball: bytes = b"") -> str:
        """Record the outcome, waiting out a database outage. If recording it raises (a bug, an
        instance deleted under the run), the failure is recorded on the operation alone. Returns the
        status recorded, or lost when none was."""
        what = f"operation {op['id']}: recording {status}"
        with tracing.span("record", **{"gpuaas.operation.status": status}):
            try:
                retrying(self.db, what, lambda conn: self._record(conn, op, slot, status, error, outcome, tarball),
                         self.stop)
                return status
            except psycopg.OperationalError:
                log.warning("%s: the worker stopped first; the lease will expire and the operation run again", what)
                return "lost"
            except Exception as exc:  # noqa: BLE001 - the queue must move on whatever one operation does
                log.exception("%s failed", what)
                error = {"code": "internal_error", "message": f"recording the outcome failed ({type(exc).__name__})"}
            try:
                retrying(self.db, what, lambda conn: ops.finish(conn, op["id"], slot, "failed", error=error,
                                                                 result=outcome), self.stop)
                return "failed"
            except psycopg.OperationalError:
                log.warning("%s: the worker stopped first; the lease will expire", what)
                return "lost"

    def _record(self, conn: psycopg.Connection, op: dict, slot: str, status: str, error: dict | None,
                outcome: dict | None, tarball: bytes) -> None:
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
            truth.on_failure(conn, final, error["message"] if error else status, outcome)


class _EventSink:
    """Appends run summaries to the timeline from a thread of its own. ansible-runner hands each event
    over in the loop that reads ansible-playbook's output, so a commit made there would hold the
    playbook up (its output pipe fills) for as long as the database takes. Here append only queues:
    the writer commits what has queued, in order, one transaction per batch, so the live stream still
    shows progress as it comes. While the database is unreachable the events wait in memory (a run is
    never failed for its timeline) and are written when it answers again, at the latest on close."""

    RETRY_SECONDS = 1.0

    def __init__(self, db: Database, instance: dict, cid: str, stop: threading.Event | None = None):
        self.db, self.instance, self.cid, self.stop = db, instance, cid, stop
        self.pending: list[tuple[str, dict]] = []
        self.queued = threading.Condition()
        self.closing = False
        # A new thread starts with an empty context: its lines carry the run's ids only through this copy.
        context = contextvars.copy_context()
        self.writer = threading.Thread(target=context.run, args=(self._write_as_they_come,), daemon=True,
                                       name=f"timeline-{cid}")
        self.writer.start()

    def append(self, name: str, payload: dict) -> None:
        with self.queued:
            self.pending.append((name, payload))
            self.queued.notify()

    def close(self) -> None:
        """Returns once every event is written; raises psycopg.OperationalError if the worker stops
        while the database is still away."""
        with self.queued:
            self.closing = True
            self.queued.notify()
        self.writer.join()
        if self.pending:
            retrying(self.db, "timeline", self._write, self.stop)

    def _write_as_they_come(self) -> None:
        while True:
            with self.queued:
                self.queued.wait_for(lambda: self.pending or self.closing)
                if not self.pending:
                    return
            try:
                with self.db.transaction(timeout=self.RETRY_SECONDS) as conn:
                    self._write(conn)
            except psycopg.OperationalError as exc:
                log.warning("timeline: database unavailable (%s); %d events wait", type(exc).__name__,
                            len(self.pending))
                if self.closing:
                    return  # close writes what is left, waiting out the outage
                with self.queued:
                    self.queued.wait_for(lambda: self.closing, self.RETRY_SECONDS)

    def _write(self, conn: psycopg.Connection) -> None:
        with self.queued:
            batch = list(self.pending)
        for name, payload in batch:
            audit.append_event(conn, self.instance, name, payload, correlation_id=self.cid)
        conn.commit()
        metrics.events_ingested(name for name, _ in batch)
        with self.queued:
            del self.pending[:len(batch)]


class _Heartbeat(threading.Thread):
    """Extends the lease every few seconds and turns a cancel request, the timeout or a lost lease
    into a stop reason that the runner acts on (it SIGKILLs the run's process group). Each renewal moves
    the fence (the module docstring): `fence_file` holds the time after which the run guard stops the run."""

    def __init__(self, db: Database, op: dict, slot: str, settings: OperationSettings, renewed: float):
        super().__init__(name=f"heartbeat-{op['id']}", daemon=True)
        self.db, self.op, self.slot, self.settings = db, op, slot, settings
        self.done = threading.Event()
        self.reason: str | None = None
        self.deadline = time.monotonic() + op["timeout_s"]
        self.interval = max(0.2, min(1.0, settings.lease_seconds / 3))
        self.worker = slot.rpartition("/")[0] or slot
        self.fence_after = fence_seconds(settings.lease_seconds)
        self.fence_file = Path(runner.scratch_dir("fence")) / "until"
        self.renewed = renewed
        self._move_fence()
        # A new thread starts with an empty context: its lines carry the run's ids only through this copy.
        self.context = contextvars.copy_context()

    def fenced(self) -> bool:
        return guard.fence_clock() > self.renewed + self.fence_after

    def stop_reason(self) -> str | None:
        if self.reason is None and time.monotonic() > self.deadline:
            self.reason = "timeout"
        if self.reason is None and self.fenced():
            self.reason = "fenced"
        return self.reason

    def close(self) -> None:
        self.done.set()
        shutil.rmtree(self.fence_file.parent, ignore_errors=True)

    def _move_fence(self) -> None:
        # Written whole, then renamed: the guard never reads half a number.
        partial = self.fence_file.with_suffix(".new")
        partial.write_text(repr(self.renewed + self.fence_after))
        os.replace(partial, self.fence_file)

    def run(self) -> None:
        self.context.run(self._beat)

    def _beat(self) -> None:
        while not self.done.wait(self.interval):
            sent = guard.fence_clock()
            try:
                with self.db.transaction() as conn:
                    beat = ops.heartbeat(conn, self.op["id"], self.slot, self.settings.lease_seconds)
            except psycopg.OperationalError as exc:
                # The run goes on until its fence: an outage shorter than that costs it nothing.
                log.warning("heartbeat for operation %s: database unavailable (%s)", self.op["id"],
                            type(exc).__name__)
                continue
            except Exception:  # noqa: BLE001 - a dead heartbeat thread would give the run away
                log.exception("heartbeat for operation %s failed", self.op["id"])
                continue
            metrics.heartbeat(self.worker, "lease")
            if beat is None:
                self.reason = self.reason or "lost"
                continue
            if not self.fenced():  # a renewal after the fence passed cannot bring the stopped run back
                self.renewed = sent
                self._move_fence()
            if beat["cancel_requested"]:
                self.reason = self.reason or "canceled"
