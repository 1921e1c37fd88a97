"""Runtime access credentials (POST /v1/instances/{id}/credentials/{name}): the test app declares one whose
module (tests/apps/opsapp fake_credential, a test double of a cluster's admin configuration: there is no
cluster here) returns a secret the test generates and writes on the hosts. A real ad-hoc ansible-runner run
of the app's build reads it from a worker's host (localhost), the real PostgreSQL records the issuance.
The secret must reach the caller and nothing else: no event, audit row, operation, log record or file."""

from __future__ import annotations

import gzip
import io
import logging
import os
import secrets
import tarfile
import tempfile
import time
from pathlib import Path

from psycopg import sql

from .helpers import CREDENTIAL, deployed_with_credential, events, make_instance, members

SA = "service_account"


def issued_events(ops, iid: str) -> list[dict]:
    return events(ops, iid, type="runtime_secret.issued")


def database_text(ops) -> str:
    """Every row of every table as text, and every stored run artifact unpacked: where a secret could persist."""
    tables = [r["table_name"] for r in ops.sql(
        "SELECT table_name FROM information_schema.tables WHERE table_schema = 'public' AND table_type = 'BASE TABLE'")]
    rows = [r["t"] for table in tables for r in ops.sql(
        sql.SQL("SELECT to_jsonb(t)::text AS t FROM {} t").format(sql.Identifier(table)))]
    for artifact in ops.sql("SELECT tarball FROM operation_artifacts"):
        with tarfile.open(fileobj=io.BytesIO(gzip.decompress(bytes(artifact["tarball"])))) as tar:
            rows += [tar.extractfile(m).read().decode(errors="replace") for m in tar.getmembers() if m.isfile()]
    return "\n".join(rows)


def files_holding(text: str, roots: list[Path], since: float, apart: set[Path]) -> list[Path]:
    """Files under `roots` written since `since` (except `apart`) that hold `text`."""
    found = []
    for root in roots:
        for directory, _, names in os.walk(root):  # other processes' files come and go meanwhile: skip those
            for path in (Path(directory) / name for name in names):
                try:
                    if (path.is_file() and not path.is_symlink() and path not in apart
                            and path.stat().st_mtime >= since and path.stat().st_size < 64 << 20
                            and text.encode() in path.read_bytes()):
                        found.append(path)
                except OSError:
                    continue
    return found


def test_a_credential_is_read_from_a_serving_member_and_given_to_the_caller_alone(ops, local_hosts, caplog):
    caplog.set_level(logging.DEBUG)
    iid, (w1, w2), marker = deployed_with_credential(ops, "creds")
    url = f"/v1/instances/{iid}/credentials/{CREDENTIAL}"
    started = time.time() - 1
    runs_before = ops.sql("SELECT count(*) AS n FROM operations")[0]["n"]
    events_before = len(events(ops, iid))

    # No host keeps it yet: each worker is asked in turn, and the answer says why neither gave it.
    refused = ops.w.call(SA, "POST", url, 502).json()["error"]
    assert refused["code"] == "credential_unavailable" and refused["correlation_id"]
    assert [a["node_name"] for a in refused["details"]["attempts"]] == [w1, w2]
    assert all("cannot read the credential" in a["reason"] for a in refused["details"]["attempts"]), refused

    # Only w2 keeps it: w1 fails, w2 answers, with the options templated on its own host.
    secret = f"apiVersion: v1\ntoken: {secrets.token_urlsafe(32)}\n"
    (marker / f"{w2}.secret").write_text(secret)
    response = ops.w.call(SA, "POST", url, 200)
    assert response.headers["cache-control"] == "no-store"
    body = response.json()
    assert (body["name"], body["content"], body["node_name"]) == (CREDENTIAL, secret, w2)
    assert (body["media_type"], body["filename"]) == ("text/plain", "opsapp-admin.txt")

    # A degraded instance still answers (its control plane does); every issuance is audited.
    ops.sql("UPDATE app_instances SET status = 'degraded' WHERE id = %s RETURNING id", (iid,))
    assert ops.w.call(SA, "POST", url, 200).json()["content"] == secret

    issued = issued_events(ops, iid)
    w2_member = next(m for m in members(ops, iid) if m["node_name"] == w2)
    assert [e["payload"] for e in issued] == [{
        "purpose": "operator_access", "credential": CREDENTIAL, "module": "gpuaas_tests.opsapp.fake_credential",
        "node_name": w2, "host_name": w2_member["host_name"],
        "issued_to": {"kind": "service_account", "id": ops.ids["sa_service_account"]}}] * 2
    assert {e["member_id"] for e in issued} == {w2_member["id"]}
    assert issued[0]["correlation_id"] == response.headers["x-correlation-id"]
    audit = ops.w.call("tenant_admin", "GET", "/v1/audit", 200, params={
        "project_id": ops.ids["project_a1"], "action": "runtime_secret.issued"}).json()["items"]
    assert len(audit) == 2 and {(a["actor_kind"], a["actor_id"], a["app_instance_id"]) for a in audit} == {
        ("service_account", ops.ids["sa_service_account"], iid)}
    # The runs themselves left no trace: no operation, no event but the issuances.
    assert ops.sql("SELECT count(*) AS n FROM operations")[0]["n"] == runs_before
    assert len(events(ops, iid)) == events_before + 2

    # The secret went to the caller alone.
    token = secret.split("token: ")[1].strip()
    assert token not in database_text(ops)
    logged = [r for r in caplog.records if token in r.getMessage() or token in repr(r.__dict__)]
    assert not logged and caplog.records  # the requests and the runs did log
    temp = Path(tempfile.gettempdir())
    assert not list(temp.glob("gpuaas-credential-*")), "a run's scratch directory outlived its request"
    assert files_holding(token, [temp, ops.settings.state_dir, Path.home() / ".ansible"], started,
                         apart={marker / f"{w2}.secret"}) == []


def test_refusals_name_the_reason_and_issue_nothing(ops):
    instance, _ = make_instance(ops, "closed")
    iid = instance["id"]
    url = f"/v1/instances/{iid}/credentials/{CREDENTIAL}"

    unknown = ops.w.call(SA, "POST", f"/v1/instances/{iid}/credentials/no-such", 404).json()["error"]
    assert unknown["code"] == "not_found" and unknown["details"] == {"kind": "credential", "id": "no-such"}
    not_running = ops.w.call(SA, "POST", url, 409).json()["error"]
    assert not_running["code"] == "instance_not_operable" and not_running["details"] == {"status": "created"}

    # Reading the instance is not enough: a project member and a read-only service account are refused.
    viewer = ops.w.call("project_admin", "POST", f"/v1/projects/{ops.ids['project_a1']}/service-accounts", 201,
                        json={"name": "viewer", "roles": ["sa_viewer"]}).json()
    ops.w.tokens["viewer"] = ops.w.call(
        "project_admin", "POST", f"/v1/projects/{ops.ids['project_a1']}/service-accounts/{viewer['id']}/tokens", 201,
        json={"name": "read"}).json()["token"]
    for reader in ("project_member", "viewer"):
        ops.w.call(reader, "GET", f"/v1/instances/{iid}", 200)
        denied = ops.w.call(reader, "POST", url, 403).json()["error"]
        assert denied["details"] == {"permission": "apps.instance.credentials.issue"}
    # Another tenant, another project: the instance does not exist for them.
    for outsider in ("other_tenant_admin", "other_service_account"):
        hidden = ops.w.call(outsider, "POST", url, 404).json()["error"]
        assert hidden["details"] == {"kind": "app_instance", "id": iid}
    assert issued_events(ops, iid) == []


def test_a_credential_without_options_runs_its_module_without_arguments(ops, local_hosts):
    """A credential may declare no options (RKE2's admin kubeconfig): its module then runs with no arguments,
    not with an empty free-form argument, which every module refuses. The test app's module needs a path, so
    here each member answers that one is missing: proof that the module itself ran."""
    iid, workers, _ = deployed_with_credential(ops, "bare")
    ops.sql("""UPDATE app_versions SET adapter = jsonb_set(adapter, ARRAY['credentials', %s, 'options'], '{}')
                WHERE id = (SELECT app_version_id FROM app_instances WHERE id = %s) RETURNING id""", (CREDENTIAL, iid))
    error = ops.w.call(SA, "POST", f"/v1/instances/{iid}/credentials/{CREDENTIAL}", 502).json()["error"]
    reasons = {a["node_name"]: a["reason"] for a in error["details"]["attempts"]}
    assert set(reasons) == set(workers), reasons
    assert all("missing required arguments: path" in why for why in reasons.values()), reasons
