#!/bin/bash
# GPU detection, GRES and CDI checked on a real GPU host (docs/gpus.md, "Checked on real hardware").
#   bash scripts/gpu_hardware_check.sh prepare DIR   # here: Debian's Slurm 22.05 debs and ansible-core wheels
#   OUT=LOGDIR bash scripts/gpu_hardware_check.sh run DIR   # on a throwaway GPU machine, as root, from the repo root
# `run` unpacks Slurm under /tmp/sroot, links its daemons into /usr, adds users and starts munged, slurmctld
# and slurmd: use it on a machine you will throw away, never on a production host. Every step logs; a
# failing step does not stop the others.
set -u
MODE=${1:?prepare or run}
DIR=$(realpath -m "${2:?a directory for the debs and wheels}")
if [ "$MODE" = prepare ]; then
  mkdir -p "$DIR/debs" "$DIR/whl"
  (cd "$DIR/debs" && apt-get download slurmd slurmctld slurm-client slurm-wlm-basic-plugins munge libmunge2 \
    libhwloc15 libjson-c5 liblua5.1-0 libnuma1 libyaml-0-2 libdbus-1-3)
  python3 -m pip download --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
    --platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 \
    -d "$DIR/whl" "ansible-core==$(.venv/bin/python -c 'from ansible.release import __version__ as v; print(v)')" \
    resolvelib cryptography cffi pycparser
  exit
fi
[ "$MODE" = run ] || { echo "usage: $0 prepare|run DIR" >&2; exit 2; }
ROOT=$PWD
LOG=${OUT:?set OUT to a directory for the log}/gpucheck.log
exec > >(tee "$LOG") 2>&1
step() { echo; echo "===== $* ====="; }

pkill -x slurmd; pkill -x slurmctld; pkill -x munged; rm -rf /var/lib/slurm /var/log/slurm
step machine
cat /etc/os-release | head -2; uname -r; nproc; grep MemTotal /proc/meminfo; hostname; hostname -s
ip -4 addr 2>/dev/null | grep inet || hostname -I
step nvidia-smi
nvidia-smi
nvidia-smi --query-gpu=index,name --format=csv,noheader; echo "rc=$?"
nvidia-smi --query-gpu=index,name,pci.bus_id,uuid,mig.mode.current --format=csv,noheader; echo "rc=$?"
nvidia-smi --help-query-gpu | grep -i -B1 -A2 "minor\|\"index\"" | head -20
nvidia-smi -q | grep -i "minor number\|bus id\|MIG Mode" -A1 | head -20
ls -l /dev/nvidia* 2>&1
step cdi tooling
command -v nvidia-ctk nvidia-container-toolkit nvidia-container-cli podman 2>&1
ls -l /etc/cdi /var/run/cdi 2>&1
step cgroup
stat -fc %T /sys/fs/cgroup; ps -p 1 -o comm=

step install ansible-core "(wheels)"
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site "$DIR"/whl/*.whl
export PYTHONPATH=/tmp/site PATH=/tmp/site/bin:$PATH
ansible --version | head -3
mkdir -p /tmp/coll/ansible_collections/gpuaas && ln -sfn "$ROOT" /tmp/coll/ansible_collections/gpuaas/apps
export ANSIBLE_COLLECTIONS_PATH=/tmp/coll ANSIBLE_HOST_KEY_CHECKING=false ANSIBLE_NOCOLOR=1
PY=$(command -v python3)
cat > /tmp/inv.ini <<EOF
[slurm_controller]
ctl ansible_connection=local ansible_python_interpreter=$PY

[slurm_workers]
g1 ansible_connection=local ansible_python_interpreter=$PY gpu_detect_output=/tmp/render gpu_detect_templates=$ROOT/roles/slurm_controller/templates
EOF
mkdir -p /tmp/render

step "the host_facts module, gpus=true, through Ansible"
ansible -i /tmp/inv.ini g1 -m gpuaas.apps.host_facts -a gpus=true

step "the worker role's description and the controller's templates (tests/integration/playbooks/gpu_detect.yml)"
ansible-playbook -i /tmp/inv.ini --limit g1 tests/integration/playbooks/gpu_detect.yml
echo "--- slurm.conf"; cat /tmp/render/slurm.conf
echo "--- gres.conf"; cat /tmp/render/gres.conf
cp /tmp/render/slurm.conf /tmp/render/gres.conf "$OUT/" 2>/dev/null

step "slurm 22.05 (Debian bookworm debs, unpacked under /tmp/sroot)"
for f in "$DIR"/debs/*.deb; do dpkg -x "$f" /tmp/sroot; done
ln -sfn /tmp/sroot/usr/lib/x86_64-linux-gnu/slurm-wlm /usr/lib/x86_64-linux-gnu/slurm-wlm
for b in slurmd slurmctld slurmstepd; do ln -sfn /tmp/sroot/usr/sbin/$b-wlm /usr/sbin/$b; done
for b in srun sinfo scontrol squeue; do ln -sfn /tmp/sroot/usr/bin/$b /usr/local/bin/$b; done
ln -sfn /tmp/sroot/usr/sbin/munged /usr/sbin/munged
export LD_LIBRARY_PATH=/tmp/sroot/usr/lib/x86_64-linux-gnu:/tmp/sroot/lib/x86_64-linux-gnu
ldd /usr/sbin/slurmd | grep "not found"

step "slurmd -C (what slurmd sees)"
slurmd -C

step "slurm.conf and gres.conf as rendered, with the controller on this machine"
# The rendered files as they are, except: the controller is this machine.
mkdir -p /etc/slurm
sed -e "s/^SlurmctldHost=.*/SlurmctldHost=$(hostname -s)(127.0.0.1)/" \
    -e "s/^\(NodeName=g1 \)NodeAddr=[^ ]*/\1NodeAddr=127.0.0.1/" /tmp/render/slurm.conf > /etc/slurm/slurm.conf
cp /tmp/render/gres.conf /etc/slurm/gres.conf
diff /tmp/render/slurm.conf /etc/slurm/slurm.conf

id slurm >/dev/null 2>&1 || useradd -r -M -s /usr/sbin/nologin slurm
id munge >/dev/null 2>&1 || useradd -r -M -s /usr/sbin/nologin munge
# The controller role's cgroup.conf; PID 1 here is not systemd, so slurmd makes its cgroup scope itself
# (IgnoreSystemd) in a system.slice with the controllers delegated, as systemd would.
{ grep -v '^#' roles/slurm_controller/templates/cgroup.conf.j2; echo IgnoreSystemd=yes; } > /etc/slurm/cgroup.conf
cat /etc/slurm/cgroup.conf
mkdir -p /sys/fs/cgroup/system.slice
echo "+cpuset +cpu +memory +pids" > /sys/fs/cgroup/cgroup.subtree_control
echo "+cpuset +cpu +memory +pids" > /sys/fs/cgroup/system.slice/cgroup.subtree_control
cat /sys/fs/cgroup/system.slice/cgroup.subtree_control

step "slurmd -G (GRES as slurmd reads slurm.conf and gres.conf on this node)"
slurmd -N g1 -G; echo "rc=$?"

step "munge, slurmctld, slurmd"
mkdir -p /etc/munge /var/lib/munge /var/log/munge /run/munge /var/lib/slurm/slurmctld /var/lib/slurm/slurmd /var/log/slurm
dd if=/dev/urandom of=/etc/munge/munge.key bs=1024 count=1 status=none
chown -R munge: /etc/munge /var/lib/munge /var/log/munge /run/munge; chmod 0400 /etc/munge/munge.key
chown -R slurm: /var/lib/slurm/slurmctld /var/log/slurm
runuser -u munge -- /usr/sbin/munged; echo "munged rc=$?"
slurmctld; echo "slurmctld rc=$?"
slurmd -N g1; echo "slurmd rc=$?"; sleep 2; tail -n 15 /var/log/slurm/slurmd.log
for i in $(seq 1 30); do sinfo -h -N -o '%N %T %G' 2>/dev/null | grep -q idle && break; sleep 1; done
sinfo -N -o '%N %T %G %c %m'
scontrol show node g1 | grep -i "gres\|state\|cfgtres"

step "a job that asks for the GPU through GRES"
timeout 45 srun -N1 --gres=gpu:1 sh -c 'echo CUDA_VISIBLE_DEVICES=$CUDA_VISIBLE_DEVICES; nvidia-smi -L'; echo "rc=$?"
step "a job that asks for no GPU (ConstrainDevices: it must not see one)"
timeout 45 srun -N1 sh -c 'echo CUDA_VISIBLE_DEVICES=${CUDA_VISIBLE_DEVICES-unset}; nvidia-smi -L'; echo "rc=$?"
step "a job that asks for two GPUs on a one-GPU node (must be refused)"
timeout 30 srun -N1 --gres=gpu:2 true; echo "rc=$?"

step "CDI"
if command -v nvidia-ctk >/dev/null; then
  nvidia-ctk cdi generate --output=/etc/cdi/nvidia.yaml; echo "rc=$?"
fi
PYTHONPATH=/tmp/coll python3 - <<'EOF'
from ansible_collections.gpuaas.apps.plugins.module_utils import oci
found = oci.cdi_devices()
print("CDI devices declared on this host:", sorted(found))
print("gpus=auto gives:", oci.resolve_devices([], "auto", found))
EOF
tail -n 30 /var/log/slurm/slurmd.log /var/log/slurm/slurmctld.log 2>/dev/null | grep -i "gres\|gpu\|error" | head -40
