"""The whole product on one machine: the control service with an embedded PostgreSQL, a worker, local
test hosts registered as allocations, and a Slurm cluster deployed and operated through the HTTP API by
a project service account, the way a tenant's automation would.

`gpuaas demo` runs every step and prints the timeline as it goes; the end-to-end test drives the same
steps one by one and checks the real Slurm state after each.
"""

from __future__ import annotations

import contextlib
import json
import os
import secrets
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import httpx

from . import testhosts
from .catalog.register import register

# This checkout's collection: the demo registers its build.
COLLECTION = Path(__file__).resolve().parents[2]

# The test hosts are unprivileged containers: Slurm's cgroup plugins cannot start there.
TEST_HOST_PARAMETERS = {
    "slurm_controller_proctrack_type": "proctrack/linuxproc",
    "slurm_controller_task_plugin": "task/none",
    "gpuaas_apt_cache_valid_time": 31536000,
}


class ApiError(RuntimeError):
    pass


@dataclass
class Api:
    """A small JSON client that turns error envelopes into readable exceptions."""

    base_url: str
    token: str | None = None

    def __post_init__(self):
        auth = {"Authorization": f"Bearer {self.token}"} if self.token else {}
        self.http = httpx.Client(base_url=self.base_url, timeout=120, headers=auth)

    def call(self, method: str, path: str, body: dict | None = None, expect: tuple[int, ...] = (200, 201, 202),
             headers: dict | None = None) -> dict:
        auth = {"Authorization": f"Bearer {self.token}"} if self.token else {}
        response = self.http.request(method, path, json=body, headers=auth | (headers or {}))
        if response.status_code not in expect:
            raise ApiError(f"{method} {path} -> {response.status_code}: {response.text[:800]}")
        return response.json() if response.content else {}

    def post(self, path: str, body: dict | None = None, **kw) -> dict:
        return self.call("POST", path, body or {}, **kw)

    def get(self, path: str, **kw) -> dict:
        return self.call("GET", path, **kw)

    def as_(self, token: str) -> Api:
        return Api(self.base_url, token)


@dataclass
class Demo:
    prefix: str = "demo"
    say: Callable[[str], None] = print
    port: int = 0
    state_dir: Path = field(default_factory=lambda: Path(tempfile.mkdtemp(prefix="gpuaas-demo-")))
    processes: list[subprocess.Popen] = field(default_factory=list)
    hosts: dict[str, dict] = field(default_factory=dict)
    ids: dict[str, str] = field(default_factory=dict)
    admin: Api | None = None
    sa: Api | None = None

    # -- the platform --------------------------------------------------------------------------

    def env(self) -> dict[str, str]:
        return dict(os.environ, GPUAAS_STATE_DIR=str(self.state_dir),
                    GPUAAS_SSH_PRIVATE_KEY_FILE=str(testhosts.SSH_KEY),
                    GPUAAS_SSH_HOST_KEY_CHECKING="false",  # test hosts make new host keys at each start
                    GPUAAS_SECRET_KEY=self.secret_key)

    def start_service(self) -> None:
        self.secret_key = _fernet_key()
        self.port = self.port or _free_port()
        gpuaas = str(Path(sys.executable).parent / "gpuaas")
        log = open(self.state_dir / "serve.log", "w")  # noqa: SIM115 (lives as long as the process)
        self.processes.append(subprocess.Popen([gpuaas, "serve", "--port", str(self.port)], env=self.env(),
                                               stdout=log, stderr=subprocess.STDOUT))
        base = f"http://127.0.0.1:{self.port}"
        _wait(lambda: _ready(base), 120, "the API to answer /readyz")
        token = subprocess.run([gpuaas, "admin", "bootstrap", "--email", "ops@demo.example"], env=self.env(),
                               check=True, capture_output=True, text=True).stdout.strip().split()[-1]
        self.admin = Api(base, token)
        worker_log = open(self.state_dir / "worker.log", "w")  # noqa: SIM115
        self.processes.append(subprocess.Popen([gpuaas, "worker"], env=self.env(), stdout=worker_log,
                                               stderr=subprocess.STDOUT))
        self.say(f"control service on {base} (state in {self.state_dir}), one worker")

    def setup_tenancy(self) -> None:
        a = self.admin
        self.ids["tenant"] = a.post("/v1/tenants", {"name": "acme"})["id"]
        self.ids["project"] = a.post(f"/v1/tenants/{self.ids['tenant']}/projects", {"name": "research"})["id"]
        lead = a.post(f"/v1/tenants/{self.ids['tenant']}/users", {"email": "lead@acme.example"})["id"]
        a.post("/v1/role-bindings", {"principal_kind": "user", "principal_id": lead, "role": "project_admin",
                                     "project_id": self.ids["project"]})
        lead_api = a.as_(a.post(f"/v1/users/{lead}/tokens", {"name": "demo", "expires_in_days": 1})["token"])
        sa = lead_api.post(f"/v1/projects/{self.ids['project']}/service-accounts", {"name": "pipeline"})["id"]
        token = lead_api.post(f"/v1/projects/{self.ids['project']}/service-accounts/{sa}/tokens", {"name": "ci"})
        self.sa = a.as_(token["token"])
        self.say("tenant acme, project research, service account 'pipeline' (acts only inside research)")

    def register_hosts(self, pools: dict[str, list[str]]) -> None:
        """Starts the test hosts and registers each pool of them as one allocation of the project."""
        names = [n for hosts in pools.values() for n in hosts]
        self.say(f"starting test hosts {', '.join(names)} (podman + systemd, SSH); the first run builds the image")
        for host in testhosts.up(self.prefix, names, "slurm"):
            self.hosts[host["name"]] = host
        for pool, members in pools.items():
            self.ids[pool] = self.admin.post("/v1/allocations", {
                "project_id": self.ids["project"], "name": pool, "capacity_shape": "baremetal", "gpu_count": 1,
                "region": "local", "hosts": [{"name": n, "address": self.hosts[n]["address"], "ssh_user": "root"}
                                             for n in members]})["id"]
            self.say(f"allocation {pool}: {', '.join(members)}")

    def register_slurm_app(self) -> None:
        """The apps this collection describes (adapters/*.yml), registered the way an operator does it
        (`gpuaas apps register`): the build uploaded by digest, promoted to active; the project entitled."""
        registered = register(self.admin.http, COLLECTION, activate=True, reason="demo: checks passed")
        slurm = next(r for r in registered if r.app == "slurm")
        self.admin.post(f"/v1/projects/{self.ids['project']}/entitlements", {"app_slug": "slurm"})
        self.say(f"catalog: slurm {slurm.version}, collection {slurm.digest[:19]}… active; project entitled")

    # -- the tenant's automation (service account) -----------------------------------------------

    def create_instance(self, pool: str, workers: int) -> dict:
        instance = self.sa.post(f"/v1/projects/{self.ids['project']}/instances", {
            "name": "hpc", "app_slug": "slurm", "allocation_ids": [self.ids[pool]],
            "topology": [{"role": "controller", "count": 1}, {"role": "worker", "count": workers}],
            "parameters": TEST_HOST_PARAMETERS})
        self.ids["instance"] = instance["id"]
        self.say(f"instance hpc ({instance['operating_mode']}, scope {instance['control_plane_scope']}): "
                 + ", ".join(f"{m['role']}@{m['host_name']}" for m in self.members()))
        return instance

    def members(self) -> list[dict]:
        return self.sa.get(f"/v1/instances/{self.ids['instance']}/members?limit=200")["items"]

    def member(self, host: str) -> dict:
        return next(m for m in self.members() if m["host_name"] == host and m["status"] != "removed")

    def operate(self, path: str, body: dict | None = None, timeout: float = 900) -> dict:
        """Posts an operation, prints its progress from the event stream while it runs (the client's
        follower, as `gpuaas ops follow` shows it off a terminal), and returns the finished operation."""
        from .client.errors import ClientError
        from .client.follow import follow
        from .client.http import Client
        from .client.render import PlainView

        op = self.sa.post(f"/v1/instances/{self.ids['instance']}{path}", body or {},
                          headers={"Idempotency-Key": secrets.token_hex(8)})
        self.say(f"-> {op['kind']} accepted (operation {op['id'][:8]}, correlation {op['correlation_id']})")
        with Client(self.sa.base_url, self.sa.token) as client:
            try:
                progress = follow(client, op, PlainView(self.say), timeout=timeout)
            except ClientError as exc:
                raise ApiError(str(exc)) from None
        self.say(f"<- {progress.summary()}")
        return progress.op

    def slurm(self, command: str) -> str:
        """Runs a Slurm command on the controller, as a user of the cluster would."""
        return self.host_sh("ctl", command)

    def host_sh(self, host: str, command: str) -> str:
        return subprocess.run(["podman", "exec", self.hosts[host]["container"], "bash", "-c", command],
                              check=True, capture_output=True, text=True, timeout=120).stdout.strip()

    def close(self) -> None:
        for process in reversed(self.processes):
            process.terminate()
        for process in self.processes:
            try:
                process.wait(timeout=20)
            except subprocess.TimeoutExpired:
                process.kill()
        _stop_postgres(self.state_dir / "postgres")
        testhosts.down(self.prefix)


def run_demo(say: Callable[[str], None] = print) -> int:
    import logging

    logging.getLogger("httpx").setLevel(logging.WARNING)
    demo = Demo(say=say)
    step = 0

    def header(text: str) -> None:
        nonlocal step
        step += 1
        say(f"\n[{step}] {text}")

    try:
        header("Platform: control service, embedded PostgreSQL, worker")
        demo.start_service()
        header("Tenancy: tenant, project, service account")
        demo.setup_tenancy()
        header("Capacity: test hosts registered as the project's allocations")
        demo.register_hosts({"pool-a": ["ctl", "w1", "w2"], "pool-b": ["w3"]})
        header("Catalog: the Slurm app")
        demo.register_slurm_app()
        header("Deploy 1 controller + 2 workers (as the service account)")
        demo.create_instance("pool-a", workers=2)
        _require(demo.operate("/deploy"))
        say(demo.slurm("sinfo"))
        header("Run a job on both workers")
        say(demo.slurm("srun --immediate=30 -N2 hostname"))
        header("Add a worker from pool-b")
        _require(demo.operate("/members", {"role": "worker", "allocation_id": demo.ids["pool-b"]}))
        say(demo.slurm("sinfo"))
        header("Drain w1 while a job runs on it (the drain waits for the job)")
        say(demo.slurm("sbatch -w w1 --output=/dev/null --wrap 'sleep 10'"))
        _require(demo.operate(f"/members/{demo.member('w1')['id']}/drain"))
        say(demo.slurm("sinfo -N -o '%N %t %E'"))
        header("Remove w1")
        _require(demo.operate(f"/members/{demo.member('w1')['id']}/remove"))
        say(demo.slurm("sinfo"))
        header("Decommission (the playbook proves nothing is left)")
        _require(demo.operate("/decommission"))
        instance = demo.sa.get(f"/v1/instances/{demo.ids['instance']}")
        say(f"instance status: {instance['status']}")
        say("\ndemo complete")
        return 0
    except (ApiError, subprocess.CalledProcessError) as exc:
        say(f"\ndemo failed: {exc}\nservice and worker logs: {demo.state_dir}")
        return 1
    finally:
        demo.close()


def _require(op: dict) -> None:
    if op["status"] != "succeeded":
        raise ApiError(f"{op['kind']} ended {op['status']}: {json.dumps(op.get('error'))}")


def _stop_postgres(data_dir: Path) -> None:
    """The embedded PostgreSQL outlives the processes that shared it: stop it (fast shutdown)."""
    pid_file = data_dir / "postmaster.pid"
    if pid_file.exists():
        with contextlib.suppress(ProcessLookupError, ValueError):
            os.kill(int(pid_file.read_text().split()[0]), signal.SIGINT)


def _ready(base: str) -> bool:
    try:
        return httpx.get(f"{base}/readyz", timeout=2).status_code == 200
    except httpx.HTTPError:
        return False


def _wait(predicate: Callable[[], bool], timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise ApiError(f"timed out after {timeout:.0f}s waiting for {what}")
        time.sleep(0.3)


def _free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _fernet_key() -> str:
    from cryptography.fernet import Fernet

    return Fernet.generate_key().decode()
