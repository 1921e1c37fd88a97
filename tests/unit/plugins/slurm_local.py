"""A private, throwaway single-host Slurm 22.05 cluster (munged, mariadbd, slurmdbd, slurmctld, slurmd).

Used to capture real command output for the fixtures and by the *_live tests. Everything lives in one
directory (config, keys, state, sockets, logs); daemons listen on free loopback ports and use their own
munge socket, so nothing collides with a Slurm installed on the machine. Client commands find it
through the SLURM_CONF environment variable (see ``Cluster.env``).

    python tests/unit/plugins/slurm_local.py start /tmp/slurm-x   # prints the SLURM_CONF to export
    python tests/unit/plugins/slurm_local.py stop /tmp/slurm-x

Needs root and the Debian packages slurm-wlm slurmdbd munge mariadb-server.
"""

import contextlib
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

BINARIES = (
    "munged",
    "mariadbd",
    "mariadb-install-db",
    "mariadb",
    "slurmdbd",
    "slurmctld",
    "slurmd",
    "scontrol",
    "sacctmgr",
    "squeue",
    "sbatch",
)
CLUSTER_NAME = "gpuaas-test"
NODE_NAME = "gpu01"
DB_PASSWORD = "slurm-test-only"  # a throwaway database that only listens on loopback for this test


def missing_requirements():
    """Why a private cluster cannot start here ("" when it can)."""
    missing = [b for b in BINARIES if shutil.which(b) is None and not Path("/usr/sbin", b).exists()]
    if missing:
        return "not installed: " + ", ".join(missing) + " (apt-get install slurm-wlm slurmdbd munge mariadb-server)"
    if os.geteuid() != 0:
        return "needs root (slurmd runs jobs as their submitting user)"
    return ""


def _free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _binary(name):
    return shutil.which(name) or str(Path("/usr/sbin", name))


class Cluster:
    def __init__(self, root, accounting=True):
        # Without accounting: no MariaDB, no slurmdbd (Debian 13's slurmdbd 24.11 cannot use its MariaDB 11.8).
        self.accounting = accounting
        self.root = Path(root)
        self.conf = self.root / "etc" / "slurm.conf"
        self.state_file = self.root / "cluster.json"

    @property
    def env(self):
        return dict(os.environ, SLURM_CONF=str(self.conf))

    def run(self, *args, check=True):
        return subprocess.run(args, env=self.env, capture_output=True, text=True, check=check, timeout=60)

    def ok(self, *args):
        return self.run(*args, check=False).returncode == 0

    # ---- start ---------------------------------------------------------------------------------------
    def start(self):
        if self.state_file.exists():
            raise RuntimeError(f"{self.root} already holds a cluster; stop it first")
        for sub in ("etc", "munge", "db", "log", "spool/ctld", "spool/d", "run"):
            (self.root / sub).mkdir(parents=True, exist_ok=True)
        ports = {name: _free_port() for name in ("ctld", "slurmd", "dbd", "mysql")}
        pids = {}
        self.state_file.write_text(json.dumps({"ports": ports, "pids": pids}))
        try:
            pids["munged"] = self._start_munge()
            if self.accounting:
                pids["mariadbd"] = self._start_mariadb(ports["mysql"])
            self._write_configs(ports)
            if self.accounting:
                pids["slurmdbd"] = self._spawn("slurmdbd", "-D")
                self._wait(lambda: self.ok("sacctmgr", "-n", "-P", "show", "cluster"), "slurmdbd answering")
                self.run("sacctmgr", "-i", "add", "cluster", CLUSTER_NAME)
            pids["slurmctld"] = self._spawn("slurmctld", "-D", "-i")
            self._wait(lambda: self.ok("scontrol", "ping"), "slurmctld answering")
            pids["slurmd"] = self._spawn("slurmd", "-D", "-N", NODE_NAME)
            self._wait(self._node_idle, f"{NODE_NAME} idle")
        finally:
            self.state_file.write_text(json.dumps({"ports": ports, "pids": pids}))
        return self

    def _start_munge(self):
        key = self.root / "munge" / "munge.key"
        key.write_bytes(os.urandom(1024))
        key.chmod(0o400)
        sock = self.root / "munge" / "munge.socket"
        pid = self._spawn(
            "munged",
            "-F",
            "--force",
            f"--key-file={key}",
            f"--socket={sock}",
            f"--pid-file={self.root / 'munge' / 'munged.pid'}",
            f"--seed-file={self.root / 'munge' / 'munged.seed'}",
            f"--log-file={self.root / 'log' / 'munged.log'}",
        )
        self._wait(sock.exists, "munge socket")
        return pid

    def _start_mariadb(self, port):
        datadir = self.root / "db"
        sock = self.root / "run" / "mysqld.sock"
        subprocess.run(
            [
                _binary("mariadb-install-db"),
                f"--datadir={datadir}",
                "--user=root",
                "--auth-root-authentication-method=socket",
                "--skip-test-db",
            ],
            check=True,
            capture_output=True,
            timeout=120,
        )
        pid = self._spawn(
            "mariadbd",
            "--no-defaults",
            f"--datadir={datadir}",
            f"--socket={sock}",
            f"--port={port}",
            "--bind-address=127.0.0.1",
            "--user=root",
            f"--pid-file={self.root / 'run' / 'mysqld.pid'}",
            "--innodb-buffer-pool-size=64M",
            "--skip-log-bin",
        )
        self._wait(sock.exists, "mariadb socket")
        sql = (
            f"CREATE USER 'slurm'@'127.0.0.1' IDENTIFIED BY '{DB_PASSWORD}';"
            "GRANT ALL ON slurm_acct_db.* TO 'slurm'@'127.0.0.1';"
        )
        subprocess.run([_binary("mariadb"), f"--socket={sock}", "-uroot", "-e", sql], check=True, timeout=60)
        return pid

    def _write_configs(self, ports):
        r = self.root
        auth = f"AuthInfo=socket={r / 'munge' / 'munge.socket'}"
        (r / "etc" / "slurmdbd.conf").write_text(
            "\n".join(
                [
                    "AuthType=auth/munge",
                    auth,
                    "DbdHost=localhost",
                    "DbdAddr=127.0.0.1",
                    f"DbdPort={ports['dbd']}",
                    "SlurmUser=root",
                    f"LogFile={r / 'log' / 'slurmdbd.log'}",
                    f"PidFile={r / 'run' / 'slurmdbd.pid'}",
                    "StorageType=accounting_storage/mysql",
                    "StorageHost=127.0.0.1",
                    f"StoragePort={ports['mysql']}",
                    "StorageUser=slurm",
                    f"StoragePass={DB_PASSWORD}",
                    "StorageLoc=slurm_acct_db",
                    "",
                ]
            )
        )
        (r / "etc" / "slurmdbd.conf").chmod(0o600)
        # Two pretend GPUs: a gpu GRES needs device files, and these two exist everywhere.
        (r / "etc" / "gres.conf").write_text(
            f"AutoDetect=off\nNodeName={NODE_NAME} Name=gpu File=/dev/null\n"
            f"NodeName={NODE_NAME} Name=gpu File=/dev/zero\n"
        )
        self.conf.write_text(
            "\n".join(
                [
                    f"ClusterName={CLUSTER_NAME}",
                    "SlurmctldHost=localhost(127.0.0.1)",
                    f"SlurmctldPort={ports['ctld']}",
                    f"SlurmdPort={ports['slurmd']}",
                    "AuthType=auth/munge",
                    "CredType=cred/munge",
                    auth,
                    "SlurmUser=root",
                    "SlurmdUser=root",
                    f"StateSaveLocation={r / 'spool' / 'ctld'}",
                    f"SlurmdSpoolDir={r / 'spool' / 'd'}",
                    f"SlurmctldPidFile={r / 'run' / 'slurmctld.pid'}",
                    f"SlurmdPidFile={r / 'run' / 'slurmd.pid'}",
                    f"SlurmctldLogFile={r / 'log' / 'slurmctld.log'}",
                    f"SlurmdLogFile={r / 'log' / 'slurmd.log'}",
                    # FACTS.md: proctrack/cgroup cannot start here; production keeps it.
                    "ProctrackType=proctrack/linuxproc",
                    "TaskPlugin=task/none",
                    "JobAcctGatherType=jobacct_gather/none",
                    "SchedulerType=sched/backfill",
                    "SelectType=select/cons_tres",
                    "SelectTypeParameters=CR_Core",
                    "ReturnToService=2",
                    "MpiDefault=none",
                    "MailProg=/bin/true",
                    "GresTypes=gpu",
                    *([
                        "AccountingStorageType=accounting_storage/slurmdbd",
                        "AccountingStorageHost=127.0.0.1",
                        f"AccountingStoragePort={ports['dbd']}",
                        f"AccountingStoragePass={r / 'munge' / 'munge.socket'}",
                        "AccountingStorageEnforce=associations",
                        "AccountingStorageTRES=gres/gpu",
                    ] if self.accounting else []),
                    f"NodeName={NODE_NAME} NodeAddr=127.0.0.1 NodeHostname={socket.gethostname()} CPUs=2 "
                    "RealMemory=1000 Gres=gpu:2 Feature=a100,test State=UNKNOWN",
                    f"PartitionName=gpu Nodes={NODE_NAME} Default=YES MaxTime=1-00:00:00 State=UP",
                    f"PartitionName=debug Nodes={NODE_NAME} MaxTime=30:00 State=UP",
                    "",
                ]
            )
        )

    def _spawn(self, name, *args):
        log = open(self.root / "log" / f"{name}.stdout", "ab")  # noqa: SIM115 - handed to the child
        proc = subprocess.Popen(
            [_binary(name), *args], env=self.env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True
        )
        log.close()
        time.sleep(0.2)
        if proc.poll() is not None:
            raise RuntimeError(f"{name} exited at start (rc={proc.returncode}); see {self.root / 'log'}")
        return proc.pid

    def _node_idle(self):
        out = self.run("scontrol", "show", "-o", "node", NODE_NAME, check=False).stdout
        return "State=IDLE " in out

    @staticmethod
    def _wait(predicate, what, timeout=60):
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if predicate():
                return
            time.sleep(0.3)
        raise RuntimeError(f"timed out waiting for {what}")

    # ---- stop ----------------------------------------------------------------------------------------
    def stop(self):
        if not self.state_file.exists():
            return
        pids = json.loads(self.state_file.read_text())["pids"]
        for name in ("slurmd", "slurmctld", "slurmdbd", "mariadbd", "munged"):
            pid = pids.get(name)
            if pid and _signal(pid, signal.SIGTERM):
                _wait_gone(pid)
        self.state_file.unlink()


def _signal(pid, sig):
    try:
        os.kill(pid, sig)
    except ProcessLookupError:
        return False
    return True


def _wait_gone(pid, timeout=20):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        with contextlib.suppress(ChildProcessError):
            os.waitpid(pid, os.WNOHANG)
        if not Path(f"/proc/{pid}").exists() or "zombie" in _proc_state(pid):
            return
        time.sleep(0.2)
    _signal(pid, signal.SIGKILL)


def _proc_state(pid):
    try:
        return Path(f"/proc/{pid}/status").read_text().lower()
    except OSError:
        return "zombie"


def main(argv):
    if len(argv) != 3 or argv[1] not in ("start", "stop"):
        print(__doc__)
        return 2
    cluster = Cluster(argv[2])
    if argv[1] == "start":
        reason = missing_requirements()
        if reason:
            print(reason, file=sys.stderr)
            return 1
        try:
            cluster.start()
        except Exception:
            cluster.stop()
            raise
        print(cluster.conf)
    else:
        cluster.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
