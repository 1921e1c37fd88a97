#!/usr/bin/env bash
# Installs everything the project needs on a fresh Debian 12 machine: system packages for the
# containerized test hosts, and the Python virtual environment in .venv. Safe to run again.
set -euo pipefail
cd "$(dirname "$0")/.."

APT_PACKAGES=(podman runc debootstrap catatonit skopeo uidmap slirp4netns fuse-overlayfs
              openssh-client rsync git)

missing=()
for pkg in "${APT_PACKAGES[@]}"; do
  dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null | grep -q "install ok installed" || missing+=("$pkg")
done
if ((${#missing[@]})); then
  echo "setup: installing ${missing[*]}"
  SUDO=""; [ "$(id -u)" = 0 ] || SUDO="sudo"
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq "${missing[@]}" >/dev/null
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
