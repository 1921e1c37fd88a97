"""The callback plugin gpuaas.apps.task_timing, on a real playbook run: each task is timed on each host, and a
task slow on one host shows there only."""

import json
import subprocess

from .ansible_run import BIN, PLAYBOOKS, ansible_env, local_inventory


# The slow host sleeps 3 s, the fast one 0.05 s: on a loaded machine starting a task alone can take over a second,
# so a smaller gap would let the fast host look slower.
def test_records_each_task_on_each_host(tmp_path):
    inventory = local_inventory(tmp_path / "hosts.ini", {"all": ["slow", "fast"]})
    record_path = tmp_path / "timing.json"
    env = ansible_env(ANSIBLE_CALLBACKS_ENABLED="gpuaas.apps.task_timing", GPUAAS_TASK_TIMING_PATH=str(record_path))
    proc = subprocess.run([str(BIN / "ansible-playbook"), "-i", str(inventory), str(PLAYBOOKS / "timed.yml")],
                          env=env, capture_output=True, text=True, timeout=120, check=False)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    record = json.loads(record_path.read_text())
    tasks = {(t["task"], t["host"]): t for t in record["tasks"]}
    names = ("Sleep longer on slow", "Skip on fast")
    assert set(tasks) == {(task, host) for task in names for host in ("slow", "fast")}
    assert tasks[("Sleep longer on slow", "slow")]["seconds"] >= 3
    assert tasks[("Sleep longer on slow", "fast")]["seconds"] < tasks[("Sleep longer on slow", "slow")]["seconds"]
    assert tasks[("Skip on fast", "fast")]["status"] == "skipped"
    assert tasks[("Skip on fast", "slow")]["status"] == "changed"
    assert [p["name"] for p in record["plays"]] == ["A play whose tasks take a known time on two hosts"]
    assert record["plays"][0]["seconds"] >= 3
    assert record["seconds"] >= record["plays"][0]["seconds"]


def test_prints_a_summary_without_a_path(tmp_path):
    inventory = local_inventory(tmp_path / "hosts.ini", {"all": ["slow", "fast"]})
    env = ansible_env(ANSIBLE_CALLBACKS_ENABLED="gpuaas.apps.task_timing")
    env.pop("GPUAAS_TASK_TIMING_PATH", None)
    proc = subprocess.run([str(BIN / "ansible-playbook"), "-i", str(inventory), str(PLAYBOOKS / "timed.yml")],
                          env=env, capture_output=True, text=True, timeout=120, check=False)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    summary = proc.stdout[proc.stdout.index("TASK TIMING"):]
    lines = [line for line in summary.splitlines() if " host(s) " in line]
    # Ranked by time summed over hosts: the sleep first, on both hosts.
    assert "2 host(s)  A play whose tasks take a known time on two hosts : Sleep longer on slow" in lines[0]
    assert "PLAY WALL TIME" in summary
