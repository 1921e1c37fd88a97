"""The OCI workload through the API: deploy to probe healthy (image on the host, and a cold pull), what a
client sees while the workload is upgraded (one replica, then two rolling), and while a replica is added.

    .venv/bin/python bench/bench_oci.py [--rounds 3] [--json PATH] [--quick] [--max-minutes M]

Everything is set up as `gpuaas demo` sets it up (gpuaas_api.demo.Demo): `gpuaas serve` and one `gpuaas
worker` (subprocesses, embedded PostgreSQL), a registry host that takes only the service's registry
tokens (each run pulls with an `artifact_pull` credential issued for it), two Debian 13 podman test hosts
(web1, web2; one allocation each), the testregistry's busybox httpd images v1, v2, v3 (2 MB) pushed and
signed, the oci-service app registered once per image with `gpuaas apps register --workload --signed-by`,
and the demo's instance parameters (host network, no cgroups, the HTTP probe on /version.txt every 0.5 s).
A project service account drives every operation through the HTTP API; the bench reads the operation and
the instance's timeline (server timestamps) and polls the service itself on the hosts.

Each round, the order of its two parts alternating from round to round:

- warm: v1 is put on web1 first, outside the platform (the registry opened to anonymous pulls for a
  moment, `podman pull` of the exact reference on the host, the registry back to tokens only), as a
  site that pre-pulls images would have it. Then a fresh instance (1 replica on web1) is deployed with
  v1: the workload's pull finds the image by digest and pulls nothing. Then, on that instance:
  - upgrade to v2 with one replica;
  - member add of a replica on web2 (a cold pull of v2 there);
  - upgrade to v3 with two replicas (rolling, one at a time: `oci_serial` 1);
  - decommission (both hosts are then checked to hold no container and no image).
- cold: a fresh instance on web1, which holds no image, deployed with v1 (token, pull, signature check),
  then decommissioned.

Deploy: accept (the operation's created_at; POST /deploy answered 202) -> `run.playbook_started` ->
the end of the task that pulls and, on a host where the workload does not run yet, starts it until its probe
answers ("Trust the image's repository, pull the image, start it where it does not run" ok) ->
`apps.instance.running`. That task's duration and the moment the bench's own poller first got an answer are
reported next to them.

Upgrades and member add: from before the POST until the operation has finished, a poller GETs
http://HOST:8080/version.txt on every replica every 100 ms (1 s timeout each, all replicas at once). A
tick fails for a replica when its request fails; "any replica" fails when every replica's request failed
(what a client that can reach either sees). Failure seconds are the time from each failed tick to the
next tick, summed. Member add also reports accept -> `member_added` (the new member active) and whether
web1's container was restarted (its StartedAt).

It prints one table (median and min-max over the rounds), the deploy's tasks whose time differs most
between the image on the host and a cold pull, and the load average before and after each step.
--max-minutes starts no round that would end past that time (at the last round's length). At the end it
removes the hosts, the registry and the service's state; a failed run keeps the service's and worker's
logs and this run's log, and prints where.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import secrets
import shutil
import statistics
import sys
import tempfile
import threading
import time
import urllib.error
import urllib.request
from concurrent.futures import ThreadPoolExecutor
from datetime import datetime
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT), str(ROOT / "api")]

from gpuaas_api.demo import OCI_PORT, OCI_TEST_HOST_PARAMETERS, Demo  # noqa: E402

HOSTS = ["web1", "web2"]
IMAGES = ("v1", "v2", "v3")
TERMINAL = ("succeeded", "failed", "canceled")
TICK = 0.1
REQUEST_TIMEOUT = 1.0
# Where the workload does not run yet (a deploy, a new member), this one task pulls, starts and waits for the probe.
READY_TASK = "Trust the image's repository, pull the image, start it where it does not run"
TASK_ROWS = 8


class BenchError(RuntimeError):
    pass


def ts(value: str) -> float:
    """A server timestamp (ISO 8601) as epoch seconds: the bench runs on the same machine and clock."""
    return datetime.fromisoformat(value).timestamp()


def load() -> list[float]:
    return [round(x, 2) for x in os.getloadavg()]


# -- polling the service on the hosts -------------------------------------------------------------------


def fetch(url: str) -> str | None:
    """The body of a GET, or None when it failed (refused, timed out, not 200)."""
    try:
        with urllib.request.urlopen(url, timeout=REQUEST_TIMEOUT) as response:  # noqa: S310 - a test host of this run
            return response.read().decode().strip() if response.status == 200 else None
    except (OSError, urllib.error.URLError):
        return None


class Poller:
    """GETs /version.txt on every host every TICK seconds in a thread; keeps (time, {host: body or None})."""

    def __init__(self, addresses: dict[str, str]):
        self.urls = {h: f"http://{a}:{OCI_PORT}/version.txt" for h, a in addresses.items()}
        self.samples: list[tuple[float, dict[str, str | None]]] = []
        self.stop_event = threading.Event()
        self.pool = ThreadPoolExecutor(max_workers=len(self.urls))
        self.thread = threading.Thread(target=self.loop, daemon=True)

    def __enter__(self) -> Poller:
        self.thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self.stop_event.set()
        self.thread.join()
        self.pool.shutdown()

    def loop(self) -> None:
        due = time.time()
        while not self.stop_event.is_set():
            started = time.time()
            futures = {h: self.pool.submit(fetch, url) for h, url in self.urls.items()}
            self.samples.append((started, {h: f.result() for h, f in futures.items()}))
            due += TICK
            delay = due - time.time()
            if delay > 0:
                self.stop_event.wait(delay)
            else:
                due = time.time()

    def wait_answering(self, hosts: list[str], timeout: float = 30) -> None:
        deadline = time.time() + timeout
        while time.time() < deadline:
            if self.samples and all(self.samples[-1][1][h] is not None for h in hosts):
                return
            time.sleep(TICK)
        raise BenchError(f"{', '.join(hosts)} did not answer before the operation")

    def first_answer(self, host: str, since: float = 0.0) -> float | None:
        return next((t for t, r in self.samples if t >= since and r[host] is not None), None)

    def outage(self, hosts: list[str], since: float, until: float) -> dict:
        """Failure seconds, failed ticks, the longest outage, for a client of any of `hosts` (one host:
        a client of that replica), over the ticks from since to until."""
        ticks = [(t, any(r[h] is not None for h in hosts)) for t, r in self.samples if since <= t <= until]
        failed, longest, run_start = 0.0, 0.0, None
        for i, (t, ok) in enumerate(ticks):
            nxt = ticks[i + 1][0] if i + 1 < len(ticks) else t + TICK
            if not ok:
                failed += nxt - t
                run_start = t if run_start is None else run_start
                longest = max(longest, nxt - run_start)
            else:
                run_start = None
        return {"failed_s": round(failed, 2), "failed_ticks": sum(1 for _, ok in ticks if not ok),
                "ticks": len(ticks), "longest_s": round(longest, 2)}


# -- the API ---------------------------------------------------------------------------------------------


class Bench:
    def __init__(self, demo: Demo, log):
        self.demo, self.log = demo, log
        self.versions: dict[str, dict] = {}
        self.steps: list[dict] = []

    @property
    def sa(self):
        return self.demo.sa

    def address(self, host: str) -> str:
        return self.demo.hosts[host]["address"]

    def events(self, instance_id: str, kind: str, correlation_id: str) -> list[dict]:
        return self.demo.timeline(instance_id, type=kind, correlation_id=correlation_id)

    def task_times(self, instance_id: str, op: dict) -> dict[str, float]:
        """Seconds per task name in the run (its check-mode pass and the real one added up), from the
        ok events' durations: where a run's time goes."""
        times: dict[str, float] = {}
        for e in self.events(instance_id, "run.task_ok", op["correlation_id"]):
            name = e["payload"].get("task") or "?"
            times[name] = round(times.get(name, 0.0) + float(e["payload"].get("duration") or 0.0), 2)
        return times

    def task_ok(self, instance_id: str, op: dict, task: str) -> dict:
        """The task's last ok event of the run: the playbooks run every task in check mode first."""
        found = [e for e in self.events(instance_id, "run.task_ok", op["correlation_id"])
                 if (e["payload"].get("task") or "").endswith(task)]
        if not found:
            raise BenchError(f"no ok event of task {task!r} in the {op['kind']}")
        return found[-1]

    def operate(self, instance_id: str, path: str, body: dict | None = None, timeout: float = 900) -> dict:
        op = self.sa.post(f"/v1/instances/{instance_id}{path}", body or {},
                          headers={"Idempotency-Key": secrets.token_hex(8)})
        deadline = time.monotonic() + timeout
        while op["status"] not in TERMINAL:
            if time.monotonic() > deadline:
                raise BenchError(f"{op['kind']} still {op['status']} after {timeout:.0f} s")
            time.sleep(0.2)
            op = self.sa.get(f"/v1/operations/{op['id']}")
        if op["status"] != "succeeded":
            raise BenchError(f"{op['kind']} ended {op['status']}: {json.dumps(op.get('error'))}")
        return op

    def step(self, name: str, work):
        """Runs one step, logging the load average before and after it."""
        before = load()
        started = time.monotonic()
        result = work()
        entry = {"step": name, "load_before": before, "load_after": load(),
                 "seconds": round(time.monotonic() - started, 1)}
        self.steps.append(entry)
        self.log(f"{name}: {entry['seconds']} s; load average {before} -> {entry['load_after']}")
        return result

    def host_sh(self, host: str, command: str) -> str:
        return self.demo.host_sh(host, command)

    def container(self, host: str) -> dict | None:
        return self.demo.oci_container(host)

    def create(self, name: str, image: str, pool: str) -> str:
        instance = self.sa.post(f"/v1/projects/{self.demo.ids['project']}/instances", {
            "name": name, "app_slug": "oci-service", "version": self.versions[image]["version"],
            "allocation_ids": [self.demo.ids[pool]], "topology": [{"role": "replica", "count": 1}],
            "parameters": OCI_TEST_HOST_PARAMETERS})
        return instance["id"]

    # -- the steps ---------------------------------------------------------------------------------------

    def seed(self, host: str, image: str) -> None:
        """Puts the image on the host outside the platform, by its exact reference (a site's pre-pull)."""
        registry = self.demo.registry
        config = self.demo.admin.get("/v1/registry/certificate")
        registry.clear_credentials()
        try:
            self.host_sh(host, f"podman pull --quiet {self.demo.images[image]} >/dev/null")
        finally:
            registry.use_token_service(f"{self.demo.admin.base_url}/v1/registry/token", config["service"],
                                       config["issuer"], config["rootcertbundle"])

    def images_on(self, host: str) -> list[str]:
        return self.host_sh(host, "podman images --no-trunc --format '{{.Digest}}'").split()

    def deploy(self, instance_id: str, host: str, image: str) -> dict:
        with Poller({host: self.address(host)}) as poller:
            op = self.operate(instance_id, "/deploy")
        accepted = ts(op["created_at"])
        started = ts(self.events(instance_id, "run.playbook_started", op["correlation_id"])[0]["occurred_at"])
        probe = self.task_ok(instance_id, op, READY_TASK)
        running = ts(self.events(instance_id, "apps.instance.running", op["correlation_id"])[0]["occurred_at"])
        first = poller.first_answer(host, accepted)
        container = self.container(host)
        if container is None or container["ImageDigest"] != self.demo.images[image].split("@")[1]:
            raise BenchError(f"after the deploy {host} does not run {image}")
        return {"accept -> playbook start": started - accepted,
                "playbook start -> probe healthy": ts(probe["occurred_at"]) - started,
                "probe healthy -> running": running - ts(probe["occurred_at"]),
                "accept -> running": running - accepted,
                "pull task": probe["payload"].get("duration") or 0.0,
                "accept -> first answer (bench)": (first - accepted) if first else None,
                "operation": ts(op["finished_at"]) - accepted,
                "tasks": self.task_times(instance_id, op)}

    def upgrade(self, instance_id: str, hosts: list[str], image: str) -> dict:
        with Poller({h: self.address(h) for h in hosts}) as poller:
            poller.wait_answering(hosts)
            since = time.time()
            op = self.operate(instance_id, "/upgrade", {"app_version_id": self.versions[image]["id"]})
            time.sleep(0.5)
            until = time.time()
        result = {"operation": ts(op["finished_at"]) - ts(op["created_at"])}
        for host in hosts:
            result[host] = poller.outage([host], since, until)
            container = self.container(host)
            if container is None or container["ImageDigest"] != self.demo.images[image].split("@")[1]:
                raise BenchError(f"after the upgrade {host} does not run {image}")
            if poller.samples[-1][1][host] != image:
                raise BenchError(f"after the upgrade {host} answers {poller.samples[-1][1][host]!r}")
        result["any"] = poller.outage(hosts, since, until)
        return result

    def member_add(self, instance_id: str, running: str, joining: str, pool: str, image: str) -> dict:
        before = self.container(running)["State"]["StartedAt"]
        with Poller({h: self.address(h) for h in (running, joining)}) as poller:
            poller.wait_answering([running])
            since = time.time()
            op = self.operate(instance_id, "/members", {"role": "replica", "allocation_id": self.demo.ids[pool]})
            time.sleep(0.5)
            until = time.time()
        accepted = ts(op["created_at"])
        (added,) = self.events(instance_id, "member_added", op["correlation_id"])
        started = ts(self.events(instance_id, "run.playbook_started", op["correlation_id"])[0]["occurred_at"])
        probe = self.task_ok(instance_id, op, READY_TASK)
        member = self.sa.get(f"/v1/instances/{instance_id}/members/{added['member_id']}")
        if member["status"] != "active" or member["host_name"] != joining:
            raise BenchError(f"the new member is {member['status']} on {member['host_name']}")
        first = poller.first_answer(joining, accepted)
        return {"accept -> member active": ts(added["occurred_at"]) - accepted,
                "accept -> playbook start": started - accepted,
                "playbook start -> probe healthy": ts(probe["occurred_at"]) - started,
                "accept -> first answer (bench)": (first - accepted) if first else None,
                "operation": ts(op["finished_at"]) - accepted,
                running: poller.outage([running], since, until),
                "restarted": self.container(running)["State"]["StartedAt"] != before}

    def decommission(self, instance_id: str, hosts: list[str]) -> None:
        self.operate(instance_id, "/decommission")
        for host in hosts:
            left = self.host_sh(host, "podman ps -aq; podman images -q")
            if left:
                raise BenchError(f"the decommission left containers or images on {host}: {left.split()}")

    # -- a round -----------------------------------------------------------------------------------------

    def warm(self, n: int) -> dict:
        out: dict = {}
        self.step("seed v1 on web1", lambda: self.seed("web1", "v1"))
        if self.images_on("web1") != [self.demo.images["v1"].split("@")[1]]:
            raise BenchError(f"web1 should hold v1 alone before the warm deploy: {self.images_on('web1')}")
        instance_id = self.create(f"bench-{n}-warm", "v1", "pool-1")
        out["deploy warm"] = self.step("deploy v1, image on the host", lambda: self.deploy(instance_id, "web1", "v1"))
        out["upgrade 1"] = self.step("upgrade to v2, 1 replica", lambda: self.upgrade(instance_id, ["web1"], "v2"))
        out["member add"] = self.step("member add on web2", lambda: self.member_add(
            instance_id, "web1", "web2", "pool-2", "v2"))
        out["upgrade 2"] = self.step("upgrade to v3, 2 replicas", lambda: self.upgrade(
            instance_id, ["web1", "web2"], "v3"))
        self.step("decommission", lambda: self.decommission(instance_id, HOSTS))
        return out

    def cold(self, n: int) -> dict:
        if self.images_on("web1"):
            raise BenchError(f"web1 should hold no image before the cold deploy: {self.images_on('web1')}")
        instance_id = self.create(f"bench-{n}-cold", "v1", "pool-1")
        out = {"deploy cold": self.step("deploy v1, cold pull", lambda: self.deploy(instance_id, "web1", "v1"))}
        self.step("decommission", lambda: self.decommission(instance_id, ["web1"]))
        return out


# -- the report ------------------------------------------------------------------------------------------


def spread(values: list[float | None], unit: str = "s") -> str:
    values = [v for v in values if v is not None]
    if not values:
        return "-"
    if len(values) == 1:
        return f"{values[0]:.2f} {unit}"
    return f"{statistics.median(values):.2f} {unit} ({min(values):.2f}-{max(values):.2f})"


def report(rounds: list[dict]) -> list[str]:
    def col(part: str, *keys: str) -> list:
        values = []
        for r in rounds:
            value = r[part]
            for k in keys:
                value = value[k]
            values.append(value)
        return values

    rows: list[tuple[str, list]] = []
    for part, label in (("deploy warm", "deploy, image already on the host"), ("deploy cold", "deploy, cold pull")):
        rows.append((f"**{label}**: accept -> instance running", col(part, "accept -> running")))
        for key in ("accept -> playbook start", "playbook start -> probe healthy", "probe healthy -> running"):
            rows.append((f"- {key}", col(part, key)))
        rows.append(("- the pull-and-start task (in the playbook)", col(part, "pull task")))
        rows.append(("- accept -> first answer seen by the bench", col(part, "accept -> first answer (bench)")))
    up1, add, up2 = "upgrade 1", "member add", "upgrade 2"
    rows += [
        ("**upgrade, 1 replica**: failure seconds on web1", col(up1, "web1", "failed_s")),
        ("- longest outage", col(up1, "web1", "longest_s")),
        ("- the operation, accept -> succeeded", col(up1, "operation")),
        ("**member add** (web2): failure seconds on web1", col(add, "web1", "failed_s")),
        ("- accept -> new member active", col(add, "accept -> member active")),
        ("- accept -> playbook start", col(add, "accept -> playbook start")),
        ("- playbook start -> probe healthy (web2)", col(add, "playbook start -> probe healthy")),
        ("- accept -> web2's first answer seen by the bench", col(add, "accept -> first answer (bench)")),
        ("**upgrade, 2 replicas rolling**: failure seconds, a client of web1", col(up2, "web1", "failed_s")),
        ("- a client of web2", col(up2, "web2", "failed_s")),
        ("- a client of either replica", col(up2, "any", "failed_s")),
        ("- the operation, accept -> succeeded", col(up2, "operation")),
    ]
    lines = [f"| measure | median (min-max), {len(rounds)} round{'s' if len(rounds) > 1 else ''} |", "|---|---|"]
    lines += [f"| {label} | {spread(values)} |" for label, values in rows]
    restarted = sum(1 for r in rounds if r[add]["restarted"])
    lines.append(f"| - web1's container restarted by the member add | {restarted} of {len(rounds)} |")
    lines += ["", "| deploy task (check-mode pass + real run) | image on the host, median s | cold pull | "
              "cold - on the host |", "|---|---|---|---|"]
    medians = {}
    for part in ("deploy warm", "deploy cold"):
        names = {name for r in rounds for name in r[part]["tasks"]}
        medians[part] = {n: statistics.median(r[part]["tasks"].get(n, 0.0) for r in rounds) for n in names}
    names = set(medians["deploy warm"]) | set(medians["deploy cold"])
    diffs = sorted(names, key=lambda n: -abs(medians["deploy cold"].get(n, 0.0) - medians["deploy warm"].get(n, 0.0)))
    for name in diffs[:TASK_ROWS]:
        warm, cold = medians["deploy warm"].get(name, 0.0), medians["deploy cold"].get(name, 0.0)
        lines.append(f"| {name} | {warm:.2f} | {cold:.2f} | {cold - warm:+.2f} |")
    total = {p: sum(m.values()) for p, m in medians.items()}
    lines.append(f"| all {len(names)} tasks | {total['deploy warm']:.2f} | {total['deploy cold']:.2f} | "
                 f"{total['deploy cold'] - total['deploy warm']:+.2f} |")
    return lines


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--quick", action="store_true", help="one round")
    parser.add_argument("--json", type=Path, help="write every figure here")
    parser.add_argument("--max-minutes", type=float,
                        help="start no round that would end past this many minutes from the start (at the "
                             "length of the last round); the report says how many ran")
    args = parser.parse_args()
    rounds_wanted = 1 if args.quick else args.rounds
    logging.getLogger("httpx").setLevel(logging.WARNING)
    tag = secrets.token_hex(2)
    keep = Path(tempfile.mkdtemp(prefix="gpuaas-bench-oci-"))
    log_file = open(keep / "bench.log", "w")  # noqa: SIM115 (closed at the end)

    def log(line: str) -> None:
        stamped = f"{time.strftime('%H:%M:%S')} {line}"
        print(stamped, flush=True)
        log_file.write(stamped + "\n")
        log_file.flush()

    demo = Demo(prefix=f"boci{tag}", say=lambda line: log_file.write(line + "\n"))
    bench = Bench(demo, log)
    rounds: list[dict] = []
    failed = True
    bench_started = time.monotonic()
    try:
        log(f"load average at start {load()}")
        bench.step("service, worker, registry", lambda: demo.start_service(registry=True))
        demo.setup_tenancy()
        bench.step("hosts web1, web2 and signed images v1-v3", lambda: demo.prepare_oci(HOSTS, signed=IMAGES))
        demo.register_oci_hosts("pool-1", ["web1"])
        demo.register_oci_hosts("pool-2", ["web2"])
        for image in IMAGES:
            bench.versions[image] = bench.step(f"register {image}", lambda image=image: demo.register_oci_app(image))
        for n in range(rounds_wanted):
            round_started = time.monotonic()
            result: dict = {"load_before": load()}
            for part in (("warm", "cold") if n % 2 == 0 else ("cold", "warm")):
                log(f"round {n + 1}: {part}")
                result |= getattr(bench, part)(n)
            result["load_after"] = load()
            rounds.append(result)
            log(f"round {n + 1}: {json.dumps(result, default=str)}")
            took = time.monotonic() - round_started
            if (args.max_minutes and n + 1 < rounds_wanted
                    and time.monotonic() - bench_started + took > args.max_minutes * 60):
                log(f"stopping after {n + 1} of {rounds_wanted} rounds: one more ({took / 60:.1f} min) would end "
                    f"past {args.max_minutes:g} min")
                break
        failed = False
    finally:
        demo.close()
        deadline = time.monotonic() + 60
        while (demo.state_dir / "postgres" / "pgdata" / "postmaster.pid").exists() and time.monotonic() < deadline:
            time.sleep(0.5)
        if failed:
            for name in ("serve.log", "worker.log"):
                if (demo.state_dir / name).exists():
                    shutil.copy2(demo.state_dir / name, keep / name)
        shutil.rmtree(demo.state_dir, ignore_errors=True)
        log_file.close()
        if failed:
            print(f"bench failed: its log, the service's and the worker's are in {keep}", file=sys.stderr)
        else:
            shutil.rmtree(keep, ignore_errors=True)
    print(f"{len(rounds)} round(s), {(time.monotonic() - bench_started) / 60:.1f} min in all")
    table = report(rounds)
    print("\n" + "\n".join(table))
    print("\n| step | s | load average before | after |\n|---|---|---|---|")
    for s in bench.steps:
        print(f"| {s['step']} | {s['seconds']} | {s['load_before']} | {s['load_after']} |")
    if args.json:
        args.json.write_text(json.dumps({"rounds": rounds, "steps": bench.steps}, indent=2, default=str))
    return 0


if __name__ == "__main__":
    sys.exit(main())
