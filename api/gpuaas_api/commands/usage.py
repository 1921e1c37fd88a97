# Copyright: gpuaas.apps developers
# Apache License 2.0 (see https://www.apache.org/licenses/LICENSE-2.0)
"""`gpuaas usage`: the usage records charged to a project (member hours, jobs), or a tenant's sums per project and
charged_as (docs/metering.md), over a window; a table, JSON, or the service's own CSV."""

from __future__ import annotations

import argparse
import sys
from datetime import UTC, datetime

from ..client.cli import command, project_ref

DIMENSIONS = ("member_seconds", "job")


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("usage", help="usage records charged to a project, or a tenant's sums (member hours, jobs)")
    scope = p.add_mutually_exclusive_group()
    scope.add_argument("--project", metavar="ID|NAME", help="the project (default: GPUAAS_PROJECT, the project stored "
                                                            "by `gpuaas login --project`)")
    scope.add_argument("--tenant", metavar="ID", nargs="?", const="", help="the tenant's sums per project and "
                                                                           "charged_as (default: your token's tenant)")
    p.add_argument("--start", type=moment, metavar="WHEN", help="the window's start: an ISO date or time, UTC unless "
                                                                "it has an offset (default: the 1st of this month)")
    p.add_argument("--end", type=moment, metavar="WHEN", help="the window's end, excluded (default: now)")
    p.add_argument("--dimension", choices=DIMENSIONS, help="only member hours or only jobs (a project's records)")
    p.add_argument("-o", "--output", choices=("table", "json", "yaml", "csv"), default="table",
                   help="table for people (default), json, yaml or csv for scripts and spreadsheets")
    p.set_defaults(func=show_usage)


def moment(value: str) -> datetime:
    """argparse type: an ISO 8601 date or date and time; UTC unless it carries an offset."""
    try:
        parsed = datetime.fromisoformat(value)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{value!r} is not an ISO date or time (2026-11-01, 2026-11-01T08:00, "
                                         "2026-11-01T08:00:00+01:00)") from None
    return parsed if parsed.tzinfo else parsed.replace(tzinfo=UTC)


def window(args: argparse.Namespace, now: datetime | None = None) -> dict[str, str]:
    """The query's start and end: those given, else this month (UTC) up to now."""
    now = now or datetime.now(UTC)
    start = args.start or now.replace(day=1, hour=0, minute=0, second=0, microsecond=0)
    return {"start": start.isoformat(), "end": (args.end or now).isoformat()}


def _csv(client, path: str, params: dict) -> str:
    """The service's CSV of a usage route (its JSON errors become the usual one line)."""
    from ..client.http import api_error

    response = client.http.get(path, params=params | {"format": "csv"}, headers={"Accept": "text/csv"})
    if response.status_code >= 400:
        raise api_error(response)
    return response.text


def project_records(client, path: str, params: dict) -> dict:
    """Every page of a project's usage: {"totals", "items"}."""
    items, cursor = [], None
    while True:
        page = client.get(path, **params, limit=500, cursor=cursor)
        items += page["items"]
        cursor = page.get("next_cursor")
        if not cursor:
            return {"project_id": page["project_id"], "start": page["start"], "end": page["end"],
                    "totals": page["totals"], "items": items}


def _what(record: dict) -> str:
    if record["dimension"] == "member_seconds":
        return f"{record['role']} {record['node_name']}"
    return f"job {record['job_id']} {record['account']}/{record['runtime_user']}"


def records_table(usage: dict) -> str:
    from ..client.render import short_id, table, when

    rows = [[r["dimension"], short_id(r["instance_id"]), _what(r), when(r["bucket_start"] or r["end_time"]),
             r["seconds"] if r["dimension"] == "member_seconds" else r["elapsed_seconds"], r["core_seconds"],
             r["gpu_seconds"], r["charged_as"] + (" unattributed" if r["unattributed"] else "")]
            for r in usage["items"]]
    listed = table(["DIMENSION", "INSTANCE", "WHAT", "WHEN", "SECONDS", "CORE-S", "GPU-S", "CHARGED AS"], rows)
    return listed + "\n\n" + totals_table([(d, "all", t) for d, t in usage["totals"].items()])


def totals_table(lines: list[tuple[str, str, dict]]) -> str:
    """(dimension, who, totals) lines as a table."""
    from ..client.render import table

    return table(["TOTAL", "CHARGED AS", "RECORDS", "SECONDS", "HOURS", "CORE-S", "GPU-S", "MEM-MB-S",
                  "UNATTRIBUTED"],
                 [[d, who, t["records"], t["seconds"], f"{t['seconds'] / 3600:.2f}", t["core_seconds"],
                   t["gpu_seconds"], t["memory_mb_seconds"], t["unattributed_records"]] for d, who, t in lines])


def tenant_table(usage: dict) -> str:
    from ..client.render import table

    listed = table(["PROJECT", "CHARGED AS", "DIMENSION", "RECORDS", "SECONDS", "CORE-S", "GPU-S", "MEM-MB-S",
                    "UNATTRIBUTED"],
                   [[x["project_name"], x["charged_as"], x["dimension"], x["records"], x["seconds"],
                     x["core_seconds"], x["gpu_seconds"], x["memory_mb_seconds"], x["unattributed_records"]]
                    for x in usage["lines"]])
    sums = [(d, who, t) for who, per in usage["by_charged_as"].items() for d, t in per.items()]
    sums += [(d, "all", t) for d, t in usage["totals"].items()]
    return listed + "\n\n" + totals_table(sums)


@command("usage_project_get", "usage_tenant_get")
def show_usage(args, client) -> int:
    from ..client import lookup
    from ..client.errors import ClientError
    from ..client.render import dump

    params = window(args)
    if args.tenant is not None:
        if args.dimension:
            raise ClientError("--dimension is for a project's records; a tenant's sums hold every dimension")
        tenant = args.tenant or client.get("/v1/me")["tenant_id"]
        path = f"/v1/tenants/{tenant}/usage"
    else:
        ref = project_ref(args)
        if not ref:
            raise ClientError("which project? pass --project (or --tenant for the tenant's sums)")
        path = f"/v1/projects/{lookup.project(client, ref)['id']}/usage"
        if args.dimension:
            params["dimension"] = args.dimension
    if args.output == "csv":
        sys.stdout.write(_csv(client, path, params))
        return 0
    usage = client.get(path, **params) if args.tenant is not None else project_records(client, path, params)
    if args.output in ("json", "yaml"):
        dump(usage, fmt=args.output)
    else:
        print(tenant_table(usage) if args.tenant is not None else records_table(usage))
    return 0
