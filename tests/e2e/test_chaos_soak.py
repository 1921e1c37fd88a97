"""The chaos soak (bench/chaos_soak.py, issue 23 item 5) in its short form: about 15 random operations on a
Slurm instance (1 controller + 2 workers, 1 spare host) and an OCI instance (2 replicas) while every fault
kind hits once, in a fixed order: a worker is killed mid-run, a test host is killed, serve is stopped and
started, PostgreSQL restarts, and a host is cut off the network and one paused (at most two host faults at
once); the soak's own checks (nothing stuck, transitional, untruthful, orphaned, leaked or lost)
must all count 0.

The schedule is fixed rather than drawn, so that the soak's length is bounded: with faults drawn at random
for as long as operations ran, a slower machine drew more faults, and each worker kill holds its operation's
instance (all of its queue) for a lease (30 s) and a rerun, so the operations took longer still: on a loaded
machine the random form drew six worker kills, three on one operation, and ran 437 s.

It runs as a subprocess, exactly as the bench is run; its summary and log are printed when it fails."""

import json
import subprocess
import sys
import time
from pathlib import Path

import pytest

pytestmark = [pytest.mark.hosts, pytest.mark.slow]

ROOT = Path(__file__).resolve().parents[2]
# Every fault kind once; the worker kill first, while the first operations run, so that the lease its operation
# waits out overlaps the other faults.
SCHEDULE = ("worker_kill", "host_kill", "serve_term", "pg_restart", "host_netcut", "host_pause")


def test_a_short_chaos_soak_leaves_nothing_stuck_lost_or_untruthful(tmp_path):
    summary_file = tmp_path / "summary.json"
    started = time.monotonic()
    done = subprocess.run(
        [sys.executable, str(ROOT / "bench" / "chaos_soak.py"), "--operations", "15", "--seed", "23",
         "--concurrency", "3", "--fault-every", "5", "--host-fault-seconds", "25,35", "--host-faults-at-once", "2",
         "--health-interval", "5", "--slurm-spares", "1", "--oci-spares", "0",
         "--first-faults", ",".join(SCHEDULE), "--faults", "none", "--summary", str(summary_file)],
        capture_output=True, text=True, timeout=600)
    seconds = time.monotonic() - started
    assert summary_file.exists(), f"no summary (exit {done.returncode}):\n{done.stderr[-6000:]}"
    summary = json.loads(summary_file.read_text())
    print(f"\nchaos soak: {seconds:.0f} s\n{done.stdout}")
    assert done.returncode == 0, f"exit {done.returncode}:\n{done.stdout}\n{done.stderr[-8000:]}"
    assert summary["accepted"] >= 15
    # The faults the short form promises happened, each kind once (one that could not be injected is not counted).
    assert summary["faults"] == {kind: 1 for kind in SCHEDULE}, summary["fault_log"]
    assert not any(summary["violations"].values()), summary["violations"]
