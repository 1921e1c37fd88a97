"""The staging gate's checks (docs/control-service.md "Promotion gates"), run on the exact build of a collection
artifact: its descriptors against its content, ansible-lint (production profile) and ansible-test sanity.

The build is publisher code: ansible-lint loads its plugins, sanity's import test imports its modules. Each tool
runs as a run does: under the run guard (executor/guard.py: its process group dies with the worker, and at the
time limit), with the run's environment allowlist, in a fresh temporary HOME and working directory, and only a
bounded tail of its output is kept. It runs with the worker's user and network: the platform's checks of
publisher code, not a sandbox (the gate's trust boundary, as for a run of the build)."""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tarfile
import tempfile
from collections.abc import Sequence
from pathlib import Path

import yaml
from pydantic import ValidationError

from ..content.collections import collection_manifest, read_collection_file
from ..executor.runner import ENV_FROM_WORKER, GUARD
from .adapter import AppDescriptor

CHECKS = ("descriptor", "ansible_lint", "ansible_test_sanity")
OUTPUT_TAIL_BYTES = 64 << 10
MAX_FINDINGS = 200
# ansible-test fetches get-pip.py from ci-files.testing.ansible.com, which a closed network cannot reach; it reads
# the script from its cache first. This stand-in (the one scripts/sanity.sh writes) bootstraps pip from ensurepip.
_GET_PIP = '''"""Stand-in for get-pip.py (v3) (the staging gate's): pip from ensurepip, then `pip install ARGS`."""
import ensurepip
import os
import subprocess
import sys

env = dict(os.environ)  # ensurepip points PIP_CONFIG_FILE at /dev/null; the install below needs pip.conf
ensurepip.bootstrap(upgrade=True)
args = [a for a in sys.argv[1:] if a not in ("--no-setuptools", "--no-wheel")]  # get-pip's own flags
sys.exit(subprocess.call([sys.executable, "-m", "pip", "install"] + args, env=env))
'''
_PIP_VERSION = "24.2"  # the pip ansible-test 2.19 bootstraps its venvs with (as in scripts/sanity.sh)
_SANITY_ERROR = re.compile(r"^ERROR: (?P<path>[^:\s]+):(?P<line>\d+):(?P<col>\d+): (?P<message>.*)$")
_SANITY_FAILED = re.compile(r'^ERROR: Found \d+ (?P<test>[\w-]+) issue')


class DescriptorError(ValueError):
    """A descriptor of the build is invalid, or names content the build does not ship."""


def descriptors(tarball: Path) -> list[AppDescriptor]:
    """Every adapters/*.yml of the build, validated, and each checked against the build's content: the
    playbooks, the status module and the credential modules it names are in this collection."""
    manifest = collection_manifest(tarball)
    fqcn = f"{manifest['namespace']}.{manifest['name']}."
    with tarfile.open(tarball) as tar:
        names = sorted(m.name for m in tar.getmembers() if m.isfile())
    paths = [n for n in names if n.startswith("adapters/") and n.endswith((".yml", ".yaml"))]
    if not paths:
        raise DescriptorError(f"{tarball.name} ships no adapter descriptor (adapters/<app>.yml)")
    out = []
    for path in paths:
        try:
            descriptor = AppDescriptor.model_validate(yaml.safe_load(read_collection_file(tarball, path)))
        except (ValidationError, yaml.YAMLError) as exc:
            raise DescriptorError(f"{path}: {exc}") from None
        wanted = {f"playbooks/{p.removeprefix(fqcn)}.yml": p for p in descriptor.actions.values()}
        modules = [descriptor.status.module] if descriptor.status else []
        modules += [c.module for c in descriptor.credentials.values()]
        wanted |= {f"plugins/modules/{m.removeprefix(fqcn)}.py": m for m in modules}
        missing = sorted(name for file, name in wanted.items() if not name.startswith(fqcn) or file not in names)
        if missing:
            raise DescriptorError(f"{path} names content this collection ({fqcn[:-1]}) does not ship: "
                                  f"{', '.join(missing)}")
        out.append(descriptor)
    return out


def sanity_home(root: Path) -> Path:
    """`root` as ansible-test's HOME: its cache holds the get-pip stand-in (its venvs are kept there too)."""
    root = root.resolve()
    get_pip = root / ".ansible" / "test" / "cache" / f"get_pip_{_PIP_VERSION.replace('.', '_')}.py"
    if "Stand-in for get-pip.py (v3)" not in (get_pip.read_text() if get_pip.is_file() else ""):
        get_pip.parent.mkdir(parents=True, exist_ok=True)
        get_pip.write_text(_GET_PIP)
    return root


def run_checks(tarball: Path, checks: Sequence[str], *, sanity_root: Path, timeout: float) -> list[dict]:
    """Each named check on the build, in order: [{name, status: passed|failed, summary, findings: [{rule, path,
    line, message}], output}]. The tools run on the extracted collection (ansible_collections/<ns>/<name>)."""
    results = []
    with tempfile.TemporaryDirectory(prefix="gpuaas-gate-") as scratch:
        tree = _extract(tarball, Path(scratch))
        for name in checks:
            results.append({"descriptor": _descriptor, "ansible_lint": _ansible_lint,
                            "ansible_test_sanity": _ansible_test_sanity}[name](
                tarball=tarball, tree=tree, sanity_root=sanity_root, timeout=timeout))
    return results


def _extract(tarball: Path, scratch: Path) -> Path:
    manifest = collection_manifest(tarball)
    tree = scratch / "ansible_collections" / manifest["namespace"] / manifest["name"]
    tree.mkdir(parents=True)
    with tarfile.open(tarball, "r:gz") as tar:
        tar.extractall(tree, filter="data")  # no links out, no absolute paths, no devices
    return tree


def _result(name: str, findings: list[dict], output: str, summary: str, failed: bool | None = None) -> dict:
    failed = bool(findings) if failed is None else failed
    return {"name": name, "status": "failed" if failed else "passed", "summary": summary,
            "findings": findings[:MAX_FINDINGS], "output": output[-OUTPUT_TAIL_BYTES:]}


def _descriptor(*, tarball: Path, **_) -> dict:
    try:
        found = descriptors(tarball)
    except DescriptorError as exc:
        return _result("descriptor", [{"rule": "descriptor", "path": None, "line": None, "message": str(exc)}],
                       "", str(exc)[:300])
    return _result("descriptor", [], "", f"{len(found)} descriptor(s): " + ", ".join(d.app.slug for d in found))


def _ansible_lint(*, tree: Path, timeout: float, **_) -> dict:
    # The build resolves its own content as a run's does: from the extracted tree alone (executor/runner.py).
    collections = {"ANSIBLE_COLLECTIONS_PATH": str(tree.parents[2]), "ANSIBLE_COLLECTIONS_SCAN_SYS_PATH": "False"}
    rc, out, err = _guarded(["ansible-lint", "--profile", "production", "--offline", "-f", "codeclimate"], tree,
                            timeout=timeout, extra_env=collections)
    findings = []
    try:
        for issue in json.loads(out or "[]"):
            where = issue.get("location") or {}
            line = (where.get("lines") or {}).get("begin") or where.get("positions", {}).get("begin", {}).get("line")
            findings.append({"rule": issue.get("check_name"), "path": where.get("path"),
                             "line": line if isinstance(line, int) else None,
                             "message": (issue.get("description") or "")[:500]})
    except (ValueError, AttributeError):
        pass
    failed = rc != 0 or bool(findings)
    if failed and not findings:
        findings = [{"rule": "ansible-lint", "path": None, "line": None,
                     "message": f"exit status {rc}: " + (err.strip().splitlines() or [""])[-1][:500]}]
    rules = sorted({f["rule"] for f in findings})
    summary = f"{len(findings)} finding(s): {', '.join(rules)}" if failed else "production profile passed"
    return _result("ansible_lint", findings, err if failed else "", summary, failed)


def _ansible_test_sanity(*, tree: Path, sanity_root: Path, timeout: float, **_) -> dict:
    # ansible-test lists a collection's files through git when it sits in a repository; give it one.
    git = ["git", "-c", "user.name=gate", "-c", "user.email=gate@localhost"]
    for step in (["init", "-q"], ["add", "-A"], ["commit", "-q", "-m", "build"]):
        subprocess.run(git + step, cwd=tree, check=True, capture_output=True)
    rc, out, err = _guarded(["ansible-test", "sanity", "--local", "--python",
                             f"{sys.version_info.major}.{sys.version_info.minor}", "--color", "no"], tree,
                            timeout=timeout, home=sanity_home(sanity_root))
    failed_tests, findings, current = [], [], None
    for line in (out + "\n" + err).splitlines():
        if m := _SANITY_FAILED.match(line):
            current = m["test"]
            failed_tests.append(current)
        elif (m := _SANITY_ERROR.match(line)) and len(findings) < MAX_FINDINGS:
            findings.append({"rule": current or "sanity", "path": m["path"], "line": int(m["line"]),
                             "message": m["message"][:500]})
    if rc != 0 and not findings:
        findings = [{"rule": "ansible-test", "path": None, "line": None,
                     "message": f"exit status {rc}: " + ((out + err).strip().splitlines() or [""])[-1][:500]}]
    summary = (f"failed: {', '.join(failed_tests) or 'ansible-test'}" if rc != 0 else "every sanity test passed")
    return _result("ansible_test_sanity", findings, (out + err) if rc != 0 else "", summary, rc != 0)


def _guarded(command: list[str], cwd: Path, *, timeout: float, home: Path | None = None,
             extra_env: dict[str, str] | None = None) -> tuple[int, str, str]:
    """`command` (a tool of the service's own environment) under the run guard, with the run's environment
    allowlist, a fresh HOME (or `home`) and TMPDIR: (exit status, stdout, stderr); _result keeps their tails.
    Past `timeout` the guard kills it and everything it started (exit status -1)."""
    with tempfile.TemporaryDirectory(prefix="gpuaas-gate-home-") as fresh:
        bin_dir = str(Path(sys.executable).parent)
        env = {k: v for k, v in os.environ.items() if k in ENV_FROM_WORKER}
        env |= {"HOME": str(home or fresh), "TMPDIR": fresh, "PATH": os.pathsep.join([bin_dir, os.environ.get(
            "PATH", os.defpath)]), "ANSIBLE_NOCOLOR": "1", "NO_COLOR": "1"} | (extra_env or {})
        tool = shutil.which(command[0], path=bin_dir) or command[0]
        proc = subprocess.Popen([*GUARD, tool, *command[1:]], cwd=cwd, env=env, stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE, text=True, errors="replace")
        try:
            out, err = proc.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            proc.send_signal(signal.SIGTERM)  # the guard kills every descendant, then exits
            out, err = proc.communicate()
            return -1, out, err + f"\ntimed out after {timeout:.0f} s"
        return proc.returncode, out, err
