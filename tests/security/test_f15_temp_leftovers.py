"""Issue 22, finding 4: a killed worker left `gpuaas-secrets-*` (an empty FIFO) and `gpuaas-cp-*`
directories in the temp dir (and now a run's `gpuaas-fence-*`), and nothing ever removed them. Now each such
directory names its worker (pid and process start time), and a worker starting removes the ones whose worker
is gone, keeping those of workers still running.

Real worker processes, a real ansible-runner run of the test app (it has a secret, so its run reads
one through the pipe), a real kill -9."""

from __future__ import annotations

import os
import signal
from pathlib import Path

from gpuaas_api.executor import runner
from operations.helpers import make_instance, wait_for
from operations.test_queue import worker_process

SA = "service_account"


def scratch(tmp: Path) -> set[str]:
    return {p.name for kind in runner.SCRATCH_KINDS for p in tmp.glob(f"gpuaas-{kind}-*")}


def test_a_starting_worker_removes_what_a_killed_one_left_in_the_temp_dir(ops, tmp_path, monkeypatch):
    tmp = tmp_path / "tmp"
    tmp.mkdir()
    monkeypatch.setenv("TMPDIR", str(tmp))  # the workers' temp dir (the run's too: TMPDIR passes to it)
    # A live worker's directory (this process stands in for one): it must survive the sweep.
    live = tmp / f"gpuaas-cp-{os.getpid()}.{runner.process_started(os.getpid())}-live"
    live.mkdir()
    instance, marker = make_instance(ops, "leftovers")
    (marker / "slow").touch()
    doomed = worker_process(ops, tmp_path / "doomed.log", "doomed")
    try:
        ops.w.call(SA, "POST", f"/v1/instances/{instance['id']}/deploy", 202)
        wait_for(lambda: (marker / "log").exists(), 60, what="the run to start")
        left = scratch(tmp) - {live.name}
        assert {name.split("-")[1] for name in left} == {"secrets", "cp", "fence"}, left
        doomed.send_signal(signal.SIGKILL)
        doomed.wait(10)
    finally:
        doomed.kill()
    assert scratch(tmp) - {live.name} == left, "the killed worker cleaned up after all: nothing to test"
    (marker / "slow").unlink()

    starting = worker_process(ops, tmp_path / "starting.log", "starting")
    try:
        # (It may start a run of its own right after, with directories of its own: only the dead ones count.)
        wait_for(lambda: not scratch(tmp) & left, 60, what="the starting worker to remove the dead one's")
    finally:
        starting.send_signal(signal.SIGTERM)
        starting.wait(30)
    assert "removed 3 run directories that stopped workers left" in (tmp_path / "starting.log").read_text()
    assert live.is_dir()
