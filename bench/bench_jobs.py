"""Jobs through the platform on real test hosts (issue 25's targets): submit latency, list latency with 10,000
jobs in the queue, and how soon a cancel shows in squeue.

    .venv/bin/python bench/bench_jobs.py [--submits 100] [--queue 10000] [--lists 50] [--cancels 10]

It starts the control service and a worker (as `gpuaas demo` does), two Slurm test hosts (a controller and a
worker, accounting on) and deploys the Slurm app through the API; the operator's site_vars raise MaxJobCount
(Slurm's default, 10,000, would refuse the last jobs of the queue). Then, every call over HTTP to the service:

- submit: `--submits` jobs of the project's service account, one after another (POST .../jobs, until the
  answer with the Slurm job id), p50 and p99;
- list: the queue filled to `--queue` pending jobs of the project's account (submitted on the controller as the
  service account's Unix user, 8 at a time), then `--lists` first pages (GET .../jobs, 50 jobs), p50 and p99;
- cancel: `--cancels` times, a pending job cancelled (POST .../jobs/{id}/cancel) and squeue polled on the
  controller until it no longer shows the job pending: the time from the request to that answer.

Targets: submit p50 < 1 s and p99 < 2 s; list p50 < 300 ms; cancel visible < 2 s. Exits non-zero when one is missed.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import time
import uuid

import httpx
from gpuaas_api.demo import Demo

HOLD = "#!/bin/sh\nsleep 3600\n"


def percentile(values: list[float], p: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(p / 100 * (len(ordered) - 1)))]


def fill_queue(d: Demo, user: str, count: int) -> None:
    """`count` pending jobs of the account, submitted on the controller as `user`, 8 sbatch at a time (held, so
    the worker's one node never starts them)."""
    script = (f"seq {count} | xargs -P 8 -I{{}} runuser -u {user} -- sbatch --hold --parsable --job-name=fill "
              "--wrap='sleep 3600' > /dev/null")
    subprocess.run(["podman", "exec", d.hosts["ctl"]["container"], "bash", "-c", script], check=True, timeout=3600)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--submits", type=int, default=100)
    parser.add_argument("--queue", type=int, default=10000)
    parser.add_argument("--lists", type=int, default=50)
    parser.add_argument("--cancels", type=int, default=10)
    args = parser.parse_args()
    lines: list[str] = []
    site_vars = {"slurm_controller_extra_config": {"MaxJobCount": args.queue + args.submits + 1000}}
    d = Demo(prefix=f"benchjobs{uuid.uuid4().hex[:4]}", say=lines.append,
             worker_env={"GPUAAS_SITE_VARS": json.dumps(site_vars)})
    try:
        d.start_service()
        d.setup_tenancy()
        d.register_hosts({"pool": ["ctl", "w1"]})
        d.register_slurm_app()
        d.create_instance("pool", workers=1)
        op = d.operate("/deploy")
        if op["status"] != "succeeded":
            print("\n".join(lines[-30:]), file=sys.stderr)
            return 1
        jobs = f"/v1/instances/{d.ids['instance']}/jobs"
        http = httpx.Client(base_url=d.sa.base_url, headers={"Authorization": f"Bearer {d.sa.token}"}, timeout=60)

        submit_s, user = [], ""
        for n in range(args.submits):
            started = time.perf_counter()
            answer = http.post(jobs, json={"name": f"bench{n}", "script": HOLD})
            submit_s.append(time.perf_counter() - started)
            answer.raise_for_status()
            user = answer.json()["runtime_user"]

        fill_started = time.monotonic()
        fill_queue(d, user, args.queue)
        queued = int(d.slurm("squeue -h -t pending -A research | wc -l"))
        fill_s = time.monotonic() - fill_started

        list_s = []
        for _ in range(args.lists):
            started = time.perf_counter()
            page = http.get(jobs, params={"limit": 50})
            list_s.append(time.perf_counter() - started)
            page.raise_for_status()
        assert len(page.json()["items"]) == 50 and page.json()["next_cursor"]

        cancel_s = []
        for n in range(args.cancels):
            job = http.post(jobs, json={"name": f"cancel{n}", "script": HOLD}).json()["id"]
            started = time.perf_counter()
            http.post(f"{jobs}/{job}/cancel").raise_for_status()
            while d.slurm(f"squeue -h -t all -j {job} -o %T") in ("PENDING", "RUNNING"):
                pass
            cancel_s.append(time.perf_counter() - started)
    finally:
        d.close()

    results = {
        "submit_p50_ms": 1000 * statistics.median(submit_s), "submit_p99_ms": 1000 * percentile(submit_s, 99),
        "queue_jobs": queued, "queue_fill_s": fill_s,
        "list_p50_ms": 1000 * statistics.median(list_s), "list_p99_ms": 1000 * percentile(list_s, 99),
        "cancel_visible_max_ms": 1000 * max(cancel_s), "cancel_visible_p50_ms": 1000 * statistics.median(cancel_s),
    }
    print(json.dumps({k: round(v, 1) if isinstance(v, float) else v for k, v in results.items()}, indent=2))
    missed = [name for name, ok in (("submit p50 < 1 s", results["submit_p50_ms"] < 1000),
                                    ("submit p99 < 2 s", results["submit_p99_ms"] < 2000),
                                    ("list p50 < 300 ms", results["list_p50_ms"] < 300),
                                    (f"queue of {args.queue}", queued >= args.queue),
                                    ("cancel visible < 2 s", results["cancel_visible_max_ms"] < 2000)) if not ok]
    if missed:
        print("missed: " + ", ".join(missed), file=sys.stderr)
    return 1 if missed else 0


if __name__ == "__main__":
    sys.exit(main())
