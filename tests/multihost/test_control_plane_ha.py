"""The control plane on several machines (issue 28): two `gpuaas serve` replicas and two `gpuaas worker` hosts,
nothing shared but one PostgreSQL with a synchronous streaming standby (docs/dev/multihost.md).

One world for the module; its steps run in order, each on what the ones before left:
lifecycle operations accepted by either replica and run by either worker, one event stream across replicas,
registry tokens, a serve replica killed, a worker host cut off from the network mid-run, the primary database
killed and the standby promoted; then the end: every operation truthfully final, no two runs of one operation at
once, attempts matching the runs, no event lost, nothing left running.

The test app (tests/apps/opsapp) records "start <step> ... <time>" and "end <step> <time>" in its instance's
marker directory, a directory of this machine mounted into both worker hosts: the test's view of every run."""

from __future__ import annotations

import base64
import contextlib
import datetime as dt
import subprocess
import time
import uuid
from dataclasses import dataclass
from pathlib import Path

import httpx
import jwt
import psycopg
from cryptography import x509
from cryptography.hazmat.primitives import serialization
from psycopg.rows import dict_row

from .cluster import LEASE_SECONDS, RUN_SECONDS, EventFollower, secret, wait_for
from .conftest import Op

# How long the service may take to write and to run operations again after the standby's promotion.
FAILOVER_SECONDS = 30


# -- what the marker logs say ---------------------------------------------------------------------------------

@dataclass
class Run:
    step: str
    start: float
    end: float | None = None


def marker_runs(marker: Path) -> tuple[list[Run], list[str]]:
    """The runs of one instance's playbooks in the order they wrote their lines, and the lines that show two runs
    at once: an `end` must close the run that started just before it (operations of one instance run one at a
    time, attempts of one operation too)."""
    runs, overlaps = [], []
    log = marker / "log"
    for line in (log.read_text().splitlines() if log.exists() else []):
        word, step, *_, stamp = line.split()
        if word == "start":
            runs.append(Run(step, float(stamp)))
        elif runs and runs[-1].step == step and runs[-1].end is None:
            runs[-1].end = float(stamp)
        else:
            overlaps.append(f"{marker.name}: {line!r} ends no run that started just before it")
    stamps = [t for r in runs for t in (r.start, r.end) if t is not None]
    if stamps != sorted(stamps):
        overlaps.append(f"{marker.name}: its lines are not in time order: {stamps}")
    return runs, overlaps


def runs_of(mh, op: Op) -> list[Run]:
    """The operation's runs: its instance's operations run in the order accepted, and each one's attempts are the
    consecutive runs of its step (no instance here runs one step twice in a row)."""
    runs, _ = marker_runs(mh.marker(op.instance))
    for other in (o for o in mh.ops if o.instance == op.instance):
        mine = []
        while runs and runs[0].step == other.kind:
            mine.append(runs.pop(0))
        if other is op:
            return mine
    return []


@contextlib.contextmanager
def slow(mh, instance: str):
    """Runs of the instance's playbook wait while this lasts (the test app sleeps while `slow` exists)."""
    flag = mh.marker(instance) / "slow"
    flag.touch()
    try:
        yield
    finally:
        flag.unlink(missing_ok=True)


def wait_started(mh, op: Op, attempts: int = 1, timeout: float = RUN_SECONDS) -> Run:
    return wait_for(lambda: len(runs_of(mh, op)) >= attempts and runs_of(mh, op)[attempts - 1], timeout,
                    f"run {attempts} of {op.instance} {op.kind} to start")


def worker_of(start: dict) -> str:
    return start["worker"].split("/")[0]  # "w1/0": the worker's name, then its slot


def issue_pull_credential(mh) -> dict:
    """A pull credential for one repository, issued as a worker issues one for a run (registry/credentials.py)."""
    from gpuaas_api.instances import service as instances
    from gpuaas_api.registry import credentials

    op = next(o for o in mh.ops if o.instance == "gamma")
    with psycopg.connect(mh.cluster.database_url, row_factory=dict_row) as conn:
        instance = instances.get_instance(conn, mh.instances["gamma"]["id"])
        credential = credentials.issue(conn, instance, op.id, "registry.test:5000", "demo/web", 600)
    secret(credential["password"])
    return credential


def registry_token(url: str, credential: dict) -> str:
    response = httpx.get(f"{url}/v1/registry/token", params={"service": "gpuaas-registry",
                                                            "scope": "repository:demo/web:pull"},
                         auth=(credential["username"], credential["password"]), timeout=30)
    assert response.status_code == 200, f"{url}: registry token refused: {response.status_code} {response.text}"
    return response.json()["token"]


# -- the steps ------------------------------------------------------------------------------------------------

def test_database_is_a_primary_with_a_synchronous_standby(mh):
    c = mh.cluster
    assert c.replication() == "db2|streaming|sync", f"db1's standbys: {c.replication()!r}"
    assert c.psql("db2", "SELECT pg_is_in_recovery()") == "t", "db2 is not a standby"
    # What the service wrote through the one multi-host URL went to db1 and is on db2.
    wait_for(lambda: c.psql("db2", "SELECT count(*) FROM tenants WHERE name = 'tenant-a'") == "1", 10,
             "the service's writes to reach the standby")
    sessions = {h: int(c.psql(h, "SELECT count(*) FROM pg_stat_activity WHERE usename = 'gpuaas'")) for h in
                ("db1", "db2")}
    assert sessions["db1"] > 0 and sessions["db2"] == 0, f"the service's sessions per server: {sessions}"


def test_lifecycle_through_both_replicas_and_both_workers(mh):
    alpha = mh.instances["alpha"]
    mh.follower = EventFollower(mh.api.urls, "a", alpha["id"], mh.w.tokens["service_account"])
    mh.follower.start()
    wait_for(lambda: mh.follower.connections, 15, "alpha's event stream to open on replica a")
    assert mh.follower.connections[0][0] == "a"

    deploys = [mh.accept("alpha", "deploy", "b"), mh.accept("beta", "deploy", "a"), mh.accept("gamma", "deploy", "b")]
    done = mh.wait_final(*deploys)
    assert [o["status"] for o in done] == ["succeeded"] * 3, [(o["status"], o["error"]) for o in done]

    # The stream opened on a carries what a worker wrote about the deploy that b accepted: its start, its tasks
    # (the run's events, by its correlation id) and its end.
    deploy = mh.operation(deploys[0])
    def seen():
        events = [e for e in mh.follower.events if e["data"].get("correlation_id") == deploy["correlation_id"]]
        types = {e["type"] for e in events}
        return events if {"operation.started", "run.task_ok", "operation.succeeded"} <= types else None
    events = wait_for(seen, 15, "replica a's stream to carry the deploy accepted through replica b")
    assert {e["via"] for e in events} == {"a"}, "the events came through another replica than a"

    member_add = mh.accept("alpha", "member_add", "a", {"role": "worker", "allocation_id": alpha["allocation_id"]})
    reconfigure = mh.accept("beta", "reconfigure", "b", {"parameters": {"message": "through b"}})
    gamma = mh.accept("gamma", "reconfigure", "a", {"parameters": {"labels": {"through": "a"}}})
    done = mh.wait_final(member_add, reconfigure, gamma)
    assert [o["status"] for o in done] == ["succeeded"] * 3, [(o["status"], o["error"]) for o in done]
    assert (mh.marker("beta") / "message").read_text() == "through b"


def test_registry_tokens_of_every_replica_carry_one_certificate(mh):
    credential = issue_pull_credential(mh)
    tokens = {name: registry_token(url, credential) for name, url in mh.api.urls.items()}
    x5c = {name: jwt.get_unverified_header(token)["x5c"] for name, token in tokens.items()}
    assert x5c["a"] == x5c["b"], "replicas a and b sign registry tokens with different certificates: a registry " \
                                 "trusting one refuses the other's tokens"
    pem = mh.via("a").call("platform_admin", "GET", "/v1/registry/certificate", 200).json()["rootcertbundle"]
    certificate = x509.load_pem_x509_certificate(pem.encode())
    assert x5c["a"] == [base64.b64encode(certificate.public_bytes(serialization.Encoding.DER)).decode()]
    for name, token in tokens.items():  # and each token verifies with that certificate's key
        claims = jwt.decode(token, certificate.public_key(), algorithms=["ES256"], audience="gpuaas-registry")
        assert claims["access"] == [{"type": "repository", "name": "demo/web", "actions": ["pull"]}], (name, claims)
    mh.facts["x5c"] = x5c["a"]


def test_a_killed_serve_replica(mh):
    c, follower = mh.cluster, mh.follower
    with slow(mh, "alpha"):
        running = mh.accept("alpha", "reconfigure", "a", {"parameters": {"round": 1}})
        wait_started(mh, running)
        wait_for(lambda: any(e["type"] == "operation.started" and e["data"]["payload"]["operation_id"] == running.id
                             for e in follower.events), 15, "replica a's stream to show the run's start")
        killed = c.kill_replica("a")
        assert killed.process.returncode == -9, f"serve replica a ended with {killed.process.returncode}"
        # The stream breaks once the follower has read what a sent before it died; then it opens on b.
        wait_for(lambda: any(name == "b" for name, _ in follower.connections), 30, "the stream to resume on b")
        last_from_a = max(e["id"] for e in follower.events if e["via"] == "a")

        # The client goes on through b, without being told.
        worker_member = next(m for m in mh.w.call("service_account", "GET",
                                                  f"/v1/instances/{mh.instances['alpha']['id']}/members",
                                                  200).json()["items"] if m["role"] == "worker")
        drain = mh.accept("alpha", "member_drain", None, member=worker_member["id"])
        assert drain.via == "b", f"the drain was accepted by {drain.via}"
    done = mh.wait_final(running, drain)
    assert [o["status"] for o in done] == ["succeeded"] * 2, [(o["status"], o["error"]) for o in done]

    # The stream went on on b, from the last event a had sent.
    resumed = [last for name, last in follower.connections if name == "b"]
    assert resumed and resumed[0] == last_from_a, \
        f"the stream resumed on b after event {resumed[:1]}, a's last was {last_from_a}: {follower.connections}"
    wait_for(lambda: any(e["type"] == "operation.succeeded" and e["via"] == "b" and
                         e["data"]["payload"]["operation_id"] == running.id for e in follower.events), 15,
             "replica b's stream to show the end of the run a had accepted")

    # A new replica in place of a, on a new port with an empty state directory of its own, signs with the same key.
    replica = c.start_replica("a")
    mh.api.urls["a"] = replica.url
    follower.use("a", replica.url)
    token = registry_token(replica.url, issue_pull_credential(mh))
    assert jwt.get_unverified_header(token)["x5c"] == mh.facts.get("x5c", "no token step"), \
        "the new replica a signs registry tokens with another certificate"


def test_a_worker_cut_off_mid_run_is_fenced(mh):
    c, beta = mh.cluster, mh.instances["beta"]
    watch = None
    try:
        with slow(mh, "beta"):
            op = mh.accept("beta", "member_add", "b", {"role": "worker", "allocation_id": beta["allocation_id"]},
                           expect=("succeeded", "failed"))
            first = wait_started(mh, op)
            (start,) = wait_for(lambda: mh.starts(op), 15, "the run's operation.started event")
            cut = worker_of(start)
            other = next(h for h in ("w1", "w2") if h != cut)
            assert c.run_processes(cut), f"no ansible-playbook runs on {cut}, which claimed the operation"
            watch = run_end_watch(c, cut, op.id)
            c.cut_off(cut)
            cut_at = time.time()

            second = wait_started(mh, op, attempts=2)
            watch.wait(RUN_SECONDS)
            ended_at = float(watch.stdout.read())
            assert ended_at < second.start, \
                f"the run on {cut} ended at {ended_at:.2f}, after the next attempt started at {second.start:.2f}"
            assert ended_at - cut_at < LEASE_SECONDS, \
                f"the run on {cut} lived {ended_at - cut_at:.1f} s after its host was cut off (lease {LEASE_SECONDS} s)"
            assert c.run_processes(cut) == "", f"left on {cut}: {c.run_processes(cut)}"
            starts = mh.starts(op)
            assert [(s["attempt"], worker_of(s)) for s in starts] == [(1, cut), (2, other)], starts
            mh.facts["fenced"] = {"cut": cut, "run_ended_after_cut_s": round(ended_at - cut_at, 1),
                                  "next_attempt_after_cut_s": round(second.start - cut_at, 1),
                                  "first_run_started": first.start}
        (done,) = mh.wait_final(op)
        assert (done["status"], done["attempt"]) == ("succeeded", 2) or \
            (done["status"] == "failed" and done["error"] and done["error"]["message"]), done
    finally:
        if watch is not None and watch.poll() is None:
            watch.kill()
        with contextlib.suppress(subprocess.CalledProcessError):
            c.reconnect(mh.facts.get("fenced", {}).get("cut") or cut)


def run_end_watch(c, host: str, operation_id: str) -> subprocess.Popen:
    """Prints the time (the clock of the marker lines) at which the last process of the operation's run on the
    host is gone: ansible-playbook, its guard, and whatever they started (all carry GPUAAS_OPERATION_ID)."""
    script = (f"while grep -qsxz 'GPUAAS_OPERATION_ID={operation_id}' /proc/[0-9]*/environ "
              "|| pgrep -f '[a]nsible-playbook' >/dev/null; do sleep 0.05; done; date +%s.%N\n")
    watch = subprocess.Popen(["podman", "exec", "-i", c.hosts[host]["container"], "sh", "-s"], stdin=subprocess.PIPE,
                             stdout=subprocess.PIPE, text=True)
    watch.stdin.write(script)
    watch.stdin.close()
    return watch


def test_database_failover(mh):
    c, gamma, beta = mh.cluster, mh.instances["gamma"], mh.instances["beta"]
    with slow(mh, "gamma"):
        across = mh.accept("gamma", "member_add", "a", {"role": "worker", "allocation_id": gamma["allocation_id"]})
        wait_started(mh, across)
        queued = mh.accept("gamma", "reconfigure", "b", {"parameters": {"round": 2}})

        c.kill_primary()
        c.promote_standby()
        promoted = time.time()

        # The first write through the service after the promotion: a reconfigure that fails on purpose.
        key, body = str(uuid.uuid4()), {"parameters": {"fail_step": "reconfigure"}}
        headers = mh.w.headers("service_account") | {"Idempotency-Key": key}
        def write():
            with contextlib.suppress(httpx.TransportError):
                response = mh.api.request("POST", f"/v1/instances/{beta['id']}/reconfigure", headers=headers, json=body)
                return response if response.status_code == 202 else None
        response = wait_for(write, FAILOVER_SECONDS, "the first write after the promotion", 0.2)
        write_s = time.time() - promoted
        after = Op(response.json()["id"], "beta", "reconfigure", "?", expect=("failed",))
        mh.ops.append(after)

        # Its claim: a worker that reconnected to the new primary.
        op = wait_for(lambda: (o := mh.operation(after, strict=False)) and o["started_at"] and o, FAILOVER_SECONDS,
                      "a worker to claim the operation accepted after the promotion")
        claim_s = dt.datetime.fromisoformat(op["started_at"]).timestamp() - promoted
    done = mh.wait_final(across, queued, after)
    mh.facts["failover"] = {"first_write_s": round(write_s, 2), "first_claim_s": round(claim_s, 2),
                            "attempts_of_the_run_across_it": done[0]["attempt"]}
    assert write_s < FAILOVER_SECONDS and claim_s < FAILOVER_SECONDS, mh.facts["failover"]
    assert [o["status"] for o in done] == ["succeeded", "succeeded", "failed"], \
        [(o["status"], o["error"]) for o in done]
    assert "planned failure in reconfigure" in done[2]["error"]["message"], done[2]["error"]
    for name, url in mh.api.urls.items():
        assert httpx.get(f"{url}/readyz", timeout=5).status_code == 200, f"replica {name} is not ready"
    assert c.psql("db2", "SELECT pg_is_in_recovery()") == "f"


def test_the_end_is_truthful(mh):
    c, problems = mh.cluster, []
    # Every operation final, with the truth: what the step expected, a reason for what did not succeed.
    for op in mh.ops:
        o = mh.operation(op)
        if o["status"] not in op.expect:
            problems.append(f"{op.instance} {op.kind}: {o['status']}, expected {op.expect}: {o['error']}")
        if (o["status"] == "succeeded") != (o["error"] is None) or (o["error"] and not o["error"]["message"]):
            problems.append(f"{op.instance} {op.kind}: {o['status']} with error {o['error']}")
        runs, starts = runs_of(mh, op), mh.starts(op)
        if not len(runs) == len(starts) == o["attempt"]:
            problems.append(f"{op.instance} {op.kind}: attempt {o['attempt']}, {len(starts)} operation.started "
                            f"events, {len(runs)} runs in the marker log")
        if o["status"] == "succeeded" and (not runs or runs[-1].end is None):
            problems.append(f"{op.instance} {op.kind} succeeded but its last run did not end")
    for name in mh.instances:
        problems += marker_runs(mh.marker(name))[1]
    workers = {worker_of(s) for op in mh.ops for s in mh.starts(op)}
    if workers != {"w1", "w2"}:
        problems.append(f"operations ran on {sorted(workers)} only")

    # No event lost: alpha's stream (opened on a, resumed on b) holds exactly the timeline the API lists.
    listed = [e["id"] for e in mh.events("alpha")]
    with contextlib.suppress(AssertionError):
        wait_for(lambda: mh.follower.ids() == listed, 15, "alpha's stream to catch up")
    streamed = mh.follower.ids()
    if streamed != listed:
        problems.append(f"alpha's stream differs from its timeline: missing {sorted(set(listed) - set(streamed))}, "
                        f"extra or repeated {[i for i in streamed if streamed.count(i) > 1 or i not in listed]}")

    # Nothing left running: no run on either worker host, the killed replica's process gone.
    for host in ("w1", "w2"):
        if c.run_processes(host):
            problems.append(f"left running on {host}: {c.run_processes(host)}")
    for replica in c.killed:
        if Path(f"/proc/{replica.process.pid}").exists():
            problems.append(f"the killed replica {replica.name} (pid {replica.process.pid}) is still there")
        with contextlib.suppress(httpx.ConnectError):
            httpx.get(f"{replica.url}/healthz", timeout=2)
            problems.append(f"something still answers on the killed replica's {replica.url}")

    # No secret in what the processes logged.
    logs = [r.log.read_text(errors="replace") for r in [*c.replicas.values(), *c.killed]]
    logs += [c.sh(h, "journalctl --no-pager -o cat").stdout for h in ("w1", "w2")]
    for name in ("db_password", "replication_password", "secret_key"):
        if any(getattr(c, name) in text for text in logs):
            problems.append(f"the {name.replace('_', ' ')} appears in a serve log or a worker's journal")
    assert not problems, "\n".join(problems)
