# Copyright: gpuaas.apps developers
# Apache License 2.0 (see https://www.apache.org/licenses/LICENSE-2.0)
"""Usage metering (docs/metering.md) on real PostgreSQL: member hours from the members' status moves on the
timeline, jobs from the scheduler gateway's usage read (the toy scheduler, toy_scheduler.py, a test double of a
runtime's gateway, on loopback), who is charged (metering/attribution.py), the pass's cursors (idempotent, resumable,
a failing gateway recorded), and the usage routes (JSON pages and totals, CSV, the tenant's breakdown).

One world for the module: the API tests' world (tenants, projects, the Slurm app) with a project-scope instance P of
project A1, and a tenant-shared runtime S owned by A1, A2 attached and contributing a worker. Status moves are made by
the service (instances.service.set_member_status, as runs make them) and their times set afterwards, so the hours
are known; every pass runs at a given `now`."""

from __future__ import annotations

import csv
import io
import logging
import socket
import threading
from dataclasses import dataclass, replace
from datetime import UTC, datetime, timedelta
from pathlib import Path
from uuid import UUID

import pytest
from api.conftest import fresh_database
from api.world import World, build_world, publish_app, register_allocation
from cryptography.fernet import Fernet
from fastapi.testclient import TestClient
from gpuaas_api import db as dbmod
from gpuaas_api.app import create_app
from gpuaas_api.catalog.adapter import stored_spec
from gpuaas_api.catalog.service import get_version_by_id
from gpuaas_api.config import OperationSettings
from gpuaas_api.executor.worker import Worker
from gpuaas_api.instances.service import set_member_status
from gpuaas_api.metering import service
from gpuaas_api.metering.attribution import Charge, charged_to, job_charged_to
from gpuaas_api.metering.loop import Metering
from gpuaas_api.metering.timeline import floor_hour
from gpuaas_api.secrets import service as secrets

from .helpers import wait_for
from .toy_scheduler import ToyScheduler, point_at

TA, PADM, PM, SA = "tenant_admin", "project_admin", "project_member", "service_account"
# Every hour below is counted from H, a whole hour in the past; passes run at H + 3 h unless a test says otherwise.
H = floor_hour(datetime.now(UTC)) - timedelta(hours=8)
NOW = H + timedelta(hours=3)
UNTIL = NOW - service.SETTLE  # how far a pass at NOW meters
MIN = timedelta(minutes=1)
HOUR = timedelta(hours=1)


@dataclass
class Metered:
    w: World
    database: dbmod.Database
    settings: OperationSettings
    p: dict  # the project-scope instance: {"id", "members": {name: member row}, "toy"}
    s: dict  # the tenant-shared runtime

    @property
    def ids(self):
        return self.w.ids

    def sql(self, query: str, params=()) -> list[dict]:
        with self.database.transaction() as conn:
            cur = conn.execute(query, params)
            return cur.fetchall() if cur.description else []

    def records(self, instance: dict, dimension: str) -> list[dict]:
        return self.sql("""SELECT * FROM usage_records WHERE instance_id = %s AND dimension = %s
                            ORDER BY member_id, bucket_start, job_id, submit_time""", (instance["id"], dimension))

    def cursor(self, instance: dict, dimension: str) -> dict:
        return self.sql("SELECT * FROM metering_cursors WHERE instance_id = %s AND dimension = %s",
                        (instance["id"], dimension))[0]

    def run(self, now: datetime = NOW) -> service.PassResult:
        return service.run_pass(self.database, self.settings, now)


def reset(m: Metered) -> None:
    """No records and no cursors: the next pass meters everything from each instance's creation again."""
    m.sql("DELETE FROM usage_records")
    m.sql("DELETE FROM metering_cursors")


def moves(m: Metered, member_id, *steps: tuple[str, datetime]) -> None:
    """Move a member through `steps` (status, when) as the service does, then date each move's event."""
    for status, when in steps:
        with m.database.transaction() as conn:
            set_member_status(conn, member_id, status, reason="metering test")
            conn.execute("""UPDATE instance_events SET occurred_at = %s
                             WHERE id = (SELECT max(id) FROM instance_events WHERE member_id = %s)""",
                         (when, member_id))


def served_by_toy(m: Metered, instance_id: str) -> ToyScheduler:
    """The instance running, its scheduler the toy (signed with the instance's own key)."""
    m.sql("UPDATE app_instances SET status = 'running', created_at = %s WHERE id = %s", (H - timedelta(hours=2),
                                                                                         instance_id))
    with m.database.transaction() as conn:
        instance = conn.execute("SELECT * FROM app_instances WHERE id = %s", (instance_id,)).fetchone()
        spec = stored_spec(get_version_by_id(conn, instance["app_version_id"]))
        secrets.ensure(conn, m.settings, instance_id, {spec.scheduler.key: {"kind": "token", "size": 32}})
        key = secrets.load(conn, m.settings, instance_id)[spec.scheduler.key]
    toy = ToyScheduler(key, str(instance_id), nodes=["n1"]).__enter__()
    point_at(lambda q, p: m.sql(q, p), instance_id, toy.port)
    return toy


def members_by_role(m: Metered, instance_id) -> dict[str, list[dict]]:
    rows = m.sql("SELECT * FROM app_instance_members WHERE instance_id = %s ORDER BY seq", (instance_id,))
    out: dict[str, list[dict]] = {}
    for row in rows:
        out.setdefault(row["role"], []).append(row)
    return out


def unix(moment: datetime) -> int:
    return int(moment.timestamp())


@pytest.fixture(scope="module")
def m(pg_uri, tmp_path_factory):
    with fresh_database(pg_uri) as url:
        database = dbmod.Database(url, min_size=1, max_size=4)
        database.open()
        settings = OperationSettings(state_dir=Path(tmp_path_factory.mktemp("state")), ssh_private_key_file=None,
                                     secret_key=Fernet.generate_key().decode(), max_open_operations_per_project=0)
        app = create_app(database)
        app.state.operation_settings = settings
        toys = []
        try:
            with TestClient(app, raise_server_exceptions=False) as client:
                w = build_world(client, database)
                m = Metered(w, database, settings, {"id": w.ids["instance_a1"]}, {})
                # P: project A1's own instance (Slurm 1.0.0): a controller live from H, a worker that joined at
                # H+15m and left at H+45m, a worker never live.
                p = members_by_role(m, m.p["id"])
                m.p["members"] = {"controller": p["controller"][0], "brief": p["worker"][0], "idle": p["worker"][1]}
                moves(m, p["controller"][0]["id"], ("joining", H - 5 * MIN), ("active", H))
                moves(m, p["worker"][0]["id"], ("joining", H + 10 * MIN), ("active", H + 15 * MIN),
                      ("removing", H + 45 * MIN), ("removed", H + 50 * MIN))
                m.p["toy"] = served_by_toy(m, m.p["id"])
                toys.append(m.p["toy"])
                # Its jobs: two of its own account, two of an account no project has.
                m.p["toy"].seed_ended_jobs(4, ["project-a1", "stranger"], ["u1"], unix(H), unix(H + 2 * HOUR),
                                           cpus=2)

                # S: a tenant-shared runtime owned by A1 (Slurm 1.1.0: a scheduler port of its own), A2 attached;
                # its controller and worker live from H, A2's contributed worker from H+30m.
                publish_app(w, version="1.1.0")
                register_allocation(w, "project_a1", "alloc-shared", hosts=2)
                shared_alloc = w.call(TA, "GET", f"/v1/projects/{w.ids['project_a1']}/allocations", 200).json()
                alloc = next(a for a in shared_alloc["items"] if a["name"] == "alloc-shared")
                s = w.call(TA, "POST", f"/v1/projects/{w.ids['project_a1']}/instances", 201, json={
                    "name": "shared", "app_slug": "slurm", "version": "1.1.0", "allocation_ids": [alloc["id"]],
                    "topology": [{"role": "controller", "count": 1}, {"role": "worker", "count": 1}],
                    "control_plane_scope": "tenant", "attachable_project_ids": [w.ids["project_a2"]]}).json()
                m.s["id"] = s["id"]
                w.call(TA, "POST", f"/v1/instances/{s['id']}/attachments", 201,
                       json={"project_id": w.ids["project_a2"], "reason": "metering tests"})
                (contributed,) = m.sql(
                    """INSERT INTO app_instance_members (instance_id, role, allocation_id, host_name, node_name,
                                                         source_project_id)
                       VALUES (%s, 'worker', %s, 'alloc-a2-h0', 'a2-worker', %s) RETURNING *""",
                    (s["id"], w.ids["alloc_a2"], w.ids["project_a2"]))
                sm = members_by_role(m, s["id"])
                m.s["members"] = {"controller": sm["controller"][0], "owned": sm["worker"][0],
                                  "contributed": contributed}
                moves(m, sm["controller"][0]["id"], ("joining", H - MIN), ("active", H))
                moves(m, sm["worker"][0]["id"], ("joining", H - MIN), ("active", H))
                moves(m, contributed["id"], ("joining", H + 29 * MIN), ("active", H + 30 * MIN))
                m.s["toy"] = served_by_toy(m, s["id"])
                toys.append(m.s["toy"])
                # Its jobs, one every 20 minutes from H: the owner's account, A2's, and one no project has; then one
                # that ends after a pass at NOW meters; then, as after Slurm lost its state, two that reuse ids.
                toy = m.s["toy"]
                m.s["jobs"] = toy.seed_ended_jobs(9, ["project-a1", "project-a2", "stranger"], ["u1", "u2"], unix(H),
                                                  unix(H + 3 * HOUR), cpus=4, gpus=2, memory_mb=1000)
                m.s["late"] = toy.seed_ended_jobs(1, ["project-a2"], ["u2"], unix(UNTIL) + 10, unix(UNTIL) + 20)
                toy._next_id = 1000  # noqa: SLF001 - the toy's job counter, as a restarted slurmctld's
                m.s["reused"] = toy.seed_ended_jobs(2, ["project-a2"], ["u2"], unix(H + HOUR), unix(H + 90 * MIN))
                yield m
        finally:
            for toy in toys:
                toy.__exit__()
            database.close()


def test_the_attribution_rule():
    own, other = "own-project", "other-project"
    project, shared = ({"id": "i", "project_id": own, "control_plane_scope": scope} for scope in ("project", "tenant"))
    assert charged_to(project, {"role": "controller", "source_project_id": None}) == Charge(own, "project")
    assert charged_to(shared, {"role": "controller", "source_project_id": None}) == Charge(own, "tenant_shared_owner")
    assert charged_to(shared, {"role": "worker"}) == Charge(own, "tenant_shared_owner")  # a planned member
    assert charged_to(shared, {"role": "worker", "source_project_id": own}) == Charge(own, "tenant_shared_owner")
    assert charged_to(shared, {"role": "worker", "source_project_id": other}) == Charge(other, "project")
    accounts = {"own": own, "other": other}
    assert job_charged_to(shared, "other", accounts) == Charge(other, "project")
    assert job_charged_to(shared, "own", accounts) == Charge(own, "project")  # the owner's own jobs are its own
    assert job_charged_to(shared, "x", accounts) == Charge(own, "tenant_shared_owner", unattributed=True)
    assert job_charged_to(project, "x", {"own": own}) == Charge(own, "project", unattributed=True)


def test_member_hours_count_live_seconds_per_hour_up_to_the_metered_point(m):
    reset(m)
    m.run()
    hours = {(r["member_id"], r["bucket_start"]): r for r in m.records(m.p, "member_seconds")}
    controller, brief, idle = (m.p["members"][k]["id"] for k in ("controller", "brief", "idle"))
    # The worker joined (active) at H+15m and left (removing) at H+45m: 30 minutes, in hour H alone.
    assert {k: r["seconds"] for k, r in hours.items() if k[0] == brief} == {(brief, H): 1800}
    assert not any(k[0] == idle for k in hours)  # never live: no record
    # The controller, live since H: whole hours, and the current one up to the metered point.
    assert {k[1]: r["seconds"] for k, r in hours.items() if k[0] == controller} == {
        H: 3600, H + timedelta(hours=1): 3600, H + timedelta(hours=2): int((UNTIL - H).total_seconds()) - 7200}
    row = hours[(brief, H)]
    assert (str(row["project_id"]), row["charged_as"], row["role"], row["host_name"], row["node_name"]) == (
        m.ids["project_a1"], "project", "worker", m.p["members"]["brief"]["host_name"],
        m.p["members"]["brief"]["node_name"])
    assert m.cursor(m.p, "member_seconds")["metered_until"] == UNTIL

    # The next pass recomputes the open hour in full and moves on: the same rows, the last one grown.
    later = NOW + timedelta(minutes=30)
    m.run(later)
    grown = {(r["member_id"], r["bucket_start"]): r for r in m.records(m.p, "member_seconds")}
    assert grown[(controller, H + timedelta(hours=2))]["seconds"] == 3600
    assert grown[(controller, H + timedelta(hours=3))]["seconds"] == 29 * 60
    assert grown[(controller, H)]["id"] == hours[(controller, H)]["id"]
    assert len([k for k in grown if k[0] == controller]) == 4


def snapshot(m: Metered, *, keys_only: bool = False) -> list[tuple]:
    """Every record (and with keys_only, without its id, sequence and write times: what it says, not which row)."""
    rows = m.sql("SELECT * FROM usage_records ORDER BY dimension, instance_id, member_id, bucket_start, job_id, "
                 "submit_time")
    skip = {"id", "seq", "recorded_at", "updated_at"} if keys_only else set()
    return [tuple(v for k, v in row.items() if k not in skip) for row in rows]


def test_the_owner_and_the_projects_split_a_shared_runtime(m):
    reset(m)
    m.run()
    a1, a2 = m.ids["project_a1"], m.ids["project_a2"]
    hours: dict[str, dict] = {}
    for r in m.records(m.s, "member_seconds"):
        hours.setdefault(str(r["member_id"]), {})[r["bucket_start"]] = (str(r["project_id"]), r["charged_as"],
                                                                        r["seconds"])
    last = int((UNTIL - H).total_seconds()) - 7200
    for name in ("controller", "owned"):  # the runtime's own part: its owner's record, flagged
        assert hours[str(m.s["members"][name]["id"])] == {
            H: (a1, "tenant_shared_owner", 3600), H + HOUR: (a1, "tenant_shared_owner", 3600),
            H + 2 * HOUR: (a1, "tenant_shared_owner", last)}
    assert hours[str(m.s["members"]["contributed"]["id"])] == {  # A2's worker: A2's, from H+30m
        H: (a2, "project", 1800), H + HOUR: (a2, "project", 3600), H + 2 * HOUR: (a2, "project", last)}

    jobs = m.records(m.s, "job")
    assert sorted(r["job_id"] for r in jobs) == sorted(m.s["jobs"] + m.s["reused"])  # not the late one, yet
    assert len({(r["job_id"], r["submit_time"]) for r in jobs}) == 11  # a reused id is another job
    charges = {"project-a1": (a1, "project", False), "project-a2": (a2, "project", False),
               "stranger": (a1, "tenant_shared_owner", True)}
    for r in jobs:
        assert (str(r["project_id"]), r["charged_as"], r["unattributed"]) == charges[r["account"]], r
        assert r["end_time"] - r["start_time"] == timedelta(seconds=r["elapsed_seconds"])
        assert (r["core_seconds"], r["gpu_seconds"], r["memory_mb_seconds"]) == (
            r["elapsed_seconds"] * r["cpus"], r["elapsed_seconds"] * r["gpus"], r["elapsed_seconds"] * r["memory_mb"])
    assert {r["cpus"] for r in jobs if r["job_id"] in m.s["jobs"][2:]} == {4}
    # A project-scope instance: a job of an unknown account is its project's, flagged unattributed.
    p_jobs = m.records(m.p, "job")
    assert sorted((r["account"], str(r["project_id"]), r["charged_as"], r["unattributed"]) for r in p_jobs) == [
        ("project-a1", a1, "project", False)] * 2 + [("stranger", a1, "project", True)] * 2

    # The gateway was asked as the platform's accounting reader, window after window of at most JOB_CHUNK, from the
    # hour S was created to the metered point, with no gap.
    usage = [(path, claims) for method, path, claims in m.s["toy"].requests if path == "/v1/usage"]
    assert usage and all(c.get("accounting") is True and "sub" not in c for _, c in usage)
    # A2 leaves; the job it ran before is still its own, and so is the one that ended just before it left.
    m.w.call(TA, "POST", f"/v1/instances/{m.s['id']}/attachments/{a2}/detach", 200, json={"reason": "done"})
    m.run(NOW + 10 * MIN)
    (late,) = [r for r in m.records(m.s, "job") if r["job_id"] == m.s["late"][0]]
    assert (str(late["project_id"]), late["charged_as"]) == (a2, "project")


def test_the_gateway_is_read_in_contiguous_windows_of_at_most_a_chunk(m, monkeypatch):
    reset(m)
    windows = []
    call = service.gateway.Gateway.call

    def recorded(gw, method, path, claims, **kwargs):
        if gw.instance_id == str(m.s["id"]):
            windows.append((kwargs["params"]["start"], kwargs["params"]["end"]))
        return call(gw, method, path, claims, **kwargs)

    monkeypatch.setattr(service.gateway.Gateway, "call", recorded)
    m.run()
    # from the cursor, less the hour read again for jobs that reached the accounting late
    assert windows[0][0] == unix(H - 2 * HOUR - service.JOB_LOOKBACK) and windows[-1][1] == unix(UNTIL)
    assert all(a[1] == b[0] for a, b in zip(windows, windows[1:], strict=False))
    assert all(0 < end - start <= service.JOB_CHUNK.total_seconds() for start, end in windows)
    assert len(windows) == 2


def test_passes_are_idempotent_whatever_window_they_read_again(m):
    reset(m)
    m.run()
    first = snapshot(m)
    assert first and m.run().records == 0 and snapshot(m) == first  # nothing due
    for rewound in (H - 2 * HOUR, H + 90 * MIN, UNTIL - MIN):
        m.sql("UPDATE metering_cursors SET metered_until = %s", (rewound,))
        result = m.run()
        assert result.metered > 0 and result.records == 0, rewound  # every row read again, none written
        assert snapshot(m) == first, rewound  # the same rows, not even rewritten


class Killed(BaseException):
    """The worker dying mid-pass (not an error a pass catches)."""


def test_a_pass_killed_halfway_resumes_without_gaps(m, monkeypatch):
    reset(m)
    m.run()
    whole = snapshot(m, keys_only=True)
    reset(m)
    done = []
    meter = service.meter

    def dies_after_the_first(*args, **kwargs):
        if done:
            raise Killed
        done.append(args[2:4])
        return meter(*args, **kwargs)

    monkeypatch.setattr(service, "meter", dies_after_the_first)
    with pytest.raises(Killed):
        m.run()
    moved = m.sql("SELECT instance_id, dimension FROM metering_cursors WHERE metered_until = %s", (UNTIL,))
    assert [(r["instance_id"], r["dimension"]) for r in moved] == done  # the first committed, nothing else
    monkeypatch.undo()
    m.run()
    assert snapshot(m, keys_only=True) == whole


def test_a_failing_gateway_leaves_the_cursor_and_says_why(m, monkeypatch, caplog):
    reset(m)
    start = H - 2 * HOUR
    with socket.socket() as s:  # a port nothing listens on
        s.bind(("127.0.0.1", 0))
        dead = s.getsockname()[1]
    point_at(lambda q, p: m.sql(q, p), m.s["id"], dead)
    with caplog.at_level(logging.WARNING, logger="gpuaas_api.metering.service"):
        result = m.run()
    cursor = m.cursor(m.s, "job")
    assert cursor["metered_until"] == start and cursor["last_error"].startswith("scheduler_unavailable: ")
    assert "127.0.0.1" in cursor["last_error"] and cursor["last_error_at"] is not None
    assert result.failed[(UUID(m.s["id"]), "job")] == cursor["last_error"]
    assert any(str(m.s["id"]) in r.getMessage() and "scheduler_unavailable" in r.getMessage() for r in caplog.records)
    assert m.records(m.s, "job") == []
    assert m.cursor(m.s, "member_seconds")["metered_until"] == UNTIL  # the other dimension went on

    # One that fails after its first window: the jobs of that window are kept and the cursor stops after it.
    point_at(lambda q, p: m.sql(q, p), m.s["id"], m.s["toy"].port)
    call, calls = service.gateway.Gateway.call, []

    def second_fails(gw, *args, **kwargs):
        calls.append(gw.instance_id)
        if gw.instance_id == str(m.s["id"]) and calls.count(gw.instance_id) == 2:
            raise service.gateway.unavailable("the gateway went away")
        return call(gw, *args, **kwargs)

    monkeypatch.setattr(service.gateway.Gateway, "call", second_fails)
    m.run()
    cursor = m.cursor(m.s, "job")
    first_window_end = start - service.JOB_LOOKBACK + service.JOB_CHUNK  # read from an hour before the cursor
    assert cursor["metered_until"] == first_window_end
    assert cursor["last_error"] == "scheduler_unavailable: the gateway went away"
    assert {r["end_time"] < first_window_end for r in m.records(m.s, "job")} == {True}
    # One whose answer is not the protocol's: nothing of that window is taken.
    monkeypatch.setattr(service.gateway.Gateway, "call", lambda gw, *a, **k: {"items": [{"id": "1", "account": "x"}]})
    m.run()
    cursor = m.cursor(m.s, "job")
    assert cursor["metered_until"] == first_window_end  # where it stood: a failed window never moves it back
    assert cursor["last_error"].startswith("the gateway's usage answer does not follow the protocol: 0.submit_time")
    monkeypatch.undo()
    m.run()  # back: it goes on from there, no gap
    cursor = m.cursor(m.s, "job")
    assert (cursor["metered_until"], cursor["last_error"], cursor["last_error_at"]) == (UNTIL, None, None)
    assert len(m.records(m.s, "job")) == 11


def test_two_workers_never_meter_one_instance_at_once(m):
    reset(m)
    m.run(H - HOUR)  # the cursors exist
    with m.database.transaction() as conn:  # another worker holds S's job cursor
        conn.execute("SELECT 1 FROM metering_cursors WHERE instance_id = %s AND dimension = 'job' FOR UPDATE",
                     (m.s["id"],))
        result = service.run_pass(m.database, m.settings, NOW)
    assert (UUID(m.s["id"]), "job") not in result.failed
    assert m.cursor(m.s, "job")["metered_until"] == H - HOUR - service.SETTLE  # passed over, not waited for
    assert m.cursor(m.p, "job")["metered_until"] == UNTIL


def window_params(start: datetime = H - timedelta(days=1), end: datetime = NOW, **more) -> dict:
    return {"start": start.isoformat(), "end": end.isoformat()} | more


def test_a_projects_usage_pages_with_totals_and_as_csv(m):
    reset(m)
    m.run()
    a2 = m.ids["project_a2"]
    expected = m.sql("SELECT * FROM usage_records WHERE project_id = %s ORDER BY seq", (a2,))
    assert {r["dimension"] for r in expected} == {"member_seconds", "job"}
    url = f"/v1/projects/{a2}/usage"
    seen, cursor, totals = [], None, None
    while True:
        page = m.w.call("other_project_admin", "GET", url, 200,
                        params=window_params(limit=2) | ({"cursor": cursor} if cursor else {})).json()
        assert len(page["items"]) <= 2 and totals in (None, page["totals"])
        seen += page["items"]
        totals, cursor = page["totals"], page["next_cursor"]
        if not cursor:
            break
    assert [r["id"] for r in seen] == [str(r["id"]) for r in expected]
    jobs = [r for r in expected if r["dimension"] == "job"]
    hours = [r for r in expected if r["dimension"] == "member_seconds"]
    def total(rows: list[dict], column: str) -> int:
        return sum(r[column] for r in rows)

    assert totals == {
        "member_seconds": {"records": len(hours), "unattributed_records": 0, "seconds": total(hours, "seconds"),
                           "core_seconds": 0, "gpu_seconds": 0, "memory_mb_seconds": 0},
        "job": {"records": len(jobs), "unattributed_records": 0, "seconds": total(jobs, "elapsed_seconds"),
                "core_seconds": total(jobs, "core_seconds"), "gpu_seconds": total(jobs, "gpu_seconds"),
                "memory_mb_seconds": total(jobs, "memory_mb_seconds")}}
    job = next(r for r in seen if r["dimension"] == "job")
    assert job["member_id"] is None and job["account"] == "project-a2" and job["end_time"].endswith("Z")
    only_jobs = m.w.call("other_service_account", "GET", url, 200,
                         params=window_params(dimension="job", limit=500)).json()
    assert [r["id"] for r in only_jobs["items"]] == [str(r["id"]) for r in jobs] and only_jobs["totals"] == totals
    # The window: member hours by the hour's start, jobs by their end.
    narrow = m.w.call("other_project_admin", "GET", url, 200,
                      params=window_params(H + HOUR, H + 2 * HOUR, limit=500)).json()["items"]
    assert narrow and all(H + HOUR <= datetime.fromisoformat(r["bucket_start"] or r["end_time"]) < H + 2 * HOUR
                          for r in narrow)

    # CSV: a header row and a row per record of the window, no pages, by format=csv or by Accept.
    answer = m.w.call("other_project_admin", "GET", url, 200, params=window_params(format="csv", limit=1))
    assert answer.headers["content-type"].startswith("text/csv")
    assert answer.headers["content-disposition"].startswith('attachment; filename="usage-project-a2-')
    rows = list(csv.DictReader(io.StringIO(answer.text)))
    assert [r["id"] for r in rows] == [str(r["id"]) for r in expected]
    assert list(rows[0]) == list(seen[0])
    by_accept = m.w.call("other_project_admin", "GET", url, 200, params=window_params(),
                         headers={"Accept": "text/csv"})
    assert by_accept.text == answer.text
    one = next(r for r in rows if r["dimension"] == "job")
    assert one["member_id"] == "" and int(one["core_seconds"]) == int(one["elapsed_seconds"]) * int(one["cpus"])

    for bad, why in ((window_params(NOW, H), "start must be before end"),
                     (window_params(H - timedelta(days=400), H), "366 days"),
                     ({"start": "0001-01-01T00:00:00+05:00", "end": "0001-01-02"}, "years 1 to 9999")):
        error = m.w.call("other_project_admin", "GET", url, 422, params=bad).json()["error"]
        assert error["code"] == "validation_error" and why in error["message"] and error["correlation_id"]
        error = m.w.call("other_project_admin", "GET", url, 422, params=bad | {"format": "csv"}).json()["error"]
        assert error["code"] == "validation_error"
    # usage.read in the project: a member lacks it; another project's admin cannot see the project at all.
    assert m.w.call(PM, "GET", f"/v1/projects/{m.ids['project_a1']}/usage", 403,
                    params=window_params()).json()["error"]["code"] == "forbidden"
    m.w.call("project_admin", "GET", url, 404, params=window_params())
    m.w.call("other_tenant_admin", "GET", url, 404, params=window_params(format="csv"))


def test_a_tenants_usage_splits_by_project_and_charged_as(m):
    reset(m)
    m.run()
    url = f"/v1/tenants/{m.ids['tenant_a']}/usage"
    usage = m.w.call(TA, "GET", url, 200, params=window_params()).json()
    lines = {(x["project_name"], x["charged_as"], x["dimension"]): x for x in usage["lines"]}
    assert set(lines) == {("project-a1", "project", "member_seconds"), ("project-a1", "project", "job"),
                          ("project-a1", "tenant_shared_owner", "member_seconds"),
                          ("project-a1", "tenant_shared_owner", "job"),
                          ("project-a2", "project", "member_seconds"), ("project-a2", "project", "job")}
    owner_jobs = lines[("project-a1", "tenant_shared_owner", "job")]
    assert owner_jobs["records"] == owner_jobs["unattributed_records"] == 3  # S's jobs of no project's account
    assert lines[("project-a1", "project", "job")]["unattributed_records"] == 2  # P's: its own, flagged
    for dimension in ("member_seconds", "job"):
        for column in ("records", "seconds", "core_seconds", "gpu_seconds"):
            assert usage["totals"][dimension][column] == sum(x[column] for x in usage["lines"]
                                                             if x["dimension"] == dimension)
            assert usage["totals"][dimension][column] == sum(usage["by_charged_as"][who][dimension][column]
                                                             for who in ("project", "tenant_shared_owner"))
    everything = m.sql("SELECT count(*) AS n, sum(seconds) AS s FROM usage_records WHERE dimension = 'member_seconds'")
    assert usage["totals"]["member_seconds"]["records"] == everything[0]["n"]
    assert usage["totals"]["member_seconds"]["seconds"] == everything[0]["s"]

    answer = m.w.call(TA, "GET", url, 200, params=window_params(format="csv"))
    rows = list(csv.DictReader(io.StringIO(answer.text)))
    assert [(r["project_name"], r["charged_as"], r["dimension"], int(r["seconds"])) for r in rows] == [
        (x["project_name"], x["charged_as"], x["dimension"], x["seconds"]) for x in usage["lines"]]
    # The tenant's usage is the tenant admin's: a project admin of it is refused, another tenant's cannot see it.
    m.w.call(PADM, "GET", url, 403, params=window_params())
    m.w.call("other_tenant_admin", "GET", url, 404, params=window_params())
    other = m.w.call("other_tenant_admin", "GET", f"/v1/tenants/{m.ids['tenant_b']}/usage", 200,
                     params=window_params()).json()
    assert other["lines"] == [] and other["totals"]["job"]["records"] == 0


def test_every_worker_meters_on_its_own_thread_at_the_interval(m):
    reset(m)
    assert Metering(m.database, replace(m.settings, metering_interval_seconds=0), threading.Event()).start() == []
    worker = Worker(m.database, replace(m.settings, metering_interval_seconds=0.3, health_concurrency=0),
                    name="metering-test")
    (serving,) = worker.start()
    try:
        # The first pass comes one interval after the start, and meters up to the clock (less the settle delay).
        wait_for(lambda: m.sql("SELECT 1 FROM metering_cursors WHERE instance_id = %s AND dimension = 'job' "
                               "AND metered_until > %s", (m.s["id"], NOW)), 30, what="a metering pass")
    finally:
        worker.stop.set()
        serving.join(30)
    assert not serving.is_alive() and not any(t.name == "metering" and t.is_alive() for t in threading.enumerate())
    assert len(m.records(m.s, "job")) == 12  # every seeded job has ended by now
