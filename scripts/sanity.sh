#!/usr/bin/env bash
# ansible-test sanity for the gpuaas.apps collection, with the project venv's ansible-core (--local).
#
# ansible-test needs the collection at .../ansible_collections/gpuaas/apps, so the git-tracked files (as they
# are in the working tree) are copied into such a tree in a temporary directory and checked there.
#
# Each sanity test installs its pinned tools (pylint, yamllint, voluptuous, ...) into its own venv, which
# ansible-test bootstraps with a get-pip script downloaded from ci-files.testing.ansible.com; this machine
# cannot reach that host. ansible-test reads the script from a cache file first, so we place there a small
# stand-in that bootstraps pip from Python's bundled ensurepip and then runs `pip install` with the same
# arguments (packages still come from PyPI). HOME points into build/ so those venvs and that cache stay out
# of the real home directory. Fails on any error.
set -euo pipefail
cd "$(dirname "$0")/.."
repo=$(pwd)
python_version=${SANITY_PYTHON:-3.11}
ansible_test=${ANSIBLE_TEST:-$repo/.venv/bin/ansible-test}

sanity_home=$repo/build/sanity-home
pip_version=$("$repo/.venv/bin/python" -c '
from ansible_test._internal.python_requirements import PIP_VERSION
print(PIP_VERSION)' 2>/dev/null || echo 24.2)
get_pip=$sanity_home/.ansible/test/cache/get_pip_${pip_version//./_}.py
if ! grep -qs "Stand-in for get-pip.py (v3)" "$get_pip"; then
  mkdir -p "$(dirname "$get_pip")"
  cat >"$get_pip" <<'PY'
"""Stand-in for get-pip.py (v3) (written by scripts/sanity.sh): pip from ensurepip, then `pip install ARGS`."""
import ensurepip
import os
import subprocess
import sys

env = dict(os.environ)  # ensurepip points PIP_CONFIG_FILE at /dev/null; the install below needs pip.conf
ensurepip.bootstrap(upgrade=True)
args = [a for a in sys.argv[1:] if a not in ("--no-setuptools", "--no-wheel")]  # get-pip's own flags
sys.exit(subprocess.call([sys.executable, "-m", "pip", "install"] + args, env=env))
PY
fi

work=$(mktemp -d "${TMPDIR:-/tmp}/gpuaas-sanity.XXXXXX")
trap 'rm -rf "$work"' EXIT
dest=$work/ansible_collections/gpuaas/apps
mkdir -p "$dest"

# The collection's tracked files (as they are in the working tree; one deleted but not yet committed is
# skipped). Parts of the repository that galaxy.yml's build_ignore keeps out of the collection (the control
# service, benchmarks, dev scripts, molecule, CI) are not Ansible content and have their own linters (ruff,
# ansible-lint). Of tests/, the parts ansible-test defines stay in (unit/, sanity/, integration/targets/); the
# project's pytest suites for the control service and the test hosts (tests/api, tests/integration) do not.
git ls-files -z | "$repo/.venv/bin/python" -c '
import fnmatch, os, shutil, sys
import yaml
dest = sys.argv[1]
ignored = [p for p in yaml.safe_load(open("galaxy.yml")).get("build_ignore", []) if p != "tests"]
ansible_test_dirs = ("tests/unit/", "tests/sanity/", "tests/integration/targets/")
def shipped(path):
    if path.startswith("tests/") and not path.startswith(ansible_test_dirs):
        return False
    return not any(fnmatch.fnmatch(path, p) or path.startswith(p.rstrip("/") + "/") for p in ignored)
for path in sys.stdin.buffer.read().decode().split("\0"):
    if path and shipped(path) and os.path.lexists(path) and (os.path.islink(path) or not os.path.isdir(path)):
        target = os.path.join(dest, path)
        os.makedirs(os.path.dirname(target), exist_ok=True)
        shutil.copy2(path, target, follow_symlinks=False)
' "$dest"

cd "$dest"
# ansible-test lists a collection's files through git when it sits in a repository; give it one.
git init -q && git add -A && git -c user.name=sanity -c user.email=sanity@localhost commit -q -m sanity

HOME=$sanity_home "$ansible_test" sanity --local --python "$python_version" --color no "$@"
