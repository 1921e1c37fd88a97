"""Digest-true runs: what installing a collection by digest adds to a run's start.

(a) A run's start today: wall time from calling ansible_runner.run (a one-task `hosts: localhost`
    playbook, connection local, from a tiny collection) with ANSIBLE_COLLECTIONS_PATH pointing at an
    unpacked checkout, to its `playbook_on_start` event. Also measured with the path pointing at that
    collection's digest install instead, to show the installed tree runs as fast as a checkout.
(b) installed_collection() for the REAL gpuaas.apps build (`ansible-galaxy collection build` of this
    checkout, so the file count is realistic): cold (first run of a digest: verify the tarball,
    install it), warm in a new worker process (re-verify the tarball once, check the installed tree)
    and warm in a process that already verified that digest (check the installed tree only).
(c) Each of (b) as a ratio to (a). The target is warm < 10 % of (a).

    .venv/bin/python bench/bench_digest_runs.py [--runs 10]
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import ansible_runner
from gpuaas_api.content import collections as cc
from gpuaas_api.content.store import ContentStore

ROOT = Path(__file__).resolve().parents[1]
GALAXY = Path(sys.executable).parent / "ansible-galaxy"
PLAYBOOK = """- name: Bench
  hosts: localhost
  connection: local
  gather_facts: false
  tasks:
    - name: Say hello
      ansible.builtin.debug:
        msg: hello
"""


def build(source: Path, out: Path) -> Path:
    out.mkdir(parents=True, exist_ok=True)
    subprocess.run([str(GALAXY), "collection", "build", "--force", "--output-path", str(out), str(source)],
                   check=True, capture_output=True)
    (tarball,) = out.glob("*.tar.gz")
    return tarball


def tiny_checkout(tmp: Path) -> Path:
    """An unpacked checkout of a tiny collection: <dir>/ansible_collections/bench/tiny/."""
    coll = tmp / "checkout" / "ansible_collections" / "bench" / "tiny"
    (coll / "playbooks").mkdir(parents=True)
    (coll / "galaxy.yml").write_text("namespace: bench\nname: tiny\nversion: 1.0.0\nreadme: README.md\n"
                                     "authors: [bench]\n")
    (coll / "README.md").write_text("bench\n")
    (coll / "playbooks" / "hello.yml").write_text(PLAYBOOK)
    return tmp / "checkout"


def run_start(collections_path: Path, tmp: Path, n: int) -> list[float]:
    """Seconds from calling ansible_runner.run to its playbook_on_start event, per run."""
    env = {"ANSIBLE_COLLECTIONS_PATH": str(collections_path), "ANSIBLE_COLLECTIONS_SCAN_SYS_PATH": "False",
           "ANSIBLE_NOCOLOR": "1", "ANSIBLE_RETRY_FILES_ENABLED": "False",
           "PATH": os.pathsep.join([str(Path(sys.executable).parent), os.environ.get("PATH", "")])}
    inventory = f"localhost ansible_connection=local ansible_python_interpreter={sys.executable}\n"
    out = []
    for i in range(n):
        seen: list[float] = []

        def handle(event: dict, seen=seen) -> bool:
            if event.get("event") == "playbook_on_start" and not seen:
                seen.append(time.perf_counter())
            return True

        pdd = tmp / f"run-{collections_path.name}-{i}"
        pdd.mkdir()
        start = time.perf_counter()
        r = ansible_runner.run(private_data_dir=str(pdd), playbook="bench.tiny.hello", inventory=inventory,
                               envvars=env, quiet=True, event_handler=handle)
        if r.rc != 0 or not seen:
            raise SystemExit(f"bench run failed: rc={r.rc} status={r.status}")
        out.append(seen[0] - start)
        shutil.rmtree(pdd, ignore_errors=True)
    return out


def timed(fn) -> float:
    start = time.perf_counter()
    fn()
    return time.perf_counter() - start


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--runs", type=int, default=10)
    args = parser.parse_args()
    n = args.runs
    tmp = Path(tempfile.mkdtemp(prefix="gpuaas-bench-digest-"))
    try:
        checkout = tiny_checkout(tmp)
        store = ContentStore(tmp / "content")
        tiny = store.put_file(build(checkout / "ansible_collections" / "bench" / "tiny", tmp / "tiny-build"))
        tiny_installed = cc.installed_collection(store, tiny, tmp / "tiny-cache")

        real_tarball = build(ROOT, tmp / "real-build")
        real = store.put_file(real_tarball)
        listed = sum(1 for _ in cc.json.loads(cc.read_collection_file(real_tarball, "FILES.json"))["files"])

        start_checkout = run_start(checkout, tmp, n)
        start_installed = run_start(tiny_installed, tmp, n)

        cold = []
        for i in range(n):
            cc._MANIFESTS.clear()
            cold.append(timed(lambda i=i: cc.installed_collection(store, real, tmp / f"cold-{i}")))
        cache = tmp / "cold-0"
        new_process, same_process = [], []
        for _ in range(n):
            cc._MANIFESTS.clear()
            new_process.append(timed(lambda: cc.installed_collection(store, real, cache)))
        for _ in range(n):
            same_process.append(timed(lambda: cc.installed_collection(store, real, cache)))

        a = statistics.median(start_checkout)
        print(f"real collection: {real_tarball.stat().st_size} bytes, {listed} FILES.json entries; {n} runs each\n")
        print("| measure | p50 ms | min ms | max ms | ratio to (a) |")
        print("|---|---|---|---|---|")
        rows = [("(a) run start, checkout on ANSIBLE_COLLECTIONS_PATH", start_checkout),
                ("(a') run start, digest install on ANSIBLE_COLLECTIONS_PATH", start_installed),
                ("(b) installed_collection, cold (first run of a digest)", cold),
                ("(b) installed_collection, warm, new worker process", new_process),
                ("(b) installed_collection, warm, same worker process", same_process)]
        for label, values in rows:
            p50 = statistics.median(values)
            print(f"| {label} | {p50 * 1000:.1f} | {min(values) * 1000:.1f} | {max(values) * 1000:.1f} "
                  f"| {p50 / a * 100:.1f} % |")
        worst_warm = max(statistics.median(new_process), statistics.median(same_process))
        print(f"\ntarget warm < 10 % of (a): {'met' if worst_warm < 0.1 * a else 'NOT met'}")
        return 0 if worst_warm < 0.1 * a else 1
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
