"""An AWX job runs with exactly what the control service's own run of the instance gets (docs/awx.md).

AWX cannot run here; this is a test double of it, doing what AWX does with this repository's setup (awx/setup.yml):
- the project update installs the collection from collections/requirements.yml (project.py), and the app's
  collection (the test app's build, tests/apps/opsapp, as the service runs it);
- the inventory sync runs the inventory source's file (awx/inventory.gpuaas.yml: the collection's inventory plugin)
  with ansible-inventory --list --export, the source's variables and the control service credential's environment
  injected (GPUAAS_PROJECT_ID, GPUAAS_INSTANCES; GPUAAS_API, GPUAAS_TOKEN, ANSIBLE_VARS_ENABLED), and keeps its
  JSON (AWX imports it into its database);
- the job gets that inventory back as an inventory script (AWX writes one into each job's private data directory)
  and runs the playbook through ansible_runner.run with the same credential's environment: the collection's
  run_secrets vars plugin reads the secrets from the service as the job starts.

The service's run is executor/runner.py running the plan executor/plan.py builds for the instance's deploy, with
the playbook tests/awx/run_vars.yml (the test app's deploy playbook, then every run variable's value on every host)
instead of the app's own. Both runs must see the same values; the secrets are in both runs but in neither the
inventory nor the job's events and artifacts, and the service records who read them, never what."""

from __future__ import annotations

import dataclasses
import hashlib
import json
import logging
import os
import stat
import subprocess
import tempfile
import uuid
from pathlib import Path

import ansible_runner
from gpuaas_api.executor import plan as planner
from gpuaas_api.executor import runner
from gpuaas_api.executor.content import run_content
from gpuaas_api.instances import service as instances
from operations.helpers import make_instance, serving, wait_op

from .project import BIN, ROOT, credential_env, inventory_source_env, project_update

SA = "service_account"
RUN_VARS = Path(__file__).with_name("run_vars.yml")
# The operator's site variables: below the catalog's (app_version stays the catalog's), and a template over the
# run's other variables that leaves a tenant's value (message) data.
SITE_VARS = {"site_note": "{{ app_version }}|{{ step }}|{{ message }}", "app_version": "the site's"}
# What the test app's playbook writes down from its variables (tests/apps/opsapp/playbooks/step.yml).
MARKERS = ("message", "labels", "access.json", "site_note", "munge.key")


def take_markers(marker: Path) -> dict[str, str]:
    """What one run wrote down (the values of its variables), removed so that the next run writes its own."""
    found = {name: (marker / name).read_text() for name in MARKERS}
    found["started"] = [" ".join(line.split()[:5]) for line in (marker / "log").read_text().splitlines()
                        if line.startswith("start")]
    found["vars"] = {p.stem.removeprefix("vars-"): json.loads(p.read_text()) for p in marker.glob("vars-*.json")}
    for path in [*(marker / name for name in (*MARKERS, "log")), *marker.glob("vars-*.json")]:
        path.unlink(missing_ok=True)
    return found


def masked(value, secrets: list[str]):
    """`value` with each secret in it replaced by its digest: compared as the secret, never shown as one."""
    text = json.dumps(value, sort_keys=True)
    for secret in secrets:
        text = text.replace(json.dumps(secret)[1:-1], f"<secret {hashlib.sha256(secret.encode()).hexdigest()[:12]}>")
    return json.loads(text)


def service_run(ops, op_id: str, marker: Path, tmp_path: Path) -> tuple[planner.RunPlan, dict]:
    """The plan the worker builds for the operation, run by the service's runner with tests/awx/run_vars.yml."""
    with ops.database.transaction() as conn:
        op = conn.execute("SELECT * FROM operations WHERE id = %s", (op_id,)).fetchone()
        plan = planner.build(conn, ops.settings, op, instances.get_instance(conn, op["instance_id"]))
    collections = run_content(ops.settings, ops.database, plan)
    result = runner.run(ops.settings, dict(op, id=uuid.uuid4()), dataclasses.replace(plan, playbook=str(RUN_VARS)),
                        collections, on_event=lambda *_: None, should_stop=lambda: None,
                        run_dir=tmp_path / "service-run")
    assert result.status == "successful", result.failure
    return plan, take_markers(marker)


def job_env(url: str, token: str, collections: str) -> dict[str, str]:
    """A job's environment: what awx/setup.yml's control service credential injects, and where AWX put the
    project's collections."""
    return credential_env(url, token) | {
        "ANSIBLE_COLLECTIONS_PATH": collections, "ANSIBLE_NOCOLOR": "1", "ANSIBLE_INVENTORY_UNPARSED_FAILED": "True",
        "PATH": f"{BIN}:{os.environ['PATH']}"}


def inventory_sync(env: dict) -> str:
    """AWX's inventory update of awx/setup.yml's inventory source: awx/inventory.gpuaas.yml read by ansible-inventory
    with the source's variables in the environment; the JSON AWX imports."""
    done = subprocess.run([str(BIN / "ansible-inventory"), "-i", str(ROOT / "awx" / "inventory.gpuaas.yml"), "--list",
                           "--export"], env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    return done.stdout


def awx_job(tmp_path: Path, imported: str, env: dict) -> dict:
    """A job of a job template running tests/awx/run_vars.yml on the synced inventory; returns its status and every
    file its private data directory held (events, stdout, the command, the inventory)."""
    script = tmp_path / "awx-inventory.py"  # what AWX writes into a job's private data directory
    script.write_text(f"#!{BIN / 'python'}\nimport sys\nprint({imported!r} if '--list' in sys.argv else '{{}}')\n")
    script.chmod(script.stat().st_mode | stat.S_IXUSR)
    with tempfile.TemporaryDirectory(prefix="gpuaas-awx-job-") as private:
        run = ansible_runner.run(private_data_dir=private, project_dir=str(ROOT),
                                 playbook=str(RUN_VARS.relative_to(ROOT)), inventory=str(script), envvars=env,
                                 quiet=True)
        files = {str(p): p.read_text(errors="replace") for p in Path(private).rglob("*") if p.is_file()}
        return {"status": run.status, "stdout": run.stdout.read(), "files": files}


def test_an_awx_job_runs_with_the_services_variables_and_secrets(ops, app, tmp_path, caplog):
    ops.settings = dataclasses.replace(ops.settings, site_vars=SITE_VARS)
    app.state.operation_settings = ops.settings
    # Tenant values that look like templates stay data in both runs (keys too).
    instance, marker = make_instance(ops, "awx", workers=1, message="{{ 6 * 7 }}", labels={"{{ k }}": "{{ v }}"})
    ops.start_worker()
    deploy = wait_op(ops, ops.w.call(SA, "POST", f"/v1/instances/{instance['id']}/deploy", 202).json()["id"])
    assert deploy["status"] == "succeeded", deploy
    by_operation = take_markers(marker)

    # The service's run of that deploy, and what Ansible made of its variables.
    with ops.database.transaction() as conn:
        op = conn.execute("SELECT * FROM operations WHERE id = %s", (deploy["id"],)).fetchone()
        expected = planner.build(conn, ops.settings, op, instances.get_instance(conn, instance["id"]))
    names = sorted(set(expected.extravars) | set(expected.site_vars) | set(expected.secret_vars))
    (marker / "names.json").write_text(json.dumps(names))
    plan, service = service_run(ops, deploy["id"], marker, tmp_path)
    secrets = plan.secret_strings
    assert set(plan.secret_vars) == {"munge_key", "scheduler_key"} and all(len(s) >= 32 for s in secrets)
    same = {k: masked(by_operation[k], secrets) for k in MARKERS}
    assert same == {k: masked(service[k], secrets) for k in MARKERS}  # the same run as the worker's

    # AWX: project update, inventory sync, job.
    awx_collections = project_update(tmp_path / "awx-collections").parents[2]
    collections = f"{awx_collections}:{run_content(ops.settings, ops.database, plan)}"
    with serving(app) as url, caplog.at_level(logging.DEBUG):
        env = job_env(url, ops.w.tokens[SA], collections)
        # The test app's adapter declares action_vars: its inventory source names the action (GPUAAS_ACTION).
        source = inventory_source_env(gpuaas_awx_project_id=ops.ids["project_a1"], gpuaas_awx_instance="awx")
        imported = inventory_sync(env | source | {"GPUAAS_ACTION": "deploy"})
        served = ops.w.call(SA, "GET", f"/v1/instances/{instance['id']}/inventory", 200,
                            params={"action": "deploy"}).text
        job = awx_job(tmp_path, imported, env)
    assert job["status"] == "successful", job["stdout"][-3000:]
    awx = take_markers(marker)
    # What AWX imported marks the run's variables as data (ansible-inventory's {"__ansible_unsafe": ...}: the job's
    # inventory script gives them back so), the site's template as one.
    imported_vars = json.loads(imported)["all"]["vars"]
    assert imported_vars["message"] == {"__ansible_unsafe": "{{ 6 * 7 }}"}
    assert imported_vars["step"] == {"__ansible_unsafe": "deploy"}
    assert imported_vars["site_note"] == SITE_VARS["site_note"]

    # Every variable the service's run sets has the same value in the AWX job, on every host and on localhost:
    # the catalog's vars and action_vars, the tenant's parameters, the site's (templated alike), the secrets and the
    # access map.
    hosts = ["localhost", *plan.inventory["all"]["hosts"]]
    assert sorted(service["vars"]) == sorted(awx["vars"]) == sorted(hosts)
    assert masked(awx["vars"], secrets) == masked(service["vars"], secrets)
    local = masked(awx["vars"]["localhost"], secrets)
    assert "<undefined>" not in local.values()
    assert local["message"] == "{{ 6 * 7 }}" and local["labels"] == {"{{ k }}": "{{ v }}"}
    assert local["app_version"] == "1.0.0" and local["step"] == "deploy"
    assert local["site_note"] == "1.0.0|deploy|{{ 6 * 7 }}"
    assert local["munge_key"] == masked(plan.secret_vars["munge_key"], secrets) != plan.secret_vars["munge_key"]
    assert local["test_access"] == plan.extravars["test_access"]
    # And the test app's playbook wrote down the same things as the platform's own deploy did.
    assert masked({k: awx[k] for k in (*MARKERS, "started")}, secrets) == \
        masked({k: by_operation[k] for k in (*MARKERS, "started")}, secrets)

    # The secrets reached the job but none of the inventory (what the service serves, what AWX imports), the
    # job's events, stdout or any other file of its private data directory, nor the service's log.
    for where, text in {"served inventory": served, "imported inventory": imported, "log": caplog.text,
                        **job["files"]}.items():
        assert not any(s in text for s in secrets), where  # (a failure names where, not the secret)
    assert any("job_events" in path for path in job["files"])
    # The reading is on record: who read which variables, once for the job, never a value.
    with ops.database.transaction() as conn:
        rows = conn.execute("""SELECT actor_kind, after FROM audit_log WHERE action = 'runtime_secret.issued'
                                 AND app_instance_id = %s""", (instance["id"],)).fetchall()
    assert [(r["actor_kind"], r["after"]["purpose"], r["after"]["variables"]) for r in rows] == [
        ("service_account", "external_run", ["munge_key", "scheduler_key", "test_access"])]
    assert not any(s in json.dumps([r["after"] for r in rows]) for s in secrets)
