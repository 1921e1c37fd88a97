"""The raw-SSH floor for the OCI workload: the least a person would do over SSH to run the same signed image.

bench/bench_oci_speed.py times this next to the playbooks on identical fresh test hosts. Each step runs one
`ssh <host> bash -s` per host, with nothing on the hosts beyond podman: the script writes the trust files
(policy.json requiring a sigstore signature for the image's repository, registries.d looking for the
signatures as sigstore attachments, registries.conf.d reaching the registry over plain HTTP), pulls the
image by digest (podman checks the signature), writes a systemd unit that runs `podman run --rm --replace
--pull=never --network host --cgroups=disabled`, (re)starts it and polls the service until it answers
(bash's /dev/tcp: the test hosts have neither curl nor wget).

    deploy(hosts, image)    every host at once
    again(hosts, image)     the no-change run: every host at once checks that its unit and trust files are
                            what deploy writes, that the container runs the image's digest and answers
    upgrade(hosts, image)   one host after the other, each pulling, then restarting until it answers
    add(host, image)        deploy on the one new host
"""

from __future__ import annotations

import base64
import json
import shlex
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "api"))

from gpuaas_api import testhosts  # noqa: E402

NAME = "web"
UNIT = f"/etc/systemd/system/gpuaas-floor-{NAME}.service"
REGISTRIES_D = f"/etc/containers/registries.d/{NAME}.yaml"
REGISTRIES_CONF_D = f"/etc/containers/registries.conf.d/{NAME}.conf"
POLICY = "/etc/containers/policy.json"

# One GET on the workload's port; its status line must say 200.
ANSWERS = """\
answers() {{
  ( exec 3<>/dev/tcp/127.0.0.1/{port} && printf 'GET {path} HTTP/1.0\\r\\n\\r\\n' >&3 \\
    && head -n1 <&3 | grep -q ' 200 ' ) 2>/dev/null
}}
"""
WAIT = """\
end=$((SECONDS + 60))
until answers; do
  [ $SECONDS -lt $end ] || {{ echo 'the workload did not answer in 60 s' >&2; exit 1; }}; sleep {interval}
done
"""


class Floor:
    """The workload on test hosts (dicts from testhosts.up: name, address), set up by plain SSH."""

    def __init__(self, registry: str, public_pem: bytes, port: int = 8080, path: str = "/version.txt",
                 interval: float = 0.2):
        self.registry, self.public_pem = registry, public_pem
        self.port, self.path, self.interval = port, path, interval

    # -- what the hosts hold -------------------------------------------------------------------------------

    def files(self, image: str) -> dict[str, str]:
        """Path -> content of every file a deploy of `image` writes."""
        repository = image.split("@")[0]
        policy = {"default": [{"type": "insecureAcceptAnything"}],
                  "transports": {"docker": {repository: [{
                      "type": "sigstoreSigned", "keyData": base64.b64encode(self.public_pem).decode(),
                      "signedIdentity": {"type": "matchRepository"}}]}}}
        return {
            POLICY: json.dumps(policy, indent=2) + "\n",
            REGISTRIES_D: f"docker:\n  {repository}:\n    use-sigstore-attachments: true\n",
            REGISTRIES_CONF_D: f'[[registry]]\nlocation = "{self.registry}"\ninsecure = true\n',
            UNIT: self.unit(image),
        }

    @staticmethod
    def unit(image: str) -> str:
        return (
            "[Unit]\nDescription=web (OCI workload, the floor)\nWants=network-online.target\n"
            "After=network-online.target\n\n[Service]\nEnvironment=PODMAN_SYSTEMD_UNIT=%n\nRestart=on-failure\n"
            f"ExecStart=/usr/bin/podman run --rm --replace --pull=never --name {NAME} --network host "
            f"--cgroups=disabled --sdnotify=conmon --detach {image}\n"
            f"ExecStop=/usr/bin/podman stop --ignore -t 2 {NAME}\n"
            "Type=notify\nNotifyAccess=all\n\n[Install]\nWantedBy=multi-user.target\n"
        )

    def write_files(self, image: str) -> str:
        out = "mkdir -p /etc/containers/registries.d /etc/containers/registries.conf.d\n"
        for path, content in self.files(image).items():
            out += f"cat > {path} <<'GPUAAS_EOF'\n{content}GPUAAS_EOF\n"
        return out

    def answers(self) -> str:
        return ANSWERS.format(port=self.port, path=self.path)

    def step(self, image: str) -> str:
        """Trust, pull, unit, (re)start, wait: one host's deploy (or upgrade) of `image`."""
        unit = Path(UNIT).name
        return (self.write_files(image)
                + f"podman pull --quiet {shlex.quote(image)} >/dev/null </dev/null\n"
                + f"systemctl daemon-reload\nsystemctl enable --quiet {unit}\nsystemctl restart {unit}\n"
                + self.answers() + WAIT.format(interval=self.interval))

    def check(self, image: str) -> str:
        """Changes nothing: fails unless every file, the unit's state and the container's image are right."""
        out = ""
        for path, content in self.files(image).items():
            out += (f"cmp -s {path} - <<'GPUAAS_EOF' || {{ echo '{path} differs' >&2; exit 1; }}\n"
                    f"{content}GPUAAS_EOF\n")
        digest = image.split("@")[1]
        out += (f"systemctl is-active --quiet {Path(UNIT).name}\n"
                f"[ \"$(podman container inspect --format '{{{{.ImageDigest}}}}' {NAME} </dev/null)\" = {digest} ]\n")
        return out + self.answers() + "answers\n"

    # -- the steps -----------------------------------------------------------------------------------------

    def ssh(self, host: dict, script: str, timeout: float = 300) -> str:
        proc = subprocess.run([*testhosts.ssh_command(host["address"]), "bash", "-s"], input="set -e\n" + script,
                              capture_output=True, text=True, timeout=timeout, check=False)
        if proc.returncode != 0:
            raise RuntimeError(f"floor: {host['name']} failed ({proc.returncode}): {proc.stderr.strip()[-2000:]}")
        return proc.stdout

    def parallel(self, hosts: list[dict], script: str) -> None:
        with ThreadPoolExecutor(len(hosts)) as pool:
            list(pool.map(lambda host: self.ssh(host, script), hosts))

    def deploy(self, hosts: list[dict], image: str) -> None:
        self.parallel(hosts, self.step(image))

    def again(self, hosts: list[dict], image: str) -> None:
        self.parallel(hosts, self.check(image))

    def upgrade(self, hosts: list[dict], image: str) -> None:
        for host in hosts:
            self.ssh(host, self.step(image))

    def add(self, host: dict, image: str) -> None:
        self.ssh(host, self.step(image))
