"""End to end: the control service, a worker process and real test hosts. A project service account
deploys and operates a Slurm cluster through the HTTP API only; after each step the test reads the
real Slurm state on the hosts and the instance's timeline.

This is the `gpuaas demo` flow, step by step, with the checks the demo only prints.
"""

import io
import shutil
import tarfile
import uuid

import pytest
from gpuaas_api.demo import Demo

pytestmark = [pytest.mark.hosts, pytest.mark.slow]

if not shutil.which("podman"):
    pytest.skip("needs podman: run `make test` (scripts/setup.sh installs it)", allow_module_level=True)


@pytest.fixture(scope="module")
def demo():
    lines = []
    d = Demo(prefix=f"e2e{uuid.uuid4().hex[:6]}", say=lines.append)
    d.lines = lines
    try:
        d.start_service()
        d.setup_tenancy()
        d.register_hosts({"pool-a": ["ctl", "w1", "w2"], "pool-b": ["w3", "w4"]})
        d.register_slurm_app()
        yield d
    finally:
        d.close()


def node_states(demo) -> dict[str, str]:
    out = demo.slurm("sinfo --noheader --Node --format='%N %t'")
    return dict(line.split() for line in out.splitlines())


def statuses(demo) -> dict[str, str]:
    return {m["host_name"]: m["status"] for m in demo.members() if m["status"] != "removed"}


def slurmd_pid(demo, host: str) -> str:
    return demo.host_sh(host, "systemctl show -p MainPID --value slurmd")


def events(demo, **filters) -> list[dict]:
    query = "&".join(f"{k}={v}" for k, v in filters.items())
    items, cursor = [], None
    while True:
        page = demo.sa.get(f"/v1/instances/{demo.ids['instance']}/events?limit=200&{query}"
                           + (f"&cursor={cursor}" if cursor else ""))
        items += page["items"]
        cursor = page["next_cursor"]
        if not cursor:
            return items


def test_deploy_runs_jobs_and_reports_running(demo):
    demo.create_instance("pool-a", workers=2)
    op = demo.operate("/deploy")
    assert op["status"] == "succeeded", op
    assert demo.sa.get(f"/v1/instances/{demo.ids['instance']}")["status"] == "running"
    assert statuses(demo) == {"ctl": "active", "w1": "active", "w2": "active"}
    assert node_states(demo) == {"w1": "idle", "w2": "idle"}
    assert sorted(demo.slurm("srun --immediate=30 -N2 hostname").split()) == ["w1", "w2"]

    types = [e["type"] for e in events(demo, correlation_id=op["correlation_id"])]
    for expected in ("apps.instance.starting", "member_added", "start_completed", "healthy", "apps.instance.running"):
        assert expected in types, f"{expected} missing from {types}"
    assert types.index("start_completed") > types.index("run.playbook_stats")
    sample = events(demo, type="apps.instance.running")[0]
    for key in ("correlation_id", "tenant_id", "project_id", "app_slug", "operating_mode", "control_plane_scope",
                "runtime_backend"):
        assert sample[key], key


def test_member_add_joins_a_worker_without_restarting_the_others(demo):
    before = {h: slurmd_pid(demo, h) for h in ("w1", "w2")}
    op = demo.operate("/members", {"role": "worker", "allocation_id": demo.ids["pool-b"], "host_name": "w3"})
    assert op["status"] == "succeeded", op
    assert statuses(demo)["w3"] == "active"
    assert node_states(demo) == {"w1": "idle", "w2": "idle", "w3": "idle"}
    assert {h: slurmd_pid(demo, h) for h in ("w1", "w2")} == before


def test_drain_waits_for_the_job_then_refresh_reads_slurm(demo):
    job = demo.slurm("sbatch --parsable -w w1 --output=/dev/null --wrap 'sleep 8'")
    op = demo.operate(f"/members/{demo.member('w1')['id']}/drain")
    assert op["status"] == "succeeded", op
    assert demo.slurm(f"squeue --noheader --jobs={job}") == ""
    assert node_states(demo)["w1"] == "drain"
    assert statuses(demo)["w1"] == "drained"

    # Someone drains w2 behind the platform's back; refresh makes the API tell the truth.
    demo.slurm("scontrol update nodename=w2 state=drain reason='site maintenance'")
    op = demo.operate("/refresh")
    assert op["status"] == "succeeded", op
    assert statuses(demo)["w2"] in {"drained", "draining"}
    demo.slurm("scontrol update nodename=w2 state=resume")
    assert demo.operate("/refresh")["status"] == "succeeded"
    assert statuses(demo)["w2"] == "active"


def test_remove_and_replace_keep_the_cluster_working(demo):
    op = demo.operate(f"/members/{demo.member('w1')['id']}/remove")
    assert op["status"] == "succeeded", op
    assert "w1" not in statuses(demo)
    assert set(node_states(demo)) == {"w2", "w3"}
    assert demo.host_sh("w1", "pgrep -x slurmd || true") == ""

    op = demo.operate(f"/members/{demo.member('w2')['id']}/replace",
                      {"allocation_id": demo.ids["pool-b"], "host_name": "w4"})
    assert op["status"] == "succeeded", op
    assert set(statuses(demo)) == {"ctl", "w3", "w4"}
    assert set(node_states(demo)) == {"w3", "w4"}
    assert sorted(demo.slurm("srun --immediate=30 -N2 hostname").split()) == ["w3", "w4"]


def test_no_secret_value_leaves_the_service(demo):
    munge_key = demo.host_sh("ctl", "cat /etc/munge/munge.key")
    assert len(munge_key) >= 32
    haystacks = {"events": str(events(demo)), "serve log": (demo.state_dir / "serve.log").read_text(),
                 "worker log": (demo.state_dir / "worker.log").read_text(),
                 # a tenant's audit rows are a break-glass read for the platform admin
                 "audit": str(demo.admin.get(f"/v1/audit?limit=200&tenant_id={demo.ids['tenant']}",
                                             headers={"X-Break-Glass-Reason": "e2e: no secret in audit"})),
                 "demo output": "\n".join(demo.lines)}
    ops = demo.sa.get(f"/v1/instances/{demo.ids['instance']}/operations?limit=100")["items"]
    for op in ops:
        response = demo.sa.http.get(f"/v1/operations/{op['id']}/artifacts",
                                    headers={"Authorization": f"Bearer {demo.sa.token}"})
        assert response.status_code == 200, response.text
        with tarfile.open(fileobj=io.BytesIO(response.content)) as tar:
            for member in tar.getmembers():
                if member.isfile():
                    haystacks[f"{op['kind']} artifact {member.name}"] = tar.extractfile(member).read().decode(
                        "utf-8", "replace")
    leaks = [where for where, text in haystacks.items() if munge_key in text]
    assert not leaks, f"the MUNGE key appears in: {leaks}"


def test_decommission_tears_everything_down(demo):
    op = demo.operate("/decommission")
    assert op["status"] == "succeeded", op
    assert demo.sa.get(f"/v1/instances/{demo.ids['instance']}")["status"] == "stopped"
    types = [e["type"] for e in events(demo, correlation_id=op["correlation_id"])]
    assert "apps.instance.deleting" in types and "apps.instance.deleted" in types, types
    for host in ("ctl", "w2", "w3", "w4"):
        assert demo.host_sh(host, "pgrep -x 'slurmctld|slurmd|munged' || true") == ""
        assert demo.host_sh(host, "ls /etc/slurm/slurm.conf /etc/munge/munge.key 2>/dev/null || true") == ""
