"""End to end: the control service, a worker and Debian 13 test hosts running the RKE2 TEST DOUBLE (tests/rke2_double/,
docs/rke2.md). A project service account creates and operates an RKE2 cluster through the HTTP API only, following
each operation's timeline live; after each step the test reads the cluster itself (kubectl on a server, the rke2
binary on each node) and checks that the API's members and the cluster's nodes are the same hosts.

One cluster on one set of hosts for the whole module, its steps chained: three servers and two agents deployed, an
agent added from a spare allocation, a workload drained off an agent and the agent resumed, an agent removed, another
replaced by the removed host, an upgrade to the double's second release and a rollback, the admin kubeconfig
fetched through the credential route and used from here, no secret anywhere the service writes, and a decommission
that leaves nothing.

The site: a seventh host is the site's mirror, serving both releases in GitHub's layout
(`releases/download/<version>/`). Where a run fetches a release from is the operator's `site_vars` setting, a template
over the version the run installs; which release a version installs (and its pin) is the catalog's: each catalog
version is a build of this collection whose descriptor pins one release of the double (`pinned_release`).
"""

from __future__ import annotations

import base64
import io
import json
import ssl
import subprocess
import sys
import tarfile
import time
import uuid
from pathlib import Path

import httpx
import pytest
import yaml
from gpuaas_api import testhosts
from gpuaas_api.catalog.register import register
from gpuaas_api.demo import Demo

from .pinned_builds import copy_collection

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from integration.rke2_harness import workload  # noqa: E402
from rke2_double import release  # noqa: E402 - the test double's release builder, beside the tests

pytestmark = [pytest.mark.hosts, pytest.mark.slow]

SERVERS = ["srv1", "srv2", "srv3"]
AGENTS = ["agt1", "agt2"]
SPARE = "agt3"  # in an allocation of its own: added, removed, then the replacement
MIRROR = "mirror"
MIRROR_PORT = 8080
KUBECTL = "/var/lib/rancher/rke2/bin/kubectl --kubeconfig /etc/rancher/rke2/rke2.yaml"
KUBECONFIG = "admin-kubeconfig"  # the adapter's credential
# What a decommission or a removal must leave on a host: none of these.
LEFTOVERS = ["/etc/rancher", "/var/lib/rancher/rke2", "/usr/local/bin/rke2", "/var/lib/kubelet"]
# A workload of one pod per schedulable node (the double spreads a controller's pods), with a budget that lets a
# drain evict one pod at a time.
WORKLOAD = workload(replicas=6, min_available=5)
DURATIONS: dict[str, float] = {}


def pinned_release(dest: Path, n: int, version: str, sha256sum_sha256: str) -> Path:
    """A build of this collection as the catalog version of one RKE2 release: only the RKE2 descriptor, named after
    the release, whose vars pin it (rke2_version and the sha256 of its sha256sum file), as a collection release
    that ships that RKE2 would. Its galaxy version is its own, so each version runs its own build."""
    copy_collection(dest)
    galaxy = yaml.safe_load((dest / "galaxy.yml").read_text())
    galaxy["version"] = f"{galaxy['version']}-rke2double.{n}"
    (dest / "galaxy.yml").write_text(yaml.safe_dump(galaxy, sort_keys=False))
    for other in (dest / "adapters").iterdir():
        if other.name != "rke2.yml":
            other.unlink()
    descriptor = yaml.safe_load((dest / "adapters/rke2.yml").read_text())
    descriptor["version"] = version
    descriptor["vars"] = descriptor.get("vars", {}) | {"rke2_version": version,
                                                       "rke2_sha256sum_sha256": sha256sum_sha256}
    (dest / "adapters/rke2.yml").write_text("---\n" + yaml.safe_dump(descriptor, sort_keys=False))
    return dest


def serve_releases(demo: Demo, workdir: Path) -> dict[str, str]:
    """Both releases of the double on the mirror host, in GitHub's layout; returns {version: sha256sum pin}."""
    container = demo.hosts[MIRROR]["container"]
    pins = {}
    for version in release.VERSIONS:
        built = release.build(workdir / version, version)
        pins[version] = built[release.SHA256SUM]
        directory = f"/srv/mirror/rke2/releases/download/{version}"
        demo.host_sh(MIRROR, f"mkdir -p '{directory}'")
        for name in built:
            subprocess.run(["podman", "cp", str(workdir / version / name), f"{container}:{directory}/"],
                           check=True, capture_output=True)
    subprocess.run(["podman", "exec", "-d", container, "python3", "-m", "http.server", str(MIRROR_PORT),
                    "--directory", "/srv/mirror"], check=True, capture_output=True)
    demo.host_sh(MIRROR, f"for i in $(seq 50); do python3 -c 'import urllib.request as u; "
                 f"u.urlopen(\"http://127.0.0.1:{MIRROR_PORT}/\")' 2>/dev/null && exit 0; sleep 0.1; done; exit 1")
    return pins


@pytest.fixture(scope="module")
def rke2(tmp_path_factory):
    workdir = tmp_path_factory.mktemp("rke2e2e")
    lines = []
    d = Demo(prefix=f"rk2e{uuid.uuid4().hex[:6]}", say=lines.append,
             worker_env={"GPUAAS_HEALTH_INTERVAL_SECONDS": "10"})
    d.lines = lines
    try:
        for host in testhosts.up(d.prefix, [*SERVERS, *AGENTS, SPARE, MIRROR], "rke2"):
            d.hosts[host["name"]] = host
        d.pins = pins = serve_releases(d, workdir)
        # The operator's setting, as a YAML file: the site's mirror, per release.
        site = workdir / "site-vars.yml"
        mirror = f"http://{d.hosts[MIRROR]['address']}:{MIRROR_PORT}/rke2/releases/download"
        site.write_text(yaml.safe_dump({"rke2_artifact_url": mirror + "/{{ rke2_version | urlencode }}"}))
        d.worker_env["GPUAAS_SITE_VARS"] = str(site)
        d.start_service()
        d.setup_tenancy()
        for pool, names in (("pool-main", [*SERVERS, *AGENTS]), ("pool-spare", [SPARE])):
            d.ids[pool] = d.admin.post("/v1/allocations", {
                "project_id": d.ids["project"], "name": pool, "capacity_shape": "baremetal", "gpu_count": 0,
                "region": "local", "hosts": [{"name": n, "address": d.hosts[n]["address"], "ssh_user": "root"}
                                             for n in names]})["id"]
        d.versions = [register(d.admin.http, pinned_release(workdir / f"build{n}", n, version, pin), activate=True,
                               reason=f"e2e: the RKE2 double {version}", skip_gates=True)[0]
                      for n, (version, pin) in enumerate(pins.items(), 1)]
        d.admin.post(f"/v1/projects/{d.ids['project']}/entitlements", {"app_slug": "rke2"})
        yield d
    finally:
        d.close()
        if DURATIONS:
            print("\nRKE2 through the API, seconds per step: "
                  + ", ".join(f"{step} {seconds:.0f}" for step, seconds in DURATIONS.items()))


# -- reading the cluster -------------------------------------------------------------------------------------------

def kubectl(rke2: Demo, args: str, host: str = SERVERS[0]) -> str:
    return rke2.host_sh(host, f"{KUBECTL} {args}")


def nodes(rke2: Demo) -> dict[str, dict]:
    """The cluster's nodes: {name: {"ready": bool, "cordoned": bool}}."""
    items = json.loads(kubectl(rke2, "get nodes -o json"))["items"]
    return {n["metadata"]["name"]: {
        "ready": any(c["type"] == "Ready" and c["status"] == "True" for c in n["status"].get("conditions", [])),
        "cordoned": bool(n["spec"].get("unschedulable"))} for n in items}


def statuses(rke2: Demo) -> dict[str, str]:
    return {m["host_name"]: m["status"] for m in rke2.members() if m["status"] != "removed"}


def roles(rke2: Demo) -> dict[str, str]:
    return {m["host_name"]: m["role"] for m in rke2.members() if m["status"] != "removed"}


def instance(rke2: Demo) -> dict:
    return rke2.sa.get(f"/v1/instances/{rke2.ids['instance']}")


def versions(rke2: Demo, hosts: list[str]) -> dict[str, str]:
    """What `rke2 --version` says on each host: its second word."""
    return {h: rke2.host_sh(h, "/usr/local/bin/rke2 --version").split()[2] for h in hosts}


def assert_cluster(rke2: Demo, expected: dict[str, str], cordoned: frozenset[str] = frozenset()) -> None:
    """The API's live members are `expected` ({host: status}), and the cluster's nodes are exactly those hosts,
    all Ready, cordoned exactly where asked."""
    assert statuses(rke2) == expected
    seen = wait_for(lambda: (n := nodes(rke2)) and all(v["ready"] for v in n.values()) and n,
                    60, "every node Ready")
    assert set(seen) == set(expected), seen
    assert {name for name, v in seen.items() if v["cordoned"]} == set(cordoned), seen


def web_pods(rke2: Demo) -> dict[str, str]:
    """The workload's running pods: {pod: node}."""
    pods = json.loads(kubectl(rke2, "get pods -n default -l app=web -o json"))["items"]
    return {p["metadata"]["name"]: p["spec"].get("nodeName") for p in pods if p["status"].get("phase") == "Running"}


def pids(rke2: Demo, hosts: list[str]) -> dict[str, str]:
    """The main process of rke2-server or rke2-agent on each host: a restart changes it."""
    return {h: rke2.host_sh(h, "systemctl show -p MainPID --value rke2-server rke2-agent | grep -v '^0$' || true")
            for h in hosts}


def leftovers(rke2: Demo, host: str) -> str:
    return rke2.host_sh(host, f"ls -d {' '.join(LEFTOVERS)} 2>/dev/null; pgrep -x etcd; pgrep -x rke2; true")


def wait_for(predicate, seconds: float, what: str):
    deadline = time.monotonic() + seconds
    while not (value := predicate()):
        assert time.monotonic() < deadline, f"no {what} within {seconds} s"
        time.sleep(1)
    return value


def operate(rke2: Demo, step: str, path: str, body: dict | None = None) -> dict:
    """One operation through the API, followed on its live timeline (the client's follower); it must succeed."""
    started = time.monotonic()
    op = rke2.operate(path, body)
    DURATIONS[step] = time.monotonic() - started
    if op["status"] != "succeeded":
        print(f"\n{step} failed: {json.dumps(op.get('error'))}\n" + "\n".join(rke2.lines[-60:]) + journals(rke2))
    assert op["status"] == "succeeded", op.get("error")
    return op


def journals(rke2: Demo) -> str:
    """The double's own log on every node, for a failure's message."""
    return "".join(f"\n--- {h}\n" + rke2.host_sh(h, "journalctl -u rke2-server -u rke2-agent --no-pager | "
                                                   "grep -v level | tail -8 || true")
                   for h in [*SERVERS, *AGENTS, SPARE])


def types(rke2: Demo, op: dict) -> list[str]:
    return [e["type"] for e in rke2.events(correlation_id=op["correlation_id"])]


# -- the lifecycle, chained ----------------------------------------------------------------------------------------

def test_create_and_deploy(rke2):
    v1 = rke2.versions[0]
    assert (v1.version, v1.status) == (release.VERSIONS[0], "active")
    created = rke2.sa.post(f"/v1/projects/{rke2.ids['project']}/instances", {
        "name": "k8s", "app_slug": "rke2", "version": v1.version, "allocation_ids": [rke2.ids["pool-main"]],
        "topology": [
            {"role": "server", "count": 3,
             "placement": [{"allocation_id": rke2.ids["pool-main"], "host_name": h} for h in SERVERS]},
            {"role": "agent", "count": 2,
             "placement": [{"allocation_id": rke2.ids["pool-main"], "host_name": h} for h in AGENTS]}]})
    rke2.ids["instance"] = created["id"]
    assert created["app_version"] == v1.version
    # The catalog pins the release; where it is fetched from is the site's alone.
    pinned = rke2.admin.get(f"/v1/catalog/apps/rke2/versions/{v1.version}")["adapter"]["vars"]
    assert (pinned["rke2_version"], pinned["rke2_sha256sum_sha256"]) == (v1.version, rke2.pins[v1.version])
    assert "rke2_artifact_url" not in pinned, pinned
    assert roles(rke2) == {h: "server" for h in SERVERS} | {h: "agent" for h in AGENTS}

    op = operate(rke2, "deploy", "/deploy")
    assert instance(rke2)["status"] == "running"
    assert_cluster(rke2, {h: "active" for h in [*SERVERS, *AGENTS]})
    assert versions(rke2, [*SERVERS, *AGENTS]) == {h: v1.version for h in [*SERVERS, *AGENTS]}
    seen = types(rke2, op)
    for expected in ("apps.instance.starting", "run.playbook_started", "run.task_ok", "member_added",
                     "start_completed", "apps.instance.running"):
        assert expected in seen, f"{expected} missing from {seen}"
    # The follower printed the run as it went: its tasks, host by host.
    assert any("ok srv1:" in line or "changed srv1:" in line for line in rke2.lines), rke2.lines[-20:]
    healthy = wait_event(rke2, "healthy")
    assert healthy["payload"]["module"] == "gpuaas.apps.rke2_info", healthy


def wait_event(rke2: Demo, event_type: str, after: int = 0, timeout: float = 60) -> dict:
    return wait_for(lambda: next((e for e in rke2.events(type=event_type) if e["id"] > after), None), timeout,
                    f"{event_type} event")


def test_add_an_agent_restarts_no_other_node(rke2):
    before = pids(rke2, [*SERVERS, *AGENTS])
    op = operate(rke2, "member add", "/members",
                 {"role": "agent", "allocation_id": rke2.ids["pool-spare"], "host_name": SPARE})
    assert_cluster(rke2, {h: "active" for h in [*SERVERS, *AGENTS, SPARE]})
    assert pids(rke2, list(before)) == before, "adding an agent restarted RKE2 on another node"
    assert "member_added" in types(rke2, op)


def test_drain_moves_the_workload_off_then_resume(rke2):
    rke2.host_sh(SERVERS[0], f"{KUBECTL} apply --validate=false -f - <<'EOF'\n{WORKLOAD}EOF")
    placed = wait_for(lambda: len(web := web_pods(rke2)) == 6 and web, 90, "six running pods of the workload")
    target = AGENTS[0]
    assert target in placed.values(), placed

    op = operate(rke2, "drain", f"/members/{rke2.member(target)['id']}/drain")
    assert statuses(rke2)[target] == "drained"
    moved = wait_for(lambda: len(web := web_pods(rke2)) == 6 and web, 90, "the evicted pod replaced")
    assert target not in moved.values(), moved
    assert_cluster(rke2, {h: "active" for h in [*SERVERS, *AGENTS, SPARE]} | {target: "drained"},
                   cordoned=frozenset({target}))
    seen = [e["type"] for e in rke2.events(correlation_id=op["correlation_id"], member_id=rke2.member(target)["id"])]
    assert seen[-2:] == ["member_draining", "member_drained"], seen

    operate(rke2, "resume", f"/members/{rke2.member(target)['id']}/resume")
    assert_cluster(rke2, {h: "active" for h in [*SERVERS, *AGENTS, SPARE]})


def test_remove_an_agent_leaves_its_host_clean(rke2):
    op = operate(rke2, "remove", f"/members/{rke2.member(SPARE)['id']}/remove")
    assert_cluster(rke2, {h: "active" for h in [*SERVERS, *AGENTS]})
    assert leftovers(rke2, SPARE) == ""
    assert "member_removed" in types(rke2, op)
    assert len(wait_for(lambda: len(web := web_pods(rke2)) == 6 and web, 90, "six running pods")) == 6


def test_replace_an_agent_with_the_removed_host(rke2):
    old = AGENTS[1]
    op = operate(rke2, "replace", f"/members/{rke2.member(old)['id']}/replace",
                 {"allocation_id": rke2.ids["pool-spare"], "host_name": SPARE})
    assert_cluster(rke2, {h: "active" for h in [*SERVERS, AGENTS[0], SPARE]})
    assert roles(rke2)[SPARE] == "agent"
    assert leftovers(rke2, old) == ""
    seen = types(rke2, op)
    assert "member_added" in seen and "member_removed" in seen, seen


def live_hosts(rke2: Demo) -> list[str]:
    return sorted(statuses(rke2))


def test_upgrade_to_the_second_release(rke2):
    v1, v2 = rke2.versions
    op = operate(rke2, "upgrade", "/upgrade", {"app_version_id": v2.version_id})
    got = instance(rke2)
    assert (got["app_version_id"], got["app_version"], got["status"]) == (v2.version_id, v2.version, "running")
    assert got["artifact_reference"].endswith(f"@{v2.digest}")
    (upgraded,) = rke2.events(correlation_id=op["correlation_id"], type="apps.instance.upgraded")
    assert upgraded["payload"] == {"from": v1.version, "to": v2.version}
    assert versions(rke2, live_hosts(rke2)) == {h: v2.version for h in live_hosts(rke2)}
    assert_cluster(rke2, {h: "active" for h in live_hosts(rke2)})
    assert len(wait_for(lambda: len(web := web_pods(rke2)) == 6 and web, 90, "six running pods")) == 6


def test_rollback_to_the_first_release(rke2):
    v1, v2 = rke2.versions
    op = operate(rke2, "rollback", "/rollback")
    got = instance(rke2)
    assert (got["app_version_id"], got["app_version"], got["status"]) == (v1.version_id, v1.version, "running")
    (rolled_back,) = rke2.events(correlation_id=op["correlation_id"], type="apps.instance.rolled_back")
    assert rolled_back["payload"] == {"from": v2.version, "to": v1.version}
    assert versions(rke2, live_hosts(rke2)) == {h: v1.version for h in live_hosts(rke2)}
    assert_cluster(rke2, {h: "active" for h in live_hosts(rke2)})
    assert len(wait_for(lambda: len(web := web_pods(rke2)) == 6 and web, 90, "six running pods")) == 6


def test_the_kubeconfig_through_the_credential_route(rke2, tmp_path):
    """The admin kubeconfig the adapter declares as a credential, issued to the service account from a server,
    works from outside the cluster: the cluster's nodes, read with it here, are the instance's hosts."""
    before = max(e["id"] for e in rke2.events())
    started = time.monotonic()
    issued = rke2.sa.post(f"/v1/instances/{rke2.ids['instance']}/credentials/{KUBECONFIG}")
    DURATIONS["kubeconfig"] = time.monotonic() - started
    assert (issued["name"], issued["media_type"]) == (KUBECONFIG, "application/yaml")
    assert issued["node_name"] in SERVERS, issued["node_name"]
    rke2.kubeconfig = issued["content"]
    config = yaml.safe_load(issued["content"])
    cluster, user = config["clusters"][0]["cluster"], config["users"][0]["user"]
    assert cluster["server"] == f"https://{rke2.hosts[issued['node_name']]['address']}:6443", cluster["server"]
    ca = tmp_path / "ca.crt"
    ca.write_bytes(base64.b64decode(cluster["certificate-authority-data"]))
    response = httpx.get(f"{cluster['server']}/api/v1/nodes", verify=ssl.create_default_context(cafile=str(ca)),
                         headers={"Authorization": f"Bearer {user['token']}"}, timeout=30)
    assert response.status_code == 200, response.status_code
    assert {n["metadata"]["name"] for n in response.json()["items"]} == set(statuses(rke2))
    (event,) = [e for e in rke2.events(type="runtime_secret.issued") if e["id"] > before]
    assert event["payload"]["credential"] == KUBECONFIG and event["payload"]["node_name"] == issued["node_name"]


def test_no_secret_leaves_the_service(rke2):
    node_token = rke2.host_sh(SERVERS[0], "cat /var/lib/rancher/rke2/server/node-token")
    token = node_token.rpartition("::server:")[2]
    admin_kubeconfig = rke2.host_sh(SERVERS[0], "cat /etc/rancher/rke2/rke2.yaml")
    api_token = yaml.safe_load(admin_kubeconfig)["users"][0]["user"]["token"]
    assert len(token) >= 32 and len(api_token) >= 16
    ops = rke2.sa.get(f"/v1/instances/{rke2.ids['instance']}/operations?limit=100")["items"]
    assert {"deploy", "member_add", "member_drain", "member_remove", "upgrade", "rollback"} <= {o["kind"] for o in ops}
    haystacks = {"events": json.dumps(rke2.events()), "operations": json.dumps(ops),
                 "instance": json.dumps(instance(rke2)), "members": json.dumps(rke2.members()),
                 "serve log": (rke2.state_dir / "serve.log").read_text(),
                 "worker log": (rke2.state_dir / "worker.log").read_text(),
                 "audit": json.dumps(rke2.admin.get(f"/v1/audit?limit=200&tenant_id={rke2.ids['tenant']}",
                                                    headers={"X-Break-Glass-Reason": "e2e: no secret in audit"})),
                 "demo output": "\n".join(rke2.lines)}
    for op in ops:
        response = rke2.sa.http.get(f"/v1/operations/{op['id']}/artifacts",
                                    headers={"Authorization": f"Bearer {rke2.sa.token}"})
        assert response.status_code == 200, response.text
        with tarfile.open(fileobj=io.BytesIO(response.content)) as tar:
            for member in tar.getmembers():
                if member.isfile():
                    haystacks[f"{op['kind']} artifact {member.name}"] = tar.extractfile(member).read().decode(
                        "utf-8", "replace")
    leaks = [where for where, text in haystacks.items() if token in text]
    assert not leaks, f"the cluster token appears in: {leaks}"
    leaks = [where for where, text in haystacks.items() if api_token in text or rke2.kubeconfig in text]
    assert not leaks, f"the kubeconfig or its credential appears in: {leaks}"


def test_decommission_leaves_nothing(rke2):
    op = operate(rke2, "decommission", "/decommission")
    assert instance(rke2)["status"] == "stopped"
    assert {m["status"] for m in rke2.members()} == {"removed"}
    seen = types(rke2, op)
    assert "apps.instance.deleting" in seen and "apps.instance.deleted" in seen, seen
    for host in [*SERVERS, *AGENTS, SPARE]:
        assert leftovers(rke2, host) == "", host
