"""The staging gate (docs/control-service.md "Promotion gates"): a collection build becomes staged only through
the platform's checks on its exact bytes (descriptor, ansible-lint production profile, ansible-test sanity), run
by the gate worker's tick against the real database with the real tools; skip_gates is the platform admin's,
recorded; a deprecated artifact is retired only after the grace period."""

from __future__ import annotations

import dataclasses
import shutil
import threading
from pathlib import Path

import pytest
from fastapi.testclient import TestClient
from gpuaas_api.catalog.gate_worker import GateWorker
from gpuaas_api.catalog.register import build, register
from gpuaas_api.config import OperationSettings
from gpuaas_api.content.store import ContentStore

from .test_catalog_publishers import seat
from .world import World

OPSAPP = Path(__file__).resolve().parents[1] / "apps" / "opsapp"
# The venvs `make lint` (scripts/sanity.sh) built: the gate's ansible-test does not install them again.
SANITY_HOME = Path(__file__).resolve().parents[2] / "build" / "sanity-home"
FIRST_TASK_END = "        quiet: true\n"
UNNAMED_TASK = "\n    - ansible.builtin.debug:\n        msg: a task without a name\n"


@pytest.fixture
def w(world: World, app, database, tmp_path) -> World:
    app.state.content_store = ContentStore(tmp_path / "content", database)
    seat(world, "platform_admin", "publisher", "tenant_a", {})
    return world


def gate_worker(database, tmp_path) -> GateWorker:
    settings = dataclasses.replace(OperationSettings(), state_dir=tmp_path / "worker",
                                   promotion_sanity_home=SANITY_HOME)
    return GateWorker(database, settings, threading.Event(), "test-gates")


def collection(tmp_path: Path, version: str, *, unnamed_task: bool = False) -> Path:
    """A tiny collection from the test app: its descriptor and playbook (no modules: a descriptor names none), a
    task without a name where asked (ansible-lint's production profile: name[missing])."""
    source = tmp_path / f"src-{version}"
    shutil.copytree(OPSAPP, source, ignore=shutil.ignore_patterns("plugins"))
    # Edited as text: the files stay as yamllint (ansible-lint's yaml rule) wants them.
    lines, keep = [], True
    for line in (source / "adapters" / "opsapp.yml").read_text().splitlines(keepends=True):
        if not line.startswith((" ", "#")):
            keep = not line.startswith(("status:", "credentials:"))
        if keep:
            lines.append(line)
    (source / "adapters" / "opsapp.yml").write_text("".join(lines).replace("\nversion: 1.0.0\n",
                                                                            f"\nversion: {version}\n"))
    galaxy = (source / "galaxy.yml").read_text()
    (source / "galaxy.yml").write_text(galaxy.replace("\nversion: 1.0.0\n", f"\nversion: {version}\n"))
    if unnamed_task:
        playbook = source / "playbooks" / "step.yml"
        text = playbook.read_text()
        assert text.count(FIRST_TASK_END) == 1
        playbook.write_text(text.replace(FIRST_TASK_END, FIRST_TASK_END + UNNAMED_TASK))
    return build(source, tmp_path / f"out-{version}")


def publish_draft(w: World, tarball: Path) -> dict:
    """The build published as the platform publisher, nothing promoted: (its draft collection artifact)."""
    (registered,) = register(TestClient(w.client.app, headers=w.headers("publisher")), tarball)
    return w.call("publisher", "GET", f"/v1/catalog/artifacts/{registered.artifact_id}", 200).json()


def events(w: World, artifact_id: str) -> list[dict]:
    return w.call("publisher", "GET", "/v1/catalog/apps/opsapp/events", 200,
                  params={"artifact_id": artifact_id}).json()["items"]


def test_a_build_that_fails_lint_is_not_staged_and_a_clean_one_is(w, database, tmp_path):
    broken = publish_draft(w, collection(tmp_path, "1.0.0", unnamed_task=True))
    # A move by hand is refused: the gate makes it, and the answer names the route that starts it.
    moved = w.call("publisher", "POST", f"/v1/catalog/artifacts/{broken['id']}/transitions", 409,
                   json={"to": "staged", "reason": "by hand"}).json()["error"]
    assert moved["code"] == "gate_required" and moved["details"] == {
        "gate": "staging", "route": f"POST /v1/catalog/artifacts/{broken['id']}/gates"}

    started = w.call("publisher", "POST", f"/v1/catalog/artifacts/{broken['id']}/gates", 202,
                     json={"kind": "staging", "reason": "release 1.0.0"},
                     headers={"X-Correlation-ID": "stage-broken-1"})
    gate = started.json()
    assert started.headers["Location"] == f"/v1/catalog/gates/{gate['id']}"
    assert (gate["status"], gate["correlation_id"]) == ("queued", "stage-broken-1")
    # Asked again while it is open: the same gate (200), not a second one.
    again = w.call("publisher", "POST", f"/v1/catalog/artifacts/{broken['id']}/gates", 200,
                   json={"kind": "staging", "reason": "again"}).json()
    assert again["id"] == gate["id"]

    worker = gate_worker(database, tmp_path)
    assert str(worker.tick()["id"]) == gate["id"]
    assert worker.tick() is None  # nothing else queued
    failed = w.call("publisher", "GET", f"/v1/catalog/gates/{gate['id']}", 200).json()
    checks = {c["name"]: c for c in failed["checks"]}
    assert failed["status"] == "failed" and "ansible_lint" in failed["reason"]
    assert checks["descriptor"]["status"] == "passed" and checks["ansible_test_sanity"]["status"] == "passed"
    lint = checks["ansible_lint"]
    assert lint["status"] == "failed" and "name[missing]" in lint["summary"]
    (finding,) = lint["findings"]
    assert (finding["rule"], finding["path"], finding["line"]) == ("name[missing]", "playbooks/step.yml", 16)
    assert w.call("publisher", "GET", f"/v1/catalog/artifacts/{broken['id']}", 200).json()["status"] == "draft"
    # A tenant's member sees the platform's app, and reads the outcome alone: not the findings, output or requester.
    seen = w.call("project_member", "GET", f"/v1/catalog/gates/{gate['id']}", 200).json()
    assert seen["checks"] == [{"name": c["name"], "status": c["status"]} for c in failed["checks"]]
    assert seen["requested_by"] is None and seen["reason"] == "the staging checks failed"
    assert "failing_rules" not in w.call("project_member", "GET", "/v1/catalog/apps/opsapp/events", 200).json()[
        "items"][-1]["payload"]
    timeline = events(w, broken["id"])
    assert [(e["type"], e["correlation_id"]) for e in timeline] == [
        ("gate.started", "stage-broken-1"), ("gate.failed", "stage-broken-1")]
    assert timeline[1]["payload"]["failing_rules"] == ["name[missing]"]

    # The fixed build (a new version, its own digest) passes all three checks and the gate stages it.
    clean = publish_draft(w, collection(tmp_path, "1.0.1"))
    gate = w.call("publisher", "POST", f"/v1/catalog/artifacts/{clean['id']}/gates", 202,
                  json={"kind": "staging", "reason": "release 1.0.1"}).json()
    passed = worker.tick()
    assert str(passed["id"]) == gate["id"] and passed["status"] == "passed", passed["reason"]
    assert [(c["name"], c["status"]) for c in passed["checks"]] == [
        ("descriptor", "passed"), ("ansible_lint", "passed"), ("ansible_test_sanity", "passed")]
    assert w.call("publisher", "GET", f"/v1/catalog/artifacts/{clean['id']}", 200).json()["status"] == "staged"
    assert [e["type"] for e in events(w, clean["id"])] == ["gate.started", "gate.passed"]
    with database.transaction() as conn:
        row = conn.execute("""SELECT actor_id, reason FROM audit_log WHERE action = 'apps.catalog.artifact.transition'
                                 AND target_id = %s""", (clean["id"],)).fetchone()
    assert (str(row["actor_id"]), row["reason"]) == (w.ids["user_publisher"], f"staging gate {gate['id']} passed")
    listed = w.call("publisher", "GET", "/v1/catalog/apps/opsapp/gates", 200, params={"status": "failed"}).json()
    assert [g["artifact_id"] for g in listed["items"]] == [broken["id"]]
    # A staged artifact has no staging gate to start.
    assert w.call("publisher", "POST", f"/v1/catalog/artifacts/{clean['id']}/gates", 409,
                  json={"kind": "staging", "reason": "again"}).json()["error"]["code"] == "gate_not_applicable"


def test_skipping_gates_is_the_platform_admins_and_retire_waits_the_grace_period(w, app, tmp_path):
    artifact = publish_draft(w, collection(tmp_path, "2.0.0"))["id"]
    move = f"/v1/catalog/artifacts/{artifact}/transitions"
    refused = w.call("publisher", "POST", move, 403, json={"to": "staged", "reason": "skip", "skip_gates": True})
    assert refused.json()["error"]["details"]["permission"] == "apps.catalog.gates.skip"
    w.call("platform_admin", "POST", move, 200, json={"to": "staged", "reason": "our CI ran the checks",
                                                      "skip_gates": True}, headers={"X-Correlation-ID": "skip-1"})
    (skipped,) = [e for e in events(w, artifact) if e["type"] == "gate.skipped"]
    assert skipped["correlation_id"] == "skip-1" and skipped["payload"]["gates"] == ["staging"]
    assert skipped["payload"]["reason"] == "our CI ran the checks"
    assert skipped["payload"]["by"]["kind"] == "user" and skipped["payload"]["by"]["id"]

    for to in ("canary", "active", "deprecated"):
        w.call("publisher", "POST", move, 200, json={"to": to, "reason": "tests"})
    early = w.call("publisher", "POST", move, 409, json={"to": "retired", "reason": "too early"}).json()["error"]
    assert early["code"] == "retire_grace_period" and early["details"]["retire_after"]
    app.state.settings = dataclasses.replace(app.state.settings, promotion_retire_grace_seconds=0)
    assert w.call("publisher", "POST", move, 200, json={"to": "retired", "reason": "grace over"}).json()[
        "status"] == "retired"


def test_a_gate_whose_worker_died_is_claimed_again_and_the_old_claim_records_nothing(w, database, tmp_path):
    artifact = publish_draft(w, collection(tmp_path, "3.0.0"))["id"]
    gate = w.call("publisher", "POST", f"/v1/catalog/artifacts/{artifact}/gates", 202,
                  json={"kind": "staging", "reason": "lease"}).json()
    first, second = gate_worker(database, tmp_path), gate_worker(database, tmp_path)
    second.owner = "test-gates-2"
    claimed = first.claim()
    assert str(claimed["id"]) == gate["id"] and second.claim() is None  # leased: not claimed twice
    with database.transaction() as conn:  # the first worker died: its lease runs out
        conn.execute("UPDATE promotion_gates SET lease_expires_at = now() - interval '1 s' WHERE id = %s",
                     (gate["id"],))
    assert str(second.claim()["id"]) == gate["id"]
    assert first.finish(claimed, []) is None  # its late outcome is not recorded
    assert w.call("publisher", "GET", f"/v1/catalog/gates/{gate['id']}", 200).json()["status"] == "running"


def _repack(tarball: Path, tmp_path: Path, extra: dict[str, str], *, name: str = "repacked") -> Path:
    """The build with `extra` files ({path: text}) added: what a hand-made tarball could hold."""
    import io
    import tarfile
    out = tmp_path / f"{name}-{tarball.name}"
    with tarfile.open(tarball) as src, tarfile.open(out, "w:gz") as dst:
        for member in src.getmembers():
            dst.addfile(member, src.extractfile(member) if member.isfile() else None)
        for path, text in extra.items():
            info = tarfile.TarInfo(path)
            info.size, info.mode = len(text.encode()), 0o755
            dst.addfile(info, io.BytesIO(text.encode()))
    return out


def test_a_build_holding_a_git_directory_is_refused_and_its_hook_never_runs(tmp_path):
    from gpuaas_api.catalog import staging
    marker = tmp_path / "hook-ran"
    tarball = _repack(collection(tmp_path, "1.0.0"), tmp_path, {
        ".git/hooks/pre-commit": f"#!/bin/sh\ntouch {marker}\n", ".git/HEAD": "ref: refs/heads/main\n"})
    with pytest.raises(staging.BuildRefused, match=r"\.git"):
        staging.run_checks(tarball, ["descriptor", "ansible_test_sanity"], sanity_root=tmp_path / "home", timeout=60)
    assert not marker.exists()


def test_an_oversized_build_is_refused_before_extraction(tmp_path, monkeypatch):
    from gpuaas_api.catalog import staging
    tarball = collection(tmp_path, "1.0.0")
    monkeypatch.setattr(staging, "MAX_BUILD_BYTES", 100)
    with pytest.raises(staging.BuildRefused, match="limit"):
        staging.run_checks(tarball, ["descriptor"], sanity_root=tmp_path / "home", timeout=60)
    monkeypatch.setattr(staging, "MAX_BUILD_BYTES", 1 << 30)
    monkeypatch.setattr(staging, "MAX_BUILD_MEMBERS", 2)
    with pytest.raises(staging.BuildRefused, match="members"):
        staging.run_checks(tarball, ["descriptor"], sanity_root=tmp_path / "home", timeout=60)


def test_a_builds_own_lint_config_cannot_skip_the_platforms_rules(tmp_path):
    from gpuaas_api.catalog import staging
    skip = "---\nskip_list:\n  - name[missing]\n  - name\n"
    tarball = _repack(collection(tmp_path, "1.0.0", unnamed_task=True), tmp_path,
                      {".ansible-lint": skip, ".config/ansible-lint.yml": skip})
    [lint] = staging.run_checks(tarball, ["ansible_lint"], sanity_root=tmp_path / "home", timeout=300)
    assert lint["status"] == "failed"
    assert "name[missing]" in {f["rule"] for f in lint["findings"]}


def test_sanity_ignores_the_platform_does_not_allow_are_refused_and_the_home_is_copied_per_gate(tmp_path):
    from gpuaas_api.catalog import staging
    template = tmp_path / "template"
    shutil.copytree(SANITY_HOME, template, symlinks=True)
    before = sorted(str(p.relative_to(template)) for p in template.rglob("*"))
    ignore = ("playbooks/step.yml symlinks\nplugins/modules/x.py validate-modules:missing-gplv3-license\n"
              "plugins/modules/x.py pylint:unused-import  # a check a build must not switch off\n")
    tarball = _repack(collection(tmp_path, "1.0.0"), tmp_path, {"tests/sanity/ignore-2.19.txt": ignore})
    refused = staging._neutralize(tmp_path, ())  # nothing there: nothing refused
    assert refused == []
    findings = staging.run_checks(tarball, ["ansible_test_sanity"], sanity_root=template, timeout=300)[0]
    assert findings["status"] == "failed"
    [entry] = [f for f in findings["findings"] if f["rule"] == "sanity-ignore"]
    assert entry["path"] == "tests/sanity/ignore-2.19.txt" and "pylint:unused-import" in entry["message"]
    # The template (the configured home) is not written: each gate ran in its own copy.
    assert sorted(str(p.relative_to(template)) for p in template.rglob("*")) == before


def test_a_gate_whose_build_kills_its_worker_fails_after_three_claims(w, database, tmp_path):
    artifact = publish_draft(w, collection(tmp_path, "4.0.0"))["id"]
    gate = w.call("publisher", "POST", f"/v1/catalog/artifacts/{artifact}/gates", 202,
                  json={"kind": "staging", "reason": "attempts"}).json()
    worker = gate_worker(database, tmp_path)
    for attempt in range(1, 4):  # each claim's worker dies: its lease runs out
        assert worker.claim()["attempts"] == attempt
        with database.transaction() as conn:
            conn.execute("UPDATE promotion_gates SET lease_expires_at = now() - interval '1 s' WHERE id = %s",
                         (gate["id"],))
    worker.run = None  # the fourth claim runs nothing
    worker.tick()
    failed = w.call("publisher", "GET", f"/v1/catalog/gates/{gate['id']}", 200).json()
    assert failed["status"] == "failed" and "started 3 times" in failed["reason"]
