"""The web console (/console/) in a real headless Chromium against the service over real HTTP, with a
real worker running the test app's playbook (tests/apps/opsapp: real ansible-runner runs on localhost):
a project's instances with their members per role; a deploy's progress and events arriving live over
the event stream while the page stays loaded; a failed run's task, message and correlation id; another
project's instance refused with the API's own refusal and correlation id; tenant strings shown as text,
never as markup; the instance and member actions a token may take, asked first where they cannot be taken
back, sent to the public routes."""

from __future__ import annotations

import json
import logging
import re
from pathlib import Path

from api.world import register_allocation
from cli.health_world import seed_degraded
from fastapi.testclient import TestClient
from gpuaas_api.app import create_app
from gpuaas_api.console import CSP, FILES, STATIC
from gpuaas_api.instances import rules as instance_rules
from gpuaas_api.operations.kinds import KINDS
from operations.helpers import events, make_instance, publish_test_app, wait_for, wait_op
from playwright.sync_api import expect

from .scheduler_world import scheduled_instance

SA = "service_account"
# Tenant strings that would run script if the page parsed them as HTML. The instance name cannot come
# through the API (names are DNS labels); it is set in the database, as a hostile name from an older
# release or another writer would be. The message reaches the failing task's message, the operation's
# error and the instance's status reason through a run.
HOSTILE_NAME = '<img src=x onerror="window.__pwned=1">'
HOSTILE_MESSAGE = '<img src=x onerror="window.__pwned=2"><script>window.__pwned=3</script>&amp; "quoted"'
RED = "rgb(179, 38, 30)"  # console.css's --bad
DEGRADED = "rgb(253, 227, 207)"  # console.css's .status-degraded background
RUN_MINUTES = 90_000  # ms: a run on a loaded 2-core machine


def rows(page, selector: str, attribute: str) -> list[str]:
    return page.locator(selector).evaluate_all(f"rows => rows.map(r => r.getAttribute('{attribute}'))")


def bar_colour(page, operation_id: str) -> str:
    bar = page.locator(f'tr[data-operation="{operation_id}"] progress')
    return bar.evaluate("bar => getComputedStyle(bar).accentColor")


# The argument checks a run starts with (the collection's playbooks and the test app's first play), and
# the task Ansible adds where a role validates its arguments: folded into one row of the timeline.
CHECKS = re.compile(r"^(Check the inventory|Refuse --limit|Validating arguments against arg spec)")


def task_starts(recorded: list[dict]) -> list[dict]:
    return [e for e in recorded if e["type"] == "run.task_started"]


def timeline_rows(recorded: list[dict]) -> int:
    """The rows the timeline shows for these events: one per task and host (a task's start and its result
    are one row), one per play and playbook header, one per lifecycle event, one per host in the recap,
    and one folded row per run for its argument checks."""
    starts = task_starts(recorded)
    checks = [e for e in starts if CHECKS.match(e["payload"]["task"])]
    plays = [e for e in recorded if e["type"] == "run.play_started"]
    check_plays = [e for e in plays if CHECKS.match(e["payload"]["play"])]
    headers = len(plays) - len(check_plays) + sum(e["type"] == "run.playbook_started" for e in recorded)
    lifecycle = [e for e in recorded if not e["type"].startswith("run.")]
    recap = sum(len(set().union(*(set(hosts) for hosts in e["payload"].values())))
                for e in recorded if e["type"] == "run.playbook_stats")
    runs = len({e["correlation_id"] for e in checks})
    return len(starts) - len(checks) + headers + len(lifecycle) + recap + runs


def the_timeline_reads_as_the_run(page, recorded: list[dict]) -> None:
    """A succeeded deploy's timeline: results, durations, play names, the recap and the folded checks."""
    top = ".timeline > tbody > tr"
    tasks = page.locator(f'{top}[data-type="run.task"]')
    ends = {(e["payload"]["host"], e["payload"]["task"]): e["payload"] for e in recorded if e["type"] == "run.task_ok"}
    expected = [(e["payload"]["host"], e["payload"]["task"]) for e in task_starts(recorded)
                if not CHECKS.match(e["payload"]["task"])]
    names = rows(page, f"{top}[data-type='run.task']", "data-task")
    assert list(zip(rows(page, f"{top}[data-type='run.task']", "data-host"), names, strict=True)) == expected[::-1]
    results = dict(zip(names, tasks.locator("td.result").all_text_contents(), strict=True))
    for (_, task), payload in ends.items():
        if not CHECKS.match(task):
            assert results[task] == ("changed" if payload["changed"] else "ok"), (task, results)
    assert results["Record the start"] == "changed" and results["Work while the slow file exists"] == "ok"
    assert results["Fail on purpose"] == "skipped"  # started, and no result: Ansible skipped it (when: false)
    # Skipped on each member host too: the next play started with no result from them.
    member_task = tasks.filter(has=page.locator("td.what", has_text="Fail on the host asked for"))
    expect(member_task.locator("td.result")).to_have_text(["skipped"] * len(
        [h for h, t in expected if t == "Fail on the host asked for"]))
    duration = tasks.filter(has_text="Work while the slow file exists").locator("td.duration").text_content()
    assert re.fullmatch(r"\d+\.\d\d s|\d+(\.\d)? s|\d+m\d\ds", duration), duration
    # The play's header names it (and its hosts); the checks' play is in the fold, not a header of its own.
    plays = [e["payload"] for e in recorded if e["type"] == "run.play_started"]
    assert [p["play"] for p in plays] == ["Check the inventory and the request", "Member hosts", "Operation step"]
    expect(page.locator(f'{top}[data-type="run.play_started"] td.what')).to_have_text(
        ["play Operation step", "play Member hosts"])
    expect(page.locator(f'{top}[data-type="run.play_started"] td.host')).to_have_text(["localhost", "all:!localhost"])
    # The recap: each host with its counts, as the run's stats give them (added in order: the last on top).
    (stats,) = [e["payload"] for e in recorded if e["type"] == "run.playbook_stats"]
    recap = page.locator(f'{top}[data-type="run.recap"]')
    expect(recap.locator("td.host")).to_have_text(sorted(set().union(*stats.values()), reverse=True))
    counts = {key: hosts.get("localhost", 0) for key, hosts in stats.items()}
    assert counts["changed"] >= 2 and counts["skipped"] >= 1, counts
    local_recap = recap.filter(has=page.locator("td.host", has_text=re.compile("^localhost$")))
    expect(local_recap.locator("td.what")).to_have_text(
        f"recap ok={counts['ok']} changed={counts['changed']} unreachable={counts['dark']} "
        f"failed={counts['failures']} skipped={counts['skipped']} rescued={counts['rescued']} "
        f"ignored={counts['ignored']}")
    # The argument checks: one folded row, closed, that opens on the checks' play and task with its result.
    fold = page.locator(f'{top}[data-type="run.checks"]')
    expect(fold).to_have_count(1)
    expect(fold.locator("summary")).to_have_text("argument checks: 1 task, all ok")
    assert fold.locator("details").evaluate("d => d.open") is False
    expect(fold.locator('tr[data-type="run.task"] td.what')).to_be_hidden()
    fold.locator("summary").click()
    expect(fold.locator('tr[data-type="run.task"] td.what')).to_have_text(["Check the inventory and the request"])
    expect(fold.locator('tr[data-type="run.task"] td.result')).to_have_text(["ok"])
    expect(fold.locator('tr[data-type="run.play_started"] td.what')).to_have_text(
        ["play Check the inventory and the request"])
    assert not [t for t in page.locator(f"{top}:not([data-type='run.checks']) td.what").all_text_contents()
                if CHECKS.search(t.removeprefix("play "))]


def no_markup_injected(page) -> None:
    assert page.evaluate("window.__pwned") is None
    assert page.locator("main img, main script").count() == 0


def test_a_deploy_shows_live_and_a_failed_run_names_its_task_and_correlation_id(ops, console):
    live, live_marker = make_instance(ops, "live", workers=1)
    broken, _ = make_instance(ops, "broken", workers=1, fail_step="deploy", message=HOSTILE_MESSAGE)
    named, _ = make_instance(ops, "named", workers=1, allocation="alloc_ops2")
    with ops.database.transaction() as conn:
        conn.execute("UPDATE app_instances SET name = %s WHERE id = %s", (HOSTILE_NAME, named["id"]))
    page = console.page
    requests: list[str] = []
    page.on("request", lambda r: requests.append(r.url))

    # The service account reads one project: the console goes straight to its instances.
    console.open(ops.w.tokens[SA])
    expect(page.locator("#whoami")).to_have_text(re.compile(r"^service account \S+$"))
    expect(page.locator("table.instances tbody tr")).to_have_count(4)
    assert sorted(page.locator("table.instances td.name").all_text_contents()) == sorted(
        ["slurm-a1", "live", "broken", HOSTILE_NAME])
    row = page.locator(f'tr[data-instance="{live["id"]}"]')
    expect(row.locator("td.members")).to_have_text("controller 1/1, worker 1/1")
    expect(row.locator(".status")).to_have_text("created")
    no_markup_injected(page)
    console.shot("1-project")

    # The live instance's page, loaded before anything runs: what a created instance takes, Deploy and Delete.
    row.locator("a").click()
    expect(page.locator('.timeline > tbody > tr[data-type="apps.instance.requested"]')).to_have_count(1)
    expect(page.locator(".toolbar .stream .status")).to_have_text("live")
    expect(page.locator(".action-bar button")).to_have_text(["Deploy", "Delete…"])
    page.evaluate("window.__loadedOnce = true")
    (live_marker / "slow").touch()  # the playbook waits at one task until this file is gone
    ops.start_worker(concurrency=2)
    # Deployed from the page (the deploy route, with the token in use); the other one through the API.
    page.locator(".action-bar button[data-action=deploy]").click()
    notice = page.locator(".notice[data-operation]")
    expect(notice).to_contain_text("deploy queued: operation")
    deploy = ops.w.call(SA, "GET", f"/v1/operations/{notice.get_attribute('data-operation')}", 200).json()
    assert deploy["kind"] == "deploy" and deploy["instance_id"] == live["id"]
    expect(notice.locator(".correlation-id")).to_have_text(deploy["correlation_id"])
    failing = ops.w.call(SA, "POST", f"/v1/instances/{broken['id']}/deploy", 202).json()
    # Behind a queued or running deploy: no second Deploy, no Delete; what a starting instance takes.
    expect(page.locator(".action-bar button")).to_have_text(["Add member…", "Upgrade…", "Roll back…",
                                                             "Decommission…"])

    # Progress as it happens: the host and the task it runs now, tasks done of started.
    op_row = page.locator(f'tr[data-operation="{deploy["id"]}"]')
    expect(op_row.locator("td.hosts")).to_have_text("localhost: Work while the slow file exists",
                                                    timeout=RUN_MINUTES)
    expect(op_row).to_have_attribute("data-status", "running")
    running = op_row.locator("td.tasks").text_content()
    assert re.fullmatch(r"(\d+)/(\d+)", running) and int(running.split("/")[0]) < int(running.split("/")[1])
    expect(page.locator("h1 .status")).to_have_text("starting")
    # The running task is one row, its result still to come; the page updates that very row.
    slow_row = page.locator('.timeline > tbody > tr[data-type="run.task"][data-task="Work while the slow file exists"]')
    expect(slow_row.locator("td.result")).to_have_text("running")
    slow_row.evaluate("row => { row.__seen = 1; }")
    console.shot("2-deploy-running")
    (live_marker / "slow").unlink()

    expect(op_row).to_have_attribute("data-status", "succeeded", timeout=RUN_MINUTES)
    done = re.fullmatch(r"(\d+)/(\d+)", op_row.locator("td.tasks").text_content())
    assert done and done[1] == done[2] and int(done[1]) >= 5, done
    expect(page.locator("h1 .status")).to_have_text("running")
    expect(page.locator("table.members td.state .status")).to_have_text(["active", "active"])
    # The timeline, read over the stream (the page was not reloaded, it read the timeline's list once at
    # load): one row per task and host with its result and duration, play headers, the recap per host,
    # the argument checks folded into one row, and every lifecycle event a row of its own.
    recorded = events(ops, live["id"])
    wait_for(lambda: len(rows(page, ".timeline > tbody > tr", "data-type")) == timeline_rows(recorded), 15,
             what="one row per task and host")
    assert page.evaluate("window.__loadedOnce") is True
    assert len([u for u in requests if re.search(rf"/v1/instances/{live['id']}/events(\?|$)", u)]) == 1, requests
    assert any(f"/v1/instances/{live['id']}/events/stream" in u for u in requests)
    the_timeline_reads_as_the_run(page, recorded)
    # The row of the task that waited was updated in place when its result came.
    assert slow_row.evaluate("row => row.isConnected && row.__seen === 1") is True
    console.shot("console-timeline", clip="section:has(> table.timeline)")
    console.shot("3-deploy-succeeded")

    # The failed run: its task, host and message, and the correlation id to search the logs with.
    failed = wait_op(ops, failing["id"])
    assert failed["status"] == "failed"
    page.evaluate("hash => { location.hash = hash; }", f"#/instances/{broken['id']}")
    panel = page.locator(".failure")
    expect(panel.locator(".task")).to_have_text("Fail on purpose")
    expect(panel.locator(".host")).to_have_text("localhost")
    expect(panel.locator("code.correlation-id")).to_have_text(failed["correlation_id"])
    expect(panel.locator(".error")).to_have_text(f"{failed['error']['code']}: {failed['error']['message']}")
    assert panel.locator(".task-message").text_content() == f"planned failure in deploy {HOSTILE_MESSAGE}"
    assert HOSTILE_MESSAGE in page.locator(".status-reason").text_content()
    assert any(HOSTILE_MESSAGE in text for text in page.locator(".timeline .task-message").all_text_contents())
    failed_row = page.locator(f'tr[data-operation="{failed["id"]}"]')
    expect(failed_row).to_have_attribute("data-status", "failed")
    expect(failed_row.locator("td.tasks")).to_have_text(re.compile(r"^(\d+)/\1, 1 failed$"))
    # Its progress bar is red; the succeeded deploy's is not (the value bar's colour is accent-color).
    page.evaluate("hash => { location.hash = hash; }", f"#/instances/{live['id']}")
    expect(page.locator(f'tr[data-operation="{deploy["id"]}"]')).to_have_attribute("data-status", "succeeded")
    assert bar_colour(page, deploy["id"]) != RED
    page.evaluate("hash => { location.hash = hash; }", f"#/instances/{broken['id']}")
    expect(failed_row).to_have_attribute("data-status", "failed")
    assert bar_colour(page, failed["id"]) == RED
    # The correlation id narrows the timeline to the operation's own events.
    failed_row.locator("a.correlation-id").click()
    expect(page.locator(".toolbar code.filter")).to_have_text(failed["correlation_id"])
    shown = set(page.locator(".timeline > tbody > tr > td.cid").all_text_contents())
    assert shown == {failed["correlation_id"]}
    no_markup_injected(page)
    console.shot("4-failure")

    page.evaluate("hash => { location.hash = hash; }", f"#/instances/{named['id']}")
    expect(page.locator("h1 .instance-name")).to_have_text(HOSTILE_NAME)
    no_markup_injected(page)
    assert console.errors == []


# What the console offers, read from its own module in the page.
MIRROR = """async () => {
    const {KINDS, DELETE, CREATE} = await import("./actions.js");
    return {kinds: KINDS, remove: DELETE, create: CREATE};
}"""


def the_consoles_rules_are_the_services(page) -> None:
    """actions.js's table of what each kind needs and where it is accepted is kinds.py's, and its delete is the
    service's: the console hides no button the service would accept, and shows none it would refuse for these
    reasons."""
    mirror = page.evaluate(MIRROR)
    assert set(mirror["kinds"]) == {"deploy", "upgrade", "rollback", "decommission", "member_add", "member_drain",
                                    "member_resume", "member_remove", "member_replace"}
    for name, offered in mirror["kinds"].items():
        kind = KINDS[name]
        assert sorted(offered["permissions"]) == sorted(kind.permissions), name
        assert sorted(offered["instance"]) == sorted(kind.accept_states), name
        assert offered.get("member") == (sorted(kind.member_states) if kind.member_states else None), name
        assert offered.get("single", False) == kind.single, name
        assert offered.get("closesQueue", False) == kind.closes_queue, name
        assert offered.get("queuedAs", {}) == kind.queued_as, name
    assert sorted(mirror["remove"]["instance"]) == sorted(instance_rules.DELETABLE_STATUSES)
    assert mirror["remove"]["permission"] == "apps.instance.delete" and mirror["create"] == "apps.instance.create"


def buttons(page, scope: str) -> list[str]:
    return page.locator(f"{scope} button[data-action]").all_text_contents()


def queued(page, ops, kind: str) -> dict:
    """The operation the page's notice names (the service's answer to the request it sent), read back."""
    notice = page.locator(".notice[data-operation]")
    try:
        expect(notice).to_contain_text(f"{kind} queued: operation")
    except AssertionError as error:  # what the page says instead: a refusal, in the dialog or above the page
        raise AssertionError(page.locator(".notice-slot, dialog").all_inner_texts()) from error
    op = ops.w.call(SA, "GET", f"/v1/operations/{notice.get_attribute('data-operation')}", 200).json()
    assert op["kind"] == kind and op["status"] == "queued", op
    expect(notice.locator(".correlation-id")).to_have_text(op["correlation_id"])
    return op


def test_a_tenant_creates_acts_on_and_deletes_instances_as_its_token_may(ops, console):
    """The console's actions call the public routes with the token in use, each after a confirmation where it
    cannot be taken back; a token sees the buttons it may use, and the service's refusals with their correlation
    ids. No worker runs here: each request is accepted and queued, and the operations tests run the playbooks
    (the deploy test above runs a deploy asked for from the page)."""
    page = console.page
    newer = publish_test_app(ops.w, "1.1.0")  # an upgrade target
    ops.ids["alloc_ops3"] = register_allocation(ops.w, "project_a1", "alloc-ops3", hosts=3)["id"]  # for a new one
    # Running (as the status machine leaves a deploy; nothing runs here), a worker for each member action.
    iid = ops.w.call(SA, "POST", f"/v1/projects/{ops.ids['project_a1']}/instances", 201, json={
        "name": "acting", "app_slug": "opsapp", "version": "1.0.0",
        "allocation_ids": [ops.ids["alloc_ops"], ops.ids["alloc_ops2"]],
        "topology": [{"role": "controller", "count": 1}, {"role": "worker", "count": 4}],
        "parameters": {"marker_dir": str(ops.marker_root)}}).json()["id"]
    ops.sql("UPDATE app_instances SET status = 'running' WHERE id = %s RETURNING id", (iid,))
    ops.sql("UPDATE app_instance_members SET status = 'active' WHERE instance_id = %s RETURNING id", (iid,))
    # Its version without a scheduler: the jobs and nodes panels say so (no runtime answers them here).
    ops.sql("""UPDATE app_versions SET adapter = adapter - 'scheduler'
                WHERE id = (SELECT app_version_id FROM app_instances WHERE id = %s) RETURNING id""", (iid,))
    members = {m["node_name"]: m for m in ops.w.call(SA, "GET", f"/v1/instances/{iid}/members", 200).json()["items"]}
    controller = next(n for n, m in members.items() if m["role"] == "controller")
    w1, w2, w3, w4 = sorted(n for n, m in members.items() if m["role"] == "worker")
    ops.sql("UPDATE app_instance_members SET status = 'drained' WHERE id = %s RETURNING id", (members[w2]["id"],))
    project = f"#/projects/{ops.ids['project_a1']}"
    row = lambda node: f'table.members tr[data-node="{node}"]'  # noqa: E731

    # A project member reads, and acts on nothing: no button, no Actions column.
    console.open(ops.w.tokens["project_member"], f"#/instances/{iid}")
    expect(page.locator("table.members tbody tr")).to_have_count(5)
    the_consoles_rules_are_the_services(page)
    expect(page.locator(".action-bar button")).to_have_count(0)
    assert "Actions" not in page.locator("table.members thead th").all_text_contents()
    expect(page.locator("table.members button")).to_have_count(0)
    page.evaluate("hash => { location.hash = hash; }", project)
    expect(page.locator("table.instances tbody tr")).to_have_count(2)
    expect(page.locator(".action-bar button")).to_have_count(0)

    # The project admin: what a running instance and each member take, and no more. The controller is its role's
    # only member and its maximum: it is neither removed (role_minimum) nor replaced (role_at_max: the new member
    # joins before the old one leaves).
    page.click("#forget")
    console.open(ops.w.tokens["project_admin"], f"#/instances/{iid}")
    expect(page.locator(".action-bar button")).to_have_text(["Add member…", "Upgrade…", "Roll back…",
                                                             "Decommission…"])
    expect(page.locator("table.members thead th").last).to_have_text("Actions")
    expect(page.locator(f"{row(controller)} button")).to_have_text(["Drain…"])
    expect(page.locator(f"{row(w1)} button")).to_have_text(["Drain…", "Replace…", "Remove…"])
    expect(page.locator(f"{row(w2)} button")).to_have_text(["Resume", "Replace…", "Remove…"])
    dialog = page.locator("dialog.action-dialog")

    # A refusal shows the service's envelope: code, message, status and the correlation id of that very answer.
    page.click(".action-bar button[data-action=rollback]")
    with page.expect_response(lambda r: r.url.endswith(f"/v1/instances/{iid}/rollback")) as answer:
        dialog.locator("button[type=submit]").click()
    envelope = answer.value.json()["error"]
    assert answer.value.status == 409 and envelope["correlation_id"] == answer.value.headers["x-correlation-id"]
    refusal = dialog.locator(".dialog-refusal .refusal")
    expect(refusal.locator(".code")).to_have_text("no_previous_version")
    expect(refusal.locator(".message")).to_have_text(envelope["message"])
    expect(refusal.locator(".correlation-id")).to_have_text(envelope["correlation_id"])
    expect(refusal).to_contain_text("HTTP 409")
    console.shot("console-refusal", full_page=False)
    dialog.locator("button.dismiss").click()
    expect(dialog).to_have_count(0)

    # Drain asks first; Keep sends nothing.
    page.click(f"{row(w1)} button[data-action=member_drain]")
    expect(dialog.locator(".question")).to_have_text(
        f"Drain {w1} ({members[w1]['host_name']})? It takes no new work and finishes what it runs; Resume brings it "
        "back.")
    console.shot("console-confirm", full_page=False)
    dialog.locator("button.dismiss").click()
    expect(dialog).to_have_count(0)
    assert ops.w.call(SA, "GET", f"/v1/instances/{iid}/operations", 200).json()["items"] == []
    page.click(f"{row(w1)} button[data-action=member_drain]")
    dialog.locator("button[type=submit]").click()
    drain = queued(page, ops, "member_drain")
    assert drain["member_ids"] == [members[w1]["id"]]
    expect(page.locator(f"{row(w1)} button")).to_have_count(0)  # busy with its drain

    page.click(f"{row(w2)} button[data-action=member_resume]")  # nothing to confirm
    assert queued(page, ops, "member_resume")["member_ids"] == [members[w2]["id"]]
    page.click(f"{row(w3)} button[data-action=member_remove]")
    expect(dialog.locator("button[type=submit]")).to_have_text(f"Remove {w3}")
    dialog.locator("button[type=submit]").click()
    assert queued(page, ops, "member_remove")["member_ids"] == [members[w3]["id"]]

    # Replace and add: on a host of the allocation chosen, the first free one unless one is named; the hosts
    # offered are those no member of the instance holds.
    def free_in_ops2() -> list[str]:
        held = {m["host_name"] for m in ops.w.call(SA, "GET", f"/v1/instances/{iid}/members", 200).json()["items"]
                if m["status"] != "removed"}
        return [f"alloc-ops2-h{i}" for i in range(4) if f"alloc-ops2-h{i}" not in held]

    page.click(f"{row(w4)} button[data-action=member_replace]")
    dialog.locator("select[name=allocation_id]").select_option(label="alloc-ops2 (4 hosts)")
    expect(dialog.locator("select[name=host_name] option")).to_have_text(["the first free host", *free_in_ops2()])
    dialog.locator("button[type=submit]").click()
    replaced = queued(page, ops, "member_replace")
    assert replaced["member_ids"][0] == members[w4]["id"] and len(replaced["member_ids"]) == 2
    page.click(".action-bar button[data-action=member_add]")
    expect(dialog.locator("select[name=role] option")).to_have_text(["worker"])  # the controller's role is full
    dialog.locator("select[name=allocation_id]").select_option(label="alloc-ops2 (4 hosts)")
    host = free_in_ops2()[-1]
    dialog.locator("select[name=host_name]").select_option(host)
    dialog.locator("button[type=submit]").click()
    added = queued(page, ops, "member_add")
    expect(page.locator("table.members tr[data-node] td.host", has_text=host)).to_have_count(1)
    assert added["params"]["request"] == {"role": "worker", "allocation_id": ops.ids["alloc_ops2"],
                                          "host_name": host}, added["params"]

    page.click(".action-bar button[data-action=upgrade]")
    expect(dialog.locator("select[name=app_version_id] option")).to_have_text(["1.1.0 (active)"])
    dialog.locator("button[type=submit]").click()
    assert queued(page, ops, "upgrade")["params"]["request"] == {"app_version_id": newer["id"]}

    # Decommission asks first; once queued, the instance takes nothing more: no button is left.
    page.click(".action-bar button[data-action=decommission]")
    expect(dialog.locator("button[type=submit]")).to_have_text("Decommission acting")
    dialog.locator("button[type=submit]").click()
    queued(page, ops, "decommission")
    expect(page.locator(".action-bar button")).to_have_count(0)
    expect(page.locator("table.members button")).to_have_count(0)
    assert [op["kind"] for op in ops.w.call(SA, "GET", f"/v1/instances/{iid}/operations", 200).json()["items"]] == [
        "member_drain", "member_resume", "member_remove", "member_replace", "member_add", "upgrade", "decommission"]
    console.shot("console-instance-acted", full_page=False)

    # A new instance from the project's page: the form's problems and the service's refusal in the dialog, then
    # the instance, on its own page.
    page.evaluate("hash => { location.hash = hash; }", project)
    page.click(".action-bar button[data-action=create]")
    dialog.locator("input[name=name]").fill("made-here")
    dialog.locator("select[name=app_slug]").select_option("opsapp")
    expect(dialog.locator("select[name=version] option")).to_have_text(["the newest active", "1.1.0 (active)",
                                                                        "1.0.0 (active)"])
    dialog.locator("label.check", has_text="alloc-ops3 (").locator("input").check()
    dialog.locator("input[data-role=worker]").fill("2")
    dialog.locator("textarea[name=parameters]").fill("{")
    dialog.locator("button[type=submit]").click()
    expect(dialog.locator(".problem")).to_contain_text("Parameters: not JSON")
    dialog.locator("textarea[name=parameters]").fill('{"nope": 1}')
    dialog.locator("button[type=submit]").click()
    expect(dialog.locator(".refusal .code")).to_have_text("invalid_parameters")
    expect(dialog.locator(".refusal .correlation-id")).not_to_be_empty()
    dialog.locator("textarea[name=parameters]").fill(json.dumps({"marker_dir": str(ops.marker_root / "made-here")}))
    console.shot("console-create", full_page=False)
    dialog.locator("button[type=submit]").click()
    expect(page.locator("h1 .instance-name")).to_have_text("made-here")
    made = page.evaluate("location.hash").removeprefix("#/instances/")
    instance = ops.w.call(SA, "GET", f"/v1/instances/{made}", 200).json()
    assert instance["status"] == "created" and instance["app_version"] == "1.1.0"
    assert [(r["name"], r["desired_count"]) for r in instance["topology"]["roles"]] == [("controller", 1),
                                                                                         ("worker", 2)]
    assert {m["allocation_id"] for m in ops.w.call(SA, "GET", f"/v1/instances/{made}/members", 200)
            .json()["items"]} == {ops.ids["alloc_ops3"]}
    expect(page.locator(".action-bar button")).to_have_text(["Deploy", "Delete…"])

    # Delete asks first (Keep keeps it), then the instance is gone and the page is its project's.
    page.click(".action-bar button[data-action=delete]")
    dialog.locator("button.dismiss").click()
    page.click(".action-bar button[data-action=delete]")
    expect(dialog.locator("button[type=submit]")).to_have_text("Delete made-here")
    dialog.locator("button[type=submit]").click()
    expect(page.locator("table.instances td.name")).to_have_text(["acting", "slurm-a1"])
    assert page.evaluate("location.hash") == project
    ops.w.call(SA, "GET", f"/v1/instances/{made}", 404)
    no_markup_injected(page)
    assert console.errors == []


def test_another_projects_instance_is_refused_with_the_services_correlation_id(ops, console):
    page = console.page
    answers = []
    page.on("response", lambda response: answers.append(response))
    other = ops.ids["instance_a2"]  # project a2's instance; the token is a service account's of project a1

    console.open(ops.w.tokens[SA], f"#/instances/{other}")
    box = page.locator(".refusal")
    expect(box.locator(".code")).to_have_text("not_found")
    (answer,) = [a for a in answers if a.url.endswith(f"/v1/instances/{other}")]
    envelope = answer.json()["error"]
    assert answer.status == 404 and envelope["correlation_id"] == answer.headers["x-correlation-id"]
    expect(box.locator(".message")).to_have_text(envelope["message"])
    expect(box.locator(".correlation-id")).to_have_text(envelope["correlation_id"])
    expect(box).to_contain_text("HTTP 404")
    # The same refusal as for an instance that does not exist: nothing about the other project leaks.
    assert envelope["message"] == f"app_instance {other} not found"
    assert page.locator("main").text_content().count("slurm-a2") == 0
    console.shot("5-refused")

    # Its project is refused too, and the token's own project does not list the instance.
    page.evaluate("hash => { location.hash = hash; }", f"#/projects/{ops.ids['project_a2']}")
    expect(page.locator(".refusal .code")).to_have_text("not_found")
    page.evaluate("hash => { location.hash = hash; }", f"#/projects/{ops.ids['project_a1']}")
    expect(page.locator("table.instances td.name")).to_have_text(["slurm-a1"])

    # The other project's own service account reads it (the refusal was the token's, not the page's).
    page.click("#forget")
    console.open(ops.w.tokens["other_service_account"], f"#/instances/{other}")
    expect(page.locator("h1 .instance-name")).to_have_text("slurm-a2")
    assert page.evaluate("sessionStorage.length") == 1

    # A tenant admin reads every project of its tenant, and no other tenant's.
    page.click("#forget")
    console.open(ops.w.tokens["tenant_admin"], "#/")
    expect(page.locator("main table tbody td a")).to_have_text(["project-a1", "project-a2"])

    # A token the service does not accept: the form comes back with the refusal.
    page.click("#forget")
    page.fill("#token", "gpa_not-a-token")
    page.click("#token-form button[type=submit]")
    expect(page.locator(".refusal .code")).to_have_text("unauthenticated")
    expect(page.locator("#token-form")).to_be_visible()
    assert page.evaluate("sessionStorage.length") == 1  # kept, so that the user sees which token failed
    console.shot("6-unauthenticated")
    assert console.errors == []


def test_an_instance_page_names_its_project_counts_in_words_and_has_an_icon(ops, console, caplog):
    instance, _ = make_instance(ops, "small", workers=1)  # one event so far: apps.instance.requested
    page = console.page
    caplog.set_level(logging.INFO, logger="gpuaas_api.access")  # what the service answered the browser

    console.open(ops.w.tokens[SA], f"#/instances/{instance['id']}")
    expect(page.locator(".timeline > tbody > tr")).to_have_count(1)
    # The project by its name, linking to its page; its id is one hover away.
    project = page.locator(".facts dt:text-is('project') + dd a")
    expect(project).to_have_text("project-a1")
    assert project.get_attribute("href") == f"#/projects/{ops.ids['project_a1']}"
    assert project.get_attribute("title") == ops.ids["project_a1"]
    expect(page.locator(".toolbar > :first-child")).to_have_text("1 event")

    # Chromium asks for the page's icon by itself (Playwright does not report that request, the service's
    # access log has it): the one index.html links to, not a /favicon.ico that would answer 404.
    def answered() -> list[tuple[str, int]]:
        return [(r.http_path, r.http_status) for r in caplog.records if hasattr(r, "http_status")]
    wait_for(lambda: any("favicon" in path for path, _ in answered()), 15, what="the browser to ask for an icon")
    assert [a for a in answered() if a[1] == 404] == []
    assert ("/console/favicon.svg", 200) in answered()
    # It is an image that loads under the console's own CSP, and served with that CSP.
    href = page.locator('head link[rel="icon"]').evaluate("link => link.href")
    assert href == f"{console.url}/console/favicon.svg"
    assert page.evaluate("""href => new Promise((resolve) => {
        const image = new Image();
        image.onload = () => resolve(image.naturalWidth > 0);
        image.onerror = () => resolve(false);
        image.src = href;
    })""", href) is True
    icon = page.request.get(href)
    assert icon.status == 200 and icon.headers["content-type"] == "image/svg+xml"
    assert icon.headers["content-security-policy"] == CSP
    assert console.errors == []


def test_a_degraded_instance_shows_its_health_its_roles_and_what_the_check_read_of_each_member(ops, console):
    """The day-2 read models (issue 23), seeded as a check writes them (tests/cli/health_world.py)."""
    instance, _ = make_instance(ops, "sick", workers=2)
    world = seed_degraded(ops, instance)
    ctl, wrk = world.controller["node_name"], world.worker["node_name"]
    page = console.page
    console.open(ops.w.tokens[SA], f"#/projects/{ops.ids['project_a1']}")
    row = page.locator(f'tr[data-instance="{instance["id"]}"]')
    expect(row.locator(".status")).to_have_text("degraded")
    expect(row.locator("td.reason")).to_have_text(f"health check: {world.failed_message}")

    # Visibly degraded: its own badge colour, and an alert that says why and since when.
    page.evaluate("hash => { location.hash = hash; }", f"#/instances/{instance['id']}")
    expect(page.locator("h1 .status")).to_have_text("degraded")
    assert page.locator("h1 .status").evaluate("b => getComputedStyle(b).backgroundColor") == DEGRADED
    alert = page.locator(".health-alert")
    expect(alert.locator("h2")).to_have_text("Degraded since 2025-05-01 09:59:40Z")
    expect(alert.locator(".message")).to_have_text(world.failed_message)

    # The last check: what ran, and each condition with its status, reason, since when and message.
    expect(page.locator(".health p.check")).to_contain_text(": opsapp_status on 3 hosts, 3 members, 0.84 s")
    expect(page.locator(".health p.check .checked-at")).to_have_text("2025-05-01 10:00:00Z")
    conditions = page.locator("table.conditions tbody tr")
    assert rows(page, "table.conditions tbody tr", "data-condition") == ["ControlPlaneAvailable", "MembersHealthy",
                                                                          "Healthy"]
    expect(conditions.locator("td.state")).to_have_text(["True", "False", "False"])
    expect(conditions.locator("td.reason")).to_have_text(["Answered", "MembersFailed", "Unhealthy"])
    expect(conditions.locator("td.since")).to_have_text(["2025-05-01 09:00:00Z", "2025-05-01 09:59:40Z",
                                                         "2025-05-01 09:59:40Z"])
    expect(conditions.locator("td.message")).to_have_text(["", f"{wrk}: {world.unreachable}", world.failed_message])
    assert conditions.nth(1).locator(".status").evaluate("b => getComputedStyle(b).color") == RED

    # Each role: its members of the desired count, by status.
    expect(page.locator('table.roles tr[data-role="controller"] td.count')).to_have_text("1/1")
    expect(page.locator('table.roles tr[data-role="controller"] td.by-status')).to_have_text("1 active")
    expect(page.locator('table.roles tr[data-role="worker"] td.by-status .status-failed')).to_have_text("1 failed")

    # Each member: what the check read (observed, reachable, the app's details) and its last operation.
    controller, worker = (page.locator(f'table.members tr[data-node="{n}"]') for n in (ctl, wrk))
    expect(worker.locator("td.state")).to_have_text("failed")
    expect(worker.locator("td.check .status")).to_have_text(["failed", "unreachable"])
    expect(worker.locator("td.read .runtime-reason")).to_have_text(world.unreachable)
    expect(controller.locator("td.check")).to_contain_text("active reachable")
    expect(controller.locator("td.read .detail-kv")).to_have_text(
        ["node_state=IDLE", "probe_ok=true", "reason=site maintenance", "running_jobs=0"])
    expect(controller.locator("td.last-op")).to_contain_text(f"deploy succeeded {world.deploy['id'][:8]}")
    expect(worker.locator("td.last-op")).to_contain_text(f"member_remove queued {world.remove['id'][:8]}")
    console.shot("7-degraded")

    # The timeline: the node a member or cleanup event is about in the Host column, what a check ran, and
    # rows tinted by what they say (unhealthy red, recovered and cleaned green, a pending cleanup amber).
    top = ".timeline > tbody > tr"
    checked = "module=opsapp_status hosts=3 members=3 seconds=0.84"
    expected = {"healthy": ("", f"healthy {checked}", "event-good"),
                "member_failed": (wrk, f"member_failed reason=health check: {world.unreachable}", "event-failed"),
                "unhealthy": ("", f"unhealthy {checked} reason={world.failed_message}", "event-failed"),
                "host_cleanup_pending": (wrk, "host_cleanup_pending", "event-warn"),
                "host_cleaned": (wrk, f"host_cleaned host_name={world.worker['host_name']} attempts=2", "event-good"),
                "member_recovered": (ctl, "member_recovered reason=health check: read active", "event-good")}
    for kind, (host, what, tone) in expected.items():
        event = page.locator(f'{top}[data-type="{kind}"]')
        expect(event.locator("td.host")).to_have_text(host)
        expect(event.locator("td.what")).to_have_text(what)
        expect(event).to_have_class(re.compile(rf"\b{tone}\b"))

    # The worker's last operation's correlation id narrows the timeline to that run.
    worker.locator("td.last-op a.correlation-id").click()
    expect(page.locator(".toolbar code.filter")).to_have_text(world.remove["correlation_id"])
    assert set(page.locator(f"{top} > td.cid").all_text_contents()) == {world.remove["correlation_id"]}
    assert console.errors == []


# A long run, made in the page: a test double of the events of a run of thousands of tasks, which no test
# here has the time to run. The timeline's own module reads them, as the page feeds it from the stream.
LONG_RUN = """async ({tasks, limit}) => {
    const {Timeline} = await import("./timeline.js");
    const body = document.createElement("tbody");
    const timeline = new Timeline(body, limit);
    timeline.load([]);
    let added = 0, id = 0;
    new MutationObserver((changes) => changes.forEach((c) => { added += c.addedNodes.length; }))
      .observe(body, {childList: true});
    const event = (type, payload) => ({id: ++id, type, payload, correlation_id: "c", occurred_at: null});
    const hosts = ["h1", "h2", "h3"];
    timeline.apply(event("run.play_started", {play: "Long", pattern: "all"}));
    for (let i = 0; i < tasks; i++) {
      for (const host of hosts) timeline.apply(event("run.task_started", {host, task: `task ${i}`}));
      for (const host of hosts) timeline.apply(event("run.task_ok", {host, task: `task ${i}`, changed: i % 2 === 1,
                                                                     duration: 0.5}));
    }
    await new Promise((resolve) => setTimeout(resolve, 0));  // the observer's last records
    const top = body.firstElementChild;
    return {rows: body.childElementCount, added, events: id, first: [top.dataset.task, top.dataset.host,
            top.querySelector("td.result").textContent, top.querySelector("td.duration").textContent]};
}"""


def test_a_long_timeline_costs_one_row_per_event_and_keeps_its_newest_rows(console):
    console.page.goto(f"{console.url}/console/")
    result = console.page.evaluate(LONG_RUN, {"tasks": 1000, "limit": 500})
    # 6,001 events, 3,001 rows of which the newest 500 are on the page; each event added at most one row.
    assert result["rows"] == 500 and result["events"] == 6001, result
    assert result["added"] == 3001, result
    assert result["first"] == ["task 999", "h3", "changed", "0.50 s"], result
    assert console.errors == []


def test_the_console_is_static_same_origin_and_not_in_the_schema():
    client = TestClient(create_app())
    for path in ["/console/", *(f"/console/{name}" for name in FILES)]:
        answer = client.get(path)
        assert answer.status_code == 200, path
        assert answer.headers["content-security-policy"] == CSP
        assert answer.headers["x-content-type-options"] == "nosniff"
    assert client.get("/console", follow_redirects=False).headers["location"] == "console/"
    assert client.get("/console/other.js").json()["error"]["code"] == "not_found"
    assert "script-src 'self';" in CSP and "unsafe" not in CSP and "connect-src 'self';" in CSP
    assert not [p for p in client.get("/openapi.json").json()["paths"] if "console" in p]
    # Nothing in the page parses strings as HTML or code: every string is set as text (dom.js).
    sources = {name: (STATIC / name).read_text() for name in FILES}
    assert set(sources) == {"index.html", "console.css", "api.js", "console.js", "dom.js", "progress.js", "timeline.js",
                            "scheduler.js", "actions.js", "favicon.svg"}
    for name, text in sources.items():
        for sink in ("innerHTML", "outerHTML", "insertAdjacentHTML", "document.write", "eval(", "new Function",
                     "style=", "<script>"):
            assert sink not in text, (name, sink)
    assert Path(str(STATIC / "index.html")).read_text().count("<script") == 1


def job_rows(page) -> list[str]:
    return rows(page, "table.jobs tbody tr", "data-job")


def test_the_jobs_and_nodes_panels_offer_each_action_only_to_a_token_that_holds_it(ops, console):
    """An instance served by the toy scheduler (tests/console/scheduler_world.py): a project member sees the
    project's jobs and may cancel them, and sees the nodes without Drain or Resume; the project admin drains (after
    a confirmation with a reason) and resumes nodes. What the service refuses shows as its refusal."""
    page = console.page
    with scheduled_instance(ops, "hpc") as (instance, toy, _):
        iid = instance["id"]
        script = "#!/bin/sh\nsrun hostname\n"
        submit = [ops.w.call(actor, "POST", f"/v1/instances/{iid}/jobs", 201, json={"name": name, "script": script})
                  .json() for actor, name in (("project_member", "train"), ("project_admin", "eval"),
                                              ("project_member", "done"))]
        train, evaluation, done = submit
        ops.w.call("project_admin", "POST", f"/v1/instances/{iid}/jobs/{done['id']}/cancel", 200)
        # A reason is the tenant's text: it reaches the page as text.
        ops.w.call("project_admin", "POST", f"/v1/instances/{iid}/nodes/n2/drain", 200,
                   json={"reason": HOSTILE_NAME})
        member_user = train["runtime_user"]

        console.open(ops.w.tokens["project_member"], f"#/instances/{iid}")
        expect(page.locator("table.jobs tbody tr")).to_have_count(3)
        assert job_rows(page) == [done["id"], evaluation["id"], train["id"]]  # newest first
        mine = page.locator(f'table.jobs tr[data-job="{train["id"]}"]')
        expect(mine.locator("td.name")).to_have_text("train")
        expect(mine.locator("td.state .status")).to_have_text("pending")
        expect(mine.locator("td.owner")).to_have_text(f"{member_user} (you)")
        expect(mine.locator("td.account")).to_have_text("project-a1")
        expect(mine.locator("td.submitted")).to_have_text("2026-11-25 10:00:00Z")
        ended = page.locator(f'table.jobs tr[data-job="{done["id"]}"]')
        expect(ended.locator("td.state .status")).to_have_text("cancelled")
        expect(ended.locator("td.ended")).to_have_text("2026-11-25 10:01:00Z")
        expect(page.locator(f'table.jobs tr[data-job="{evaluation["id"]}"] td.owner')).to_have_text(
            evaluation["runtime_user"])
        # Cancel where a job can still be cancelled; a member holds scheduler.queue.cancel.
        expect(page.locator("table.jobs button.cancel")).to_have_count(2)
        expect(ended.locator("button")).to_have_count(0)
        # Nodes: read, not operated (no scheduler.node.operate): no button, no column for them.
        expect(page.locator("table.nodes tbody tr")).to_have_count(2)
        expect(page.locator("table.nodes thead th")).to_have_text(["Name", "State", "Reason", "CPUs", "GPUs",
                                                                   "Features"])
        expect(page.locator("table.nodes button")).to_have_count(0)
        n2 = page.locator('table.nodes tr[data-node="n2"]')
        expect(n2.locator("td.state .status")).to_have_text("drained")
        expect(n2.locator("td.reason")).to_have_text(f"gpuaas: {HOSTILE_NAME}")
        expect(page.locator('table.nodes tr[data-node="n1"] td.gpus')).to_have_text("1")
        no_markup_injected(page)
        console.shot("8-jobs-member")

        # Keep puts the button back and sends nothing; confirmed, the cancel reaches the scheduler.
        theirs = page.locator(f'table.jobs tr[data-job="{evaluation["id"]}"]')
        theirs.locator("button.cancel").click()
        expect(theirs.locator("form.confirm .question")).to_have_text(f"Cancel job {evaluation['id']} (eval)?")
        theirs.locator("button.keep").click()
        expect(theirs.locator("button.cancel")).to_be_visible()
        assert toy.jobs[int(evaluation["id"])]["state"] == "pending"
        mine.locator("button.cancel").click()
        mine.locator("form.confirm button[type=submit]").click()
        expect(mine.locator("td.state .status")).to_have_text("cancelled")
        expect(mine.locator("button")).to_have_count(0)
        assert toy.jobs[int(train["id"])]["state"] == "cancelled"
        assert console.errors == []

        # The project admin operates nodes: Drain where the node schedules, Resume where it is drained.
        page.click("#forget")
        console.open(ops.w.tokens["project_admin"], f"#/instances/{iid}")
        n1 = page.locator('table.nodes tr[data-node="n1"]')
        expect(n1.locator("button.drain")).to_be_visible()
        expect(n2.locator("button.resume")).to_be_visible()
        # A drain asks first, with a reason: without one the form does not go.
        n1.locator("button.drain").click()
        expect(n1.locator("form.confirm .question")).to_have_text(
            "Drain n1? Its running jobs finish; no new job starts on it.")
        n1.locator("form.confirm button[type=submit]").click()
        assert toy.nodes["n1"]["state"] == "idle"
        # A reason the service refuses (printable ASCII only): its refusal above the table, the node as it was.
        n1.locator("input[name=reason]").fill("défaut mémoire")
        n1.locator("form.confirm button[type=submit]").click()
        refusal = page.locator(".scheduler.nodes .action-refusal .refusal")
        expect(refusal.locator(".code")).to_have_text("validation_error")
        expect(refusal.locator("h2")).to_have_text("The service refused the drain of n1")
        expect(n1.locator("td.state .status")).to_have_text("idle")
        n1.locator("button.drain").click()
        n1.locator("input[name=reason]").fill("bad DIMM")
        n1.locator("form.confirm button[type=submit]").click()
        expect(n1.locator("td.state .status")).to_have_text("drained")
        expect(n1.locator("td.reason")).to_have_text("gpuaas: bad DIMM")
        expect(n1.locator("button.resume")).to_be_visible()
        expect(refusal).to_have_count(0)
        assert toy.nodes["n1"]["reason"] == "gpuaas: bad DIMM"
        n2.locator("button.resume").click()
        expect(n2.locator("td.state .status")).to_have_text("idle")
        expect(n2.locator("button.drain")).to_be_visible()
        assert toy.nodes["n2"]["state"] == "idle"
        no_markup_injected(page)
        console.shot("9-nodes-admin")
        assert console.errors == []


def test_the_jobs_and_nodes_panels_say_when_the_instance_serves_none(ops, console):
    page = console.page
    created, _ = make_instance(ops, "fresh", workers=1)
    # The world's Slurm version, stripped of its scheduler in the catalog's row: an app that serves no jobs.
    ops.sql("""UPDATE app_versions SET adapter = adapter - 'scheduler'
                WHERE id = (SELECT app_version_id FROM app_instances WHERE id = %s) RETURNING id""",
            (ops.ids["instance_a1"],))
    console.open(ops.w.tokens[SA], f"#/instances/{ops.ids['instance_a1']}")
    expect(page.locator(".scheduler.jobs .no-scheduler")).to_have_text(
        "No jobs here: this instance's app has no scheduler.")
    expect(page.locator(".scheduler.nodes .no-scheduler")).to_have_text(
        "No nodes here: this instance's app has no scheduler.")
    expect(page.locator(".scheduler .refusal")).to_have_count(0)
    console.shot("10-no-scheduler")

    # An app with a scheduler, an instance that does not run yet.
    page.evaluate("hash => { location.hash = hash; }", f"#/instances/{created['id']}")
    expect(page.locator(".scheduler.jobs .not-operable")).to_have_text("The jobs are served once the instance runs.")
    expect(page.locator(".scheduler.nodes .not-operable")).to_have_text("The nodes are served once the instance runs.")
    assert console.errors == []
