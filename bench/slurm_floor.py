"""The raw-SSH floor for the Slurm lifecycle: the least a person would do over SSH to get the same cluster.

bench/bench_slurm_speed.py times this next to the playbooks on identical fresh test hosts. Each step runs
one `ssh <host> bash -s` per host and phase, all hosts of a phase at once (threads), with no tooling on the
hosts beyond the Slurm packages. What it writes has the shape of the roles' own: the munge key, a
configless slurm.conf on the controller only (roles/slurm_controller/templates/slurm.conf.j2, with the test
hosts' proctrack/linuxproc and task/none), slurmd pointed at the controller through /etc/default/slurmd.

    deploy(ctl, workers)   munge key and munge everywhere, hardware read on the workers (one phase);
                           slurm.conf and slurmctld on the controller, until it answers (two);
                           slurmd on the workers (three); `srun -N<workers> hostname` answers (four)
    again()                writes the same files again and starts what already runs (one phase, in which the
                           controller then runs srun on every worker)
    add(host)              munge and the hardware read on the new host; its NodeName, restart slurmctld;
                           slurmd on the new host; srun on it
    remove(host)           slurmd and munge stopped and their files gone on the host; NodeName dropped,
                           slurmctld restarted; Slurm no longer knows the node

The munge key is made here, passed on ssh's stdin and never printed.
"""

from __future__ import annotations

import secrets
import shlex
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "api"))

from gpuaas_api import testhosts  # noqa: E402

SLURM_CONF_HEAD = """\
ClusterName=gpuaas
SlurmctldHost={ctl}({ctl_addr})
SlurmctldPort=6817
SlurmdPort=6818
SlurmctldParameters=enable_configless
AuthType=auth/munge
CryptoType=crypto/munge
SlurmUser=slurm
SlurmdUser=root
StateSaveLocation=/var/lib/slurm/slurmctld
SlurmdSpoolDir=/var/lib/slurm/slurmd
SlurmctldPidFile=/run/slurmctld.pid
SlurmdPidFile=/run/slurmd.pid
SlurmctldLogFile=/var/log/slurm/slurmctld.log
SlurmdLogFile=/var/log/slurm/slurmd.log
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
SchedulerType=sched/backfill
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
ReturnToService=2
MpiDefault=none
"""
PARTITION = "PartitionName=main Nodes=ALL Default=YES MaxTime=INFINITE State=UP\n"

# Every host: the key (a here-document on ssh's stdin, written by a builtin: never on a command line).
MUNGE_KEY = """\
key=$(cat <<'GPUAAS_KEY'
{key}
GPUAAS_KEY
)
umask 077
printf %s "$key" > /etc/munge/munge.key
umask 022
chown munge:munge /etc/munge/munge.key && chmod 0400 /etc/munge/munge.key
"""
# Workers: slurmd without a local slurm.conf, pointed at the controller.
SLURMD_FILES = """\
mkdir -p /etc/systemd/system/slurmd.service.d
printf '[Unit]\\nConditionPathExists=\\n' > /etc/systemd/system/slurmd.service.d/gpuaas-configless.conf
echo 'SLURMD_OPTIONS="--conf-server {ctl_addr}:6817 -N {name}"' > /etc/default/slurmd
"""
# "CPUs RealMemory" (95 % of MemTotal, as the role does).
HARDWARE = "echo \"$(nproc) $(awk '/^MemTotal:/ {print int($2 / 1024 * 0.95)}' /proc/meminfo)\"\n"
# slurmctld's unit is Type=simple: poll until it answers (30 s at most).
SLURMCTLD_READY = """\
for i in $(seq 300); do scontrol ping >/dev/null 2>&1 && break; sleep 0.1; done
scontrol ping >/dev/null
"""
WRITE_CONF = "cat > /etc/slurm/slurm.conf <<'GPUAAS_EOF'\n{conf}GPUAAS_EOF\n"


def srun(nodes: list[str], timeout: int = 60) -> str:
    """Waits until a job step runs on every one of the nodes (retrying while they register). srun reads
    stdin, which is the script here: it gets /dev/null."""
    names = ",".join(nodes)
    return (
        f"end=$((SECONDS + {timeout}))\n"
        f"until out=$(srun --immediate=30 --nodelist={names} -N{len(nodes)} --ntasks-per-node=1 hostname"
        " 2>&1 </dev/null); do\n"
        "  [ $SECONDS -lt $end ] || { echo \"$out\" >&2; exit 1; }; sleep 0.2\n"
        "done\n"
        "echo \"$out\"\n"
    )


class Floor:
    """A Slurm cluster on test hosts (dicts from testhosts.up: name, address), set up by plain SSH."""

    def __init__(self, ctl: dict, workers: list[dict]):
        self.ctl = ctl
        self.workers = list(workers)
        self.key = secrets.token_hex(32)
        self.nodes: dict[str, str] = {}  # worker name -> NodeName line

    def ssh(self, host: dict, script: str, timeout: float = 300) -> str:
        proc = subprocess.run(
            [*testhosts.ssh_command(host["address"]), "bash", "-s"],
            input="set -e\n" + script.replace("{key}", self.key),
            capture_output=True, text=True, timeout=timeout, check=False,
        )
        if proc.returncode != 0:
            raise RuntimeError(f"floor: {host['name']} failed ({proc.returncode}): {proc.stderr.strip()[-2000:]}")
        return proc.stdout

    def parallel(self, jobs: list[tuple[dict, str]]) -> list[str]:
        with ThreadPoolExecutor(len(jobs)) as pool:
            return list(pool.map(lambda job: self.ssh(*job), jobs))

    def conf(self) -> str:
        head = SLURM_CONF_HEAD.format(ctl=self.ctl["name"], ctl_addr=self.ctl["address"])
        nodes = "".join(self.nodes[name] + "\n" for name in sorted(self.nodes))
        return head + nodes + PARTITION

    def _worker_files(self, worker: dict) -> str:
        return MUNGE_KEY + SLURMD_FILES.format(ctl_addr=self.ctl["address"], name=worker["name"])

    def _register(self, worker: dict, hardware: str) -> None:
        cpus, memory = hardware.split()
        self.nodes[worker["name"]] = (
            f"NodeName={worker['name']} NodeAddr={worker['address']} CPUs={cpus} RealMemory={memory} State=UNKNOWN"
        )

    def _join(self, worker: dict) -> str:
        """Phase one on a worker: key, files, units enabled (one reload of systemd), munge started."""
        return (self._worker_files(worker) + "systemctl enable --quiet munge slurmd\nsystemctl start munge\n"
                + HARDWARE)

    def deploy(self) -> str:
        ctl = MUNGE_KEY + "systemctl enable --quiet munge slurmctld\nsystemctl start munge\n"
        outputs = self.parallel([(self.ctl, ctl)] + [(w, self._join(w)) for w in self.workers])
        for worker, out in zip(self.workers, outputs[1:], strict=True):
            self._register(worker, out.strip())
        self.ssh(self.ctl, WRITE_CONF.format(conf=self.conf()) + "systemctl start slurmctld\n" + SLURMCTLD_READY)
        self.parallel([(w, "systemctl start slurmd\n") for w in self.workers])
        return self.ssh(self.ctl, srun([w["name"] for w in self.workers]))

    def again(self) -> str:
        """The no-change run: the same files written again, every daemon started (already running)."""
        ctl = (MUNGE_KEY + WRITE_CONF.format(conf=self.conf()) + "systemctl start munge slurmctld\n"
               + SLURMCTLD_READY + srun([w["name"] for w in self.workers]))
        workers = [(w, self._worker_files(w) + "systemctl start munge slurmd\n") for w in self.workers]
        return self.parallel([(self.ctl, ctl), *workers])[0]

    def add(self, worker: dict) -> str:
        self._register(worker, self.ssh(worker, self._join(worker)).strip())
        self.workers.append(worker)
        self.ssh(self.ctl, WRITE_CONF.format(conf=self.conf()) + "systemctl restart slurmctld\n" + SLURMCTLD_READY)
        self.ssh(worker, "systemctl start slurmd\n")
        return self.ssh(self.ctl, srun([worker["name"]]))

    def remove(self, worker: dict) -> None:
        self.ssh(worker, "systemctl disable --now --quiet slurmd munge\n"
                 "rm -rf /etc/munge/munge.key /etc/default/slurmd /etc/systemd/system/slurmd.service.d "
                 "/var/lib/slurm/slurmd/*\n")
        self.workers = [w for w in self.workers if w["name"] != worker["name"]]
        del self.nodes[worker["name"]]
        self.ssh(self.ctl, WRITE_CONF.format(conf=self.conf()) + "systemctl restart slurmctld\n" + SLURMCTLD_READY
                 + f"! scontrol show node {shlex.quote(worker['name'])} >/dev/null 2>&1\n")
