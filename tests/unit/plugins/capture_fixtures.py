"""Re-capture the real Slurm output the unit tests parse: 22.05's text, and 24.11's JSON.

Starts a private cluster (slurm_local.py), drives it through the situations the modules meet (idle, draining
with running jobs, drained, resumed, down, drained by someone else, accounts and associations), and writes
each command's raw stdout to fixtures/<name>.txt. fixtures/index.json records, per fixture, the exact command,
its exit status, stderr and the situation it was taken in.

    python tests/unit/plugins/capture_fixtures.py   # needs root + slurm-wlm slurmdbd munge mariadb-server

On Slurm 24.11 (a Debian 13 test host) it captures the JSON the modules read there instead, into
fixtures/json_*.txt, and adds those to index.json, keeping the 22.05 entries.
"""

import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
from slurm_local import NODE_NAME, Cluster, missing_requirements  # noqa: E402

FIXTURES = Path(__file__).parent / "fixtures"
ASSOC_FORMAT = "format=Cluster,Account,User,ParentName,Share,GrpTRES,MaxJobs,MaxSubmit,QOS,DefaultQOS"
ACCOUNT_FORMAT = "format=Account,Description,Organization"
USER_FORMAT = "format=User,DefaultAccount,Cluster"
HOSTLIST = "gpu[01-03,07],login1,rack[1-2]-n[8-10],x[009-011]"


class Recorder:
    def __init__(self, cluster):
        self.cluster = cluster
        self.index = {}

    def capture(self, name, situation, *cmd):
        proc = self.cluster.run(*cmd, check=False)
        (FIXTURES / f"{name}.txt").write_text(proc.stdout)
        self.index[name] = {
            "command": " ".join(cmd),
            "rc": proc.returncode,
            "stderr": proc.stderr,
            "situation": situation,
        }
        return proc

    def do(self, *cmd):
        return self.cluster.run(*cmd)

    def node_state(self):
        return self.cluster.run("scontrol", "show", "-o", "node", NODE_NAME).stdout


def wait_for(predicate, what, timeout=60):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return
        time.sleep(0.2)
    raise RuntimeError(f"timed out waiting for {what}")


def capture_nodes(rec):
    node = ("scontrol", "show", "-o", "node", NODE_NAME)
    jobs = ("squeue", "-h", "-w", NODE_NAME, "-t", "RUNNING,COMPLETING,SUSPENDED", "-o", "%i")
    rec.capture("node_idle", "idle node, no jobs", *node)
    rec.capture("node_missing", "a node name slurm does not know", "scontrol", "show", "-o", "node", "nosuch")
    rec.capture("config", "scontrol show config of the test cluster", "scontrol", "show", "config")
    rec.capture("partitions", "two partitions, gpu is the default", "scontrol", "show", "-o", "partition")
    rec.capture("squeue_node_empty", "no jobs on the node", *jobs)

    job1 = rec.do("sbatch", "--parsable", "-n1", "-o", "/dev/null", "--wrap", "sleep 300").stdout.strip()
    wait_for(lambda: "MIXED" in rec.node_state(), "job 1 running")
    rec.capture("node_mixed", "one 1-cpu job running on a 2-cpu node", *node)
    rec.capture("nodes_all_mixed", "all nodes, one job running", "scontrol", "show", "-o", "node")
    job2 = rec.do("sbatch", "--parsable", "-n1", "-o", "/dev/null", "--wrap", "sleep 300").stdout.strip()
    wait_for(lambda: "ALLOCATED" in rec.node_state(), "job 2 running")
    rec.capture("squeue_node_two_jobs", f"jobs {job1} and {job2} running on the node", *jobs)
    rec.capture(
        "squeue_all_running",
        "all running jobs with their node lists",
        "squeue",
        "-h",
        "-t",
        "RUNNING,COMPLETING,SUSPENDED",
        "-o",
        "%i|%N",
    )

    rec.do("scontrol", "update", f"nodename={NODE_NAME}", "state=drain", "reason=gpuaas: maintenance window")
    rec.capture("node_draining_allocated", "drained by gpuaas while two jobs run", *node)
    rec.do("scancel", job2)
    wait_for(lambda: "MIXED+DRAIN" in rec.node_state(), "job 2 gone")
    rec.capture("node_draining_mixed", "drained by gpuaas while one job runs", *node)
    rec.do("scancel", job1)
    wait_for(lambda: "State=IDLE+DRAIN " in rec.node_state(), "node drained")
    rec.capture("node_drained", "drained by gpuaas, jobs gone", *node)

    rec.do("scontrol", "update", f"nodename={NODE_NAME}", "state=resume")
    rec.capture("node_resumed_not_responding", "right after resume (sinfo shows idle*)", *node)
    wait_for(lambda: "State=IDLE " in rec.node_state(), "node idle after resume")

    rec.do(
        "scontrol",
        "update",
        f"nodename={NODE_NAME}",
        "state=drain",
        "reason=slinky: gpu xid 79 Reason=looks like a key",
    )
    rec.capture("node_drained_foreign", "drained by another system whose reason has a Key= inside", *node)
    rec.do("scontrol", "update", f"nodename={NODE_NAME}", "state=resume")
    wait_for(lambda: "State=IDLE " in rec.node_state(), "node idle after resume")

    rec.do("scontrol", "update", f"nodename={NODE_NAME}", "state=down", "reason=gpuaas: broken gpu")
    rec.capture("node_down", "set down by gpuaas", *node)
    rec.do("scontrol", "update", f"nodename={NODE_NAME}", "state=drain", "reason=gpuaas: broken gpu")
    rec.capture("node_down_drain", "down, then drained by gpuaas", *node)
    rec.capture(
        "update_missing_node",
        "scontrol update on an unknown node",
        "scontrol",
        "update",
        "nodename=nosuch",
        "state=drain",
        "reason=gpuaas: x",
    )
    rec.do("scontrol", "update", f"nodename={NODE_NAME}", "state=resume")
    wait_for(lambda: "State=IDLE " in rec.node_state(), "node idle after resume")


def capture_json(rec):
    """Slurm 24.11's `--json` output of nodes and jobs, in the situations capture_nodes() records as text."""
    node = ("scontrol", "show", "node", NODE_NAME, "--json")
    running = ("squeue", "--json", "-t", "RUNNING,COMPLETING,SUSPENDED")
    rec.capture("json_version", "client version", "scontrol", "--version")
    rec.capture("json_node_idle", "idle node, no jobs", *node)
    rec.capture("json_node_missing", "a node name slurm does not know", "scontrol", "show", "node", "nosuch", "--json")
    rec.capture("json_squeue_empty", "no jobs", *running)
    job1 = rec.do("sbatch", "--parsable", "-n1", "-o", "/dev/null", "--wrap", "sleep 300").stdout.strip()
    wait_for(lambda: "MIXED" in rec.node_state(), "job 1 running")
    rec.capture("json_nodes_all_mixed", "all nodes, one job running", "scontrol", "show", "node", "--json")
    rec.capture("json_squeue_running", f"job {job1} running", *running)
    rec.capture("json_squeue_all", f"every job, job {job1} running (-a: hidden partitions too)", "squeue", "--json",
                "-a")
    rec.do("scontrol", "update", f"nodename={NODE_NAME}", "state=drain", "reason=gpuaas: maintenance window")
    rec.capture("json_node_draining_mixed", "drained by gpuaas while one job runs", *node)
    rec.do("scancel", job1)
    wait_for(lambda: "State=IDLE+DRAIN " in rec.node_state(), "node drained")
    rec.capture("json_node_drained", "drained by gpuaas, jobs gone", *node)
    rec.do("scontrol", "update", f"nodename={NODE_NAME}", "state=down", "reason=gpuaas: broken gpu")
    rec.capture("json_node_down", "set down by gpuaas", *node)
    rec.do("scontrol", "update", f"nodename={NODE_NAME}", "state=resume")
    wait_for(lambda: "State=IDLE " in rec.node_state(), "node idle after resume")


def capture_accounts(rec):
    assoc = ("sacctmgr", "-P", "-n", "show", "assoc", ASSOC_FORMAT)
    rec.capture("assoc_initial", "fresh cluster: root account and root user only", *assoc)
    rec.do("sacctmgr", "-i", "add", "qos", "high")
    rec.capture(
        "add_account",
        "add a new account",
        "sacctmgr",
        "-i",
        "add",
        "account",
        "tenant1",
        "description=tenant one",
        "organization=acme",
        "parent=root",
    )
    rec.capture("add_account_exists", "add an account that exists", "sacctmgr", "-i", "add", "account", "tenant1")
    rec.capture(
        "add_account_uppercase",
        "sacctmgr lowercases names and text silently",
        "sacctmgr",
        "-i",
        "add",
        "account",
        "ProjUpper",
        "description=Mixed Case",
        "organization=Acme Corp",
    )
    rec.do("sacctmgr", "-i", "remove", "account", "projupper")
    odd = {"comma": "a,b", "quote": "it's", "equals": "x=y"}
    for label, name in odd.items():
        rec.capture(
            f"add_account_{label}",
            f"what sacctmgr makes of the name {name!r}",
            "sacctmgr",
            "-i",
            "add",
            "account",
            name,
        )
    rec.capture(
        "add_account_pipe_text",
        "a '|' in a description breaks -P output",
        "sacctmgr",
        "-i",
        "add",
        "account",
        "piped",
        "description=a|b",
    )
    rec.capture(
        "accounts_mangled",
        "what sacctmgr stored for the names and text above",
        "sacctmgr",
        "-P",
        "-n",
        "show",
        "account",
        ACCOUNT_FORMAT,
    )
    rec.do("sacctmgr", "-i", "remove", "account", "a", "b", "it`s", "piped")
    rec.do(
        "sacctmgr",
        "-i",
        "add",
        "account",
        "proj-a",
        "parent=tenant1",
        "description=project a",
        "organization=acme",
        "fairshare=10",
        "maxjobs=5",
        "maxsubmit=20",
        "grptres=gres/gpu=4,cpu=8",
        "qos=normal,high",
        "defaultqos=high",
    )
    rec.do("sacctmgr", "-i", "add", "user", "alice", "account=proj-a")
    rec.do("sacctmgr", "-i", "add", "user", "bob", "account=tenant1")
    rec.do("sacctmgr", "-i", "add", "user", "bob", "account=proj-a")
    rec.do(
        "sacctmgr",
        "-i",
        "modify",
        "user",
        "where",
        "name=bob",
        "account=proj-a",
        "set",
        "maxjobs=2",
        "fairshare=3",
    )
    rec.capture("assoc_tree", "tenant1 > proj-a with limits; alice and bob (two accounts) as users", *assoc)
    rec.capture(
        "assoc_account",
        "associations of one account (account row and user rows)",
        "sacctmgr",
        "-P",
        "-n",
        "show",
        "assoc",
        "where",
        "account=proj-a",
        ASSOC_FORMAT,
    )
    rec.capture(
        "assoc_none",
        "associations of an account that does not exist",
        "sacctmgr",
        "-P",
        "-n",
        "show",
        "assoc",
        "where",
        "account=nosuch",
        ASSOC_FORMAT,
    )
    rec.capture("accounts", "account rows", "sacctmgr", "-P", "-n", "show", "account", ACCOUNT_FORMAT)
    rec.capture("users", "user rows", "sacctmgr", "-P", "-n", "show", "user", USER_FORMAT)
    rec.capture(
        "modify_account_unknown_qos",
        "modify with a QOS that does not exist",
        "sacctmgr",
        "-i",
        "modify",
        "account",
        "where",
        "name=proj-a",
        "set",
        "qos=nosuch",
    )
    rec.capture(
        "modify_account_nothing",
        "modify an account that does not exist",
        "sacctmgr",
        "-i",
        "modify",
        "account",
        "where",
        "name=nosuch",
        "set",
        "maxjobs=3",
    )
    rec.capture(
        "add_user_unknown_account",
        "add a user to an account that does not exist",
        "sacctmgr",
        "-i",
        "add",
        "user",
        "carol",
        "account=nosuch",
    )
    rec.capture(
        "remove_account_cascade",
        "removing tenant1 also removes proj-a and its users",
        "sacctmgr",
        "-i",
        "remove",
        "account",
        "where",
        "name=tenant1",
    )
    rec.capture("assoc_after_cascade", "after removing tenant1", *assoc)


def main():
    reason = missing_requirements()
    if reason:
        print(f"cannot capture fixtures: {reason}", file=sys.stderr)
        return 1
    FIXTURES.mkdir(exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="gpuaas-slurm-fixtures-") as tmp:
        release = subprocess.run(["dpkg-query", "-W", "-f=${Version}", "slurmctld"], capture_output=True, text=True,
                                 check=False).stdout
        cluster = Cluster(tmp, accounting=not release.startswith("24.11"))
        try:
            cluster.start()
            rec = Recorder(cluster)
            if not cluster.accounting:
                capture_json(rec)
                index = json.loads((FIXTURES / "index.json").read_text())
                (FIXTURES / "index.json").write_text(json.dumps(dict(index, **rec.index), indent=2, sort_keys=True)
                                                     + "\n")
                print(f"wrote {len(rec.index)} JSON fixtures to {FIXTURES}")
                return 0
            capture_nodes(rec)
            capture_accounts(rec)
            rec.capture("version", "client version", "scontrol", "--version")
            rec.capture(
                "hostnames",
                "Slurm's own host list expansion, to check ours against",
                "scontrol",
                "show",
                "hostnames",
                HOSTLIST,
            )
        finally:
            cluster.stop()
    (FIXTURES / "index.json").write_text(json.dumps(rec.index, indent=2, sort_keys=True) + "\n")
    print(f"wrote {len(rec.index)} fixtures to {FIXTURES}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
