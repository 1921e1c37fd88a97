#!/usr/bin/env bash
# Installs everything the project needs on a fresh Debian 12 machine: system packages for the
# containerized test hosts, and the Python virtual environment in .venv. Safe to run again.
set -euo pipefail
cd "$(dirname "$0")/.."

APT_PACKAGES=(podman runc debootstrap catatonit skopeo uidmap slirp4netns fuse-overlayfs
              openssh-client rsync git curl jq busybox-static
              postgresql  # the control service's embedded PostgreSQL (run as its own child, in its state dir)
              chromium)  # tests/console: the web console in a real headless browser (driven by Playwright)

missing=()
for pkg in "${APT_PACKAGES[@]}"; do
  dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null | grep -q "install ok installed" || missing+=("$pkg")
done
SUDO=""; [ "$(id -u)" = 0 ] || SUDO="sudo"
if ((${#missing[@]})); then
  # The service runs Debian's PostgreSQL binaries itself; the package's own system cluster is not needed.
  if [ ! -e /etc/postgresql-common/createcluster.d/50-gpuaas.conf ]; then
    $SUDO mkdir -p /etc/postgresql-common/createcluster.d
    echo "create_main_cluster = false" | $SUDO tee /etc/postgresql-common/createcluster.d/50-gpuaas.conf >/dev/null
  fi
  echo "setup: installing ${missing[*]}"
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq "${missing[@]}" >/dev/null
fi

# Podman as Debian ships it cannot start containers on this kind of machine (no CAP_SYS_RESOURCE
# for its default ulimits, crun refuses the hybrid cgroup layout, the default network takes a /16).
CONTAINERS_DROPIN=/etc/containers/containers.conf.d/50-gpuaas-testhosts.conf
if [ ! -f "$CONTAINERS_DROPIN" ]; then
  $SUDO mkdir -p "$(dirname "$CONTAINERS_DROPIN")"
  $SUDO tee "$CONTAINERS_DROPIN" >/dev/null <<'CONF'
[containers]
default_ulimits = ["nofile=20000:20000", "nproc=32768:32768"]
[engine]
runtime = "runc"
[network]
default_subnet = "10.88.0.0/24"
default_subnet_pools = [{"base" = "10.88.0.0/16", "size" = 24}]
CONF
fi

PY=${PYTHON:-python3}
if [ ! -x .venv/bin/python ]; then
  "$PY" -m venv .venv
fi
stamp=.venv/.installed-$(sha256sum pyproject.toml | cut -c1-16)
if [ ! -f "$stamp" ]; then
  echo "setup: installing Python packages into .venv"
  .venv/bin/pip install -q --upgrade pip
  .venv/bin/pip install -q -e '.[dev]'
  rm -f .venv/.installed-*; touch "$stamp"
fi

# The collection is used from this checkout: expose it as ansible_collections/gpuaas/apps.
mkdir -p build/collections/ansible_collections/gpuaas
ln -sfn "$(pwd)" build/collections/ansible_collections/gpuaas/apps
echo "setup: ready"
