"""The multi-host world (docs/dev/multihost.md): PostgreSQL 15 on two test hosts, a primary and a synchronous
streaming standby; `gpuaas serve` replicas on this machine, each with a state directory of its own; `gpuaas
worker` processes on two more test hosts, running this machine's Python and checkout (mounted read-only at the
same paths). Nothing is shared between them but the database: no disk, no process.

Secrets (the database passwords, the Fernet key, the API's tokens) never appear in a command line here: scripts
reach the hosts on stdin. Every secret is named in SECRETS, and the tests' reports are scrubbed of them (conftest).
"""

from __future__ import annotations

import contextlib
import json
import os
import secrets
import shutil
import socket
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path

import httpx
from cryptography.fernet import Fernet
from gpuaas_api import testhosts

REPO = Path(__file__).resolve().parents[2]
GPUAAS = Path(sys.executable).parent / "gpuaas"
PG_CONF = "/etc/postgresql/15/main"
PG_DATA = "/var/lib/postgresql/15/main"
PG_UNIT = "postgresql@15-main"
WORKER_UNIT = "gpuaas-worker"
WORKER_STATE = "/var/lib/gpuaas-worker"
DB_HOSTS = ("db1", "db2")
WORKER_HOSTS = ("w1", "w2")
# Short leases: a cut-off worker's operation moves to another worker within seconds, not the default 30.
LEASE_SECONDS = 6
# Waits for runs: a run takes 3 s on an idle machine of 2 cores, a minute when other test sessions load it.
RUN_SECONDS = 180
# Every secret of the worlds made here: whatever a report shows is scrubbed of them (conftest.py).
SECRETS: set[str] = set()


def secret(value: str) -> str:
    SECRETS.add(value)
    return value


def scrub(text: str) -> str:
    for value in sorted(SECRETS, key=len, reverse=True):
        text = text.replace(value, "********")
    return text


def wait_for(predicate, timeout: float, what: str, interval: float = 0.2):
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout:.0f} s waiting for {what}")
        time.sleep(interval)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def code_mounts() -> list[str]:
    """`podman run` arguments mounting this machine's Python (pyenv's, or the system's), its virtual
    environment and the checkout read-only at the same paths: a worker in a container runs the code under test."""
    paths = {Path(sys.base_prefix).resolve(), Path(sys.prefix).resolve(), REPO}
    outermost = sorted(p for p in paths if not any(p != q and p.is_relative_to(q) for q in paths))
    return [arg for p in outermost for arg in ("-v", f"{p}:{p}:ro")]


def network_subnet() -> str:
    """The test network's subnet (CIDR): the database hosts take connections from it."""
    out = subprocess.run(["podman", "network", "inspect", testhosts.NETWORK], check=True, capture_output=True,
                         text=True).stdout
    return json.loads(out)[0]["subnets"][0]["subnet"]


@dataclass
class Replica:
    """One `gpuaas serve` process on loopback."""

    name: str
    port: int
    state_dir: Path
    process: subprocess.Popen
    log: Path

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"


@dataclass(repr=False)
class Cluster:
    root: Path  # this machine's directory of the world: the replicas' state directories, logs, the marker root
    prefix: str = field(default_factory=lambda: f"mh{uuid.uuid4().hex[:6]}")
    hosts: dict[str, dict] = field(default_factory=dict)
    replicas: dict[str, Replica] = field(default_factory=dict)
    killed: list[Replica] = field(default_factory=list)
    db_password: str = field(default_factory=lambda: secret(secrets.token_urlsafe(18)))
    replication_password: str = field(default_factory=lambda: secret(secrets.token_urlsafe(18)))
    secret_key: str = field(default_factory=lambda: secret(Fernet.generate_key().decode()))

    def __repr__(self) -> str:
        return f"Cluster({self.prefix}, {self.root})"

    @classmethod
    def create(cls) -> Cluster:
        # Not under pytest's tmp_path: concurrent pytest runs rotate /tmp/pytest-of-<user>, and the workers' hosts
        # mount the marker root for the whole module.
        return cls(root=Path(tempfile.mkdtemp(prefix="gpuaas-multihost-")))

    @property
    def marker_root(self) -> Path:
        return self.root / "markers"

    # -- secrets and scripts -----------------------------------------------------------------------------

    def sh(self, host: str, script: str, timeout: float = 120, check: bool = True) -> subprocess.CompletedProcess:
        """Runs `script` with sh -e inside a test host, fed on stdin (no secret in it shows in a process list)."""
        done = subprocess.run(["podman", "exec", "-i", self.hosts[host]["container"], "sh", "-es"], input=script,
                              capture_output=True, text=True, timeout=timeout)
        if check and done.returncode != 0:
            raise AssertionError(f"{host}: a script failed (rc {done.returncode}): "
                                 f"{scrub(done.stderr or done.stdout).strip()[-1500:]}")
        return done

    def psql(self, host: str, query: str, database: str = "gpuaas") -> str:
        return self.sh(host, f"su postgres -c 'psql -d {database} -Atq -v ON_ERROR_STOP=1' <<'EOF'\n{query}\nEOF\n"
                       ).stdout.strip()

    # -- the world ------------------------------------------------------------------------------------

    def start(self) -> None:
        """Test hosts, the database (primary and standby), replicas a and b, workers on w1 and w2."""
        self.marker_root.mkdir(parents=True)
        testhosts.build("postgres")  # and the base image: built once, before two threads could both build it
        mounts = code_mounts() + ["-v", f"{self.marker_root}:{self.marker_root}"]
        with _Background() as bg:
            dbs = bg.submit(testhosts.up, self.prefix, list(DB_HOSTS), "postgres")
            workers = bg.submit(testhosts.up, self.prefix, list(WORKER_HOSTS), "base", mounts)
            for host in dbs.result() + workers.result():
                self.hosts[host["name"]] = host
        self.start_database()
        # Every process migrates the new database as it starts, all at once: they must agree (the migration lock).
        with _Background() as bg:
            started = [bg.submit(self.start_replica, name) for name in ("a", "b")]
            started += [bg.submit(self.start_worker, name) for name in WORKER_HOSTS]
            for future in started:
                future.result()

    @property
    def database_url(self) -> str:
        """One libpq multi-host URL: whichever of the two servers takes writes."""
        servers = ",".join(f"{self.hosts[h]['address']}:5432" for h in DB_HOSTS)
        return (f"postgresql://gpuaas:{self.db_password}@{servers}/gpuaas"
                "?target_session_attrs=read-write&connect_timeout=3")

    def start_database(self) -> None:
        """db1 the primary, db2 a streaming standby made with pg_basebackup -R. Synchronous replication
        (synchronous_standby_names names db2): a commit returns only once db2 has it, so a failover loses nothing
        that was accepted. The setting goes in last, once db2 streams: before, every commit would wait for it."""
        network, primary = network_subnet(), self.hosts["db1"]["address"]
        for host in DB_HOSTS:
            self.sh(host, f"""
cat > {PG_CONF}/conf.d/gpuaas.conf <<'EOF'
listen_addresses = '*'
wal_level = replica
synchronous_commit = on
EOF
cat >> {PG_CONF}/pg_hba.conf <<'EOF'
host gpuaas gpuaas {network} scram-sha-256
host replication replicator {network} scram-sha-256
EOF
""")
        self.sh("db1", f"""
systemctl start {PG_UNIT}
su postgres -c 'psql -q -v ON_ERROR_STOP=1' <<'EOF'
CREATE ROLE gpuaas LOGIN PASSWORD '{self.db_password}';
CREATE DATABASE gpuaas OWNER gpuaas;
CREATE ROLE replicator LOGIN REPLICATION PASSWORD '{self.replication_password}';
EOF
""")
        # The standby's replication password lives in its postgres user's ~/.pgpass, not in primary_conninfo.
        self.sh("db2", f"""
umask 077
echo '*:*:*:replicator:{self.replication_password}' > /var/lib/postgresql/.pgpass
chown postgres: /var/lib/postgresql/.pgpass
rm -rf {PG_DATA}
su postgres -c "pg_basebackup -d 'host={primary} user=replicator application_name=db2' -D {PG_DATA} -R -X stream \\
  -c fast"
systemctl start {PG_UNIT}
""")
        self.sh("db1", f"""
echo "synchronous_standby_names = 'db2'" >> {PG_CONF}/conf.d/gpuaas.conf
su postgres -c "psql -Atqc 'SELECT pg_reload_conf()'" >/dev/null
""")
        wait_for(lambda: self.replication() == "db2|streaming|sync", 30, "db2 to stream synchronously from db1")

    def replication(self) -> str:
        """The primary's view of its standbys: `name|state|sync_state` lines."""
        return self.psql("db1", "SELECT application_name, state, sync_state FROM pg_stat_replication")

    def kill_primary(self) -> None:
        """SIGKILL to every process of the primary's server, as a crash would end them (no shutdown checkpoint,
        connections reset)."""
        self.sh("db1", f"systemctl kill -s KILL {PG_UNIT}; while pgrep -x postgres >/dev/null; do sleep 0.05; done")

    def promote_standby(self) -> None:
        assert self.psql("db2", "SELECT pg_promote()") == "t", "db2 did not confirm its promotion"

    # -- serve replicas ---------------------------------------------------------------------------------

    def service_env(self, state_dir: Path) -> dict[str, str]:
        own = {k: v for k, v in os.environ.items() if not k.startswith("GPUAAS_") and k != "DATABASE_URL"}
        return own | {"GPUAAS_STATE_DIR": str(state_dir), "GPUAAS_DATABASE_URL": self.database_url,
                      "GPUAAS_SECRET_KEY": self.secret_key, "GPUAAS_LEASE_SECONDS": str(LEASE_SECONDS),
                      "GPUAAS_LOG_FORMAT": "text"}

    def start_replica(self, name: str, port: int | None = None) -> Replica:
        """`gpuaas serve` on loopback with a new, empty state directory of its own; returns once it is ready."""
        state_dir = Path(tempfile.mkdtemp(dir=self.root, prefix=f"serve-{name}-"))
        log, port = self.root / f"serve-{name}.log", port or free_port()
        process = subprocess.Popen([str(GPUAAS), "serve", "--host", "127.0.0.1", "--port", str(port)],
                                   env=self.service_env(state_dir), stdout=log.open("a"), stderr=subprocess.STDOUT)
        replica = self.replicas[name] = Replica(name, port, state_dir, process, log)
        wait_for(lambda: process.poll() is not None or _ready(replica.url), 90, f"serve replica {name} to be ready")
        assert process.poll() is None, f"serve replica {name} exited ({process.returncode}): {self.tail(log)}"
        return replica

    def kill_replica(self, name: str) -> Replica:
        replica = self.replicas.pop(name)
        replica.process.kill()
        replica.process.wait(10)
        self.killed.append(replica)
        return replica

    def tail(self, log: Path, lines: int = 30) -> str:
        return scrub("\n".join(log.read_text(errors="replace").splitlines()[-lines:]))

    # -- workers ------------------------------------------------------------------------------------

    def start_worker(self, host: str) -> None:
        """`gpuaas worker --name HOST` as a systemd unit of the host, its settings in an environment file (0600)."""
        settings = {"GPUAAS_DATABASE_URL": self.database_url, "GPUAAS_SECRET_KEY": self.secret_key,
                    "GPUAAS_STATE_DIR": WORKER_STATE, "GPUAAS_LEASE_SECONDS": str(LEASE_SECONDS),
                    "GPUAAS_WORKER_POLL_SECONDS": "0.5", "GPUAAS_LOG_FORMAT": "text",
                    # No health checks or metering: the allocations' hosts are names only (the test app runs
                    # every play with a local connection), and statuses here follow the runs alone.
                    "GPUAAS_HEALTH_CONCURRENCY": "0", "GPUAAS_METERING_INTERVAL_SECONDS": "0",
                    "HOME": "/root", "LANG": "C.UTF-8"}
        env_file = "".join(f"{k}={v}\n" for k, v in settings.items())
        self.sh(host, f"""
umask 077
mkdir -p /etc/gpuaas
cat > /etc/gpuaas/worker.env <<'EOF'
{env_file}EOF
cat > /etc/systemd/system/{WORKER_UNIT}.service <<'EOF'
[Unit]
Description=gpuaas worker (tests/multihost)
[Service]
EnvironmentFile=/etc/gpuaas/worker.env
ExecStart={GPUAAS} worker --name {host}
EOF
systemctl daemon-reload
systemctl start {WORKER_UNIT}
""")
        wait_for(lambda: f"worker {host} started" in self.worker_log(host), 60, f"the worker on {host} to start")

    def worker_log(self, host: str, lines: int = 200) -> str:
        done = self.sh(host, f"journalctl -u {WORKER_UNIT} --no-pager -o cat -n {lines}", check=False)
        return scrub(done.stdout)

    def run_processes(self, host: str) -> str:
        """Every ansible-playbook process on the host (its run guard's too), as `pgrep -af` lists them."""
        return self.sh(host, "pgrep -af '[a]nsible-playbook' || true").stdout.strip()

    def cut_off(self, host: str) -> None:
        subprocess.run(["podman", "network", "disconnect", testhosts.NETWORK, self.hosts[host]["container"]],
                       check=True, capture_output=True)

    def reconnect(self, host: str) -> None:
        """Back on the test network at the address it had (as testhosts.start_again puts a host back)."""
        h = self.hosts[host]
        subprocess.run(["podman", "network", "connect", "--ip", h["address"], "--alias", host, testhosts.NETWORK,
                        h["container"]], check=True, capture_output=True)

    # -- the end ------------------------------------------------------------------------------------

    def close(self, keep_files: bool = False) -> None:
        for replica in list(self.replicas.values()) + self.killed:
            if replica.process.poll() is None:
                replica.process.kill()
                replica.process.wait(10)
        testhosts.down(self.prefix)
        if not keep_files:
            shutil.rmtree(self.root, ignore_errors=True)


def _ready(url: str) -> bool:
    try:
        return httpx.get(f"{url}/readyz", timeout=2).status_code == 200
    except httpx.HTTPError:
        return False


class _Background(contextlib.AbstractContextManager):
    """A few slow steps side by side (test hosts, replicas); every one is waited for on leaving."""

    def __enter__(self):
        from concurrent.futures import ThreadPoolExecutor

        self.pool = ThreadPoolExecutor(max_workers=4, thread_name_prefix="multihost")
        return self.pool

    def __exit__(self, *exc):
        self.pool.shutdown(wait=True)
        return False


class EventFollower(threading.Thread):
    """Follows an instance's event stream (GET .../events/stream) on one serve replica, and when that stream
    ends or the replica is gone, resumes on the next one with Last-Event-ID: the last id it received."""

    def __init__(self, replicas: dict[str, str], first: str, instance_id: str, token: str):
        super().__init__(name=f"events-{instance_id}", daemon=True)
        self.replicas, self.instance_id, self.token = dict(sorted(replicas.items())), instance_id, token
        self.current = first
        self.events: list[dict] = []  # {id, type, data, via}
        self.connections: list[tuple[str, int]] = []  # (replica, the Last-Event-ID it was opened with)
        self.last = 0
        self.stopped = threading.Event()
        self._response: httpx.Response | None = None
        self.lock = threading.Lock()

    def use(self, name: str, url: str) -> None:
        """A replica to resume on (one started again, on another port)."""
        with self.lock:
            self.replicas[name] = url

    def ids(self) -> list[int]:
        with self.lock:
            return [e["id"] for e in self.events]

    def run(self) -> None:
        while not self.stopped.is_set():
            with contextlib.suppress(httpx.TransportError, httpx.StreamError):
                self._one_connection()
            if self.stopped.is_set():
                return
            # The stream ended or broke: resume on the next replica.
            with self.lock:
                names = list(self.replicas)
                self.current = names[(names.index(self.current) + 1) % len(names)]
            time.sleep(0.2)

    def _one_connection(self) -> None:
        with self.lock:
            name, url = self.current, self.replicas[self.current]
        headers = {"Authorization": f"Bearer {self.token}", "Accept": "text/event-stream"}
        if self.last:
            headers["Last-Event-ID"] = str(self.last)
        with httpx.stream("GET", f"{url}/v1/instances/{self.instance_id}/events/stream", headers=headers,
                          timeout=httpx.Timeout(5, read=None)) as response:
            self._response = response
            if response.status_code != 200:  # e.g. 503 while the database fails over
                return
            self.connections.append((name, self.last))
            fields: dict[str, str] = {}
            for line in response.iter_lines():
                if self.stopped.is_set():
                    return
                if line:
                    key, _, value = line.partition(":")
                    fields[key] = value.removeprefix(" ")
                    continue
                if "id" in fields:
                    event = {"id": int(fields["id"]), "type": fields.get("event"),
                             "data": json.loads(fields.get("data") or "{}"), "via": name}
                    with self.lock:
                        self.events.append(event)
                    self.last = event["id"]
                fields = {}

    def stop(self) -> None:
        """Ends the stream now: shutting the socket down wakes the blocked read."""
        self.stopped.set()
        response = self._response
        stream = response.extensions.get("network_stream") if response is not None else None
        sock = stream.get_extra_info("socket") if stream is not None else None
        if sock is not None:
            with contextlib.suppress(OSError):
                sock.shutdown(socket.SHUT_RDWR)
        self.join(10)


class Replicas:
    """The API as a client of several replicas sees it (an httpx.Client's request and get, for World): each
    request goes to the next replica in turn; a replica that refuses the connection (killed) is passed over.
    It knows only the replicas' addresses (`urls`, name -> base URL), not whether they live."""

    def __init__(self):
        self.urls: dict[str, str] = {}
        self.turn = 0
        self.clients: dict[str, httpx.Client] = {}

    def via(self, name: str) -> httpx.Client:
        """A client of one replica (a new one when the replica moved to another address)."""
        url = self.urls[name]
        if name not in self.clients or str(self.clients[name].base_url).rstrip("/") != url:
            self.clients[name] = httpx.Client(base_url=url, timeout=30)
        return self.clients[name]

    def request(self, method: str, url: str, **kwargs) -> httpx.Response:
        names = sorted(self.urls)
        self.turn += 1
        order = names[self.turn % len(names):] + names[:self.turn % len(names)]
        for name in order[:-1]:
            with contextlib.suppress(httpx.ConnectError):
                return self.via(name).request(method, url, **kwargs)
        return self.via(order[-1]).request(method, url, **kwargs)

    def get(self, url: str, **kwargs) -> httpx.Response:
        return self.request("GET", url, **kwargs)

    def close(self) -> None:
        for client in self.clients.values():
            client.close()
