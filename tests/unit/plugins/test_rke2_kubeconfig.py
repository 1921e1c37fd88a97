"""rke2_kubeconfig: the admin kubeconfig as RKE2 writes it, its server URL pointed at the server's address (its
node-ip by default), everything else as it was; run for real with `ansible -m` on localhost too."""

import sys

import pytest
from ansible_collections.gpuaas.apps.plugins.modules import rke2_kubeconfig
from live_ansible import run

# As RKE2 writes /etc/rancher/rke2/rke2.yaml (its layout and keys; the certificate data shortened).
RKE2_YAML = """apiVersion: v1
clusters:
- cluster:
    certificate-authority-data: LS0tLS1CRUdJTiBDRVJUSUZJQ0FURS0tLS0tCk1JSUJkekNDQVIyZ0F3SUJB
    server: https://127.0.0.1:6443
  name: default
contexts:
- context:
    cluster: default
    user: default
  name: default
current-context: default
kind: Config
preferences: {}
users:
- name: default
  user:
    client-certificate-data: LS0tLS1CRUdJTiBDRVJUSUZJQ0FURS0tLS0tCk1JSUJrVENDQVRlZ0F3SUJBZ0lJYzFxZz0KCg==
    client-key-data: LS0tLS1CRUdJTiBFQyBQUklWQVRFIEtFWS0tLS0tCk1IY0NBUUVFSUp4dz0KCg==
"""
CONFIG = """cni: canal
node-ip: 10.0.0.11
node-label: []
node-name: s1
token: {token}
"""


def test_only_the_server_url_changes():
    rewritten = rke2_kubeconfig.rewrite(RKE2_YAML, "https://10.0.0.11:6443")
    assert rewritten == RKE2_YAML.replace("https://127.0.0.1:6443", "https://10.0.0.11:6443")
    with pytest.raises(ValueError, match="names no server"):
        rke2_kubeconfig.rewrite("apiVersion: v1\nkind: Config\n", "https://10.0.0.11:6443")


@pytest.mark.parametrize("address, url", [("10.0.0.11", "https://10.0.0.11:6443"),
                                          ("fd00::11", "https://[fd00::11]:6443"),
                                          ("[fd00::11]", "https://[fd00::11]:6443"),
                                          ("s1.example.internal", "https://s1.example.internal:6443")])
def test_server_urls(address, url):
    assert rke2_kubeconfig.server_url(address, 6443) == url


@pytest.mark.parametrize("config, address", [
    (CONFIG, "10.0.0.11"),
    ("node-ip: '10.0.0.11'\n", "10.0.0.11"),
    ("node-ip: 10.0.0.11,fd00::11  # dual-stack\n", "10.0.0.11"),
    ("node-ip: [10.0.0.11, fd00::11]\n", "10.0.0.11"),
    ("node-ip:\n- 10.0.0.11\n- fd00::11\n", "10.0.0.11"),
    ("node-name: s1\n", None),
    ("node-ip: ''\n", None),
])
def test_node_ip(config, address):
    assert rke2_kubeconfig.node_ip(config) == address


def test_a_run_on_a_server_points_the_kubeconfig_at_its_node_ip(tmp_path):
    token = "K10secret-token-that-must-stay-on-the-host"
    (tmp_path / "rke2.yaml").write_text(RKE2_YAML)
    (tmp_path / "config.yaml").write_text(CONFIG.format(token=token))
    inventory = tmp_path / "hosts"
    inventory.write_text(f"s1 ansible_connection=local ansible_python_interpreter={sys.executable}\n")
    args = {"path": str(tmp_path / "rke2.yaml"), "config": str(tmp_path / "config.yaml")}

    result = run(inventory, "s1", "rke2_kubeconfig", args, check=True)[0]  # reads only: check mode is a run
    assert not result.get("failed"), result
    assert result["changed"] is False and result["server"] == "https://10.0.0.11:6443"
    assert result["kubeconfig"] == RKE2_YAML.replace("127.0.0.1", "10.0.0.11")
    assert token not in str(result)  # config.yaml gives its node-ip, nothing else
    assert (tmp_path / "rke2.yaml").read_text() == RKE2_YAML

    given = run(inventory, "s1", "rke2_kubeconfig", dict(args, server_address="192.168.7.7", port=443))[0]
    assert given["server"] == "https://192.168.7.7:443" and "server: https://192.168.7.7:443\n" in given["kubeconfig"]

    missing = run(inventory, "s1", "rke2_kubeconfig", dict(args, path=str(tmp_path / "absent.yaml")))[0]
    assert missing["failed"] and "cannot read the admin kubeconfig" in missing["msg"]
