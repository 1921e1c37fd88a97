"""oci_trust on real files in a temporary directory: what it writes into the trust policy and the drop-ins,
what it keeps, what it removes, check mode and diff. The module runs in-process (its main(), only its exit
captured), and once for real through `ansible -m` (AnsiballZ and all) on the control node. The trust these
files configure is proven on real podman hosts by tests/integration/test_oci_lifecycle.py."""

import base64
import json
import sys
from unittest import mock

import live_ansible
import pytest
from ansible.module_utils import basic
from ansible.module_utils.testing import patch_module_args
from ansible_collections.gpuaas.apps.plugins.modules import oci_trust

PEM = "-----BEGIN PUBLIC KEY-----\nMFkwEwYHKoZIzj0CAQYIKoZIzj0DAQcDQgAE\n-----END PUBLIC KEY-----\n"
# Debian's containers-common policy, as the operator left it (formatting included).
SHIPPED = '{\n    "default": [{"type": "insecureAcceptAnything"}],\n    "transports": {\n' \
          '        "docker-daemon": {"": [{"type": "insecureAcceptAnything"}]},\n' \
          '        "docker": {"quay.io/team": [{"type": "reject"}]}\n    }\n}\n'
SCOPE = "10.88.0.5:5000/apps/web"


class Ended(Exception):
    def __init__(self, result):
        super().__init__(result.get("msg", ""))
        self.result = result


def run_in_process(args, check=False, diff=False):
    """The module's result (with failed=True when it failed), from its main() run in this process."""
    def end(failed):
        def record(module, **result):
            raise Ended(dict(result, failed=failed))
        return record

    args = dict(args, _ansible_check_mode=check, _ansible_diff=diff)
    with (patch_module_args(args), mock.patch.object(basic.AnsibleModule, "exit_json", end(False)),
          mock.patch.object(basic.AnsibleModule, "fail_json", end(True)), pytest.raises(Ended) as ended):
        oci_trust.main()
    return ended.value.result


@pytest.fixture
def node(tmp_path):
    """The control node as the target, with the containers configuration under tmp_path."""
    inventory = tmp_path / "hosts.ini"
    inventory.write_text(f"node ansible_connection=local ansible_python_interpreter={sys.executable}\n")
    (tmp_path / "registries.d").mkdir()
    (tmp_path / "registries.conf.d").mkdir()
    (tmp_path / "policy.json").write_text(SHIPPED)

    class Node:
        path = tmp_path

        def args(self, args):
            return {"policy_path": str(tmp_path / "policy.json"), "registries_d": str(tmp_path / "registries.d"),
                    "registries_conf_d": str(tmp_path / "registries.conf.d")} | args

        def trust(self, check=False, diff=False, **args):
            return run_in_process(self.args(args), check=check, diff=diff)

        def trust_through_ansible(self, **args):
            return live_ansible.run(inventory, "node", "oci_trust", self.args(args))[0]

        def policy(self):
            return json.loads((tmp_path / "policy.json").read_text())

        def files(self):
            return sorted(str(p.relative_to(tmp_path)) for p in tmp_path.rglob("*") if p.is_file())

    return Node()


def test_present_requires_the_signature_for_its_scopes_and_keeps_the_rest(node):
    result = node.trust_through_ansible(name="web", scopes=[SCOPE], public_key=PEM,
                                        insecure_registries=["10.88.0.5:5000"])
    assert result["changed"] and not result.get("failed"), result
    assert result["scopes"] == [SCOPE]
    policy = node.policy()
    (requirement,) = policy["transports"]["docker"][SCOPE]
    assert requirement["type"] == "sigstoreSigned" and requirement["signedIdentity"] == {"type": "matchRepository"}
    assert base64.b64decode(requirement["keyData"]).decode() == PEM
    shipped = json.loads(SHIPPED)
    assert policy["default"] == shipped["default"]
    assert policy["transports"]["docker-daemon"] == shipped["transports"]["docker-daemon"]
    assert policy["transports"]["docker"]["quay.io/team"] == [{"type": "reject"}]
    assert node.files() == ["hosts.ini", "policy.json", "registries.conf.d/gpuaas-web.conf",
                            "registries.d/gpuaas-web.yaml"]
    assert '"use-sigstore-attachments": true' in (node.path / "registries.d/gpuaas-web.yaml").read_text()
    conf = (node.path / "registries.conf.d/gpuaas-web.conf").read_text()
    assert 'location = "10.88.0.5:5000"\ninsecure = true' in conf

    again = node.trust(name="web", scopes=[SCOPE], public_key=PEM, insecure_registries=["10.88.0.5:5000"])
    assert again["changed"] is False, again


def test_absent_removes_exactly_what_present_added(node):
    node.trust(name="web", scopes=[SCOPE], public_key=PEM, insecure_registries=["10.88.0.5:5000"])
    # A later version from another repository adds its scope; the record keeps both.
    second = node.trust(name="web", scopes=["10.88.0.5:5000/apps/web2"], public_key=PEM)
    assert second["scopes"] == [SCOPE, "10.88.0.5:5000/apps/web2"]
    assert not (node.path / "registries.conf.d/gpuaas-web.conf").exists(), "no insecure registry asked for any more"

    removed = node.trust(name="web", state="absent")
    assert removed["changed"] and sorted(removed["removed_scopes"]) == [SCOPE, "10.88.0.5:5000/apps/web2"]
    assert node.policy() == json.loads(SHIPPED)
    assert node.files() == ["hosts.ini", "policy.json"]
    assert node.trust(name="web", state="absent")["changed"] is False


def test_a_scope_another_workload_also_records_stays(node):
    node.trust(name="web", scopes=[SCOPE], public_key=PEM)
    node.trust(name="api", scopes=[SCOPE, "10.88.0.5:5000/apps/api"], public_key=PEM)
    result = node.trust(name="web", state="absent")
    assert result["kept_scopes"] == [SCOPE] and result["removed_scopes"] == []
    assert SCOPE in node.policy()["transports"]["docker"]
    result = node.trust(name="api", state="absent")
    assert sorted(result["removed_scopes"]) == ["10.88.0.5:5000/apps/api", SCOPE]
    assert node.policy() == json.loads(SHIPPED)


def test_check_mode_changes_nothing_and_diff_shows_each_file(node):
    result = node.trust(check=True, diff=True, name="web", scopes=[SCOPE], public_key=PEM,
                        insecure_registries=["10.88.0.5:5000"])
    assert result["changed"] is True
    assert (node.path / "policy.json").read_text() == SHIPPED
    assert node.files() == ["hosts.ini", "policy.json"]
    diffs = {d["after_header"]: d for d in result["diff"]}
    assert SCOPE in diffs[str(node.path / "policy.json")]["after"]
    assert diffs[str(node.path / "registries.d/gpuaas-web.yaml")]["before"] == ""
    assert "insecure = true" in diffs[str(node.path / "registries.conf.d/gpuaas-web.conf")]["after"]


def test_unsigned_is_an_explicit_opt_out(node):
    result = node.trust(name="web", scopes=[SCOPE])
    assert result.get("failed") and "public_key is required" in result["msg"]
    assert node.files() == ["hosts.ini", "policy.json"]
    result = node.trust(name="web", scopes=[SCOPE], unsigned=True)
    assert result["changed"] and node.policy()["transports"]["docker"][SCOPE] == [{"type": "insecureAcceptAnything"}]
    assert '"use-sigstore-attachments": false' in (node.path / "registries.d/gpuaas-web.yaml").read_text()
    result = node.trust(name="web", scopes=[SCOPE], unsigned=True, public_key=PEM)
    assert result.get("failed") and "not both" in result["msg"]


@pytest.mark.parametrize(("args", "words"), [
    ({"name": "web", "scopes": [f"{SCOPE}@sha256:{'a' * 64}"], "public_key": PEM},
     "is not a registry or repository scope"),
    ({"name": "web", "scopes": [], "public_key": PEM}, "state=present needs scopes"),
    ({"name": "Web", "scopes": [SCOPE], "public_key": PEM}, "name 'Web'"),
    ({"name": "web", "scopes": [SCOPE], "public_key": "ssh-ed25519 AAAA"}, "must be a PEM block"),
])
def test_bad_requests_are_refused_before_any_file_changes(node, args, words):
    result = node.trust(**args)
    assert result.get("failed") and words in result["msg"], result
    assert (node.path / "policy.json").read_text() == SHIPPED
    assert node.files() == ["hosts.ini", "policy.json"]


def test_a_missing_policy_is_created_with_debians_default(node):
    (node.path / "policy.json").unlink()
    node.trust(name="web", scopes=[SCOPE], public_key=PEM)
    assert node.policy()["default"] == [{"type": "insecureAcceptAnything"}]
    node.trust(name="web", state="absent")
    assert node.policy() == {"default": [{"type": "insecureAcceptAnything"}]}
