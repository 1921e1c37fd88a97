"""Drives the collection's playbooks against real containerized test hosts and reads real Slurm state.

Shared by the integration tests and bench/bench_slurm_speed.py.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

from gpuaas_api import testhosts

ROOT = Path(__file__).resolve().parents[2]

# Unprivileged containers cannot initialize Slurm's cgroup plugins (FACTS.md); production keeps them.
TEST_HOST_VARS = {
    "slurm_controller_proctrack_type": "proctrack/linuxproc",
    "slurm_controller_task_plugin": "task/none",
    # The image holds every package and a fresh apt cache: do not go to the mirror on each run.
    "gpuaas_apt_cache_valid_time": 31536000,
}
# The ansible-playbook of the Python running the tests (the project venv), else the one on PATH.
_venv_playbook = Path(sys.executable).parent / "ansible-playbook"
ANSIBLE_PLAYBOOK = str(_venv_playbook) if _venv_playbook.exists() else shutil.which("ansible-playbook")
ANSIBLE = str(Path(ANSIBLE_PLAYBOOK).with_name("ansible")) if ANSIBLE_PLAYBOOK else None
DAEMONS = ("slurmctld", "slurmd", "munge", "slurmdbd")
LOCAL_REPO = Path(__file__).with_name("local_repo.py")


def ansible_env() -> dict[str, str]:
    return dict(
        os.environ,
        ANSIBLE_COLLECTIONS_PATH=str(ROOT / "build" / "collections"),
        ANSIBLE_HOST_KEY_CHECKING="False",
        ANSIBLE_NOCOLOR="1",
        ANSIBLE_FORCE_COLOR="0",
    )


_RECAP = re.compile(r"^(\S+)\s+: ok=(\d+)\s+changed=(\d+)\s+unreachable=(\d+)\s+failed=(\d+)", re.M)


@dataclass
class PlaybookRun:
    rc: int
    output: str
    seconds: float
    recap: dict[str, dict[str, int]] = field(default_factory=dict)

    @property
    def hosts_touched(self) -> set[str]:
        return {host for host in self.recap if host != "localhost"}

    @property
    def changed(self) -> dict[str, int]:
        return {host: counts["changed"] for host, counts in self.recap.items()}


class Cluster:
    """A set of running test hosts plus the inventory that describes the Slurm cluster on them."""

    def __init__(self, prefix: str, workdir: Path, hosts: dict[str, dict], flavor: str = "slurm"):
        self.prefix = prefix
        self.flavor = flavor
        self.workdir = workdir
        self.hosts = hosts
        self.controller = "ctl"
        self.workers: list[str] = []
        self.extra_groups: dict[str, list[str]] = {}

    @classmethod
    def start(cls, prefix: str, workdir: Path, names: list[str], flavor: str = "slurm") -> Cluster:
        """Hosts of a testhosts flavor: "slurm" (Debian 12, Slurm 22.05) or "slurm-trixie" (Debian 13, 24.11)."""
        started = testhosts.up(prefix, names, flavor)
        return cls(prefix, workdir, {h["name"]: h for h in started}, flavor)

    def add_hosts(self, names: list[str]) -> None:
        for h in testhosts.up(self.prefix, names, self.flavor):
            self.hosts[h["name"]] = h

    def stop(self) -> None:
        testhosts.down(self.prefix)

    def inventory(
        self,
        controllers: list[str] | None = None,
        workers: list[str] | None = None,
        host_overrides: dict[str, dict] | None = None,
        name: str = "hosts.ini",
    ) -> Path:
        controllers = [self.controller] if controllers is None else controllers
        workers = self.workers if workers is None else workers
        overrides = host_overrides or {}

        def line(host: str) -> str:
            h = self.hosts[host]
            attrs = {"ansible_host": h["address"], **overrides.get(host, {})}
            return host + "".join(f" {k}={v}" for k, v in attrs.items())

        lines = ["[slurm_controller]", *map(line, controllers), "", "[slurm_workers]", *map(line, workers)]
        for group, members in self.extra_groups.items():
            lines += ["", f"[{group}]", *map(line, members)]
        key = next(iter(self.hosts.values()))["ssh_private_key_file"]
        lines += [
            "",
            "[all:vars]",
            "ansible_user=root",
            f"ansible_ssh_private_key_file={key}",
            "ansible_ssh_common_args='-o StrictHostKeyChecking=no -o UserKnownHostsFile=/dev/null'",
            "ansible_python_interpreter=/usr/bin/python3",
        ]
        lines += [f"{k}={v}" for k, v in TEST_HOST_VARS.items()]
        path = self.workdir / name
        path.write_text("\n".join(lines) + "\n")
        return path

    def playbook(self, name: str, inventory: Path | None = None, timeout: float = 900, verbose: bool = False,
                 **extra_vars) -> PlaybookRun:
        """Runs playbook gpuaas.apps.<name>; verbose (-v) shows what each task printed."""
        # As docs/slurm-playbooks.md tells operators: at least as many forks as hosts.
        cmd = [ANSIBLE_PLAYBOOK, "-i", str(inventory or self.inventory()), "--forks", str(max(5, len(self.hosts))),
               f"gpuaas.apps.{name}", *(["-v"] if verbose else [])]
        for key, value in extra_vars.items():
            # Strings as key=value, anything structured as JSON so Ansible keeps its type.
            cmd += ["-e", f"{key}={value}" if isinstance(value, str) else json.dumps({key: value})]
        env = ansible_env()
        started = time.monotonic()
        proc = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=timeout, check=False)
        seconds = time.monotonic() - started
        output = proc.stdout + proc.stderr
        recap = {
            m[1]: {"ok": int(m[2]), "changed": int(m[3]), "unreachable": int(m[4]), "failed": int(m[5])}
            for m in _RECAP.finditer(output)
        }
        (self.workdir / f"{name}-{int(time.time() * 1000)}.log").write_text(output)
        return PlaybookRun(proc.returncode, output, seconds, recap)

    def module(self, host: str, name: str, check: bool = True, **args) -> dict:
        """Runs module gpuaas.apps.<name> on one host of the cluster's inventory, as the platform's health check
        runs its status module (ad hoc); returns its result. check=False returns a failed module's result too."""
        cmd = [ANSIBLE, "-i", str(self.inventory()), host, "-o", "-m", f"gpuaas.apps.{name}", "-a", json.dumps(args)]
        proc = subprocess.run(cmd, capture_output=True, text=True, env=ansible_env(), timeout=300, check=False)
        # One line per host: "<host> | SUCCESS => {...}" or "<host> | FAILED! => {...}"
        head, _, result = proc.stdout.partition(" => ")
        if check and (proc.returncode != 0 or "SUCCESS" not in head):
            raise AssertionError(f"{name} on {host} failed ({proc.returncode}): {proc.stdout}{proc.stderr}")
        if not result.strip().startswith("{"):
            raise AssertionError(f"{name} on {host} gave no result ({proc.returncode}): {proc.stdout}{proc.stderr}")
        return json.loads(result)

    def pause(self, host: str) -> None:
        """Freezes every process of the host (podman pause): it stops answering, as a hung or cut-off machine."""
        subprocess.run(["podman", "pause", self.hosts[host]["container"]], check=True, capture_output=True, timeout=60)

    def unpause(self, host: str) -> None:
        """The paused host answers again, its processes as they were."""
        subprocess.run(["podman", "unpause", self.hosts[host]["container"]], check=True, capture_output=True,
                       timeout=60)

    def sh(self, host: str, command: str, check: bool = True, timeout: float = 120) -> str:
        proc = subprocess.run(
            ["podman", "exec", self.hosts[host]["container"], "bash", "-c", command],
            capture_output=True,
            text=True,
            timeout=timeout,
            check=False,
        )
        if check and proc.returncode != 0:
            raise AssertionError(f"{host}: `{command}` failed ({proc.returncode}): {proc.stdout}{proc.stderr}")
        return proc.stdout.strip()

    def local_repo(self, host: str, repo: str, suffixes: list[str], groups: list[list[str]]) -> dict[str, str]:
        """Rebuilds the host's installed packages under "<version>+<suffix>" into a flat apt repository at
        `repo` (tests/integration/local_repo.py); returns the installed version of each package."""
        request = json.dumps({"repo": repo, "suffixes": suffixes, "groups": groups})
        proc = subprocess.run(
            ["podman", "exec", "-i", self.hosts[host]["container"], "python3", "-", request],
            input=LOCAL_REPO.read_text(), capture_output=True, text=True, timeout=600, check=False,
        )
        if proc.returncode != 0:
            raise AssertionError(f"{host}: building the local repository failed: {proc.stdout}{proc.stderr}")
        return json.loads(proc.stdout)

    def package_versions(self, host: str, packages: list[str]) -> dict[str, str]:
        out = self.sh(host, "dpkg-query --show --showformat='${Package} ${Version}\\n' " + " ".join(packages))
        return dict(line.split() for line in out.splitlines())

    def started_at(self, host: str, unit: str) -> int:
        """When the unit last became active, in microseconds of the (shared) monotonic clock."""
        return int(self.sh(host, f"systemctl show -p ActiveEnterTimestampMonotonic --value {unit}"))

    def daemon_runs(self) -> dict[tuple[str, str], str]:
        """For each Slurm-related daemon on each host, when systemd last started its unit ("0" when it is not
        running): a restart or a start changes it. Not the PID: from Slurm 24.05, `scontrol reconfigure` makes
        slurmctld and every slurmd re-execute themselves in place (new PIDs, same unit run, jobs kept)."""
        runs = {}
        for host in self.hosts:
            out = self.sh(host, "systemctl show -p MainPID -p ActiveEnterTimestampMonotonic " + " ".join(DAEMONS),
                          check=False)
            # One block of KEY=value lines per unit, in the order asked, separated by blank lines.
            for daemon, block in zip(DAEMONS, out.split("\n\n"), strict=False):
                props = dict(line.split("=", 1) for line in block.splitlines() if "=" in line)
                runs[(host, daemon)] = props.get("ActiveEnterTimestampMonotonic", "0") if props.get(
                    "MainPID", "0") != "0" else "0"
        return runs

    def node_states(self) -> dict[str, str]:
        out = self.sh(self.controller, "sinfo --noheader --Node --format='%N %t'")
        return dict(line.split() for line in out.splitlines())

    def wait_node_state(self, node: str, states: set[str], timeout: float = 60) -> str:
        deadline = time.monotonic() + timeout
        while True:
            state = self.node_states().get(node, "absent")
            if state in states or time.monotonic() > deadline:
                return state
            time.sleep(0.5)


def restarted(before: dict, after: dict) -> set[tuple[str, str]]:
    """Daemons restarted, started or stopped between two daemon_runs() snapshots."""
    return {key for key in before.keys() | after.keys() if before.get(key, "0") != after.get(key, "0")}
