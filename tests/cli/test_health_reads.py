"""The day-2 read models (issue 23) in the client: `instances show` prints the last health check and its
conditions, and each role's members by status; `members list` prints each member's last operation and
what the last check read of it; `events tail` says what a health event checked. The health record is
seeded (health_world.py): no check runs here. JSON output is the API's objects as they are."""

from __future__ import annotations

import json
import re

from operations.helpers import make_instance

from .health_world import SA, seed_degraded


def rows_after(lines: list[str], header: str) -> tuple[list[str], list[str]]:
    """The table whose header line starts with `header` after its indent: (header, its rows: the lines
    that follow with the same indent)."""
    start = next(n for n, line in enumerate(lines) if line.strip().startswith(header))
    indent = len(lines[start]) - len(lines[start].lstrip())
    end = next((n for n in range(start + 1, len(lines))
                if not lines[n].strip() or len(lines[n]) - len(lines[n].lstrip()) != indent), len(lines))
    return lines[start], lines[start + 1:end]


def cells(header: str, row: str) -> dict[str, str]:
    """A row's cells by column, cut where the header's columns start (cells may hold spaces)."""
    names = [n.strip() for n in header.split("  ") if n.strip()]
    starts, at = [], 0
    for name in names:
        at = header.index(name, at)
        starts.append(at)
        at += len(name)
    return {n: row[a:b].strip() for n, a, b in zip(names, starts, [*starts[1:], None], strict=True)}


def test_show_and_members_list_say_what_the_last_check_read(ops, cli):
    instance, _ = make_instance(ops, "sick", workers=2)
    world = seed_degraded(ops, instance)
    ctl, wrk = world.controller["node_name"], world.worker["node_name"]
    token = ops.w.tokens[SA]

    shown = cli("instances", "show", "sick", token=token)
    assert shown.returncode == 0, shown.stderr
    lines = shown.stdout.splitlines()
    assert f"  status    degraded: health check: {world.failed_message}" in lines
    assert "  roles     controller 1/1 (1 active), worker 2/2 (1 active, 1 failed)" in lines
    assert "  health    checked 2025-05-01T10:00:00Z: opsapp_status on 3 hosts, 3 members, 0.84 s" in lines
    header, conditions = rows_after(lines, "CONDITION")
    assert header.startswith(" " * 12 + "CONDITION")
    assert [cells(header, row) for row in conditions] == [
        {"CONDITION": "ControlPlaneAvailable", "STATUS": "True", "REASON": "Answered",
         "SINCE": "2025-05-01T09:00:00Z", "MESSAGE": "-"},
        {"CONDITION": "MembersHealthy", "STATUS": "False", "REASON": "MembersFailed",
         "SINCE": "2025-05-01T09:59:40Z", "MESSAGE": f"{wrk}: {world.unreachable}"},
        {"CONDITION": "Healthy", "STATUS": "False", "REASON": "Unhealthy", "SINCE": "2025-05-01T09:59:40Z",
         "MESSAGE": world.failed_message}]
    as_json = json.loads(cli("instances", "show", "sick", "-o", "json", token=token).stdout)
    api = ops.w.call(SA, "GET", f"/v1/instances/{instance['id']}", 200).json()
    assert as_json["health"] == api["health"] and as_json["topology"] == api["topology"]

    listed = cli("members", "list", "sick", token=token)
    assert listed.returncode == 0, listed.stderr
    lines = listed.stdout.splitlines()
    header, members = rows_after(lines, "ROLE")
    by_node = {c["NODE"]: c for c in (cells(header, row) for row in members)}
    assert (by_node[ctl]["STATUS"], by_node[ctl]["REASON"]) == ("active", "-")
    assert by_node[ctl]["LAST OPERATION"] == f"deploy succeeded {world.deploy['id'][:8]}"
    assert by_node[ctl]["CORRELATION ID"] == world.deploy["correlation_id"]
    assert (by_node[wrk]["STATUS"], by_node[wrk]["REASON"]) == ("failed", "health check: " + world.unreachable)
    assert by_node[wrk]["LAST OPERATION"] == f"member_remove queued {world.remove['id'][:8]}"
    assert by_node[wrk]["CORRELATION ID"] == world.remove["correlation_id"]
    # The short id is one `gpuaas ops show` takes.
    op = cli("ops", "show", world.remove["id"][:8], token=token)
    assert op.returncode == 0 and f"operation {world.remove['id']}" in op.stdout, op.stderr

    # What the check read, one line per member: the details by key, empty ones left out, quoted where
    # they hold spaces; the app's own `reason` detail kept where it says something of its own.
    header, read = rows_after(lines, "NODE")
    by_node = {c["NODE"]: c for c in (cells(header, row) for row in read)}
    assert by_node[ctl] == {"NODE": ctl, "CHECKED": "2025-05-01T10:00:00Z", "REACHABLE": "yes", "OBSERVED": "active",
                            "READ": 'node_state=IDLE probe_ok=true reason="site maintenance" running_jobs=0'}
    assert by_node[wrk] == {"NODE": wrk, "CHECKED": "2025-05-01T10:00:00Z", "REACHABLE": "no", "OBSERVED": "failed",
                            "READ": world.unreachable}
    api_members = ops.w.call(SA, "GET", f"/v1/instances/{instance['id']}/members", 200).json()["items"]
    assert json.loads(cli("members", "list", "sick", "-o", "json", token=token).stdout) == api_members

    # The timeline says what each health event checked, and which node a member or cleanup event is about.
    tail = cli("events", "tail", "sick", token=token)
    assert tail.returncode == 0, tail.stderr
    described = [re.fullmatch(r"\S+ +\d+  (.*)  \[[^]]+\]", line)[1] for line in tail.stdout.splitlines()]
    checked = "module=opsapp_status hosts=3 members=3 seconds=0.84"
    assert f"healthy {checked}" in described
    assert f"unhealthy {checked} reason={world.failed_message}" in described
    assert f"member_failed node_name={wrk} reason=health check: {world.unreachable}" in described
    assert f"host_cleanup_pending node_name={wrk}" in described
    assert f"host_cleaned node_name={wrk} host_name={world.worker['host_name']} attempts=2" in described
    assert f"member_recovered node_name={ctl} reason=health check: read active" in described


def test_show_says_when_no_check_has_run(ops, cli):
    make_instance(ops, "fresh", workers=1)
    shown = cli("instances", "show", "fresh", token=ops.w.tokens[SA])
    assert shown.returncode == 0, shown.stderr
    assert "  health    not checked yet" in shown.stdout.splitlines()
    assert "  roles     controller 1/1 (1 pending), worker 1/1 (1 pending)" in shown.stdout.splitlines()
    listed = cli("members", "list", "fresh", token=ops.w.tokens[SA])
    assert "CHECKED" not in listed.stdout and "LAST OPERATION" in listed.stdout.splitlines()[0]
