#!/usr/bin/env bash
# The main job, operator path: three fresh test hosts, a Slurm cluster deployed on them with the
# collection's playbooks, a job run, a worker added, drained and removed, and everything torn down.
set -euo pipefail
cd "$(dirname "$0")/.."
export ANSIBLE_COLLECTIONS_PATH="$PWD/build/collections" PATH="$PWD/.venv/bin:$PATH"
prefix=demo
workdir=build/demo
mkdir -p "$workdir"
step() { printf '\n==> %s\n' "$*"; }
trap '.venv/bin/python scripts/testhosts.py down --prefix "$prefix"' EXIT

step "Starting four test hosts (podman + systemd, SSH); the first run builds the image"
.venv/bin/python scripts/testhosts.py up --prefix "$prefix" ctl w1 w2 w3 > "$workdir/hosts.json"
python3 - "$workdir" <<'PY'
import json, sys
workdir = sys.argv[1]
hosts = {h["name"]: h for h in json.load(open(f"{workdir}/hosts.json"))}
def inventory(workers):
    line = lambda n: f"{n} ansible_host={hosts[n]['address']}"
    return "\n".join(["[slurm_controller]", line("ctl"), "", "[slurm_workers]", *map(line, workers), "",
        "[all:vars]", "ansible_user=root",
        f"ansible_ssh_private_key_file={hosts['ctl']['ssh_private_key_file']}",
        "ansible_ssh_common_args='-o StrictHostKeyChecking=no -o UserKnownHostsFile=/dev/null'",
        "ansible_python_interpreter=/usr/bin/python3",
        "slurm_controller_proctrack_type=proctrack/linuxproc", "slurm_controller_task_plugin=task/none"]) + "\n"
open(f"{workdir}/two.ini", "w").write(inventory(["w1", "w2"]))
open(f"{workdir}/three.ini", "w").write(inventory(["w1", "w2", "w3"]))
PY
on_ctl() { podman exec "$prefix-ctl" bash -c "$*"; }
play() { local inv=$1; shift; ansible-playbook -i "$workdir/$inv" "$@" | grep -E '^(PLAY|ok:|changed:|fatal|.*: ok=)' | grep -E '^(PLAY \[|fatal|.*: ok=)'; }

step "Deploying 1 controller + 2 workers (gpuaas.apps.slurm_deploy)"
time play two.ini gpuaas.apps.slurm_deploy
on_ctl sinfo
step "Running a job on both workers"
on_ctl srun -N2 hostname

step "Adding a third worker (gpuaas.apps.slurm_member_add): only the controller and w3 are touched"
time play three.ini gpuaas.apps.slurm_member_add -e slurm_members=w3
on_ctl sinfo

step "Draining w3 while a job runs on it: the drain waits for the job"
on_ctl "sbatch -w w3 --output=/dev/null --wrap 'sleep 10'"
time play three.ini gpuaas.apps.slurm_member_drain -e slurm_members=w3
on_ctl sinfo -N -o "'%N %t %E'"

step "Removing w3 (gpuaas.apps.slurm_member_remove)"
play three.ini gpuaas.apps.slurm_member_remove -e slurm_members=w3
on_ctl sinfo

step "Decommissioning the cluster; the playbook proves nothing is left"
play three.ini gpuaas.apps.slurm_decommission
step "Done"
