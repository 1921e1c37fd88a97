"""Cleanup of hosts a forced removal left behind: a member removed while its host was unreachable
(host_cleanups, written by operations.truth's forced_cleanup effect) still has what the app installed
on that host. The health checker tries each pending cleanup in turn: it runs the app version's cleanup
playbook (catalog/adapter.AdapterSpec.cleanup) on that host, the instance's live members also in the inventory
and the host named in the members target variable; an unreachable host
is tried again later, with a growing pause; success marks the cleanup done, with an event on the
instance's timeline. Until then no new member is placed on the host (allocations.busy_hosts)."""

from __future__ import annotations

import logging
import shutil
import time
from pathlib import Path

import psycopg

from ..audit import service as audit
from ..catalog.adapter import stored_spec
from ..catalog.service import get_version_by_id
from ..config import OperationSettings
from ..db import Database, retrying
from ..errors import ApiError
from ..executor import plan as planner
from ..executor import runner
from ..executor.content import ContentRefused, run_content
from ..instances import inventory
from ..instances import service as instances

log = logging.getLogger(__name__)
MAX_PAUSE_SECONDS = 600


def claim(conn: psycopg.Connection, lease_seconds: float) -> dict | None:
    return conn.execute(
        """UPDATE host_cleanups SET lease_until = now() + make_interval(secs => %s), attempts = attempts + 1
            WHERE id = (SELECT id FROM host_cleanups WHERE status = 'pending' AND next_try_at <= now()
                          AND (lease_until IS NULL OR lease_until < now())
                        ORDER BY next_try_at LIMIT 1 FOR UPDATE SKIP LOCKED)
        RETURNING *""", (lease_seconds,)).fetchone()


def finish(conn: psycopg.Connection, cleanup: dict, error: str | None, interval_seconds: float) -> None:
    instance = instances.get_instance(conn, cleanup["instance_id"], include_deleted=True)
    if error is None:
        conn.execute("UPDATE host_cleanups SET status = 'done', done_at = now(), lease_until = NULL, last_error = NULL "
                     "WHERE id = %s", (cleanup["id"],))
        audit.append_event(conn, instance, "host_cleaned", {"member_id": str(cleanup["member_id"]),
                           "node_name": cleanup["node_name"], "host_name": cleanup["host_name"],
                           "attempts": cleanup["attempts"]}, member_id=cleanup["member_id"],
                           correlation_id=cleanup["correlation_id"])
        return
    pause = min(MAX_PAUSE_SECONDS, interval_seconds * cleanup["attempts"])
    conn.execute("""UPDATE host_cleanups SET lease_until = NULL, last_error = %s,
                        next_try_at = now() + make_interval(secs => %s) WHERE id = %s""",
                 (error[:1000], pause, cleanup["id"]))


def plan_for(conn: psycopg.Connection, settings: OperationSettings, cleanup: dict) -> planner.RunPlan:
    version = get_version_by_id(conn, cleanup["app_version_id"])
    spec = stored_spec(version)
    if spec.cleanup is None or spec.targets.members is None:
        raise ApiError(409, "no_cleanup_playbook", "the app version's adapter names no cleanup playbook")
    member = conn.execute(instances.MEMBER_SELECT + " WHERE m.id = %s", (cleanup["member_id"],)).fetchone()
    # The instance's live members come along (none once it is gone): an app whose returning host registered
    # itself again (an RKE2 node) forgets it from one of them. The cleanup variable names the host to clean.
    # A live member that took the cleaned node's name since (another host, the same host name) stays out: the
    # inventory holds one host per node name.
    live = [m for m in planner.live_members(conn, cleanup["instance_id"]) if m["node_name"] != member["node_name"]]
    built = inventory.build(spec, str(cleanup["instance_id"]), [member, *live])
    built["all"]["vars"] = {}
    if settings.ssh_private_key_file:
        built["all"]["vars"]["ansible_ssh_private_key_file"] = str(settings.ssh_private_key_file)
    return planner.RunPlan(kind="cleanup", inventory=built, extravars={spec.targets.members: cleanup["node_name"]},
                           secret_vars={}, playbook=spec.cleanup, site_vars=planner.site_vars_for(settings, spec),
                           content_digest=version["artifact_digest"] if version["artifact_kind"] == "collection"
                           else None)


def run_one(db: Database, settings: OperationSettings, stop) -> bool:
    """Try the next due cleanup; False when none was due."""
    timeout = settings.timeouts.get("member_remove", 1800)
    with db.transaction() as conn:
        cleanup = claim(conn, timeout + 60)
    if cleanup is None:
        return False
    error = None
    try:
        with db.transaction() as conn:
            plan = plan_for(conn, settings, cleanup)
        error = _run(db, settings, cleanup, plan, timeout, stop)
    except (ApiError, ContentRefused) as exc:
        error = str(exc)
    log.info("cleanup of %s (member %s): %s", cleanup["node_name"], cleanup["member_id"], error or "done")
    retrying(db, "cleanup: record", lambda conn: finish(conn, cleanup, error, settings.health_interval_seconds), stop)
    return True


def _run(db: Database, settings: OperationSettings, cleanup: dict, plan: planner.RunPlan, timeout: float,
         stop) -> str | None:
    deadline = time.monotonic() + timeout
    run_dir = Path(runner.scratch_dir("health"))
    op = {"id": f"cleanup-{cleanup['id']}", "attempt": cleanup["attempts"], "correlation_id": cleanup["correlation_id"],
          "kind": "cleanup"}
    try:
        result = runner.run(settings, op, plan, run_content(settings, db, plan), on_event=lambda *_: None,
                            should_stop=lambda: "canceled" if stop.is_set() else (
                                "timeout" if time.monotonic() > deadline else None),
                            run_dir=run_dir, connect_timeout=settings.health_connect_timeout_seconds)
    finally:
        shutil.rmtree(run_dir, ignore_errors=True)
    if result.status == "successful":
        return None
    failure = result.failure or {}
    return f"{failure.get('task') or result.status}: {failure.get('message') or f'rc={result.rc}'}"

