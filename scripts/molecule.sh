#!/usr/bin/env bash
# One command for role developers: builds whatever molecule needs, then runs a scenario.
#
#   scripts/molecule.sh [SCENARIO] [MOLECULE COMMAND]     (make molecule SCENARIO=cluster)
#   scripts/molecule.sh cluster            # destroy, syntax, create, converge, idempotence, check, verify, destroy
#   scripts/molecule.sh cluster converge   # keep the hosts up to iterate; `... cluster destroy` after
#
# What it builds (each step is skipped when already done): the Debian packages, podman settings and .venv of
# scripts/setup.sh, which also links this checkout as the collection under build/collections; the test host
# images (localhost/gpuaas-testhost:bookworm and the -slurm one with the Slurm packages installed, built
# locally with debootstrap from the Debian mirror: no registry is needed). Each scenario's hosts get a
# podman network of their own (gpuaas-molecule-<scenario>), which molecule creates and removes. Scenarios:
# molecule/*/ (single_node, on Debian 13 from its base image; cluster, on Debian 12, with accounting; oci_workload, whose host and registry are built from the
# Debian 13 images instead and sit on the test hosts' network; rke2, one server and one agent of the rke2 flavour
# against the RKE2 test double; rke2_delegated, an operator's own VMs, for which nothing is built:
# molecule/rke2_delegated/README.md).
set -euo pipefail
cd "$(dirname "$0")/.."
scenario=${1:-cluster}
command=${2:-test}
if [ ! -f "molecule/$scenario/molecule.yml" ]; then
  echo "molecule.sh: no scenario '$scenario'; there are: $(ls molecule | tr '\n' ' ')" >&2
  exit 2
fi
bash scripts/setup.sh
case "$scenario" in
  oci_*)  # a Debian 13 host with podman (Debian 12's cannot verify signatures) and a registry host
    .venv/bin/python -c 'from gpuaas_api import testhosts
for flavor in ("registry", "oci-trixie"):
    testhosts.build(flavor)  # one at a time: both are built on the Debian 13 base image
testhosts.ensure_network()' ;;
  rke2_delegated) ;;  # the operator's VMs: no test host image
  rke2*) .venv/bin/python -c 'from gpuaas_api import testhosts; testhosts.build("rke2")' ;;
  single_node) .venv/bin/python -c 'from gpuaas_api import testhosts; testhosts.build_base(False, "trixie")' ;;
  *) .venv/bin/python -c 'from gpuaas_api import testhosts; testhosts.build_slurm(rebuild=False)' ;;
esac
export PATH="$PWD/.venv/bin:$PATH"
exec molecule "$command" -s "$scenario"
