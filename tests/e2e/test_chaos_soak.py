"""The chaos soak (bench/chaos_soak.py, issue 23 item 5) in its short form: about 15 random operations on a
Slurm instance (1 controller + 2 workers, 1 spare host) and an OCI instance (2 replicas) while a test host
is killed, a worker is killed mid-run, and then serve, PostgreSQL and hosts get random faults; the soak's
own checks (nothing stuck, transitional, untruthful, orphaned, leaked or lost) must all count 0.

It runs as a subprocess, exactly as the bench is run; its summary and log are printed when it fails."""

import json
import subprocess
import sys
import time
from pathlib import Path

import pytest

pytestmark = [pytest.mark.hosts, pytest.mark.slow]

ROOT = Path(__file__).resolve().parents[2]


def test_a_short_chaos_soak_leaves_nothing_stuck_lost_or_untruthful(tmp_path):
    summary_file = tmp_path / "summary.json"
    started = time.monotonic()
    done = subprocess.run(
        [sys.executable, str(ROOT / "bench" / "chaos_soak.py"), "--operations", "15", "--seed", "23",
         "--concurrency", "3", "--fault-every", "20", "--host-fault-seconds", "25,35", "--health-interval", "5",
         "--slurm-spares", "1", "--oci-spares", "0", "--first-faults", "host_kill,worker_kill",
         "--faults", "serve_term,pg_restart,host_pause,host_netcut,worker_kill",
         "--summary", str(summary_file)],
        capture_output=True, text=True, timeout=600)
    seconds = time.monotonic() - started
    assert summary_file.exists(), f"no summary (exit {done.returncode}):\n{done.stderr[-6000:]}"
    summary = json.loads(summary_file.read_text())
    print(f"\nchaos soak: {seconds:.0f} s\n{done.stdout}")
    assert done.returncode == 0, f"exit {done.returncode}:\n{done.stdout}\n{done.stderr[-8000:]}"
    assert summary["accepted"] >= 15
    # The faults the short form promises happened: one host kill and one worker kill mid-run.
    assert summary["faults"].get("host_kill", 0) >= 1 and summary["faults"].get("worker_kill", 0) >= 1, summary
    assert not any(summary["violations"].values()), summary["violations"]
