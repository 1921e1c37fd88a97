"""The multi-host world of tests/multihost, one per module (docs/dev/multihost.md), and the API as its clients
see it: a World (tests/api/world.py) whose requests go to the serve replicas in turn."""

from __future__ import annotations

import dataclasses
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

import httpx
import pytest
from api.world import World, build_world, register_allocation
from gpuaas_api import db as dbmod
from gpuaas_api.catalog.register import register
from operations.helpers import TEST_APP, opsapp_build

from .cluster import RUN_SECONDS, Cluster, EventFollower, Replicas, scrub, secret, wait_for

INSTANCES = ("alpha", "beta", "gamma")
FINAL = ("succeeded", "failed", "canceled")


@dataclass
class Op:
    id: str
    instance: str
    kind: str
    via: str  # the replica that accepted it
    expect: tuple[str, ...] = ("succeeded",)  # the final statuses that would be the truth


@dataclass(repr=False)
class MultiHost:
    cluster: Cluster
    api: Replicas
    w: World
    instances: dict[str, dict] = field(default_factory=dict)  # name -> the instance (with "marker": its dir)
    ops: list[Op] = field(default_factory=list)  # every operation accepted, in order
    follower: EventFollower | None = None  # alpha's event stream, opened on replica a
    facts: dict = field(default_factory=dict)  # what steps measured, for later steps and the report

    def __repr__(self) -> str:
        return f"MultiHost({self.cluster!r})"

    def via(self, replica: str) -> World:
        """The world's actors, through one replica only."""
        return dataclasses.replace(self.w, client=self.api.via(replica))

    def marker(self, instance: str) -> Path:
        return Path(self.instances[instance]["marker"])

    def accept(self, instance: str, kind: str, via: str | None, body: dict | None = None,
               member: str | None = None, expect: tuple[str, ...] = ("succeeded",)) -> Op:
        """A lifecycle operation of the service account, through replica `via` (None: whichever answers)."""
        iid = self.instances[instance]["id"]
        path = {"deploy": f"/v1/instances/{iid}/deploy", "reconfigure": f"/v1/instances/{iid}/reconfigure",
                "member_add": f"/v1/instances/{iid}/members",
                "member_drain": f"/v1/instances/{iid}/members/{member}/drain"}[kind]
        world = self.via(via) if via else self.w
        response = world.call("service_account", "POST", path, 202, json=body or {})
        answered = next(name for name, url in self.api.urls.items() if str(response.request.url).startswith(url))
        op = Op(response.json()["id"], instance, kind, answered, expect)
        self.ops.append(op)
        return op

    def operation(self, op: Op, strict: bool = True) -> dict | None:
        """The operation; not strict: None while the replica that answers has no database (503, a failover)."""
        response = self.w.call("service_account", "GET", f"/v1/operations/{op.id}")
        if response.status_code == 503 and not strict:
            return None
        assert response.status_code == 200, f"GET operation: {response.status_code} {response.text}"
        return response.json()

    def wait_final(self, *ops: Op, timeout: float = RUN_SECONDS) -> list[dict]:
        def final():
            found = [self.operation(op, strict=False) for op in ops]
            return found if all(o and o["status"] in FINAL for o in found) else None
        return wait_for(final, timeout, f"operations {[f'{o.instance} {o.kind}' for o in ops]} to end", 0.3)

    def events(self, instance: str, **params) -> list[dict]:
        out, cursor = [], None
        while True:
            query = params | {"limit": 500} | ({"cursor": cursor} if cursor else {})
            page = self.w.call("service_account", "GET", f"/v1/instances/{self.instances[instance]['id']}/events",
                               200, params=query).json()
            out += page["items"]
            cursor = page["next_cursor"]
            if not cursor:
                return out

    def starts(self, op: Op) -> list[dict]:
        """The operation's operation.started events (one per attempt: attempt, worker)."""
        return [e["payload"] for e in self.events(op.instance, type="operation.started")
                if e["payload"]["operation_id"] == op.id]


def make_world(cluster: Cluster, api: Replicas) -> MultiHost:
    """The API tests' world (tenants, projects, actors) built through the replicas, the test app registered (its
    build uploaded by digest through replica b), and three instances of it, each on an allocation of its own."""
    database = dbmod.Database(cluster.database_url, min_size=0, max_size=1)
    database.open()
    try:  # the first platform admin is made in the database, as `gpuaas admin bootstrap` makes it
        w = build_world(api, database)
    finally:
        database.close()
    for token in w.tokens.values():
        if token:
            secret(token)
    admin = httpx.Client(base_url=cluster.replicas["b"].url, headers=w.headers("platform_admin"), timeout=60)
    with admin:
        register(admin, opsapp_build("1.0.0"), activate=True, reason="multi-host tests", skip_gates=True)
    w.call("platform_admin", "POST", f"/v1/projects/{w.ids['project_a1']}/entitlements", 201,
           json={"app_slug": TEST_APP})
    mh = MultiHost(cluster, api, w)
    for name in INSTANCES:
        allocation = register_allocation(w, "project_a1", f"alloc-{name}", hosts=3)["id"]
        marker = cluster.marker_root / name
        marker.mkdir()
        body = {"name": name, "app_slug": TEST_APP, "allocation_ids": [allocation],
                "topology": [{"role": "controller", "count": 1}, {"role": "worker", "count": 1}],
                "parameters": {"marker_dir": str(marker)}}
        instance = w.call("service_account", "POST", f"/v1/projects/{w.ids['project_a1']}/instances", 201,
                          json=body).json()
        mh.instances[name] = instance | {"marker": str(marker), "allocation_id": allocation}
    return mh


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    """No secret of the world in a report: a failure's traceback shows arguments, and some hold one."""
    report = (yield).get_result()
    if report.longrepr is not None:
        text = str(report.longrepr)
        if scrub(text) != text:
            report.longrepr = scrub(text)
    report.sections = [(title, scrub(content)) for title, content in report.sections]


@pytest.fixture(scope="module")
def mh(request):
    started = time.monotonic()
    failures_before = request.session.testsfailed
    cluster = Cluster.create()
    api = Replicas()
    world = None
    try:
        cluster.start()
        started_cluster = round(time.monotonic() - started, 1)
        api.urls = {name: r.url for name, r in cluster.replicas.items()}
        world = make_world(cluster, api)
        world.facts["setup_s"] = {"cluster": started_cluster, "world": round(time.monotonic() - started, 1)}
        yield world
    finally:
        if world is not None:  # what the steps measured (-s or -rA shows it)
            shown = {k: v for k, v in world.facts.items() if k != "x5c"}
            print(f"\nmultihost: {shown}", file=sys.stderr)
        if world is not None and world.follower is not None:
            world.follower.stop()
        api.close()
        keep = request.session.testsfailed > failures_before
        cluster.close(keep_files=keep)
        if keep:
            print(f"\nmultihost: logs and markers kept in {cluster.root}", file=sys.stderr)
