# Copyright: gpuaas.apps developers
# Apache License 2.0 (see https://www.apache.org/licenses/LICENSE-2.0)
"""`gpuaas usage` (docs/metering.md): its arguments and window, then `gpuaas` run as its own process against the
service over real HTTP (the client CLI tests' world, tests/cli/conftest.py), reading records a metering pass wrote
from a test-app instance's member moves and its toy scheduler's ended jobs (tests/operations/toy_scheduler.py, a
test double of a runtime's gateway)."""

from __future__ import annotations

import csv
import io
import json
from datetime import UTC, datetime, timedelta

import pytest
from gpuaas_api.cli import build_parser
from gpuaas_api.commands import usage
from gpuaas_api.instances.service import set_member_status
from gpuaas_api.metering import service as metering
from gpuaas_api.metering.reports import RECORD_COLUMNS
from gpuaas_api.metering.timeline import floor_hour
from gpuaas_api.secrets import service as secrets
from operations.helpers import instance_secrets, make_instance
from operations.toy_scheduler import ToyScheduler, point_at

from cli import conftest as cli_fixtures
from cli.test_login_and_reads import error_line

app, ops, op_settings, served, cli = (cli_fixtures.app, cli_fixtures.ops, cli_fixtures.op_settings,
                                      cli_fixtures.served, cli_fixtures.cli)
_no_stray_env = cli_fixtures._no_stray_env

SA, MEMBER, TA = "service_account", "project_member", "tenant_admin"
H = floor_hour(datetime.now(UTC)) - timedelta(hours=5)


def parse(*argv: str):
    return build_parser().parse_args(list(argv))


def test_the_window_is_iso_in_utc_and_defaults_to_this_month(capsys):
    args = parse("usage", "--project", "p", "--start", "2026-11-01", "--end", "2026-11-02T08:30:00+01:00")
    assert usage.window(args) == {"start": "2026-11-01T00:00:00+00:00", "end": "2026-11-02T08:30:00+01:00"}
    now = datetime(2026, 11, 25, 10, 7, tzinfo=UTC)
    assert usage.window(parse("usage"), now) == {"start": "2026-11-01T00:00:00+00:00", "end": now.isoformat()}
    assert parse("usage", "--tenant").tenant == "" and parse("usage").tenant is None
    for argv in (["--start", "yesterday"], ["--project", "p", "--tenant"], ["-o", "text"]):
        with pytest.raises(SystemExit):
            parse("usage", *argv)
    assert "is not an ISO date or time" in capsys.readouterr().err


def test_usage_prints_a_projects_records_and_a_tenants_sums(ops, cli):
    instance, _ = make_instance(ops, "metered", workers=1)
    iid = instance["id"]
    ops.sql("UPDATE app_instances SET status = 'running', created_at = %s WHERE id = %s RETURNING id",
            (H - timedelta(hours=1), iid))
    for member in ops.sql("SELECT id FROM app_instance_members WHERE instance_id = %s", (iid,)):
        for status, when in (("joining", H - timedelta(minutes=1)), ("active", H)):
            with ops.database.transaction() as conn:
                set_member_status(conn, member["id"], status)
                conn.execute("UPDATE instance_events SET occurred_at = %s WHERE id = (SELECT max(id) FROM "
                             "instance_events WHERE member_id = %s)", (when, member["id"]))
    with ops.database.transaction() as conn:
        secrets.ensure(conn, ops.settings, iid, {"scheduler_key": {"kind": "token", "size": 32}})
    with ToyScheduler(instance_secrets(ops, iid)["scheduler_key"], iid, nodes=["n1"]) as toy:
        point_at(ops.sql, iid, toy.port)
        jobs = toy.seed_ended_jobs(2, ["project-a1"], ["u1"], int(H.timestamp()), int(H.timestamp()) + 3600,
                                   cpus=2, gpus=1)
        metering.run_pass(ops.database, ops.settings, H + timedelta(hours=2))
    stored = ops.sql("SELECT * FROM usage_records WHERE instance_id = %s ORDER BY seq", (iid,))
    assert len(stored) == 2 * 2 + 2  # two members' two hours, two jobs
    window = ["--start", (H - timedelta(days=1)).date().isoformat(), "--end", (H + timedelta(hours=3)).isoformat()]
    sa = ops.w.tokens[SA]

    done = cli("usage", "--project", "project-a1", *window, token=sa)
    assert done.returncode == 0, done.stderr
    listed, totals = done.stdout.split("\n\n")
    rows = [line.split() for line in listed.splitlines()]
    assert rows[0] == ["DIMENSION", "INSTANCE", "WHAT", "WHEN", "SECONDS", "CORE-S", "GPU-S", "CHARGED", "AS"]
    assert sorted(r[0] for r in rows[1:]) == ["job"] * 2 + ["member_seconds"] * 4
    job_rows = [r for r in rows[1:] if r[0] == "job"]
    assert [r[3] for r in job_rows] == [jobs[0], jobs[1]] and all(r[4] == "project-a1/u1" for r in job_rows)
    live = sum(r["seconds"] for r in stored if r["seconds"] is not None)
    ran = sum(r["elapsed_seconds"] for r in stored if r["elapsed_seconds"] is not None)
    assert live == 2 * (3600 + 3600 - 60)  # both members live from H; the pass at H+2h meters up to a minute before
    assert totals.splitlines()[0].split() == ["TOTAL", "CHARGED", "AS", "RECORDS", "SECONDS", "HOURS", "CORE-S",
                                              "GPU-S", "MEM-MB-S", "UNATTRIBUTED"]
    assert [line.split() for line in totals.splitlines()[1:]] == [
        ["member_seconds", "all", "4", str(live), f"{live / 3600:.2f}", "0", "0", "0", "0"],
        ["job", "all", "2", str(ran), f"{ran / 3600:.2f}", str(ran * 2), str(ran), "0", "0"]]

    as_json = json.loads(cli("usage", "--project", "project-a1", *window, "-o", "json", token=sa).stdout)
    assert [r["id"] for r in as_json["items"]] == [str(r["id"]) for r in stored]
    assert as_json["totals"]["job"]["gpu_seconds"] == sum(r["gpu_seconds"] for r in stored if r["job_id"])
    only_jobs = json.loads(cli("usage", "--project", "project-a1", *window, "--dimension", "job", "-o", "json",
                               token=sa).stdout)
    assert [r["job_id"] for r in only_jobs["items"]] == jobs
    as_csv = cli("usage", "--project", "project-a1", *window, "-o", "csv", token=sa).stdout
    read = list(csv.DictReader(io.StringIO(as_csv)))
    assert tuple(read[0]) == RECORD_COLUMNS and [r["id"] for r in read] == [str(r["id"]) for r in stored]

    tenant = cli("usage", "--tenant", *window, token=ops.w.tokens[TA])
    assert tenant.returncode == 0, tenant.stderr
    lines, sums = tenant.stdout.split("\n\n")
    assert [line.split()[:4] for line in lines.splitlines()[1:]] == [
        ["project-a1", "project", "job", "2"], ["project-a1", "project", "member_seconds", "4"]]
    assert "all" in sums and "tenant_shared_owner" in sums
    tenant_csv = list(csv.DictReader(io.StringIO(cli("usage", "--tenant", *window, "-o", "csv",
                                                     token=ops.w.tokens[TA]).stdout)))
    assert [(r["project_name"], r["dimension"], r["records"]) for r in tenant_csv] == [
        ("project-a1", "job", "2"), ("project-a1", "member_seconds", "4")]

    # Refusals: the envelope in one line, exit 1 (a member of the project holds no usage.read).
    code, _, status, _ = error_line(cli("usage", "--project", "project-a1", *window, token=ops.w.tokens[MEMBER]))
    assert (code, status) == ("forbidden", 403)
    code, message, status, _ = error_line(cli("usage", "--project", "project-a1", "--start", "2026-02-01", "--end",
                                              "2026-01-01", token=sa))
    assert (code, status) == ("validation_error", 422) and "start must be before end" in message
    code, _, status, _ = error_line(cli("usage", "--tenant", *window, "-o", "csv", token=sa))
    assert (code, status) == ("forbidden", 403)
