# Copyright: gpuaas.apps developers
# Apache License 2.0 (see https://www.apache.org/licenses/LICENSE-2.0)
"""The metering pass: for each instance and dimension, the usage from its cursor (metering_cursors.metered_until)
to a moment a little in the past, written as usage records charged by attribution.py, and the cursor moved there in
the same transaction. A pass that dies leaves every instance at its last committed cursor; the next one goes on
from there, and reading a window again rewrites the same rows (upserts by the records' keys), so nothing is missed
or counted twice.

- member_seconds: every hour the window touches is recomputed in full from the members' status moves (timeline.py)
  and upserted; an hour that has no live time any more loses its row.
- job: instances whose app declares a scheduler, running or degraded: their gateway's `GET /v1/usage` (docs/
  scheduler.md), window by window of JOB_CHUNK, each job upserted by (instance, job id, submit time). A gateway
  that fails leaves the cursor after the last window it answered and records why (log line, last_error).

The cursor row is locked FOR UPDATE SKIP LOCKED for the whole of an instance's work, so two workers never meter one
instance at once; the other one passes over it."""

from __future__ import annotations

import logging
import threading
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Annotated
from uuid import UUID

import psycopg
from psycopg import sql
from pydantic import BaseModel, ConfigDict, Field, StringConstraints, TypeAdapter, ValidationError

from ..config import METERING_SETTLE_SECONDS, OperationSettings
from ..db import Database
from ..errors import ApiError
from ..scheduler import gateway
from . import attribution
from .timeline import floor_hour, live_intervals, seconds_per_hour

log = logging.getLogger(__name__)

DIMENSIONS = ("member_seconds", "job")
# How far behind now a pass stops by default (the setting metering_settle_seconds): a status move's time is its
# transaction's start and a job reaches accounting a moment after it ends, so the last seconds may still change.
# Member hours are recomputed from the settle delay before the cursor for the same reason.
SETTLE = timedelta(seconds=METERING_SETTLE_SECONDS)
# Jobs are read again from this far before the cursor on every pass: one that reached the runtime's accounting
# later than the settle delay (a busy slurmdbd) is still recorded, once (records are upserted by their key).
JOB_LOOKBACK = timedelta(hours=1)
# One gateway call reads the jobs that ended in this much time (its answer is not paginated).
JOB_CHUNK = timedelta(hours=4)
# One pass moves one instance's cursor this far at most (the gateway refuses longer windows).
MAX_WINDOW = timedelta(days=31)
# Job records per INSERT.
BATCH = 5000


_WORDS = r"^[^\x00-\x1f\x7f]*$"  # no control characters (PostgreSQL's text holds no NUL)


class GatewayJob(BaseModel):
    """One job allocation of the gateway's usage answer (docs/scheduler.md, GET /v1/usage)."""

    model_config = ConfigDict(extra="ignore")
    # any printable word: a runtime's own ids (Slurm's JobIDRaw) are not the platform's to restrict
    id: Annotated[str, StringConstraints(pattern=r"^[\x21-\x7e]{1,64}$")]
    account: Annotated[str, StringConstraints(max_length=64, pattern=_WORDS)]
    user: Annotated[str, StringConstraints(max_length=64, pattern=_WORDS)] = ""
    state: Annotated[str, StringConstraints(max_length=64, pattern=_WORDS)] = ""
    submit_time: int = Field(ge=0)
    start_time: int | None = Field(default=None, ge=0)
    end_time: int = Field(ge=0)
    elapsed_seconds: int = Field(ge=0)
    cpus: int = Field(default=0, ge=0)
    gpus: int = Field(default=0, ge=0)
    memory_mb: int = Field(default=0, ge=0)
    nodes: int = Field(default=0, ge=0)


_JOBS = TypeAdapter(list[GatewayJob])


@dataclass
class PassResult:
    metered: int = 0  # (instance, dimension) cursors moved
    records: int = 0  # records written, changed or removed
    failed: dict[tuple[UUID, str], str] = field(default_factory=dict)  # (instance, dimension) -> why


def _moment(unix: int | None) -> datetime | None:
    return None if unix is None else datetime.fromtimestamp(unix, UTC)


def run_pass(db: Database, settings: OperationSettings, now: datetime | None = None, *,
             stop: threading.Event | None = None) -> PassResult:
    """One pass over every instance that has usage to meter up to `now` (default: the clock) less the settle
    delay. `stop` ends it between two instances."""
    settle = timedelta(seconds=settings.metering_settle_seconds)
    until = ((now or datetime.now(UTC)) - settle).astimezone(UTC).replace(microsecond=0)
    with db.transaction() as conn:
        conn.execute(_OPEN)
        due = conn.execute(_DUE, {"until": until}).fetchall()
    result = PassResult()
    for row in due:
        if stop is not None and stop.is_set():
            break
        try:
            meter(db, settings, row["instance_id"], row["dimension"], until, result)
        except psycopg.OperationalError:
            raise  # the database is away: the whole pass waits for the next one
        except Exception as exc:  # noqa: BLE001 - one instance's failure must not stop the others' metering
            log.exception("metering: instance %s, %s: failed", row["instance_id"], row["dimension"])
            why = f"internal error ({type(exc).__name__}); see the worker's log"
            result.failed[(row["instance_id"], row["dimension"])] = why
            with db.transaction() as conn:
                conn.execute(_FAILED, {"iid": row["instance_id"], "dimension": row["dimension"], "error": why})
    return result


# Every instance gets a member_seconds cursor, every instance whose app declares a scheduler a job cursor, both from
# the hour the instance was created.
_OPEN = """
INSERT INTO metering_cursors (instance_id, dimension, metered_until)
SELECT i.id, d.dimension, date_trunc('hour', i.created_at AT TIME ZONE 'UTC') AT TIME ZONE 'UTC'
  FROM app_instances i JOIN app_versions v ON v.id = i.app_version_id
 CROSS JOIN (VALUES ('member_seconds'), ('job')) AS d (dimension)
 WHERE (d.dimension = 'member_seconds' OR jsonb_typeof(v.adapter -> 'scheduler') = 'object')
   AND NOT EXISTS (SELECT 1 FROM metering_cursors c WHERE c.instance_id = i.id AND c.dimension = d.dimension)
ON CONFLICT DO NOTHING
"""

# Jobs are read from a running instance's gateway; member time is there to meter until the instance is deleted.
_DUE = """
SELECT c.instance_id, c.dimension FROM metering_cursors c JOIN app_instances i ON i.id = c.instance_id
 WHERE c.metered_until < %(until)s
   AND CASE c.dimension WHEN 'job' THEN i.deleted_at IS NULL AND i.status IN ('running', 'degraded')
                        ELSE i.deleted_at IS NULL OR c.metered_until <= i.deleted_at END
 ORDER BY c.metered_until, c.instance_id, c.dimension
"""

_ADVANCE = """
UPDATE metering_cursors SET metered_until = %(reached)s, last_pass_at = now(), last_error = %(error)s,
       last_error_at = CASE WHEN %(error)s::text IS NULL THEN NULL ELSE now() END
 WHERE instance_id = %(iid)s AND dimension = %(dimension)s
"""

_FAILED = """
UPDATE metering_cursors SET last_pass_at = now(), last_error = %(error)s, last_error_at = now()
 WHERE instance_id = %(iid)s AND dimension = %(dimension)s
"""


def meter(db: Database, settings: OperationSettings, instance_id: UUID, dimension: str, until: datetime,
          result: PassResult) -> None:
    """Meter one instance's dimension up to `until` (at most MAX_WINDOW further), in one transaction; nothing when
    another worker holds its cursor or it is there already."""
    with db.transaction() as conn:
        cursor = conn.execute("""SELECT * FROM metering_cursors WHERE instance_id = %s AND dimension = %s
                                    AND metered_until < %s FOR UPDATE SKIP LOCKED""",
                              (instance_id, dimension, until)).fetchone()
        if cursor is None:
            return
        instance = conn.execute("SELECT * FROM app_instances WHERE id = %s", (instance_id,)).fetchone()
        start = cursor["metered_until"]
        end = min(until, start + MAX_WINDOW)
        if dimension == "member_seconds":
            settle = timedelta(seconds=settings.metering_settle_seconds)
            reached, written, error = end, _meter_members(conn, instance, start, end, settle), None
        else:
            reached, written, error = _meter_jobs(conn, settings, instance, start, end)
        conn.execute(_ADVANCE, {"reached": reached, "error": error, "iid": instance_id, "dimension": dimension})
    result.records += written
    if reached > start:
        result.metered += 1
    if error is not None:
        result.failed[(instance_id, dimension)] = error
        log.warning("metering: instance %s: jobs metered up to %s only: %s", instance_id, reached.isoformat(), error)


# Member time ---------------------------------------------------------------------------------------------------

_MOVES = """
SELECT member_id, occurred_at, payload ->> 'to' AS status FROM instance_events
 WHERE app_instance_id = %s AND member_id IS NOT NULL AND type LIKE 'member\\_%%' AND payload ? 'to'
 ORDER BY id
"""

_UPSERT_HOURS = """
INSERT INTO usage_records (dimension, tenant_id, instance_id, project_id, charged_as, member_id, role, host_name,
                           node_name, bucket_start, seconds)
SELECT 'member_seconds', %(tenant)s, %(iid)s, r.* FROM unnest(%(project_id)s::uuid[], %(charged_as)s::text[],
       %(member_id)s::uuid[], %(role)s::text[], %(host_name)s::text[], %(node_name)s::text[],
       %(bucket_start)s::timestamptz[], %(seconds)s::int[]) AS r
ON CONFLICT (member_id, bucket_start) WHERE dimension = 'member_seconds' DO UPDATE
   SET project_id = EXCLUDED.project_id, charged_as = EXCLUDED.charged_as, seconds = EXCLUDED.seconds,
       updated_at = now()
 WHERE (usage_records.project_id, usage_records.charged_as, usage_records.seconds)
       IS DISTINCT FROM (EXCLUDED.project_id, EXCLUDED.charged_as, EXCLUDED.seconds)
"""

# Hours of the window that no longer have live time (a move committed late took it away).
_DROP_HOURS = """
DELETE FROM usage_records
 WHERE instance_id = %(iid)s AND dimension = 'member_seconds' AND bucket_start >= %(start)s AND bucket_start < %(end)s
   AND (member_id, bucket_start) NOT IN (SELECT * FROM unnest(%(member_id)s::uuid[], %(bucket_start)s::timestamptz[]))
"""


def _meter_members(conn: psycopg.Connection, instance: dict, since: datetime, end: datetime,
                   settle: timedelta) -> int:
    start = floor_hour(since - settle)
    moves: dict[UUID, list[tuple[datetime, str]]] = {}
    for move in conn.execute(_MOVES, (instance["id"],)):
        moves.setdefault(move["member_id"], []).append((move["occurred_at"], move["status"]))
    columns: dict[str, list] = {k: [] for k in ("project_id", "charged_as", "member_id", "role", "host_name",
                                                "node_name", "bucket_start", "seconds")}
    for member in conn.execute("SELECT * FROM app_instance_members WHERE instance_id = %s ORDER BY seq",
                               (instance["id"],)):
        hours = seconds_per_hour(live_intervals(moves.get(member["id"], []), end), start, end)
        charge = attribution.charged_to(instance, member)
        for hour, seconds in hours.items():
            for name, value in (("project_id", charge.project_id), ("charged_as", charge.charged_as),
                                ("member_id", member["id"]), ("role", member["role"]),
                                ("host_name", member["host_name"]), ("node_name", member["node_name"]),
                                ("bucket_start", hour), ("seconds", seconds)):
                columns[name].append(value)
    written = conn.execute(_UPSERT_HOURS, columns | {"tenant": instance["tenant_id"], "iid": instance["id"]}).rowcount
    dropped = conn.execute(_DROP_HOURS, {"iid": instance["id"], "start": start, "end": end,
                                         "member_id": columns["member_id"],
                                         "bucket_start": columns["bucket_start"]}).rowcount
    return written + dropped


# Jobs ----------------------------------------------------------------------------------------------------------

# The job columns a pass writes, with their types, in the order of the unnest below.
_JOB_COLUMNS = (("project_id", "uuid"), ("charged_as", "text"), ("unattributed", "boolean"), ("job_id", "text"),
                ("submit_time", "timestamptz"), ("account", "text"), ("runtime_user", "text"), ("state", "text"),
                ("start_time", "timestamptz"), ("end_time", "timestamptz"), ("elapsed_seconds", "bigint"),
                ("cpus", "integer"), ("gpus", "integer"), ("memory_mb", "bigint"), ("nodes", "integer"),
                ("core_seconds", "bigint"), ("gpu_seconds", "bigint"), ("memory_mb_seconds", "bigint"))
_UPDATED = [c for c, _ in _JOB_COLUMNS if c not in ("job_id", "submit_time")]
_UPSERT_JOBS = sql.SQL("""
INSERT INTO usage_records (dimension, tenant_id, instance_id, {columns})
SELECT 'job', %(tenant)s, %(iid)s, r.* FROM unnest({arrays}) AS r
ON CONFLICT (instance_id, job_id, submit_time) WHERE dimension = 'job' DO UPDATE SET {updates}, updated_at = now()
 WHERE ({current}) IS DISTINCT FROM ({excluded})
""").format(
    columns=sql.SQL(", ").join(sql.Identifier(c) for c, _ in _JOB_COLUMNS),
    arrays=sql.SQL(", ").join(sql.SQL("{}::{}[]").format(sql.Placeholder(c), sql.SQL(t)) for c, t in _JOB_COLUMNS),
    updates=sql.SQL(", ").join(sql.SQL("{0} = EXCLUDED.{0}").format(sql.Identifier(c)) for c in _UPDATED),
    current=sql.SQL(", ").join(sql.SQL("usage_records.{}").format(sql.Identifier(c)) for c in _UPDATED),
    excluded=sql.SQL(", ").join(sql.SQL("EXCLUDED.{}").format(sql.Identifier(c)) for c in _UPDATED))


def _unix(moment: datetime) -> int:
    return int(moment.timestamp())


def _meter_jobs(conn: psycopg.Connection, settings: OperationSettings, instance: dict, start: datetime,
                end: datetime) -> tuple[datetime, int, str | None]:
    """(how far the jobs are metered, records written, why it stopped short or None)."""
    try:
        gw = gateway.for_instance(conn, settings, instance)
    except ApiError as exc:
        return start, 0, f"{exc.code}: {exc.message}"
    projects = attribution.accounts(conn, instance)
    reached, written = start - JOB_LOOKBACK, 0
    while reached < end:
        window_end = min(reached + JOB_CHUNK, end)
        try:
            answer = gw.call("GET", "/v1/usage", {"accounting": True},
                             params={"start": _unix(reached), "end": _unix(window_end)})
            jobs = _JOBS.validate_python(answer.get("items") if isinstance(answer, dict) else None)
        except ApiError as exc:
            return max(reached, start), written, f"{exc.code}: {exc.message}"
        except ValidationError as exc:
            first = exc.errors()[0]
            return max(reached, start), written, (f"the gateway's usage answer does not follow the protocol: "
                                      f"{'.'.join(map(str, first['loc'])) or 'items'}: {first['msg']}")
        # The window's own jobs, once each (a gateway may answer a job twice, or one outside the window).
        keyed = {(j.id, j.submit_time): j for j in jobs if _unix(reached) <= j.end_time < _unix(window_end)}
        records = list(keyed.values())
        for offset in range(0, len(records), BATCH):
            written += _upsert_jobs(conn, instance, projects, records[offset:offset + BATCH])
        reached = window_end
    return reached, written, None


def _upsert_jobs(conn: psycopg.Connection, instance: dict, projects: dict[str, UUID], jobs: list[GatewayJob]) -> int:
    columns: dict[str, list] = {c: [] for c, _ in _JOB_COLUMNS}
    for job in jobs:
        charge = attribution.job_charged_to(instance, job.account, projects)
        row = {"project_id": charge.project_id, "charged_as": charge.charged_as, "unattributed": charge.unattributed,
               "job_id": job.id, "submit_time": _moment(job.submit_time), "account": job.account,
               "runtime_user": job.user, "state": job.state, "start_time": _moment(job.start_time),
               "end_time": _moment(job.end_time), "elapsed_seconds": job.elapsed_seconds, "cpus": job.cpus,
               "gpus": job.gpus, "memory_mb": job.memory_mb, "nodes": job.nodes,
               "core_seconds": job.elapsed_seconds * job.cpus, "gpu_seconds": job.elapsed_seconds * job.gpus,
               "memory_mb_seconds": job.elapsed_seconds * job.memory_mb}
        for name, value in row.items():
            columns[name].append(value)
    return conn.execute(_UPSERT_JOBS, columns | {"tenant": instance["tenant_id"], "iid": instance["id"]}).rowcount
