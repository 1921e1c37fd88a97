"""The web console (/console/) in a real headless Chromium against the service over real HTTP, with a
real worker running the test app's playbook (tests/apps/opsapp: real ansible-runner runs on localhost):
a project's instances with their members per role; a deploy's progress and events arriving live over
the event stream while the page stays loaded; a failed run's task, message and correlation id; another
project's instance refused with the API's own refusal and correlation id; tenant strings shown as text,
never as markup."""

from __future__ import annotations

import logging
import re
from pathlib import Path

from fastapi.testclient import TestClient
from gpuaas_api.app import create_app
from gpuaas_api.console import CSP, FILES, STATIC
from operations.helpers import events, make_instance, wait_for, wait_op
from playwright.sync_api import expect

SA = "service_account"
# Tenant strings that would run script if the page parsed them as HTML. The instance name cannot come
# through the API (names are DNS labels); it is set in the database, as a hostile name from an older
# release or another writer would be. The message reaches the failing task's message, the operation's
# error and the instance's status reason through a run.
HOSTILE_NAME = '<img src=x onerror="window.__pwned=1">'
HOSTILE_MESSAGE = '<img src=x onerror="window.__pwned=2"><script>window.__pwned=3</script>&amp; "quoted"'
RED = "rgb(179, 38, 30)"  # console.css's --bad
RUN_MINUTES = 90_000  # ms: a run on a loaded 2-core machine


def rows(page, selector: str, attribute: str) -> list[str]:
    return page.locator(selector).evaluate_all(f"rows => rows.map(r => r.getAttribute('{attribute}'))")


def bar_colour(page, operation_id: str) -> str:
    bar = page.locator(f'tr[data-operation="{operation_id}"] progress')
    return bar.evaluate("bar => getComputedStyle(bar).accentColor")


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

    # The live instance's page, loaded before anything runs.
    row.locator("a").click()
    expect(page.locator('.timeline tr[data-type="apps.instance.requested"]')).to_have_count(1)
    expect(page.locator(".toolbar .stream .status")).to_have_text("live")
    page.evaluate("window.__loadedOnce = true")
    (live_marker / "slow").touch()  # the playbook waits at one task until this file is gone
    ops.start_worker(concurrency=2)
    deploy = ops.w.call(SA, "POST", f"/v1/instances/{live['id']}/deploy", 202).json()
    failing = ops.w.call(SA, "POST", f"/v1/instances/{broken['id']}/deploy", 202).json()

    # Progress as it happens: the host and the task it runs now, tasks done of started.
    op_row = page.locator(f'tr[data-operation="{deploy["id"]}"]')
    expect(op_row.locator("td.hosts")).to_have_text("localhost: Work while the slow file exists",
                                                    timeout=RUN_MINUTES)
    expect(op_row).to_have_attribute("data-status", "running")
    running = op_row.locator("td.tasks").text_content()
    assert re.fullmatch(r"(\d+)/(\d+)", running) and int(running.split("/")[0]) < int(running.split("/")[1])
    expect(page.locator("h1 .status")).to_have_text("starting")
    console.shot("2-deploy-running")
    (live_marker / "slow").unlink()

    expect(op_row).to_have_attribute("data-status", "succeeded", timeout=RUN_MINUTES)
    done = re.fullmatch(r"(\d+)/(\d+)", op_row.locator("td.tasks").text_content())
    assert done and done[1] == done[2] and int(done[1]) >= 5, done
    expect(page.locator("h1 .status")).to_have_text("running")
    expect(page.locator("table.members td .status")).to_have_text(["active", "active"])
    # Every event of the timeline is on the page, newest first, and came over the stream: the page was
    # not reloaded, and it read the timeline's list once (at load).
    recorded = [str(e["id"]) for e in events(ops, live["id"])]
    wait_for(lambda: rows(page, ".timeline tbody tr", "data-event") == recorded[::-1], 15, what="the whole timeline")
    types = rows(page, ".timeline tbody tr", "data-type")
    for kind in ("operation.started", "run.task_started", "run.task_ok", "operation.succeeded",
                 "apps.instance.running"):
        assert kind in types, types
    assert page.evaluate("window.__loadedOnce") is True
    assert len([u for u in requests if re.search(rf"/v1/instances/{live['id']}/events(\?|$)", u)]) == 1, requests
    assert any(f"/v1/instances/{live['id']}/events/stream" in u for u in requests)
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
    assert any(HOSTILE_MESSAGE in text for text in page.locator(".timeline td.detail").all_text_contents())
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
    shown = set(page.locator(".timeline tbody tr td:last-child").all_text_contents())
    assert shown == {failed["correlation_id"]}
    no_markup_injected(page)
    console.shot("4-failure")

    page.evaluate("hash => { location.hash = hash; }", f"#/instances/{named['id']}")
    expect(page.locator("h1 .instance-name")).to_have_text(HOSTILE_NAME)
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
    expect(page.locator(".timeline tbody tr")).to_have_count(1)
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
    assert set(sources) == {"index.html", "console.css", "api.js", "console.js", "dom.js", "progress.js",
                            "favicon.svg"}
    for name, text in sources.items():
        for sink in ("innerHTML", "outerHTML", "insertAdjacentHTML", "document.write", "eval(", "new Function",
                     "style=", "<script>"):
            assert sink not in text, (name, sink)
    assert Path(str(STATIC / "index.html")).read_text().count("<script") == 1
