"""The staging gate's checks (docs/control-service.md "Promotion gates"), run on the exact build of a collection
artifact: its descriptors against its content, ansible-lint (production profile) and ansible-test sanity.

The build is publisher code: ansible-lint loads its plugins, sanity's import test imports its modules. Each tool
runs as a run does: under the run guard (executor/guard.py: its process group dies with the worker, and at the
time limit), with the run's environment allowlist, in a fresh temporary HOME and working directory, and only a
bounded tail of its output is kept. It runs with the worker's user and network: the platform's checks of
publisher code, not a sandbox (the gate's trust boundary, as for a run of the build)."""

from __future__ import annotations

import functools
import json
import logging
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

log = logging.getLogger(__name__)
CHECKS = ("descriptor", "ansible_lint", "ansible_test_sanity")
OUTPUT_TAIL_BYTES = 64 << 10
MAX_FINDINGS = 200
# A build is refused before extraction past these (a gzip bomb must not fill the worker's temp space).
MAX_BUILD_BYTES = 1 << 30
MAX_BUILD_MEMBERS = 50_000
# The sanity ignore entries ("test" or "test:code") a build may carry unless the operator sets others.
ALLOWED_SANITY_IGNORES = ("validate-modules:missing-gplv3-license", "symlinks")
LINT_CONFIG = Path(__file__).with_name("ansible-lint-gate.yml")  # the platform's: the build's own are removed
# Files through which a build would choose how it is judged: removed before any check runs.
_BUILD_CONFIGS = (".ansible-lint", ".ansible-lint.yml", ".ansible-lint.yaml", ".config/ansible-lint.yml",
                  ".config/ansible-lint.yaml")
# git must run nothing of the build's: no hooks, no fsmonitor (the tree holds no .git: _extract refuses one).
_GIT = ["git", "-c", "core.hooksPath=/dev/null", "-c", "core.fsmonitor=false", "-c", "user.name=gate",
        "-c", "user.email=gate@localhost", "-c", "commit.gpgSign=false", "-c", "init.templateDir="]
_NOBODY = 65534
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


class BuildRefused(ValueError):
    """The build cannot be checked at all (too large, or it holds a .git path)."""


def run_checks(tarball: Path, checks: Sequence[str], *, sanity_root: Path, timeout: float,
               allowed_ignores: Sequence[str] = ALLOWED_SANITY_IGNORES) -> list[dict]:
    """Each named check on the build, in order: [{name, status: passed|failed, summary, findings: [{rule, path,
    line, message}], output}]. The tools run on the extracted collection (ansible_collections/<ns>/<name>), in a
    scratch tree of the gate's own, with a copy of the sanity HOME (`sanity_root` is only its template)."""
    results = []
    with tempfile.TemporaryDirectory(prefix="gpuaas-gate-") as scratch:
        tree = _extract(tarball, Path(scratch))
        refused = _neutralize(tree, allowed_ignores)
        home = Path(scratch) / "home"
        if "ansible_test_sanity" in checks:  # its venvs: each gate's own copy, so no build plants code in another's
            subprocess.run(["cp", "-a", str(sanity_home(sanity_root)), str(home)], check=True, capture_output=True)
        else:
            home.mkdir()
        _own(Path(scratch))
        for name in checks:
            results.append({"descriptor": _descriptor, "ansible_lint": _ansible_lint,
                            "ansible_test_sanity": _ansible_test_sanity}[name](
                tarball=tarball, tree=tree, sanity_root=home, timeout=timeout, refused=refused))
    return results


def _extract(tarball: Path, scratch: Path) -> Path:
    manifest = collection_manifest(tarball)
    tree = scratch / "ansible_collections" / manifest["namespace"] / manifest["name"]
    tree.mkdir(parents=True)
    with tarfile.open(tarball, "r:gz") as tar:
        members = tar.getmembers()
        if len(members) > MAX_BUILD_MEMBERS or sum(m.size for m in members) > MAX_BUILD_BYTES:
            raise BuildRefused(f"the build holds {len(members)} members of {sum(m.size for m in members)} bytes: "
                               f"past the gate's limit ({MAX_BUILD_MEMBERS} members, {MAX_BUILD_BYTES} bytes)")
        if git := [m.name for m in members if ".git" in Path(m.name).parts]:
            raise BuildRefused(f"the build holds a .git path ({git[0]}): ansible-galaxy never builds one")
        tar.extractall(tree, filter="data")  # no links out, no absolute paths, no devices
    return tree


def _neutralize(tree: Path, allowed: Sequence[str]) -> list[dict]:
    """Remove what a build could switch its checks off with: its ansible-lint configs, every .gitignore, and the
    sanity ignore entries the platform does not allow (each refused one a finding of the sanity check)."""
    for name in _BUILD_CONFIGS:
        if (tree / name).is_file() or (tree / name).is_symlink():
            (tree / name).unlink()
    for path in list(tree.rglob(".gitignore")):
        path.unlink()
    refused = []
    for ignore in sorted((tree / "tests" / "sanity").glob("ignore-*.txt")):
        kept = []
        for number, line in enumerate(ignore.read_text(errors="replace").splitlines(), 1):
            entry = line.split("#", 1)[0].split()
            if not entry:
                continue
            test = entry[1] if len(entry) > 1 else ""
            if test in allowed or test.split(":", 1)[0] in allowed:
                kept.append(line)
            else:
                refused.append({"rule": "sanity-ignore", "path": str(ignore.relative_to(tree)), "line": number,
                                "message": f"ignore entry not allowed by the platform: {line.strip()[:400]}"})
        ignore.write_text("".join(k + "\n" for k in kept))
    return refused


@functools.cache
def _drop() -> list[str]:
    """As root, the tools run as nobody (uid/gid 65534, after the guard), so publisher code cannot read the
    worker's root-owned state: when nobody can run the service's interpreter (a venv under /root), they cannot,
    and run as root (logged; docs/control-service.md "Promotion gates", trust boundary)."""
    if os.geteuid() != 0:
        return []
    drop = ["setpriv", f"--reuid={_NOBODY}", f"--regid={_NOBODY}", "--clear-groups"]
    with tempfile.TemporaryDirectory(prefix="gpuaas-gate-probe-") as probe_dir:  # a lint of nothing, as nobody
        os.chown(probe_dir, _NOBODY, _NOBODY)
        lint = shutil.which("ansible-lint", path=str(Path(sys.executable).parent)) or "ansible-lint"
        probe = subprocess.run([*drop, lint, "--offline", "--version"], capture_output=True, cwd=probe_dir,
                               env={"PATH": os.environ.get("PATH", os.defpath), "HOME": probe_dir})
        if probe.returncode == 0:
            probe = subprocess.run([*drop, lint, "--offline", "."], capture_output=True, cwd=probe_dir,
                                   env={"PATH": os.environ.get("PATH", os.defpath), "HOME": probe_dir})
    if b"PermissionError" in probe.stderr or probe.returncode not in (0, 2):
        log.warning("staging gate: nobody (uid %d) cannot run %s; the gate's tools run as root", _NOBODY,
                    sys.executable)
        return []
    return drop


def _own(scratch: Path) -> None:
    """As root, the scratch tree (the build, the HOME copy) is the unprivileged user's the tools run as."""
    if _drop():
        subprocess.run(["chown", "-R", f"{_NOBODY}:{_NOBODY}", str(scratch)], check=True, capture_output=True)


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
    rc, out, err = _guarded(["ansible-lint", "-c", str(LINT_CONFIG), "--project-dir", str(tree), "--profile",
                             "production", "--offline", "-f",
                             "codeclimate"], tree,
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


def _ansible_test_sanity(*, tree: Path, sanity_root: Path, timeout: float, refused: list[dict], **_) -> dict:
    # ansible-test lists a collection's files through git when it sits in a repository; give it one (run as
    # every tool is, with nothing of the build's configuring git: _GIT).
    # A .git the build's code made meanwhile (ansible-lint loads its plugins) goes; no system or global config.
    if (tree / ".git").is_symlink() or (tree / ".git").is_file():
        (tree / ".git").unlink()
    shutil.rmtree(tree / ".git", ignore_errors=True)
    no_config = {"GIT_CONFIG_NOSYSTEM": "1", "GIT_CONFIG_GLOBAL": "/dev/null", "GIT_ATTR_NOSYSTEM": "1"}
    for step in (["init", "-q"], ["add", "-A"], ["commit", "-q", "--no-verify", "-m", "build"]):
        rc, out, err = _guarded(_GIT + step, tree, timeout=timeout, home=sanity_root, extra_env=no_config)
        if rc != 0:
            return _result("ansible_test_sanity", [{"rule": "git", "path": None, "line": None,
                                                     "message": f"git {step[0]}: exit status {rc}: {err[-400:]}"}],
                           out + err, f"git {step[0]} failed", True)
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
    findings = refused + findings
    if rc != 0 and not findings:
        findings = [{"rule": "ansible-test", "path": None, "line": None,
                     "message": f"exit status {rc}: " + ((out + err).strip().splitlines() or [""])[-1][:500]}]
    if refused:
        failed_tests.insert(0, "sanity-ignore")
    failed = rc != 0 or bool(refused)
    summary = (f"failed: {', '.join(failed_tests) or 'ansible-test'}" if failed else "every sanity test passed")
    return _result("ansible_test_sanity", findings, (out + err) if failed else "", summary, failed)


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
        # As root, the tool runs as nobody (after the guard): publisher code cannot read the worker's own state.
        drop = _drop()
        if drop:
            os.chown(fresh, _NOBODY, _NOBODY)
        proc = subprocess.Popen([*GUARD, *drop, tool, *command[1:]], cwd=cwd, env=env, stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE, text=True, errors="replace")
        try:
            out, err = proc.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            proc.send_signal(signal.SIGTERM)  # the guard kills every descendant, then exits
            out, err = proc.communicate()
            return -1, out, err + f"\ntimed out after {timeout:.0f} s"
        return proc.returncode, out, err
