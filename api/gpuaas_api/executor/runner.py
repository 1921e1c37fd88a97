"""One run through ansible-runner: private data dir per operation attempt, ident = correlation id,
events summarized into the instance timeline, artifacts scrubbed and packed as tar.gz.

What reaches the run is data, never code: every extra var (tenant parameters, node names, the
catalog's variables, secrets) is handed to Ansible tagged `!unsafe`, so Jinja in a value is never
evaluated. The one exception is the operator's site_vars setting (plan.site_vars_for): configuration
as trusted as the collection, it may template the run's other variables. Secrets travel through a named
pipe, so no file holding them survives the worker, even a killed one. The run's environment is an
allowlist.

Runner events carry module args and results (`res`, `task_args`); only summaries leave this module:
host, task, play, changed, duration, and for failures a short message unless the task is no_log."""

from __future__ import annotations

import io
import json
import logging
import os
import shutil
import signal
import sys
import tarfile
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass, field
from pathlib import Path

import yaml
from ansible_runner.interface import init_runner

from ..ansible_data import unsafe_vars_yaml
from ..config import OperationSettings
from .plan import RunPlan

log = logging.getLogger(__name__)
REDACTED = "********"
MESSAGE_CHARS = 400
STATS_KEYS = ("ok", "changed", "failures", "dark", "skipped", "rescued", "ignored")
# The run sees only these variables of the worker's environment (plus what we and ansible-runner
# set): an allowlist, so a credential in the worker's environment never reaches a run or its artifacts.
ENV_FROM_WORKER = frozenset({"HOME", "LANG", "LC_ALL", "LC_CTYPE", "LOGNAME", "PATH", "TMPDIR", "TZ", "USER"})


def child_env(env: dict[str, str], ours: dict[str, str]) -> dict[str, str]:
    """The run's environment: `ours`, ansible-runner's own additions (variables it set or changed),
    and the allowlisted variables of the worker's environment."""
    worker = os.environ
    return {k: v for k, v in env.items()
            if k in ours or k in ENV_FROM_WORKER or k not in worker or worker[k] != v}


# The run guard (guard.py) starts every run's command: nothing of a run outlives its worker.
GUARD = [sys.executable, "-I", "-S", str(Path(__file__).with_name("guard.py"))]
# Private directories of a run under the temp dir (the secrets' pipe, ssh control sockets): each
# name carries its worker's pid and that process's start time, so that a worker starting later can
# tell the ones a dead worker left (sweep_scratch) from a live worker's.
SCRATCH_KINDS = ("secrets", "cp", "health", "credential", "fence")


def process_started(pid: int) -> str | None:
    """The process's start time in clock ticks since boot (/proc/<pid>/stat field 22), None if gone."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            return f.read().rsplit(b")", 1)[1].split()[19].decode()
    except (OSError, IndexError):
        return None


def scratch_dir(kind: str) -> str:
    pid = os.getpid()
    return tempfile.mkdtemp(prefix=f"gpuaas-{kind}-{pid}.{process_started(pid)}-")


def sweep_scratch() -> int:
    """Remove the run directories that dead workers left in the temp dir (a killed worker cannot clean
    up); returns how many. A directory whose owner still runs is kept; one without an owner in its name
    (made before names carried one) is removed."""
    removed = 0
    root = Path(tempfile.gettempdir())
    for kind in SCRATCH_KINDS:
        for path in root.glob(f"gpuaas-{kind}-*"):
            pid, dot, started = path.name.split("-")[2].partition(".")
            if dot and pid.isdigit() and process_started(int(pid)) == started:
                continue
            shutil.rmtree(path, ignore_errors=True)
            removed += 1
    return removed


@contextmanager
def secret_pipe(content: str) -> Iterator[str]:
    """A path from which the run reads `content` once: a named pipe in a private directory, fed by a
    thread. The secret lives only in the kernel's pipe buffer; a worker killed at any moment leaves at
    most an empty pipe, never the secret, on disk. (Ansible resolves `-e @path` with realpath, so
    /proc/<pid>/fd paths of an in-memory file do not work.)"""
    directory = scratch_dir("secrets")
    path = os.path.join(directory, "secret-vars.yml")
    os.mkfifo(path, 0o600)

    def feed() -> None:
        with open(path, "w") as pipe:  # blocks until the run opens it for reading
            pipe.write(content)

    feeder = threading.Thread(target=feed, name="secret-pipe", daemon=True)
    feeder.start()
    try:
        yield path
    finally:
        if feeder.is_alive():  # the run never read it: open the reading end so the feeder can finish
            fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK)
            feeder.join(timeout=5)
            os.close(fd)
        shutil.rmtree(directory, ignore_errors=True)


class Redactor:
    """Replaces every secret value (and its JSON-escaped form) in text."""

    def __init__(self, values: list[str]):
        forms = set()
        for v in values:
            if v:
                forms |= {v, json.dumps(v)[1:-1]}
        self.forms = sorted(forms, key=len, reverse=True)

    def text(self, value: str) -> str:
        for form in self.forms:
            value = value.replace(form, REDACTED)
        return value

    def json(self, value):
        return json.loads(self.text(json.dumps(value, default=str)))


@dataclass
class RunResult:
    status: str  # successful | failed | canceled | timeout | lost | fenced
    rc: int | None
    failure: dict | None = None
    stats: dict | None = None
    module_results: dict[str, dict] = field(default_factory=dict)
    # host -> {task, message, unreachable}: every host a failure (not ignored, not rescued) ended the run on
    host_failures: dict[str, dict] = field(default_factory=dict)
    # Ansible gave up on every host of a play ("NO MORE HOSTS LEFT", or every host of the last play that
    # started failed in it): hosts that did not fail may not have run the plays after it
    aborted: bool = False
    tarball: bytes = b""


def _short(message) -> str:
    text = message if isinstance(message, str) else json.dumps(message, default=str)
    return text if len(text) <= MESSAGE_CHARS else text[:MESSAGE_CHARS] + "..."


def summarize(event: dict) -> tuple[str, dict] | None:
    """Timeline summary of one runner event, or None for events the timeline leaves out."""
    kind, d = event.get("event"), event.get("event_data") or {}
    where = {"host": d.get("host"), "task": d.get("task"), "play": d.get("play")}
    res = d.get("res") if isinstance(d.get("res"), dict) else {}
    hidden = bool(res.get("censored")) or bool(res.get("_ansible_no_log"))
    if kind == "playbook_on_start":
        return "run.playbook_started", {"playbook": Path(d.get("playbook") or "").name}
    if kind == "playbook_on_play_start":
        return "run.play_started", {"play": d.get("play"), "pattern": d.get("play_pattern")}
    if kind == "runner_on_start":
        return "run.task_started", where
    if kind == "runner_on_ok":
        return "run.task_ok", where | {"changed": bool(res.get("changed")), "duration": d.get("duration")}
    if kind in ("runner_on_failed", "runner_on_unreachable"):
        message = "output hidden (no_log)" if hidden else _short(res.get("msg") or res.get("stderr") or "")
        name = "run.host_unreachable" if kind == "runner_on_unreachable" else "run.task_failed"
        return name, where | {"message": message, "ignored": bool(d.get("ignore_errors")),
                              "duration": d.get("duration")}
    if kind == "playbook_on_stats":
        return "run.playbook_stats", {k: d.get(k) or {} for k in STATS_KEYS}
    return None


def kill_leftovers(marker: str) -> int:
    """SIGKILL processes of this run that escaped its process group (e.g. ssh ControlPersist masters,
    which daemonize): they carry GPUAAS_OPERATION_ID=<marker> in their environment."""
    needle = f"GPUAAS_OPERATION_ID={marker}".encode()
    killed = 0
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit() or int(proc.name) == os.getpid():
            continue
        try:
            if needle in (proc / "environ").read_bytes().split(b"\0"):
                os.kill(int(proc.name), signal.SIGKILL)
                killed += 1
        except (OSError, ValueError):
            continue
    return killed


def run(settings: OperationSettings, op: dict, plan: RunPlan, collections_path: Path, *,
        on_event: Callable[[str, dict], None], should_stop: Callable[[], str | None],
        run_dir: Path | None = None, connect_timeout: int | None = None, keep_output: bool = True,
        fence: Path | None = None) -> RunResult:
    """Run the plan against exactly the collection content installed at `collections_path` (no other
    collection path is searched); `should_stop` returns a reason (canceled | timeout | lost | fenced) to kill
    the run's whole process group (ansible-runner SIGKILLs the pexpect child's group), else None.
    `run_dir`: where the run's files go (default: the operation's directory in the state dir);
    `connect_timeout`: seconds a host gets to answer SSH (default: Ansible's);
    `fence`: the file holding the time after which the run guard stops the run (guard.py --fence);
    `keep_output=False`: the module's result is a secret the caller takes from memory (module_results), so
    no stdout file and no job event is kept and nothing is packed (ansible-runner's callback still writes
    each event's partial file into `run_dir` while the run lasts: the caller removes `run_dir`)."""
    pdd = run_dir or settings.state_dir / "runs" / str(op["id"]) / f"attempt-{op['attempt']}"
    pdd.mkdir(parents=True, exist_ok=True, mode=0o700)
    vars_file = pdd / "vars.yml"
    redact = Redactor(plan.secret_strings + [settings.secret_key or ""])
    vars_file.write_text(unsafe_vars_yaml(redact.json(plan.extravars)))
    cleanup = ExitStack()
    cmdline = f"-e @{vars_file}"
    if plan.site_vars:  # the operator's, templated by Ansible (plan.site_vars_for); first, so the others win
        (pdd / "site_vars.yml").write_text(yaml.safe_dump(plan.site_vars, default_flow_style=False))
        cmdline = f"-e @{pdd / 'site_vars.yml'} {cmdline}"
    if plan.secret_vars:
        cmdline += f" -e @{cleanup.enter_context(secret_pipe(unsafe_vars_yaml(plan.secret_vars)))}"
    env = {"GPUAAS_OPERATION_ID": str(op["id"]), "ANSIBLE_RETRY_FILES_ENABLED": "False",
           # ansible-playbook from the service's own environment (a venv need not be activated)
           "PATH": os.pathsep.join([str(Path(sys.executable).parent), os.environ.get("PATH", "")]),
           "ANSIBLE_NOCOLOR": "1"}
    # SSH control sockets need a short path (a Unix socket path holds at most 107 bytes): a private
    # directory of its own under the temp dir, and ssh's %C hash as the socket name.
    control_dir = scratch_dir("cp")
    env |= {"ANSIBLE_SSH_CONTROL_PATH_DIR": control_dir, "ANSIBLE_SSH_CONTROL_PATH": "%(directory)s/%%C"}
    env |= {"ANSIBLE_COLLECTIONS_PATH": str(collections_path), "ANSIBLE_COLLECTIONS_SCAN_SYS_PATH": "False"}
    if not settings.ssh_host_key_checking:
        env["ANSIBLE_HOST_KEY_CHECKING"] = "False"
    if connect_timeout:
        env["ANSIBLE_TIMEOUT"] = str(connect_timeout)
    # Ansible's own SSH arguments, and keepalives: a host whose network is cut mid-run is unreachable after
    # 15 s instead of holding the run until TCP gives up (minutes).
    env["ANSIBLE_SSH_ARGS"] = "-C -o ControlMaster=auto -o ControlPersist=60s -o ServerAliveInterval=5 " \
                              "-o ServerAliveCountMax=3"
    # Ansible's default of 5 forks would run a task on a 9-host cluster in two rounds.
    hosts = len(plan.inventory.get("all", {}).get("hosts", {}))
    env["ANSIBLE_FORKS"] = str(min(max(hosts, 5), settings.run_forks_max))
    result = RunResult(status="failed", rc=None)
    stop_reason: list[str] = []
    # The hosts that ran a task in the play running now, and those that failed in it: when every one of them
    # failed, Ansible ends the whole playbook there, silently (no "no hosts remaining" event).
    play = {"ran": set(), "failed": set()}

    def handle(event: dict) -> bool:  # True: ansible-runner writes the event to the run's job_events
        summary = summarize(event)
        d = event.get("event_data") or {}
        if summary:
            name, payload = summary
            payload = redact.json(payload)
            on_event(name, payload)
            if name == "run.play_started":
                play["ran"], play["failed"] = set(), set()
            if name.startswith("run.task_") or name == "run.host_unreachable":
                play["ran"].add(payload["host"])
            if name in ("run.task_failed", "run.host_unreachable") and not payload["ignored"]:
                failure = {k: payload[k] for k in ("host", "task", "play", "message")}
                result.failure = result.failure or failure
                result.host_failures.setdefault(payload["host"], failure | {
                    "unreachable": name == "run.host_unreachable"})
                play["failed"].add(payload["host"])
            if name == "run.playbook_stats":
                result.stats = payload
                # A host whose failure a rescue block handled did not fail the run.
                ended = set(payload.get("failures") or {}) | set(payload.get("dark") or {})
                for host in set(payload.get("rescued") or {}) - ended:
                    result.host_failures.pop(host, None)
                play["ran"].discard(None)
                if play["ran"] and play["ran"] <= play["failed"] & ended:
                    result.aborted = True
        if event.get("event") == "playbook_on_no_hosts_remaining":
            result.aborted = True
        if event.get("event") == "runner_on_ok" and plan.module and isinstance(d.get("res"), dict):
            result.module_results[d.get("host")] = d["res"]
        return keep_output

    def cancel() -> bool:
        if not stop_reason:
            reason = should_stop()
            if reason:
                stop_reason.append(reason)
        return bool(stop_reason)

    kwargs = dict(private_data_dir=str(pdd), ident=op["correlation_id"], inventory=plan.inventory, envvars=env,
                  cmdline=cmdline, quiet=True, event_handler=handle, cancel_callback=cancel,
                  suppress_env_files=True, settings={"pexpect_timeout": 0.5, "suppress_ansible_output": True})
    if plan.module:
        kwargs |= {"module": plan.module, "module_args": plan.module_args, "host_pattern": plan.host_pattern}
    else:
        kwargs["playbook"] = plan.playbook
    started = time.monotonic()
    try:
        runner = init_runner(**kwargs)
        runner.config.env = child_env(runner.config.env, env)
        runner.config.command = GUARD + (["--fence", str(fence)] if fence else []) + runner.config.command
        # Set here, not in `settings`: ansible-runner reads those from env/settings only, which it does not
        # write with suppress_env_files, and its default (False) would write the run's stdout to a file.
        runner.config.suppress_output_file = not keep_output
        runner.run()
        result.rc = runner.rc
        result.status = stop_reason[0] if stop_reason else runner.status
    finally:
        cleanup.close()
        shutil.rmtree(control_dir, ignore_errors=True)
        if stop_reason:
            kill_leftovers(str(op["id"]))
    log.info("operation %s %s: %s (rc=%s) in %.1fs", op["id"], op["kind"], result.status, result.rc,
             time.monotonic() - started)
    if keep_output:
        result.tarball = pack(pdd, redact)
    return result


def pack(pdd: Path, redact: Redactor) -> bytes:
    """tar.gz of the run directory (inventory, vars, artifacts), secrets scrubbed once more (on disk
    too) as a second line of defence, sockets and other special files left out."""
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w:gz") as tar:
        for path in sorted(pdd.rglob("*")):
            if not path.is_file() or path.is_symlink():
                continue
            original = path.read_text("utf-8", errors="replace")
            text = redact.text(original)
            if text != original:  # scrub the copy on disk as well
                path.write_text(text)
            data = text.encode()
            info = tarfile.TarInfo(str(path.relative_to(pdd)))
            info.size, info.mtime, info.mode = len(data), int(path.stat().st_mtime), 0o600
            tar.addfile(info, io.BytesIO(data))
    return buf.getvalue()
