#!/usr/bin/env bash
# ansible-test sanity for the gpuaas.apps collection.
#
# ansible-test needs the collection at .../ansible_collections/gpuaas/apps, so the git-tracked files (as they
# are in the working tree) are copied into such a tree in a temporary directory and checked there. The test
# requirements (pylint, yamllint, voluptuous, ...) come from ansible-test's own pinned virtual environments
# (--venv, cached under ~/.ansible/test), so the project venv is left as it is. Fails on any error.
set -euo pipefail
cd "$(dirname "$0")/.."
repo=$(pwd)
ansible_test=${ANSIBLE_TEST:-$repo/.venv/bin/ansible-test}
python_version=${SANITY_PYTHON:-3.11}

work=$(mktemp -d "${TMPDIR:-/tmp}/gpuaas-sanity.XXXXXX")
trap 'rm -rf "$work"' EXIT
dest=$work/ansible_collections/gpuaas/apps
mkdir -p "$dest"

# Tracked files that still exist in the working tree (a file deleted but not yet committed is skipped).
git ls-files -z | "$repo/.venv/bin/python" -c '
import os, shutil, sys
dest = sys.argv[1]
for path in sys.stdin.buffer.read().decode().split("\0"):
    if path and os.path.lexists(path) and not os.path.isdir(path):
        target = os.path.join(dest, path)
        os.makedirs(os.path.dirname(target), exist_ok=True)
        shutil.copy2(path, target, follow_symlinks=False)
' "$dest"

cd "$dest"
# ansible-test lists a collection's files through git when it sits in a repository; give it one.
git init -q && git add -A && git -c user.name=sanity -c user.email=sanity@localhost commit -q -m sanity

export PATH="$repo/.venv/bin:$PATH"
"$ansible_test" sanity --venv --python "$python_version" --color no "$@"
