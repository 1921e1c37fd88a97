"""Test hosts for the RKE2 playbooks, against the RKE2 TEST DOUBLE (tests/rke2_double/): Debian 13 hosts of the rke2
flavour, a mirror host serving the double's release (built here in RKE2's air-gap layout, pinned by sha256 like a
real one), an inventory with the instance-like variables, and ad hoc module runs. Used by the integration tests and
bench/bench_rke2.py."""

from __future__ import annotations

import json
import subprocess
import sys
import uuid
from pathlib import Path

from gpuaas_api import testhosts

from .slurm_harness import ANSIBLE, Cluster, ansible_env

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from rke2_double import release  # noqa: E402 - the test double's release builder, beside the tests

VERSION = release.VERSIONS[0]
# A per-test-run token, as the platform generates one per instance: it must never show in any output.
TOKEN = uuid.uuid4().hex + uuid.uuid4().hex
MIRROR_PORT = 8080
UNITS = ("rke2-server", "rke2-agent")
LEFTOVERS = ["/etc/rancher", "/var/lib/rancher/rke2", "/usr/local/bin/rke2", "/usr/local/bin/rke2-uninstall.sh",
             "/usr/local/lib/systemd/system/rke2-server.service", "/usr/local/lib/systemd/system/rke2-agent.service"]


def workload(replicas: int, min_available: int, namespace: str = "default") -> str:
    """A Deployment `web` of `replicas` pods and a PodDisruptionBudget keeping `min_available` of them, for
    `kubectl apply --validate=false -f -` (the double serves no OpenAPI document for kubectl to validate with)."""
    return f"""apiVersion: apps/v1
kind: Deployment
metadata: {{name: web, namespace: {namespace}}}
spec:
  replicas: {replicas}
  selector: {{matchLabels: {{app: web}}}}
  template:
    metadata: {{labels: {{app: web}}}}
    spec: {{containers: [{{name: web, image: registry.example/web:1}}]}}
---
apiVersion: policy/v1
kind: PodDisruptionBudget
metadata: {{name: web, namespace: {namespace}}}
spec: {{minAvailable: {min_available}, selector: {{matchLabels: {{app: web}}}}}}
"""


class Rke2Cluster(Cluster):
    """Test hosts of the rke2 flavour plus a mirror host serving the double's release."""

    servers: list[str]
    agents: list[str]
    version: str = VERSION  # the release the inventory pins
    pins: dict[str, dict[str, str]]  # {version: {file: sha256}} of the published releases

    def inventory(self, name: str = "rke2.ini", **overrides) -> Path:
        """Writes the inventory and its variables: the release is the one `version` names (published first)."""
        variables = {"rke2_token": TOKEN, "rke2_version": self.version, "rke2_artifact_url": self.url_of(self.version),
                     "rke2_sha256sum_sha256": self.pins[self.version][release.SHA256SUM], **overrides}
        variables = {k: v for k, v in variables.items() if v is not None}

        def line(host: str) -> str:
            return f"{host} ansible_host={self.hosts[host]['address']}"

        key = next(iter(self.hosts.values()))["ssh_private_key_file"]
        lines = ["[rke2_servers]", *map(line, self.servers), "", "[rke2_agents]", *map(line, self.agents), "",
                 "[all:vars]", "ansible_user=root", f"ansible_ssh_private_key_file={key}",
                 "ansible_ssh_common_args='-o StrictHostKeyChecking=no -o UserKnownHostsFile=/dev/null'",
                 "ansible_python_interpreter=/usr/bin/python3"]
        path = self.workdir / name
        path.write_text("\n".join(lines) + "\n")
        (self.workdir / "group_vars").mkdir(exist_ok=True)
        (self.workdir / "group_vars" / "all.yml").write_text(json.dumps(variables))
        return path

    def url_of(self, version: str) -> str:
        return f"http://{self.hosts['mirror']['address']}:{MIRROR_PORT}/rke2/{version.replace('+', '-')}"

    def publish(self, version: str) -> dict[str, str]:
        """Builds the double's release of this version, puts it on the mirror, and returns its pins."""
        artifacts = self.workdir / "release" / version
        pins = self.pins[version] = release.build(artifacts, version)
        directory = f"/srv/mirror/rke2/{version.replace('+', '-')}"
        self.sh("mirror", f"mkdir -p {directory}")
        for name in pins:
            subprocess.run(["podman", "cp", str(artifacts / name), f"{self.hosts['mirror']['container']}:{directory}/"],
                           check=True, capture_output=True)
        return pins

    def module(self, host: str, module_name: str, /, check: bool = True, check_mode: bool = False, **args) -> dict:
        """Runs module gpuaas.apps.<name> ad hoc on one host (--check with check_mode); returns its result."""
        cmd = [ANSIBLE, "-i", str(self.inventory()), host, "-m", f"gpuaas.apps.{module_name}",
               *(["-a", json.dumps(args)] if args else []), *(["--check"] if check_mode else [])]
        env = dict(ansible_env(), ANSIBLE_LOAD_CALLBACK_PLUGINS="1", ANSIBLE_STDOUT_CALLBACK="ansible.builtin.json")
        proc = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=300, check=False)
        result = json.loads(proc.stdout)["plays"][0]["tasks"][0]["hosts"][host]
        if check and (proc.returncode != 0 or result.get("failed")):
            raise AssertionError(f"{module_name} on {host} failed ({proc.returncode}): {result}")
        return result

    def daemon_pids(self) -> dict[tuple[str, str], str]:
        """MainPID of rke2-server and rke2-agent on each node host ("0" when not running): a restart changes it."""
        pids = {}
        for host in self.hosts:
            if host == "mirror":
                continue
            out = self.sh(host, "systemctl show -p MainPID --value " + " ".join(UNITS), check=False)
            pids.update({(host, unit): pid for unit, pid in zip(UNITS, out.split(), strict=False)})
        return pids

    def kubectl(self, host: str, args: str) -> str:
        return self.sh(host, f"/var/lib/rancher/rke2/bin/kubectl --kubeconfig /etc/rancher/rke2/rke2.yaml {args}")




def start(prefix: str, workdir: Path, servers: list[str], agents: list[str], spare: list[str] = ()) -> Rke2Cluster:
    """Starts the hosts (servers, agents, spare hosts that join later, the mirror) and serves the release."""
    started = testhosts.up(prefix, [*servers, *agents, *spare, "mirror"], "rke2")
    cluster = Rke2Cluster(prefix, workdir, {h["name"]: h for h in started})
    cluster.servers, cluster.agents, cluster.pins = list(servers), list(agents), {}
    try:
        cluster.publish(VERSION)
        subprocess.run(["podman", "exec", "-d", cluster.hosts["mirror"]["container"], "python3", "-m", "http.server",
                        str(MIRROR_PORT), "--directory", "/srv/mirror"], check=True, capture_output=True)
        cluster.sh("mirror", f"for i in $(seq 50); do python3 -c 'import urllib.request as u; "
                   f"u.urlopen(\"http://127.0.0.1:{MIRROR_PORT}/\")' 2>/dev/null && exit 0; sleep 0.1; done; exit 1")
    except BaseException:
        cluster.stop()
        raise
    return cluster
