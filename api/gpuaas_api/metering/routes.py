# Copyright: gpuaas.apps developers
# Apache License 2.0 (see https://www.apache.org/licenses/LICENSE-2.0)
"""Usage records (docs/metering.md): a project's, page by page with their totals, and a tenant's sums per project
and charged_as; JSON, or CSV with `format=csv` or `Accept: text/csv`. Both need `usage.read` at their scope."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import datetime
from typing import Annotated, Literal
from uuid import UUID

from fastapi import Header, Query
from fastapi.responses import StreamingResponse

from .. import errors
from ..common import decode_cursor, page_of
from ..deps import DB, Caller, CursorParam, LimitParam, router
from ..iam.service import get_project, get_tenant
from . import reports
from .schemas import Dimension, ProjectUsage, TenantUsage

api = router("usage")
PERMISSION = "usage.read"
# Records per query of a CSV answer, which holds the whole window.
CSV_BATCH = 5000
Start = Annotated[datetime, Query(description="the window's start (ISO 8601; UTC unless it has an offset)")]
End = Annotated[datetime, Query(description="the window's end, excluded; at most 366 days after start")]
Format = Annotated[Literal["json", "csv"] | None, Query(alias="format", description="csv: the same as Accept: "
                                                        "text/csv")]
Accept = Annotated[str | None, Header(include_in_schema=False)]


def _csv_wanted(format_: str | None, accept: str | None) -> bool:
    return format_ == "csv" if format_ else "text/csv" in (accept or "")


def _csv(chunks: Iterator[str], name: str) -> StreamingResponse:
    return StreamingResponse(chunks, media_type="text/csv; charset=utf-8",
                             headers={"Content-Disposition": f'attachment; filename="{name}"'})


def _stamp(moment: datetime) -> str:
    return moment.strftime("%Y%m%dT%H%M%SZ")


_CSV_DOC = {"text/csv": {"schema": {"type": "string"}}}


@api.get("/v1/projects/{project_id}/usage", operation_id="usage_project_get", response_model=ProjectUsage,
         responses={200: {"content": _CSV_DOC, "description": "the records, or with format=csv every record of "
                          "the window, one row each under a header row"}} | errors.responses())
def project_usage(project_id: UUID, caller: Caller, db: DB, start: Start, end: End,
                  dimension: Annotated[Dimension | None, Query(description="only records of this dimension")] = None,
                  format_: Format = None, accept: Accept = None, cursor: CursorParam = None, limit: LimitParam = 100):
    """The usage charged to the project in [start, end) (`usage.read`): member hours whose hour starts in the window
    and jobs that ended in it, oldest record first, with the window's totals per dimension. A tenant-shared
    runtime's own part is charged to its owner project with charged_as `tenant_shared_owner`. As CSV (format=csv
    or Accept: text/csv): every record of the window, no pages."""
    start, end = reports.window(start, end)
    as_csv = _csv_wanted(format_, accept)
    with db.transaction() as conn:
        project = get_project(conn, project_id)
        caller.require(PERMISSION, tenant_id=project["tenant_id"], project_id=project_id)
        if as_csv:
            first = reports.records(conn, project_id, start, end, dimension, 0, CSV_BATCH)
        else:
            totals = reports.project_totals(conn, project_id, start, end)
            rows = reports.records(conn, project_id, start, end, dimension, decode_cursor(cursor) or 0, limit + 1)
    if not as_csv:
        items, nxt = page_of(rows, limit)
        return {"project_id": project_id, "start": start, "end": end, "totals": totals, "items": items,
                "next_cursor": nxt}

    def more() -> Iterator[list[dict]]:
        batch = first
        while len(batch) == CSV_BATCH:
            with db.transaction() as conn:
                batch = reports.records(conn, project_id, start, end, dimension, batch[-1]["seq"], CSV_BATCH)
            yield batch

    return _csv(reports.csv_chunks(first, more(), reports.RECORD_COLUMNS),
                f"usage-{project['name']}-{_stamp(start)}-{_stamp(end)}.csv")


@api.get("/v1/tenants/{tenant_id}/usage", operation_id="usage_tenant_get", response_model=TenantUsage,
         responses={200: {"content": _CSV_DOC, "description": "the sums, or with format=csv one row per line"}}
         | errors.responses())
def tenant_usage(tenant_id: UUID, caller: Caller, db: DB, start: Start, end: End, format_: Format = None,
                 accept: Accept = None):
    """The tenant's usage in [start, end) (`usage.read` on the tenant): its totals per dimension, split by
    charged_as (a project's own use, a tenant-shared runtime's own part charged to its owner), and one line per
    project, charged_as and dimension. As CSV: one row per line."""
    start, end = reports.window(start, end)
    with db.transaction() as conn:
        tenant = get_tenant(conn, tenant_id)
        caller.require(PERMISSION, tenant_id=tenant_id)
        usage = reports.tenant_usage(conn, tenant_id, start, end)
    if not _csv_wanted(format_, accept):
        return usage
    rows = [line.model_dump() for line in usage["lines"]]
    return _csv(iter([reports.csv_text(rows, reports.LINE_COLUMNS, header=True)]),
                f"usage-{tenant['name']}-{_stamp(start)}-{_stamp(end)}.csv")
