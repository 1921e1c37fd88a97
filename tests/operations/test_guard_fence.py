"""The run guard as the run's fence (executor/guard.py --fence): a real guard process around a real
command tree, the fence file written as the worker's heartbeat writes it. The worker side (a database
outage longer than the fence stops the run; the operation runs again) is tests/security/test_f6_faults.py;
a worker host cut off the network, tests/multihost/."""

from __future__ import annotations

import os
import subprocess
import time
from pathlib import Path

from gpuaas_api.executor import guard
from gpuaas_api.executor.runner import GUARD
from gpuaas_api.executor.worker import fence_seconds

from .helpers import wait_for

# A command with a grandchild that daemonizes (its own session): the fence must end it too.
TREE = ["sh", "-c", "setsid sleep 300 & sleep 300"]


def fence_at(path: Path, seconds_from_now: float) -> None:
    partial = path.with_suffix(".new")
    partial.write_text(repr(guard.fence_clock() + seconds_from_now))
    os.replace(partial, path)


def tree_alive(guard_pid: int) -> list[int]:
    return guard.descendants(guard_pid)


def test_a_fence_that_passes_stops_the_run_and_everything_it_started(tmp_path):
    fence = tmp_path / "until"
    fence_at(fence, 1.0)
    started = time.monotonic()
    proc = subprocess.Popen(GUARD + ["--fence", str(fence)] + TREE, stderr=subprocess.PIPE, text=True)
    tree = wait_for(lambda: (pids := tree_alive(proc.pid)) and len(pids) >= 3 and pids, 10,
                    what="the command tree to start")
    assert proc.wait(10) == guard.FENCED_RC
    elapsed = time.monotonic() - started
    assert 1.0 <= elapsed < 1.0 + 0.5, elapsed  # at the fence, within the guard's look and the kill
    assert "fenced" in proc.stderr.read()
    assert not [pid for pid in tree if Path(f"/proc/{pid}").exists()], "a process of the fenced run is still alive"


def test_a_renewed_fence_keeps_the_run_and_an_unreadable_file_keeps_the_last_time(tmp_path):
    fence = tmp_path / "until"
    fence_at(fence, 0.6)
    proc = subprocess.Popen(GUARD + ["--fence", str(fence), "sleep", "300"])
    try:
        until = time.monotonic() + 2.0
        while time.monotonic() < until:  # renewals, as the heartbeat makes them
            fence_at(fence, 0.6)
            time.sleep(0.2)
        assert proc.poll() is None, "a renewed fence stopped the run"
        fence.write_text("half a numb")  # being rewritten: the guard keeps the time it knew
        renewed = time.monotonic()
        assert proc.wait(5) == guard.FENCED_RC
        assert time.monotonic() - renewed < 0.6 + 0.5
    finally:
        proc.kill()


def test_the_fence_leaves_a_margin_before_the_lease_can_end():
    for lease in (2, 3, 6, 30, 300):
        assert 0 < fence_seconds(lease) <= lease - 1.0, lease
    assert fence_seconds(30) == 22.5

