"""OCI workloads at the speed of the machine: our playbooks next to the containers.podman way and the raw-SSH
floor, on identical fresh test hosts.

    .venv/bin/python bench/bench_oci_speed.py [--rounds 3] [--quick] [--json PATH] [--api]

Once per bench: a registry test host (gpuaas_api.testregistry), the test images v1 and v2 pushed and signed
with one sigstore key. Each round runs three contenders one after the other (their order reversed every
other round, so that a busier stretch of the machine falls on each), each on three fresh Debian 13 podman
test hosts (r1, r2, r3; torn down after the contender's steps):

  deploy      v1 on r1 and r2, until every replica answers (the tool's own readiness wait)
  no-change   the same again
  upgrade     v1 -> v2 on r1 and r2, rolling (one at a time)
  member add  v2 on r3 (fresh); r1's and r2's containers must keep their StartedAt

Contenders (every one requires the sigstore signature; the same image by digest, probe and interval):
  ours       ansible-playbook gpuaas.apps.oci_deploy (twice), oci_upgrade, oci_member_add -e oci_members=r3,
             with the inventory shape of tests/integration/test_oci_lifecycle.py (host network, no cgroups,
             the HTTP probe on :8080/version.txt)
  podman     bench/oci_podman_reference/: containers.podman 1.18 written the standard way (copy of the trust
             files, podman_image by digest, podman_container state quadlet, systemd_service, uri until
             retries; facts gathered, the default); upgrade.yml with serial: 1; member add = deploy.yml
             --limit r3
  floor      bench/oci_floor.py: one `ssh host bash -s` per host and step
Both Ansible contenders run with forks 10 and pipelining on, and the callback gpuaas.apps.task_timing:
the report counts module runs per host (bench_slurm_speed.host_runs) and the changed tasks (the recap).
During each upgrade a thread GETs /version.txt on both replicas every 100 ms (bench_oci.Poller) and the
report gives the seconds with both replicas down and with each down. After every step the bench checks that
each replica answers the expected version and runs the expected digest.

It prints the three contenders side by side (median and min-max over the rounds), the ratios ours/podman
and ours/floor, module runs per host per step, the issue's targets met or not, and where the time of our
playbooks goes (play wall times and the longest tasks, from the median round). --json writes every figure
with each run's profile. --quick is one round.

--api (after the rest) adds the issue's last target: through the API (gpuaas_api.demo.Demo, as
bench/bench_oci.py), accept (the operation's created_at) -> `apps.instance.running` of a fresh 2-replica
instance, next to the same playbook (oci_deploy) by hand on two equivalent fresh hosts; <= 1.2x.

Every test host and the registry are removed at the end, also on failure or SIGTERM.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import secrets
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
# This checkout's harness and test hosts, also when the bench runs from another worktree.
sys.path[:0] = [str(ROOT), str(ROOT / "api"), str(ROOT / "bench")]

from bench_oci import Poller  # noqa: E402
from bench_slurm_speed import CALLBACK, host_runs, top_tasks  # noqa: E402
from gpuaas_api import testhosts  # noqa: E402
from gpuaas_api import testregistry as tr  # noqa: E402
from oci_floor import Floor  # noqa: E402

from tests.integration.slurm_harness import ANSIBLE_PLAYBOOK, ansible_env  # noqa: E402

REPO = "apps/web"
PORT = 8080
PROBE_PATH = "/version.txt"
INTERVAL = 0.2  # every contender's readiness poll, seconds
FORKS = 10
REFERENCE = ROOT / "bench" / "oci_podman_reference"
CONTENDERS = ("ours", "podman", "floor")
STEPS = ("deploy", "no-change", "upgrade", "member add")
CONTAINER = {"ours": "gpuaas-oci-workload", "podman": "web", "floor": "web"}
TARGETS = {"deploy": 3.0, "no-change": 2.0, "upgrade": 3.0, "member add": 2.5}
DEPLOY_VS_PODMAN = 0.4
API_RATIO = 1.2
RECAP = re.compile(r"^(\S+)\s+: ok=(\d+)\s+changed=(\d+)\s+unreachable=(\d+)\s+failed=(\d+)", re.M)
HOST_VARS = {
    "ansible_user": "root",
    "ansible_ssh_common_args": "-o StrictHostKeyChecking=no -o UserKnownHostsFile=/dev/null",
    "ansible_python_interpreter": "/usr/bin/python3",
}


class BenchError(RuntimeError):
    pass


def load() -> float:
    return round(os.getloadavg()[0], 2)


class World:
    """The registry, the signed images and the key: made once per bench."""

    def __init__(self, prefix: str):
        self.prefix = prefix
        testhosts.build("registry")
        testhosts.build("oci-trixie")
        testhosts.ensure_ssh_key()
        testhosts.ensure_network()
        self.registry = tr.Registry.start(prefix)
        self.key = tr.SigningKey.generate()
        self.images = {v: tr.push(self.registry, REPO, v, tr.build_image(v), sign_with=self.key) for v in ("v1", "v2")}


class Hosts:
    """Three fresh test hosts for one contender's steps, and what the bench reads on them."""

    def __init__(self, prefix: str, names: tuple[str, ...] | list[str] = ("r1", "r2", "r3")):
        self.prefix = prefix
        self.hosts = {h["name"]: h for h in testhosts.up(prefix, list(names), "oci-trixie")}

    def down(self) -> None:
        testhosts.down(self.prefix)

    def sh(self, host: str, command: str) -> str:
        proc = subprocess.run(["podman", "exec", self.hosts[host]["container"], "bash", "-c", command],
                              capture_output=True, text=True, timeout=120, check=False)
        if proc.returncode != 0:
            raise BenchError(f"{host}: `{command}` failed ({proc.returncode}): {proc.stdout}{proc.stderr}")
        return proc.stdout.strip()

    def inspect(self, host: str, container: str) -> dict:
        return json.loads(self.sh(host, f"podman container inspect {container}"))[0]

    def version(self, host: str) -> str:
        url = f"http://{self.hosts[host]['address']}:{PORT}{PROBE_PATH}"
        with urllib.request.urlopen(url, timeout=3) as response:  # noqa: S310 - a test host of this run
            return response.read().decode().strip()

    def verify(self, names: list[str], container: str, image: str, version: str) -> None:
        """Every replica answers `version` and its container runs the image's digest."""
        for host in names:
            answer = self.version(host)
            digest = self.inspect(host, container)["ImageDigest"]
            if answer != version or digest != image.split("@")[1]:
                raise BenchError(f"{host} answers {answer!r} and runs {digest}, not {version} ({image})")

    def started_at(self, names: list[str], container: str) -> dict[str, str]:
        return {h: self.inspect(h, container)["State"]["StartedAt"] for h in names}

    def addresses(self, names: list[str]) -> dict[str, str]:
        return {h: self.hosts[h]["address"] for h in names}


# -- running Ansible -----------------------------------------------------------------------------------------


class Ansible:
    """ansible-playbook runs, timed, with the task_timing profile and the recap's changed counts."""

    def __init__(self, workdir: Path):
        self.workdir, self.count = workdir, 0

    def run(self, label: str, inventory: Path, playbook: str, *args: str, **extra) -> dict:
        self.count += 1
        profile = self.workdir / f"profile-{self.count}.json"
        cmd = [ANSIBLE_PLAYBOOK, "-i", str(inventory), "--forks", str(FORKS), playbook, *args]
        for key, value in extra.items():
            cmd += ["-e", json.dumps({key: value})]
        env = ansible_env() | {"ANSIBLE_PIPELINING": "True", "ANSIBLE_CALLBACKS_ENABLED": CALLBACK,
                               "GPUAAS_TASK_TIMING_PATH": str(profile),
                               "PATH": f"{Path(ANSIBLE_PLAYBOOK).parent}:{os.environ.get('PATH', '')}"}
        started = time.monotonic()
        proc = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=600, check=False)
        seconds = time.monotonic() - started
        output = proc.stdout + proc.stderr
        (self.workdir / f"run-{self.count}-{label.replace(' ', '-')}.log").write_text(output)
        if proc.returncode != 0:
            raise BenchError(f"{label}: {playbook} failed (rc {proc.returncode}):\n{output[-4000:]}")
        recap = {m[1]: int(m[3]) for m in RECAP.finditer(output)}
        data = json.loads(profile.read_text()) if profile.exists() else None
        return {"seconds": round(seconds, 3), "changed": sum(recap.values()), "changed_per_host": recap,
                "runs": {h: r["runs"] for h, r in host_runs(data).items()} if data else {}, "profile": data}


def inventory(workdir: Path, hosts: Hosts, names: list[str], group: str, extra: dict) -> Path:
    key_file = next(iter(hosts.hosts.values()))["ssh_private_key_file"]
    members = {n: {"ansible_host": hosts.hosts[n]["address"]} for n in names}
    data = {"all": {"vars": HOST_VARS | {"ansible_ssh_private_key_file": key_file} | extra,
                    "children": {group: {"hosts": members}}}}
    path = workdir / f"{group}-{'-'.join(names)}.yml"
    path.write_text(json.dumps(data, indent=1))
    return path


def ours_vars(world: World) -> dict:
    """tests/integration/test_oci_lifecycle.py's inventory (HOST_VARS, the trust key, the insecure registry)."""
    return {
        "oci_workload_cgroups": False,
        "oci_workload_network": "host",
        "oci_workload_probe": {"type": "http", "port": PORT, "path": PROBE_PATH, "interval": INTERVAL,
                               "deadline": 60},
        "oci_workload_stop_timeout": 2,
        "gpuaas_apt_cache_valid_time": 31536000,
        "oci_trust_public_key": world.key.public_pem.decode(),
        "oci_trust_insecure_registries": [world.registry.address],
    }


def podman_vars(world: World) -> dict:
    return {"trust_public_key": world.key.public_pem.decode(), "insecure_registry": world.registry.address,
            "probe_port": PORT, "probe_path": PROBE_PATH, "probe_interval": INTERVAL, "probe_retries": 300}


# -- one contender's steps -------------------------------------------------------------------------------------


def timed(step) -> dict:
    started = time.monotonic()
    step()
    return {"seconds": round(time.monotonic() - started, 3)}


def run_steps(kind: str, world: World, workdir: Path, prefix: str) -> dict[str, dict]:
    v1, v2 = world.images["v1"], world.images["v2"]
    pair = ["r1", "r2"]
    hosts = Hosts(prefix)
    try:
        ansible = Ansible(workdir)
        if kind == "ours":
            inv2 = inventory(workdir, hosts, pair, "oci_replicas", ours_vars(world))
            inv3 = inventory(workdir, hosts, [*pair, "r3"], "oci_replicas", ours_vars(world))
            steps = {
                "deploy": lambda: ansible.run("deploy", inv2, "gpuaas.apps.oci_deploy", oci_workload_image=v1),
                "no-change": lambda: ansible.run("no-change", inv2, "gpuaas.apps.oci_deploy", oci_workload_image=v1),
                "upgrade": lambda: ansible.run("upgrade", inv2, "gpuaas.apps.oci_upgrade", oci_workload_image=v2),
                "member add": lambda: ansible.run("member add", inv3, "gpuaas.apps.oci_member_add",
                                                  oci_workload_image=v2, oci_members="r3"),
            }
        elif kind == "podman":
            inv3 = inventory(workdir, hosts, [*pair, "r3"], "web", podman_vars(world))
            inv2 = inventory(workdir, hosts, pair, "web", podman_vars(world))
            deploy, upgrade = str(REFERENCE / "deploy.yml"), str(REFERENCE / "upgrade.yml")
            steps = {
                "deploy": lambda: ansible.run("deploy", inv2, deploy, image=v1),
                "no-change": lambda: ansible.run("no-change", inv2, deploy, image=v1),
                "upgrade": lambda: ansible.run("upgrade", inv2, upgrade, image=v2),
                "member add": lambda: ansible.run("member add", inv3, deploy, "--limit", "r3", image=v2),
            }
        else:
            floor = Floor(world.registry.address, world.key.public_pem, PORT, PROBE_PATH, INTERVAL)
            h = hosts.hosts
            steps = {
                "deploy": lambda: timed(lambda: floor.deploy([h["r1"], h["r2"]], v1)),
                "no-change": lambda: timed(lambda: floor.again([h["r1"], h["r2"]], v1)),
                "upgrade": lambda: timed(lambda: floor.upgrade([h["r1"], h["r2"]], v2)),
                "member add": lambda: timed(lambda: floor.add(h["r3"], v2)),
            }
        container = CONTAINER[kind]
        figures: dict[str, dict] = {}

        def step(name: str, work) -> dict:
            before = load()
            result = work()
            result |= {"load_before": before, "load_after": load()}
            figures[name] = result
            extra = f", changed {result['changed']}" if "changed" in result else ""
            print(f"  {kind:<6} {name:<10} {result['seconds']:6.2f} s{extra}", flush=True)
            return result

        step("deploy", steps["deploy"])
        hosts.verify(pair, container, v1, "v1")
        started = hosts.started_at(pair, container)
        step("no-change", steps["no-change"])
        if hosts.started_at(pair, container) != started:
            raise BenchError(f"{kind}: the no-change run restarted a replica")
        with Poller(hosts.addresses(pair)) as poller:
            poller.wait_answering(pair)
            since = time.time()
            result = step("upgrade", steps["upgrade"])
            time.sleep(0.5)
            until = time.time()
        result["both down"] = poller.outage(pair, since, until)
        for host in pair:
            result[f"{host} down"] = poller.outage([host], since, until)
        hosts.verify(pair, container, v2, "v2")
        started = hosts.started_at(pair, container)
        result = step("member add", steps["member add"])
        hosts.verify(["r3"], container, v2, "v2")
        result["restarted"] = sorted(h for h, t in hosts.started_at(pair, container).items() if t != started[h])
        return figures
    finally:
        hosts.down()


def one_round(index: int, world: World, workdir: Path) -> dict:
    order = list(CONTENDERS) if index % 2 == 0 else list(reversed(CONTENDERS))
    result: dict = {"order": order, "load": [load()]}
    for kind in order:
        print(f"round {index + 1}: {kind}", flush=True)
        where = workdir / f"round{index}-{kind}"
        where.mkdir()
        result[kind] = run_steps(kind, world, where, f"{world.prefix}{kind[0]}{index}")
        result["load"].append(load())
    return result


# -- the API part ----------------------------------------------------------------------------------------------


def api_part(world: World, workdir: Path, rounds_n: int) -> dict:
    """accept (the operation's created_at) -> `apps.instance.running` of a fresh 2-replica instance through the
    API (gpuaas_api.demo.Demo: `gpuaas serve`, one worker, the registry taking only the service's tokens), next
    to oci_deploy by hand on two equivalent fresh hosts (the same instance parameters: the demo's probe
    interval of 0.5 s; this bench's registry, anonymous). Rounds alternate which of the two goes first."""
    from bench_oci import ts
    from gpuaas_api.demo import OCI_SITE_REGISTRIES_CONF, OCI_TEST_HOST_PARAMETERS, Demo

    # The service and worker run as subprocesses: let them import this checkout's gpuaas_api too.
    os.environ["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT / "api"), os.environ.get("PYTHONPATH")]))
    demo = Demo(prefix=f"{world.prefix}api", say=lambda line: None)
    figures: list[dict] = []
    try:
        demo.start_service(registry=True)
        demo.setup_tenancy()
        demo.prepare_oci([], signed=("v1",))
        version = demo.register_oci_app("v1")
        for n in range(rounds_n):
            names = [f"a{n}x", f"a{n}y"]

            def through_api(names=names, n=n) -> float:
                for host in testhosts.up(demo.prefix, names, "oci-trixie"):
                    demo.hosts[host["name"]] = host
                    conf = demo.registry.registries_conf()
                    demo.host_sh(host["name"], f"cat > {OCI_SITE_REGISTRIES_CONF} <<'EOF'\n{conf}EOF")
                demo.register_oci_hosts(f"pool-{n}", names)
                instance = demo.sa.post(f"/v1/projects/{demo.ids['project']}/instances", {
                    "name": f"speed-{n}", "app_slug": "oci-service", "version": version["version"],
                    "allocation_ids": [demo.ids[f"pool-{n}"]], "topology": [{"role": "replica", "count": 2}],
                    "parameters": OCI_TEST_HOST_PARAMETERS})
                op = demo.sa.post(f"/v1/instances/{instance['id']}/deploy", {},
                                  headers={"Idempotency-Key": secrets.token_hex(8)})
                deadline = time.monotonic() + 600
                while op["status"] not in ("succeeded", "failed", "canceled"):
                    if time.monotonic() > deadline:
                        raise BenchError("the API deploy did not finish in 600 s")
                    time.sleep(0.2)
                    op = demo.sa.get(f"/v1/operations/{op['id']}")
                if op["status"] != "succeeded":
                    raise BenchError(f"the API deploy ended {op['status']}: {op.get('error')}")
                (running,) = demo.timeline(instance["id"], type="apps.instance.running",
                                           correlation_id=op["correlation_id"])
                testhosts.remove_containers([demo.hosts.pop(h)["container"] for h in names])
                return ts(running["occurred_at"]) - ts(op["created_at"])

            def by_hand(n=n) -> float:
                where = workdir / f"api-hand-{n}"
                where.mkdir()
                hosts = Hosts(f"{world.prefix}h{n}", ["r1", "r2"])
                try:
                    inv = inventory(where, hosts, ["r1", "r2"], "oci_replicas",
                                    ours_vars(world) | OCI_TEST_HOST_PARAMETERS)
                    return Ansible(where).run("deploy by hand", inv, "gpuaas.apps.oci_deploy",
                                              oci_workload_image=world.images["v1"])["seconds"]
                finally:
                    hosts.down()

            order = [("api", through_api), ("by hand", by_hand)]
            result: dict = {"load": load()}
            for label, work in order if n % 2 == 0 else reversed(order):
                result[label] = round(work(), 3)
            figures.append(result)
            print(f"  api round {n + 1}: accept -> running {result['api']:.2f} s; oci_deploy by hand "
                  f"{result['by hand']:.2f} s", flush=True)
    finally:
        demo.close()
        deadline = time.monotonic() + 60
        while (demo.state_dir / "postgres" / "pgdata" / "postmaster.pid").exists() and time.monotonic() < deadline:
            time.sleep(0.5)
        shutil.rmtree(demo.state_dir, ignore_errors=True)
    return {"rounds": figures}


# -- the report ------------------------------------------------------------------------------------------------


def spread(values: list[float]) -> dict:
    return {"median": round(statistics.median(values), 3), "min": round(min(values), 3),
            "max": round(max(values), 3), "values": [round(v, 3) for v in values]}


def summarize(rounds: list[dict]) -> dict:
    return {kind: {step: spread([r[kind][step]["seconds"] for r in rounds]) for step in STEPS}
            for kind in CONTENDERS}


def ratio(rounds: list[dict], step: str, den: str) -> dict:
    pairs = [(r["ours"][step]["seconds"], r[den][step]["seconds"]) for r in rounds]
    per_round = [a / b for a, b in pairs]
    median = statistics.median(a for a, _ in pairs) / statistics.median(b for _, b in pairs)
    return {"ratio": round(median, 2), "min": round(min(per_round), 2), "max": round(max(per_round), 2)}


def median_round(rounds: list[dict], kind: str, step: str) -> dict:
    ranked = sorted(rounds, key=lambda r: r[kind][step]["seconds"])
    return ranked[(len(ranked) - 1) // 2][kind][step]


def targets(rounds: list[dict], summary: dict) -> list[dict]:
    ours = summary["ours"]
    rows = []

    def row(name: str, target: str, shown: str, met: bool) -> None:
        rows.append({"measure": name, "target": target, "value": shown, "met": met})

    for step, limit in TARGETS.items():
        seconds = ours[step]["median"]
        row(f"{step}", f"<= {limit} s", f"{seconds:.2f} s", seconds <= limit)
    r = ratio(rounds, "deploy", "podman")
    row("deploy vs containers.podman", f"<= {DEPLOY_VS_PODMAN}x", fmt_ratio(r), r["ratio"] <= DEPLOY_VS_PODMAN)
    changed = [r["ours"]["no-change"]["changed"] for r in rounds]
    row("no-change changed tasks", "0 each round", str(changed), not any(changed))
    both = [r["ours"]["upgrade"]["both down"]["failed_s"] for r in rounds]
    row("upgrade: seconds with both replicas down", "0 s", str(both), not any(both))
    restarted = [r["ours"]["member add"]["restarted"] for r in rounds]
    row("member add: existing replicas restarted", "none", str(restarted), not any(restarted))
    return rows


def fmt(s: dict) -> str:
    return f"{s['median']:.2f} ({s['min']:.2f}-{s['max']:.2f})"


def fmt_ratio(r: dict) -> str:
    """The ratio of the medians, and the range of the per-round ratios."""
    return f"{r['ratio']:.2f}x ({r['min']:.2f}-{r['max']:.2f})"


def runs_text(figure: dict) -> str:
    runs = figure.get("runs")
    return ", ".join(f"{h} {n}" for h, n in sorted(runs.items())) if runs else "-"


def report(rounds: list[dict], summary: dict, rows: list[dict], api: dict | None) -> list[str]:
    n = len(rounds)
    lines = [f"Seconds, median (min-max) over {n} round{'s' if n > 1 else ''}; probe interval {INTERVAL} s", "",
             "| measure | ours | containers.podman | floor | ours / podman | ours / floor |",
             "|---|---|---|---|---|---|"]
    for step in STEPS:
        rp, rf = ratio(rounds, step, "podman"), ratio(rounds, step, "floor")
        lines.append(f"| {step} | {fmt(summary['ours'][step])} | {fmt(summary['podman'][step])} | "
                     f"{fmt(summary['floor'][step])} | {fmt_ratio(rp)} | {fmt_ratio(rf)} |")
    for what in ("both down", "r1 down", "r2 down"):
        cells = [fmt(spread([r[k]["upgrade"][what]["failed_s"] for r in rounds])) for k in CONTENDERS]
        lines.append(f"| upgrade: s with {what.replace(' down', '') if what != 'both down' else 'both'} down | "
                     + " | ".join(cells) + " | | |")
    cells = [str(sum(1 for r in rounds if r[k]["member add"]["restarted"])) + f" of {n}" for k in CONTENDERS]
    lines.append("| member add: rounds with an existing replica restarted | " + " | ".join(cells) + " | | |")
    cells = [str([r[k]["no-change"].get("changed", "-") for r in rounds]) for k in ("ours", "podman")]
    lines.append(f"| no-change: changed tasks per round | {cells[0]} | {cells[1]} | (checks only) | | |")

    lines += ["", "Module runs per host (tasks that ran on the host, not skipped; median round). The floor: one ssh "
              "per host and step.", "", "| step | ours | containers.podman |", "|---|---|---|"]
    for step in STEPS:
        lines.append(f"| {step} | {runs_text(median_round(rounds, 'ours', step))} | "
                     f"{runs_text(median_round(rounds, 'podman', step))} |")

    lines += ["", "Targets (ours)", "", "| measure | value | target | |", "|---|---|---|---|"]
    lines += [f"| {r['measure']} | {r['value']} | {r['target']} | {'met' if r['met'] else 'NOT MET'} |" for r in rows]
    if api:
        values = api["rounds"]
        a = spread([v["api"] for v in values])
        h = spread([v["by hand"] for v in values])
        r = a["median"] / h["median"]
        per_round = [v["api"] / v["by hand"] for v in values]
        lines += ["", "| through the API (probe interval 0.5 s, the demo's) | seconds |", "|---|---|",
                  f"| accept -> apps.instance.running (2 replicas) | {fmt(a)} |",
                  f"| oci_deploy by hand, 2 fresh hosts | {fmt(h)} |",
                  f"| ratio | {r:.2f}x ({min(per_round):.2f}-{max(per_round):.2f}; target <= {API_RATIO}x: "
                  f"{'met' if r <= API_RATIO else 'NOT MET'}) |"]

    for kind in ("ours", "podman"):
        for step in STEPS:
            profile = median_round(rounds, kind, step).get("profile")
            if not profile:
                continue
            lines += ["", f"Profile of {kind} {step} (median round, {profile['seconds']:.1f} s in the playbook)",
                      "  play wall times (tasks in the play, skipped ones included):"]
            for play in profile["plays"]:
                count = len({t["task"] for t in profile["tasks"] if t["play"] == play["name"]})
                lines.append(f"    {play.get('seconds', 0.0):6.2f}  {play['name']} ({count})")
            lines.append("  top tasks by longest time on one host:")
            for t in top_tasks(profile, 8):
                hosts = f"{t['hosts']} host{'s' if t['hosts'] > 1 else ''}"
                lines.append(f"    {t['seconds']:6.2f}  {t['host']:<9} ({hosts})  {t['play']} : {t['task']}")
    load_values = [x for r in rounds for x in r["load"]]
    lines.append(f"\nLoad average (1 min) during the run: {min(load_values):.1f}-{max(load_values):.1f}")
    return lines


def commit() -> str:
    out = subprocess.run(["git", "-C", str(ROOT), "rev-parse", "--short", "HEAD"], capture_output=True, text=True,
                         check=False)
    return out.stdout.strip()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--quick", action="store_true", help="one round")
    parser.add_argument("--json", type=Path, help="write every figure (and each run's profile) here")
    parser.add_argument("--api", action="store_true", help="also: accept -> running through the API vs by hand")
    parser.add_argument("--from-json", type=Path, help="print the report of a run saved with --json; run nothing")
    args = parser.parse_args()
    if args.from_json:
        saved = json.loads(args.from_json.read_text())
        print(f"commit {saved['commit']}, started {saved['started']}, {saved['minutes']} min")
        print("\n".join(report(saved["rounds"], saved["summary"], saved["targets"], saved["api"])))
        return 0
    rounds_n = 1 if args.quick else args.rounds
    # Hosts are removed in `finally`: make a TERM from outside unwind like Ctrl-C.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))

    started = time.time()
    prefix = "ospd" + secrets.token_hex(2)
    rounds: list[dict] = []
    api = None
    world = None
    print(f"load average at start {os.getloadavg()}", flush=True)
    try:
        with tempfile.TemporaryDirectory(prefix="gpuaas-bench-oci-speed-") as tmp:
            world = World(prefix)
            for i in range(rounds_n):
                rounds.append(one_round(i, world, Path(tmp)))
            if args.api:
                api = api_part(world, Path(tmp), rounds_n)
    finally:
        if world is not None:
            world.registry.stop()
        # The registry and any host a failure left: every prefix of this bench starts with its own.
        left = [h["container"] for h in testhosts.running(None) if h["prefix"].startswith(prefix)]
        if left:
            testhosts.remove_containers(left)
    summary = summarize(rounds)
    rows = targets(rounds, summary)
    print("\n" + "\n".join(report(rounds, summary, rows, api)))
    if args.json:
        args.json.write_text(json.dumps({
            "commit": commit(), "started": time.strftime("%Y-%m-%dT%H:%M:%S", time.localtime(started)),
            "minutes": round((time.time() - started) / 60, 1), "probe_interval": INTERVAL, "summary": summary,
            "targets": rows, "rounds": rounds, "api": api,
        }, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
