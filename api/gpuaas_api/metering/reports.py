# Copyright: gpuaas.apps developers
# Apache License 2.0 (see https://www.apache.org/licenses/LICENSE-2.0)
"""Reading usage records: a window's records of a project (keyset pages, or every one for a CSV), their sums per
dimension, a tenant's sums per project and charged_as, and CSV text (the csv module) of rows."""

from __future__ import annotations

import csv
import io
from collections.abc import Iterable, Iterator
from datetime import UTC, datetime, timedelta
from uuid import UUID

import psycopg
from psycopg import sql

from ..errors import ApiError
from .schemas import DIMENSIONS, Totals, UsageLine, UsageRecord

# The longest window a read covers.
MAX_SPAN = timedelta(days=366)
RECORD_COLUMNS = tuple(UsageRecord.model_fields)
LINE_COLUMNS = ("project_id", "project_name", "charged_as", "dimension", *Totals.model_fields)
TOTAL_COLUMNS = tuple(Totals.model_fields)


def window(start: datetime, end: datetime) -> tuple[datetime, datetime]:
    """[start, end) in UTC (a time without an offset is UTC); 422 when empty or longer than MAX_SPAN."""
    try:
        start, end = ((t if t.tzinfo else t.replace(tzinfo=UTC)).astimezone(UTC) for t in (start, end))
    except OverflowError:  # an offset that takes the time out of the years 1-9999
        raise ApiError(422, "validation_error", "start and end must fall within the years 1 to 9999 in UTC",
                       {}) from None
    if start >= end:
        raise ApiError(422, "validation_error", "start must be before end", {"start": start.isoformat(),
                                                                              "end": end.isoformat()})
    if end - start > MAX_SPAN:
        raise ApiError(422, "validation_error", f"a window spans at most {MAX_SPAN.days} days",
                       {"max_days": MAX_SPAN.days})
    return start, end


def records(conn: psycopg.Connection, project_id: UUID, start: datetime, end: datetime, dimension: str | None,
            after: int, limit: int) -> list[dict]:
    """The project's records counted in [start, end) (an hour's start, a job's end), in seq order after `after`."""
    return conn.execute(
        """SELECT * FROM usage_records
            WHERE project_id = %(project)s AND counted_at >= %(start)s AND counted_at < %(end)s
              AND (%(dimension)s::text IS NULL OR dimension = %(dimension)s) AND seq > %(after)s
            ORDER BY seq LIMIT %(limit)s""",
        {"project": project_id, "start": start, "end": end, "dimension": dimension, "after": after,
         "limit": limit}).fetchall()


_SUMS = sql.SQL("""count(*) AS records, count(*) FILTER (WHERE unattributed) AS unattributed_records,
           coalesce(sum(coalesce(seconds, elapsed_seconds)), 0) AS seconds,
           coalesce(sum(core_seconds), 0) AS core_seconds, coalesce(sum(gpu_seconds), 0) AS gpu_seconds,
           coalesce(sum(memory_mb_seconds), 0) AS memory_mb_seconds""")


def _per_dimension(rows: Iterable[dict]) -> dict[str, Totals]:
    """Totals per dimension (every dimension, zero where nothing was recorded) of rows of sums."""
    totals = {d: Totals() for d in DIMENSIONS}
    for row in rows:
        current = totals[row["dimension"]]
        totals[row["dimension"]] = Totals(**{c: getattr(current, c) + row[c] for c in TOTAL_COLUMNS})
    return totals


def project_totals(conn: psycopg.Connection, project_id: UUID, start: datetime, end: datetime) -> dict[str, Totals]:
    return _per_dimension(conn.execute(
        sql.SQL("""SELECT dimension, {} FROM usage_records
                    WHERE project_id = %s AND counted_at >= %s AND counted_at < %s GROUP BY dimension""").format(_SUMS),
        (project_id, start, end)))


def tenant_lines(conn: psycopg.Connection, tenant_id: UUID, start: datetime, end: datetime) -> list[UsageLine]:
    """The tenant's sums per project, charged_as and dimension, by project name."""
    rows = conn.execute(
        sql.SQL("""SELECT u.project_id, p.name AS project_name, u.charged_as, u.dimension, {}
                     FROM usage_records u JOIN projects p ON p.id = u.project_id
                    WHERE u.tenant_id = %s AND u.counted_at >= %s AND u.counted_at < %s
                    GROUP BY u.project_id, p.name, u.charged_as, u.dimension
                    ORDER BY p.name, u.project_id, u.charged_as, u.dimension""").format(_SUMS),
        (tenant_id, start, end)).fetchall()
    return [UsageLine(**row) for row in rows]


def tenant_usage(conn: psycopg.Connection, tenant_id: UUID, start: datetime, end: datetime) -> dict:
    lines = tenant_lines(conn, tenant_id, start, end)
    rows = [line.model_dump() for line in lines]
    return {"tenant_id": tenant_id, "start": start, "end": end, "totals": _per_dimension(rows),
            "by_charged_as": {who: _per_dimension(r for r in rows if r["charged_as"] == who)
                              for who in ("project", "tenant_shared_owner")},
            "lines": lines}


def _cell(value: object) -> object:
    if isinstance(value, datetime):
        return value.astimezone(UTC).isoformat().replace("+00:00", "Z")
    # A spreadsheet runs a cell that starts with one of these as a formula: a runtime's words (a user, a state)
    # come from the tenant's own hosts.
    if isinstance(value, str) and value[:1] in ("=", "+", "-", "@", "\t", "\r"):
        return "'" + value
    return value


def csv_text(rows: Iterable[dict], columns: Iterable[str], *, header: bool) -> str:
    out = io.StringIO()
    writer = csv.writer(out, lineterminator="\n")
    columns = tuple(columns)
    if header:
        writer.writerow(columns)
    writer.writerows([_cell(row.get(c)) for c in columns] for row in rows)
    return out.getvalue()


def csv_chunks(first: list[dict], more: Iterator[list[dict]], columns: Iterable[str]) -> Iterator[str]:
    """The CSV of `first` with its header, then of each batch `more` yields."""
    yield csv_text(first, columns, header=True)
    for batch in more:
        yield csv_text(batch, columns, header=False)
