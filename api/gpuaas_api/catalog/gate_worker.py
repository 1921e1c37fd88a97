"""The worker's gate thread (docs/control-service.md "Promotion gates"): each tick runs one queued staging gate
(catalog/staging.py) and then drives the smoke gates one step (catalog/smoke.py advance()).

A staging gate is claimed as an operation is: FOR UPDATE SKIP LOCKED with a lease that a heartbeat renews while
the checks run (outside any transaction); a gate whose lease expired (its worker died) is claimed again. On a pass
the worker moves the artifact draft -> staged as the gate's requester; an artifact that moved meanwhile is left
where it is (the event says so)."""

from __future__ import annotations

import logging
import threading
from pathlib import Path
from uuid import UUID

import psycopg
from psycopg.types.json import Jsonb

from .. import correlation
from ..config import OperationSettings
from ..content.store import ContentError, embedded_store
from ..db import Database
from ..errors import ApiError
from . import events, service, smoke, staging

log = logging.getLogger(__name__)

LEASE_SECONDS = 60
MAX_ATTEMPTS = 3  # claims of one staging gate: a build that gets its worker killed fails after these
TICK_SECONDS = 2.0


def sanity_root(settings: OperationSettings) -> Path:
    return settings.promotion_sanity_home or Path(settings.state_dir) / "gates" / "ansible-test-home"


class GateWorker:
    def __init__(self, database: Database, settings: OperationSettings, stop: threading.Event, owner: str):
        self.db, self.settings, self.stop, self.owner = database, settings, stop, owner

    def start(self) -> list[threading.Thread]:
        # Smoke gates step on their own thread: a staging gate's checks (minutes) do not stall them.
        threads = [threading.Thread(target=self._loop, args=(self.tick,), name="gates", daemon=True),
                   threading.Thread(target=self._loop, args=(self.smoke_tick,), name="smoke-gates", daemon=True)]
        for thread in threads:
            thread.start()
        return threads

    def _loop(self, step) -> None:
        while not self.stop.wait(TICK_SECONDS):
            try:
                step()
            except psycopg.OperationalError as exc:
                log.warning("gates: database unavailable (%s); next tick in %.0f s", type(exc).__name__, TICK_SECONDS)
            except Exception:  # noqa: BLE001 - the next tick tries again
                log.exception("gate tick failed")

    def tick(self) -> dict | None:
        """One queued (or abandoned) staging gate run to its end. Returns the staging gate as it was recorded, or
        None when none was waiting. A gate claimed MAX_ATTEMPTS times already (its build got the worker killed
        each time) fails without running again."""
        gate = self.claim()
        if gate is None:
            return None
        if gate["attempts"] > MAX_ATTEMPTS:
            message = (f"the checks were started {MAX_ATTEMPTS} times and never finished (the worker running them "
                       "died or lost its lease each time)")
            return self.finish(gate, [{"name": "attempts", "status": "failed", "summary": message, "output": "",
                                       "findings": [{"rule": "attempts", "path": None, "line": None,
                                                     "message": message}]}])
        return self.run(gate)

    def smoke_tick(self) -> None:
        """The smoke gates' step (catalog/smoke.py advance())."""
        smoke.advance(self.db, self.settings)

    def claim(self) -> dict | None:
        with self.db.transaction() as conn:
            return conn.execute(
                """UPDATE promotion_gates SET status = 'running', lease_owner = %s,
                          lease_expires_at = now() + make_interval(secs => %s), started_at = now(),
                          attempts = attempts + 1
                    WHERE id = (SELECT id FROM promotion_gates
                                 WHERE kind = 'staging' AND (status = 'queued'
                                       OR (status = 'running' AND lease_expires_at < now()))
                                 ORDER BY seq LIMIT 1 FOR UPDATE SKIP LOCKED)
                RETURNING *""", (self.owner, LEASE_SECONDS)).fetchone()

    def run(self, gate: dict) -> dict | None:
        """The gate's checks on the artifact's verified build, under a renewed lease; then the outcome."""
        done = threading.Event()
        heartbeat = threading.Thread(target=self._renew, args=(gate["id"], done), name="gate-lease", daemon=True)
        heartbeat.start()
        try:
            with self.db.transaction() as conn:
                artifact = service.get_artifact(conn, gate["artifact_id"])
            try:
                tarball = embedded_store(self.settings.state_dir, self.db).verify(artifact["digest"])
                checks = staging.run_checks(tarball, [c["name"] for c in gate["checks"]],
                                            sanity_root=sanity_root(self.settings),
                                            timeout=self.settings.promotion_check_timeout_seconds,
                                            allowed_ignores=self.settings.promotion_sanity_allowed_ignores)
            except Exception as exc:  # noqa: BLE001 - a build the checks cannot even read fails its gate, once
                rule = "content" if isinstance(exc, ContentError) else type(exc).__name__
                message = str(exc)[:500]
                log.warning("gate %s: the checks broke off: %s", gate["id"], message)
                checks = [{"name": "content", "status": "failed", "summary": message, "output": "",
                           "findings": [{"rule": rule, "path": None, "line": None, "message": message}]}]
        finally:
            done.set()
            heartbeat.join()
        return self.finish(gate, checks)

    def _renew(self, gate_id: UUID, done: threading.Event) -> None:
        while not done.wait(LEASE_SECONDS / 3):
            try:
                with self.db.transaction() as conn:
                    conn.execute("""UPDATE promotion_gates SET lease_expires_at = now() + make_interval(secs => %s)
                                     WHERE id = %s AND lease_owner = %s AND status = 'running'""",
                                 (LEASE_SECONDS, gate_id, self.owner))
            except psycopg.Error as exc:
                log.warning("gate %s: lease not renewed (%s)", gate_id, type(exc).__name__)

    def finish(self, gate: dict, checks: list[dict]) -> dict | None:
        failed = [c for c in checks if c["status"] != "passed"]
        reason = None
        if failed:
            reason = "; ".join(f"{c['name']}: {c['summary']}" for c in failed)[:1000]
        with correlation.correlated(gate["correlation_id"]), self.db.transaction() as conn:
            row = conn.execute(
                """UPDATE promotion_gates SET status = %s, checks = %s, reason = %s, finished_at = now(),
                          lease_owner = NULL, lease_expires_at = NULL
                    WHERE id = %s AND lease_owner = %s AND status = 'running' RETURNING *""",
                ("failed" if failed else "passed", Jsonb(checks), reason, gate["id"], self.owner)).fetchone()
            if row is None:
                log.warning("gate %s: lease lost before its end; outcome left to its new owner", gate["id"])
                return None
            artifact = service.get_artifact(conn, gate["artifact_id"], lock=True)
            app = {"slug": artifact["app_slug"], "tenant_id": artifact["app_tenant_id"]}
            payload = {"kind": "staging", "checks": [{k: c.get(k) for k in ("name", "status", "summary")}
                                                     for c in checks],
                       "failing_rules": sorted({f["rule"] for c in failed for f in c["findings"] if f["rule"]})}
            if not failed:
                payload["artifact_status"] = artifact["status"]
                if artifact["status"] == "draft":
                    try:
                        with conn.transaction():
                            service.transition_artifact(conn, smoke.requester(gate), artifact["id"], "staged",
                                                        f"staging gate {gate['id']} passed")
                        payload["artifact_status"] = "staged"
                    except ApiError as exc:  # refused by a rule of the moment: recorded, not retried
                        payload["transition_refused"] = {"code": exc.code, "message": exc.message}
            events.append(conn, app, "gate.failed" if failed else "gate.passed", payload,
                          artifact_id=artifact["id"], gate_id=gate["id"], correlation_id=gate["correlation_id"])
            return row

