"""The run guard: `python guard.py [--fence FILE] COMMAND...` runs COMMAND (ansible-playbook) so that
nothing of it outlives the worker that started it, nor the worker's lease on the operation.

ansible-runner starts its command on a pty with SIGHUP ignored, so a killed worker (kill -9, OOM)
used to leave ansible-playbook acting on hosts, and ssh ControlPersist masters, which daemonize, escape
any process group. The guard sits between the worker and the command:
- it asks the kernel for a signal when its parent dies (PR_SET_PDEATHSIG);
- it is a child subreaper (PR_SET_CHILD_SUBREAPER): every process of the run that daemonizes is
  re-parented to the guard, not to init, so it remains a descendant;
- when the command exits, or the worker dies, or the guard is asked to stop (SIGTERM, SIGHUP,
  SIGINT), it kills every descendant left and exits;
- with `--fence FILE`, it is the run's fence: FILE holds a fence_clock() time (the worker rewrites it each
  time it renews its lease), and once that time passes the guard kills the run and exits with FENCED_RC. It
  runs apart from the worker, so a worker that is paused, starved or cut off from the database cannot keep a
  run going past its lease, when another worker may take the operation over (docs/operations.md "Fencing").

Standard library only, started with `python -I -S`: it costs a run no imports of the service.
Linux only (prctl); elsewhere it just runs the command."""

from __future__ import annotations

import contextlib
import ctypes
import os
import signal
import subprocess
import sys
import time

PR_SET_PDEATHSIG = 1
PR_SET_CHILD_SUBREAPER = 36
STOP_SIGNALS = (signal.SIGTERM, signal.SIGHUP, signal.SIGINT)
FENCED_RC = 75  # EX_TEMPFAIL: the run was stopped, the operation is not lost (it runs again)
FENCE_POLL_SECONDS = 0.1


def _prctl(option: int, value: int) -> None:
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.prctl(option, value, 0, 0, 0) != 0:
        raise OSError(ctypes.get_errno(), f"prctl({option}) failed")


def descendants(root: int) -> list[int]:
    """Every process below `root`, read from /proc (parents before children)."""
    children: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat", "rb") as f:
                # The command name (field 2) may hold spaces and parentheses: the ppid follows its last ')'.
                ppid = int(f.read().rsplit(b")", 1)[1].split()[1])
        except (OSError, IndexError, ValueError):
            continue
        children.setdefault(ppid, []).append(int(entry))
    found, todo = [], [root]
    while todo:
        for child in children.get(todo.pop(), []):
            found.append(child)
            todo.append(child)
    return found


def kill_descendants() -> None:
    """SIGKILL every descendant and reap them, until none is left (a dying process may have forked)."""
    me = os.getpid()
    for _ in range(20):
        left = descendants(me)
        if not left:
            return
        for pid in left:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        while True:
            try:
                if os.waitpid(-1, os.WNOHANG)[0] == 0:
                    break
            except ChildProcessError:
                break


def fence_clock() -> float:
    """The clock of the fence, shared by every process of the machine: CLOCK_BOOTTIME, which goes on while the
    machine is suspended (CLOCK_MONOTONIC stops), so a worker that wakes from a suspend finds its runs fenced."""
    return time.clock_gettime(time.CLOCK_BOOTTIME)


def fence_time(path: str, last: float) -> float:
    """The time the fence file holds; `last` while it cannot be read (being rewritten, or gone)."""
    try:
        with open(path) as f:
            return float(f.read())
    except (OSError, ValueError):
        return last


def main(argv: list[str]) -> int:
    fence = None
    if argv[:1] == ["--fence"] and len(argv) > 2:
        fence, argv = argv[1], argv[2:]
    if not argv:
        print("usage: guard.py [--fence FILE] COMMAND [ARG...]", file=sys.stderr)
        return 2
    deadline = fence_time(fence, 0.0) if fence else None  # unreadable at the start: fenced at once
    parent = os.getppid()
    if sys.platform.startswith("linux"):
        _prctl(PR_SET_PDEATHSIG, signal.SIGTERM)
        _prctl(PR_SET_CHILD_SUBREAPER, 1)
        if os.getppid() != parent:  # the worker died before the request took effect
            return 128 + signal.SIGTERM

    def stop(signum, _frame):
        kill_descendants()
        os._exit(128 + signum)

    for signum in STOP_SIGNALS:
        signal.signal(signum, stop)
    if fence is not None and fence_clock() > deadline:
        print("guard: the worker's lease was not renewed in time; the run does not start (fenced)", file=sys.stderr)
        return FENCED_RC
    # The command starts with the default SIGHUP again (exec resets handled signals; ignored ones would stay).
    child = subprocess.Popen(argv)
    while True:
        try:
            rc = child.wait(timeout=None if fence is None else FENCE_POLL_SECONDS)
            break
        except subprocess.TimeoutExpired:
            deadline = fence_time(fence, deadline)
            if fence_clock() > deadline:
                print("guard: the worker did not renew its lease in time; the run is stopped (fenced)",
                      file=sys.stderr)
                kill_descendants()
                return FENCED_RC
    kill_descendants()  # what the run left behind: ssh ControlPersist masters
    return rc if rc >= 0 else 128 - rc


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
