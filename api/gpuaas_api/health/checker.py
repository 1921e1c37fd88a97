"""The health checker: threads of a worker, apart from its operation slots, that claim due instances
(health/service.py), run each one's status read-back against its hosts and record the verdict; when
no check is due they try the pending host cleanups (health/cleanup.py). A
check is read-only, bounded (health_timeout_seconds, health_connect_timeout_seconds per host) and
leaves nothing behind: its run directory is a scratch directory removed at the end."""

from __future__ import annotations

import logging
import shutil
import threading
import time
import uuid
from pathlib import Path

import psycopg

from .. import correlation
from ..config import OperationSettings
from ..db import Database, retrying
from ..errors import ApiError
from ..executor import plan as planner
from ..executor import runner
from ..executor.content import ContentRefused, run_content
from ..observability import metrics
from . import cleanup, service

log = logging.getLogger(__name__)


class HealthChecker:
    def __init__(self, database: Database, settings: OperationSettings, name: str, stop: threading.Event):
        self.db, self.settings, self.name, self.stop = database, settings, name, stop

    def start(self) -> list[threading.Thread]:
        threads = [threading.Thread(target=self._loop, args=(f"{self.name}/health-{i}",), name=f"health-{i}",
                                    daemon=True) for i in range(self.settings.health_concurrency)]
        for t in threads:
            t.start()
        return threads

    def _loop(self, slot: str) -> None:
        while not self.stop.is_set():
            try:
                # Cleanups wait for checks: a check is due every interval, a cleanup only once its host is back.
                checked = self.check_one(slot) or cleanup.run_one(self.db, self.settings, self.stop)
            except psycopg.OperationalError as exc:
                log.warning("health: database unavailable (%s); retrying", type(exc).__name__)
                checked = False
            except Exception:  # noqa: BLE001 - one instance's check must not end the loop
                log.exception("health check failed; going on")
                checked = False
            if not checked:
                self.stop.wait(min(1.0, self.settings.health_interval_seconds))

    def check_one(self, slot: str) -> bool:
        """Claim one due instance and check it; False when none was due."""
        lease = self.settings.health_timeout_seconds + 30
        for _ in range(3):
            with self.db.transaction() as conn:
                claimed = service.claim(conn, slot, 1, lease)
            # Empty also when another thread locked the same instance a moment before: look again.
            if claimed or not self._due():
                break
        if not claimed:
            return False
        instance = claimed[0]
        cid = f"health-{uuid.uuid4().hex[:16]}"
        token = correlation.use(cid)
        confirm_soon = False
        try:
            confirm_soon = self.check(instance, slot, cid)
        finally:
            correlation._current.reset(token)
            after = self.settings.health_confirm_seconds if confirm_soon else self.settings.health_interval_seconds
            retrying(self.db, "health: release", lambda conn: service.release(conn, instance["id"], slot, after),
                     self.stop)
        return True

    def _due(self) -> bool:
        with self.db.transaction() as conn:
            return service.any_due(conn)

    def check(self, instance: dict, slot: str, cid: str) -> bool:
        """Run and record one check; True when a failure it read waits for a second read."""
        started = time.monotonic()
        try:
            with self.db.transaction() as conn:
                plan = planner.status_plan(conn, self.settings, instance)
            collections_path = run_content(self.settings, self.db, plan)
        except (ApiError, ContentRefused) as exc:
            log.info("health: instance %s cannot be checked: %s", instance["id"], exc)
            metrics.health_checked("skipped", time.monotonic() - started)
            return False
        if not plan.checked_hosts:
            metrics.health_checked("skipped", time.monotonic() - started)
            return False
        deadline = started + self.settings.health_timeout_seconds
        run_dir = Path(runner.scratch_dir("health"))
        op = {"id": f"health-{instance['id']}", "attempt": 1, "correlation_id": cid, "kind": "health"}
        try:
            result = runner.run(self.settings, op, plan, collections_path, on_event=lambda *_: None,
                                should_stop=lambda: "canceled" if self.stop.is_set() else (
                                    "timeout" if time.monotonic() > deadline else None),
                                run_dir=run_dir, connect_timeout=self.settings.health_connect_timeout_seconds)
        finally:
            shutil.rmtree(run_dir, ignore_errors=True)
        verdict = planner.read_back(plan, result)
        checked = {"module": plan.module, "hosts": len(plan.checked_hosts), "members": len(verdict.members),
                   "seconds": round(time.monotonic() - started, 2)}
        confirm_soon = retrying(self.db, f"health: instance {instance['id']}", lambda conn: service.record(
            conn, instance, verdict, checked=checked, correlation_id=cid), self.stop)
        failed = sum(v.observed == "failed" for v in verdict.members.values())
        seconds = time.monotonic() - started
        metrics.health_checked("down" if not verdict.control_plane else "degraded" if failed else "healthy", seconds)
        log.info("health: instance %s checked in %.1f s: control plane %s, %d member(s) failed", instance["id"],
                 seconds, "answers" if verdict.control_plane else "does not answer", failed)
        return confirm_soon
