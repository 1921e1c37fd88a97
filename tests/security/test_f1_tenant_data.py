"""Finding 1: tenant parameters became Ansible extra vars unchanged, so a service account could run
code as root on the control host (a Jinja lookup), choose the connection, the SSH options or the
target host, and read host-side secrets through a failed operation's message.

Each attack is made here through the API as the ordinary service account, against real runs
(ansible-runner, real playbooks on localhost), and must leave no marker file, no changed connection
and no secret in anything a tenant can read."""

from __future__ import annotations

from operations.helpers import PARAMETERS, TEST_APP, make_instance, wait_op

SA = "service_account"
# Names that would choose a connection, plugin, interpreter or host, or that the platform sets itself.
FORBIDDEN_NAMES = [
    "ansible_connection", "ansible_ssh_common_args", "ansible_host", "ansible_port", "ansible_user",
    "ansible_python_interpreter", "ansible_become_exe", "ansible_ssh_private_key_file",
    "test_members", "test_old", "munge_key",  # the adapter's operation target and secret variables
    "hosts", "environment", "connection", "hostvars", "inventory_hostname", "omit", "vars",
]


def deployed(ops, name: str, **parameters):
    ops.start_worker()
    instance, marker = make_instance(ops, name, **parameters)
    op = ops.w.call(SA, "POST", f"/v1/instances/{instance['id']}/deploy", 202).json()
    return instance, marker, wait_op(ops, op["id"])


def test_jinja_in_a_parameter_value_is_never_evaluated(ops):
    payload = "{{ lookup('pipe', 'touch " + str(ops.marker_root) + "/pwned') }}"
    instance, marker, op = deployed(ops, "jinja", message=payload)
    assert op["status"] == "succeeded", op["error"]
    assert not (ops.marker_root / "pwned").exists(), "the tenant's Jinja ran on the control host"
    assert (marker / "message").read_text() == payload  # written down as plain text


def test_jinja_in_a_parameter_key_is_never_evaluated(ops):
    key = "{{ lookup('pipe', 'touch " + str(ops.marker_root) + "/pwned-key') }}"
    _, marker, op = deployed(ops, "keys", labels={key: "{{ 6 * 7 }}"})
    assert op["status"] == "succeeded", op["error"]
    assert not (ops.marker_root / "pwned-key").exists(), "Jinja in a key ran on the control host"
    assert (marker / "labels").read_text() == key + "={{ 6 * 7 }}\n"


def test_a_failed_operation_cannot_read_host_side_secrets(ops, tmp_path):
    host_secret = tmp_path / "service.key"
    host_secret.write_text("host-side-secret-4f1c9e")
    attack = "{{ lookup('file', '" + str(host_secret) + "') }}"
    _, _, op = deployed(ops, "peek", fail_step="deploy", message=attack)
    assert op["status"] == "failed"
    as_member = ops.w.call("project_member", "GET", f"/v1/operations/{op['id']}", 200).json()
    assert "host-side-secret" not in str(as_member)
    assert "lookup('file'" in as_member["error"]["message"]  # the literal text, never its value


def test_names_that_ansible_or_the_platform_own_are_refused_at_create(ops):
    for name in FORBIDDEN_NAMES:
        body = {"name": "evil", "app_slug": TEST_APP, "allocation_ids": [ops.ids["alloc_ops"]],
                "parameters": {"marker_dir": str(ops.marker_root), name: "local"}}
        r = ops.w.call(SA, "POST", f"/v1/projects/{ops.ids['project_a1']}/instances", 422, json=body)
        assert r.json()["error"]["code"] == "invalid_parameters"
        assert r.json()["error"]["details"]["parameter"] == name


def test_reconfigure_takes_declared_parameters_only(ops):
    instance, marker, op = deployed(ops, "reconf")
    assert op["status"] == "succeeded"
    url = f"/v1/instances/{instance['id']}/reconfigure"
    for name in FORBIDDEN_NAMES + ["undeclared"]:
        r = ops.w.call(SA, "POST", url, 422, json={"parameters": {name: "x"}})
        assert r.json()["error"]["details"]["parameter"] == name, r.text
    r = ops.w.call(SA, "POST", url, 422, json={"parameters": {"round": "not a number"}})
    assert r.json()["error"]["details"]["parameter"] == "round"
    ok = ops.w.call(SA, "POST", url, 202, json={"parameters": {"round": 2}}).json()
    assert wait_op(ops, ok["id"])["status"] == "succeeded"


def test_a_stored_parameter_that_escaped_validation_never_reaches_a_run(ops):
    """Rows written before schemas existed (or by hand) are checked again when the run is planned."""
    instance, marker = make_instance(ops, "legacy")
    ops.sql("""UPDATE app_instances SET parameters = parameters || '{"ansible_connection": "ssh",
               "ansible_host": "192.0.2.1"}'::jsonb WHERE id = %s RETURNING id""", (instance["id"],))
    ops.start_worker()
    op = ops.w.call(SA, "POST", f"/v1/instances/{instance['id']}/deploy", 202).json()
    done = wait_op(ops, op["id"])
    assert done["status"] == "failed" and done["error"]["code"] == "invalid_parameters", done
    assert not (marker / "log").exists(), "the playbook ran with a tenant-chosen connection"


def publish(ops, version: str, *, extra_vars=None, action_vars=None, parameters=None):
    from operations.helpers import DESCRIPTOR

    spec = {k: v for k, v in DESCRIPTOR.items() if k not in ("app", "version")}
    spec["vars"] = spec["vars"] | (extra_vars or {})
    spec["action_vars"] = {k: v | (action_vars or {}).get(k, {}) for k, v in spec["action_vars"].items()}
    spec["parameters"] = parameters or spec["parameters"]
    artifact = ops.w.call("platform_admin", "GET", f"/v1/catalog/apps/{TEST_APP}/artifacts", 200).json()["items"][0]
    return ops.w.call("platform_admin", "POST", f"/v1/catalog/apps/{TEST_APP}/versions", json={
        "version": version, "artifact_id": artifact["id"], "adapter": spec})


BAD_VERSIONS = [
    {"extra_vars": {"ansible_connection": "local"}},
    {"action_vars": {"deploy": {"ansible_host": "192.0.2.1"}}},
    {"extra_vars": {"test_members": "w1"}},
    {"parameters": PARAMETERS | {"properties": {"ansible_port": {"type": "integer"}}}},
    {"parameters": PARAMETERS | {"properties": {"munge_key": {"type": "string"}}}},
    {"parameters": {"type": "object", "properties": {"a": {"type": "string"}}}},  # open to any other name
    {"parameters": {"type": "object", "additionalProperties": False, "properties": {"a": {"type": "nope"}}}},
]


def test_catalog_versions_obey_the_same_rules(ops):
    for change in BAD_VERSIONS:
        r = publish(ops, "9.9.9", **change)
        assert r.status_code == 422, (change, r.text)
        assert r.json()["error"]["code"] == "validation_error"
