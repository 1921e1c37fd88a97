"""The whole product on one machine: the control service with an embedded PostgreSQL, a worker, local
test hosts registered as allocations, and a Slurm cluster deployed and operated through the HTTP API by
a project service account, the way a tenant's automation would; then an OCI workload: a small HTTP
service image from a local registry, signed, deployed by digest, called, upgraded and rolled back.

`gpuaas demo` runs every step and prints the timeline as it goes; the end-to-end tests
(tests/e2e/test_api_slurm_cluster.py, tests/e2e/test_api_oci_service.py) drive the same steps one by
one and check the real state of the hosts after each.
"""

from __future__ import annotations

import contextlib
import json
import os
import secrets
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

import httpx

from . import testhosts
from . import testregistry as tr
from .catalog.register import build, register

# This checkout's collection: the demo registers its build.
COLLECTION = Path(__file__).resolve().parents[2]

# The test hosts are unprivileged containers: Slurm's cgroup plugins cannot start there.
TEST_HOST_PARAMETERS = {
    "slurm_controller_proctrack_type": "proctrack/linuxproc",
    "slurm_controller_task_plugin": "task/none",
    "gpuaas_apt_cache_valid_time": 31536000,
}


OCI_APP = "oci-service"
OCI_REPOSITORY = "demo/web"
OCI_PORT = 8080  # the test image's HTTP port (testregistry.build_image)
# The test hosts are unprivileged containers: the containers inside them get the host's network and no
# cgroups (docs/dev/oci-test-hosts.md). The probe asks the test image for its version.
OCI_TEST_HOST_PARAMETERS = {
    "oci_workload_network": "host",
    "oci_workload_cgroups": False,
    "oci_workload_probe": {"type": "http", "port": OCI_PORT, "path": "/version.txt", "interval": 0.5, "deadline": 60},
    "oci_workload_stop_timeout": 2,
}
# What the site configures on its hosts, not the workload: the local registry speaks plain HTTP.
OCI_SITE_REGISTRIES_CONF = "/etc/containers/registries.conf.d/50-demo-registry.conf"
OCI_CONTAINER = "gpuaas-oci-workload"
OCI_HOST = "web1"  # the descriptor leaves oci_workload_name at its default


class ApiError(RuntimeError):
    pass


# Slow preparations (a registry host, the OCI host and images) run beside the demo's own steps.
_BACKGROUND = ThreadPoolExecutor(max_workers=4, thread_name_prefix="gpuaas-demo")


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
    # The OCI part: a registry host started with the service (the worker must know its address), a
    # sigstore key that signs the images, and the images pushed, by name ("v1": "ADDRESS/REPO@sha256:...").
    registry: tr.Registry | None = None
    signing_key: tr.SigningKey | None = None
    images: dict[str, str] = field(default_factory=dict)
    # More GPUAAS_* variables for the worker start_service starts (e.g. a shorter health interval)
    worker_env: dict[str, str] = field(default_factory=dict)
    # What start_serve started (the address it serves on, the process) and restart_postgres started
    serve_address: str = "127.0.0.1"
    serve: subprocess.Popen | None = None
    postgres: object | None = None
    _tarball: Path | None = None

    # -- the platform --------------------------------------------------------------------------

    def env(self) -> dict[str, str]:
        return dict(os.environ, GPUAAS_STATE_DIR=str(self.state_dir),
                    GPUAAS_SSH_PRIVATE_KEY_FILE=str(testhosts.SSH_KEY),
                    GPUAAS_SSH_HOST_KEY_CHECKING="false",  # test hosts make new host keys at each start
                    GPUAAS_SECRET_KEY=self.secret_key)

    def start_service(self, registry: bool = False) -> None:
        """The service and one worker, the service on loopback. With `registry`, a registry host starts
        meanwhile, the worker issues pull credentials for it, and the service listens on the test
        network's gateway instead, the machine's own address there: the test hosts reach its registry
        token service at that address. The gateway exists only while a container is on the network
        (podman makes the bridge for the first one), so the service binds it once the registry's is."""
        self.secret_key = _fernet_key()
        self.port = self.port or _free_port()
        testhosts.ensure_network()
        started = _BACKGROUND.submit(tr.Registry.start, self.prefix) if registry else None
        gpuaas = str(Path(sys.executable).parent / "gpuaas")
        address = "127.0.0.1"
        if started:
            address = _test_network_gateway()
            _wait(lambda: _is_local_address(address) or started.done(), 180, f"the test network's gateway {address}")
            if not _is_local_address(address):
                started.result()  # raises the registry's own failure
        self.serve_address = address
        self.start_serve()
        base = f"http://{address}:{self.port}"
        token = subprocess.run([gpuaas, "admin", "bootstrap", "--email", "ops@demo.example"], env=self.env(),
                               check=True, capture_output=True, text=True).stdout.strip().split()[-1]
        self.admin = Api(base, token)
        if started:
            self.registry = started.result()
        self.processes.append(self.start_worker())
        self.say(f"control service on {base} (state in {self.state_dir}), one worker"
                 + (f"; registry {self.registry.address}" if self.registry else ""))

    def start_serve(self) -> subprocess.Popen:
        """`gpuaas serve` on the demo's address and port (again, after stop_serve), its output appended to
        serve.log; returns once it answers /readyz."""
        log_path = self.state_dir / "serve.log"
        serve = subprocess.Popen([str(Path(sys.executable).parent / "gpuaas"), "serve", "--host", self.serve_address,
                                  "--port", str(self.port)], env=self.env(),
                                 stdout=log_path.open("a"), stderr=subprocess.STDOUT)
        self.processes.append(serve)
        self.serve = serve
        base = f"http://{self.serve_address}:{self.port}"
        _wait(lambda: _ready(base) or serve.poll() is not None, 120, "the API to answer /readyz")
        if serve.poll() is not None:
            raise ApiError(f"gpuaas serve exited with {serve.returncode}: {_tail(log_path)}")
        return serve

    def stop_serve(self, timeout: float = 60) -> int:
        """SIGTERM to `serve`, as systemd stops it (it finishes its requests and stops the embedded
        PostgreSQL it started); returns its exit status."""
        self.serve.terminate()
        return self.serve.wait(timeout)

    def restart_postgres(self, down_seconds: float = 2.0) -> None:
        """Restarts the embedded PostgreSQL as an operator restarts a server: a fast shutdown (SIGINT to the
        postmaster, what `pg_ctl stop -m fast` sends), down for `down_seconds`, then started again in the
        same data directory, as any gpuaas command starts it when none runs. The new server belongs to this
        process (it stops at close(), or with this process): call this from a thread that lives as long
        as the demo, since the kernel stops the server when the thread that started it ends."""
        from .embedded_db import EmbeddedPostgres

        data_dir = self.state_dir / "postgres"
        # The postmaster removes its pid file last; its process may linger as a zombie of its owner.
        _stop_postgres(data_dir / "pgdata")
        _wait(lambda: not (data_dir / "pgdata" / "postmaster.pid").exists(), 60, "the embedded PostgreSQL to stop")
        time.sleep(down_seconds)
        self.postgres = EmbeddedPostgres(data_dir)
        self.postgres.start()

    # -- faults on test hosts (podman), for the chaos soak ----------------------------------------------

    def podman_host(self, action: str, host: str) -> None:
        """`podman kill|start|pause|unpause` of a test host (start: testhosts.start_again); `disconnect` and
        `connect` cut it from the test network and put it back at its own address."""
        container = self.hosts[host]["container"]
        if action == "start":
            testhosts.start_again(self.hosts[host])
            return
        if action == "disconnect":
            command = ["network", "disconnect", testhosts.NETWORK, container]
        elif action == "connect":
            command = ["network", "connect", "--ip", self.hosts[host]["address"], testhosts.NETWORK, container]
        else:
            command = [action, container]
        subprocess.run(["podman", *command], check=True, capture_output=True, text=True, timeout=120)

    def start_worker(self, log_name: str = "worker.log", **settings: str) -> subprocess.Popen:
        """A `gpuaas worker` process of this service, its output appended to `log_name` in the state dir;
        `settings` are more GPUAAS_* variables for it (e.g. GPUAAS_LEASE_SECONDS)."""
        env = self.env() | self.worker_env | settings
        if self.registry:
            env["GPUAAS_PULL_CREDENTIAL_REGISTRIES"] = self.registry.address
        log = open(self.state_dir / log_name, "a")  # noqa: SIM115 - the process writes it until it ends
        return subprocess.Popen([str(Path(sys.executable).parent / "gpuaas"), "worker"], env=env, stdout=log,
                                stderr=subprocess.STDOUT)

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
        registered = register(self.admin.http, self.collection(), activate=True, reason="demo: checks passed",
                              skip_gates=True)
        self.say("catalog: the platform's own collection, past the promotion gates (--skip-gates: its CI ran the "
                 "staging checks; recorded as gate.skipped)")
        slurm = next(r for r in registered if r.app == "slurm")
        self.admin.post(f"/v1/projects/{self.ids['project']}/entitlements", {"app_slug": "slurm"})
        self.say(f"catalog: slurm {slurm.version}, collection {slurm.digest[:19]}… active; project entitled")

    def collection(self) -> Path:
        """This checkout's collection, built once: every registration uploads the same build."""
        if self._tarball is None:
            self._tarball = build(COLLECTION, Path(tempfile.mkdtemp(dir=self.state_dir, prefix="build-")))
        return self._tarball

    # -- the OCI part: registry, images, hosts, the app ------------------------------------------------

    def prepare_oci(self, hosts: list[str], signed: tuple[str, ...] = ("v1", "v2"),
                    forged: tuple[str, ...] = ()) -> None:
        """Starts OCI test hosts (Debian 13: its podman verifies sigstore signatures) that reach the
        registry over plain HTTP, pushes test images built here (`signed` ones signed with the demo's
        key, `forged` ones with another), then lets the registry take only tokens of the service's
        registry token service: from then on a pull needs a credential the platform issued for one run."""
        if self.registry is None:
            raise ApiError("the OCI part needs the registry host: start_service(registry=True)")
        started = _BACKGROUND.submit(testhosts.up, self.prefix, hosts, "oci-trixie")
        self.signing_key, other_key = tr.SigningKey.generate(), tr.SigningKey.generate()
        for name in signed + forged:
            key = self.signing_key if name in signed else other_key
            self.images[name] = tr.push(self.registry, OCI_REPOSITORY, name, tr.build_image(name), sign_with=key)
        config = self.admin.get("/v1/registry/certificate")
        self.registry.use_token_service(f"{self.admin.base_url}/v1/registry/token", config["service"],
                                        config["issuer"], config["rootcertbundle"])
        for host in started.result():
            self.hosts[host["name"]] = host
            conf = self.registry.registries_conf()
            self.host_sh(host["name"], f"cat > {OCI_SITE_REGISTRIES_CONF} <<'EOF'\n{conf}EOF")

    def register_oci_hosts(self, pool: str, hosts: list[str]) -> None:
        self.ids[pool] = self.admin.post("/v1/allocations", {
            "project_id": self.ids["project"], "name": pool, "capacity_shape": "baremetal", "gpu_count": 0,
            "region": "local", "hosts": [{"name": n, "address": self.hosts[n]["address"], "ssh_user": "root"}
                                         for n in hosts]})["id"]
        self.say(f"allocation {pool}: {', '.join(hosts)} (Debian 13, podman)")

    def register_oci_app(self, image: str, canary: bool = False) -> dict:
        """One version of the oci-service app for the image pushed as `image`, registered as an operator
        does it: `gpuaas apps register BUILD --workload oci-service=IMAGE --signed-by oci-service=KEY`,
        promoted to active (or only to canary). The first one entitles the project. Returns the version."""
        key_file = self.state_dir / "signer.pub"
        key_file.write_bytes(self.signing_key.public_pem)
        gpuaas = str(Path(sys.executable).parent / "gpuaas")
        done = subprocess.run([gpuaas, "apps", "register", str(self.collection()), "--url", self.admin.base_url,
                               "--workload", f"{OCI_APP}={self.images[image]}", "--signed-by", f"{OCI_APP}={key_file}",
                               "--canary" if canary else "--activate", "--skip-gates", "--reason",
                               f"demo: image {image}"],
                              env=self.env() | {"GPUAAS_TOKEN": self.admin.token}, capture_output=True, text=True)
        if done.returncode != 0:
            raise ApiError(f"gpuaas apps register failed: {done.stderr.strip()[-800:]}")
        for line in done.stdout.splitlines():
            if line.startswith(f"{OCI_APP} "):
                self.say(f"$ gpuaas apps register ... --workload {OCI_APP}=…@{self.images[image].split('@')[1][:19]}… "
                         f"--skip-gates (the platform's own collection: past the promotion gates, recorded)\n{line}")
        digest = self.images[image].split("@")[1]
        version = next(v for v in self.admin.get(f"/v1/catalog/apps/{OCI_APP}/versions?limit=200")["items"]
                       if (v["workload_artifact_reference"] or "").endswith(f"@{digest}"))
        entitled = self.admin.get(f"/v1/projects/{self.ids['project']}/entitlements")["items"]
        if not any(e["app_slug"] == OCI_APP for e in entitled):
            self.admin.post(f"/v1/projects/{self.ids['project']}/entitlements", {"app_slug": OCI_APP})
        return version

    def create_oci_instance(self, pool: str, version: str, replicas: int = 1) -> dict:
        instance = self.sa.post(f"/v1/projects/{self.ids['project']}/instances", {
            "name": "web", "app_slug": OCI_APP, "version": version, "allocation_ids": [self.ids[pool]],
            "topology": [{"role": "replica", "count": replicas}], "parameters": OCI_TEST_HOST_PARAMETERS})
        self.ids["web"] = instance["id"]
        self.say(f"instance web ({instance['app_version']}): "
                 + ", ".join(f"{m['role']}@{m['host_name']}" for m in self.members("web")))
        return instance

    def call_oci(self, host: str) -> str:
        """What a client of the service gets: GET /version.txt on the host's port."""
        url = f"http://{self.hosts[host]['address']}:{OCI_PORT}/version.txt"
        with urllib.request.urlopen(url, timeout=5) as response:  # noqa: S310 - a test host of this demo
            return response.read().decode().strip()

    def oci_container(self, host: str) -> dict | None:
        """podman inspect of the workload's container on a host, or None when there is none."""
        out = self.host_sh(host, f"podman container inspect {OCI_CONTAINER} 2>/dev/null || true")
        return json.loads(out)[0] if out and out != "[]" else None

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

    def members(self, instance: str = "instance") -> list[dict]:
        return self.sa.get(f"/v1/instances/{self.ids[instance]}/members?limit=200")["items"]

    def events(self, instance: str = "instance", **filters) -> list[dict]:
        """The timeline of the instance kept in ids under `instance`: see timeline()."""
        return self.timeline(self.ids[instance], **filters)

    def timeline(self, instance_id: str, **filters) -> list[dict]:
        """An instance's whole timeline (every page), narrowed by the API's filters (type, correlation_id)."""
        query = "&".join(f"{k}={v}" for k, v in filters.items())
        items, cursor = [], None
        while True:
            page = self.sa.get(f"/v1/instances/{instance_id}/events?limit=200&{query}"
                               + (f"&cursor={cursor}" if cursor else ""))
            items += page["items"]
            cursor = page["next_cursor"]
            if not cursor:
                return items

    def member(self, host: str) -> dict:
        return next(m for m in self.members() if m["host_name"] == host and m["status"] != "removed")

    def operate(self, path: str, body: dict | None = None, timeout: float = 900, instance: str = "instance") -> dict:
        """Posts an operation to an instance (by its key in ids), prints its progress from the event
        stream while it runs (the client's follower, as `gpuaas ops follow` shows it off a terminal), and
        returns the finished operation."""
        from .client.errors import ClientError
        from .client.follow import follow
        from .client.http import Client
        from .client.render import PlainView

        op = self.sa.post(f"/v1/instances/{self.ids[instance]}{path}", body or {},
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
        if self.postgres is not None:  # restart_postgres started it: this process owns it
            self.postgres.stop()
        testhosts.down(self.prefix)


def run_demo(say: Callable[[str], None] = print) -> int:
    import logging

    logging.getLogger("httpx").setLevel(logging.WARNING)
    demo = Demo(say=say)
    step = 0
    oci_ready = None

    def header(text: str) -> None:
        nonlocal step
        step += 1
        say(f"\n[{step}] {text}")

    try:
        header("Platform: control service, embedded PostgreSQL, worker, a local OCI registry")
        demo.start_service(registry=True)
        header("Tenancy: tenant, project, service account")
        demo.setup_tenancy()
        # The OCI part's host and images get ready while the Slurm part runs.
        oci_ready = _BACKGROUND.submit(demo.prepare_oci, [OCI_HOST])
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
        header("OCI workload: a Debian 13 host with podman; images v1 and v2 pushed and signed")
        oci_ready.result()
        demo.register_oci_hosts("pool-oci", [OCI_HOST])
        say(f"registry {demo.registry.address} takes only tokens of the control service: each run gets a pull "
            f"credential for {OCI_REPOSITORY} alone")
        header("Catalog: the oci-service app, one version per signed image")
        v1, v2 = demo.register_oci_app("v1"), demo.register_oci_app("v2")
        header("Deploy web with image v1 (pulled by digest, signature verified on the host), then call it")
        demo.create_oci_instance("pool-oci", v1["version"])
        _require(demo.operate("/deploy", instance="web"))
        say(_oci_answer(demo))
        header("Upgrade web to image v2")
        _require(demo.operate("/upgrade", {"app_version_id": v2["id"]}, instance="web"))
        say(_oci_answer(demo))
        header("Roll web back to v1 (the previous image stayed on the host: no pull)")
        _require(demo.operate("/rollback", instance="web"))
        say(_oci_answer(demo))
        say("\ndemo complete")
        return 0
    except (RuntimeError, subprocess.CalledProcessError) as exc:  # ApiError, testregistry errors
        say(f"\ndemo failed: {exc}\nservice and worker logs: {demo.state_dir}")
        return 1
    finally:
        if oci_ready:  # hosts it starts must not outlive close()
            with contextlib.suppress(Exception):
                oci_ready.result()
        demo.close()


def _oci_answer(demo: Demo) -> str:
    address = demo.hosts[OCI_HOST]["address"]
    image = demo.oci_container(OCI_HOST)["ImageDigest"]
    return f"GET http://{address}:{OCI_PORT}/version.txt -> {demo.call_oci(OCI_HOST)!r} (container image {image[:19]}…)"


def _is_local_address(address: str) -> bool:
    """Whether this machine holds `address`, so that a server can bind it."""
    with socket.socket() as probe:
        try:
            probe.bind((address, 0))
        except OSError:
            return False
    return True


def _tail(path: Path, lines: int = 20) -> str:
    return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])


def _test_network_gateway() -> str:
    """This machine's address on the test hosts' network."""
    out = subprocess.run(["podman", "network", "inspect", testhosts.NETWORK], check=True, capture_output=True,
                         text=True).stdout
    return json.loads(out)[0]["subnets"][0]["gateway"]


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
