"""The event stream never skips an event (issue 28: no event lost). Event ids are drawn in insert order but
become visible in commit order: a follower that went on past a higher id while a lower one was still in an open
transaction would never see the lower one. Real PostgreSQL, real concurrent transactions."""

from __future__ import annotations

import threading
import time
from uuid import UUID

import pytest
from gpuaas_api.audit import service as audit
from gpuaas_api.instances import service as instances


def stream_ids(body: str) -> list[int]:
    return [int(line[4:]) for line in body.splitlines() if line.startswith("id: ")]


@pytest.mark.parametrize("quick_writer_began_first", [False, True])
def test_an_event_committed_after_a_higher_one_is_streamed_in_order(world, database, quick_writer_began_first):
    iid = UUID(world.ids["instance_a1"])
    with database.transaction() as conn:
        instance = instances.get_instance(conn, iid)
        before = audit.list_events(conn, iid, after=0, limit=1000)[0]
    last = before[-1]["id"] if before else 0
    with database.pool.connection() as quick, database.pool.connection() as slow:
        if quick_writer_began_first:  # it wrote something else first: its transaction id is the lower one
            quick.execute("SELECT pg_current_xact_id()")
        lower = audit.append_event(slow, instance, "test.slow_writer", {})  # its transaction stays open
        higher = audit.append_event(quick, instance, "test.quick_writer", {})
        quick.commit()
        assert lower["id"] < higher["id"]
        # The stream starts while the lower id is still uncommitted; it commits a second later.
        threading.Timer(1.0, slow.commit).start()
        started = time.monotonic()
        body = world.client.get(f"/v1/instances/{iid}/events/stream", params={"after": last, "max_seconds": 3},
                                headers=world.headers("project_member")).text
    ids = stream_ids(body)
    assert ids == [lower["id"], higher["id"]], body
    assert time.monotonic() - started < 5


def test_with_no_writer_in_flight_events_stream_at_once(world, database):
    iid = UUID(world.ids["instance_a1"])
    with database.transaction() as conn:
        instance = instances.get_instance(conn, iid)
        first = audit.append_event(conn, instance, "test.one", {})
    follow = audit.Follow(after=first["id"] - 1)
    got, deadline = [], time.monotonic() + 5  # a writer of another database of the server may be in flight
    while not got and time.monotonic() < deadline:
        got = audit.followed_events(database, iid, follow)
    assert [e["id"] for e in got] == [first["id"]] and follow.after == first["id"]


def test_a_writer_that_began_after_the_quick_one_is_waited_for(world, database):
    # The quick writer holds the lower transaction id, the slow one draws the lower event id: a snapshot taken
    # once the quick one committed does not list the slow one among those in flight (its id is past the
    # snapshot's xmax), so only the barrier drawn after the read holds the stream back.
    iid = UUID(world.ids["instance_a1"])
    with database.transaction() as conn:
        instance = instances.get_instance(conn, iid)
        last = max([e["id"] for e in audit.list_events(conn, iid, after=0, limit=1000)[0]], default=0)
    follow = audit.Follow(after=last)
    with database.pool.connection() as quick, database.pool.connection() as slow:
        quick.execute("SELECT pg_current_xact_id()")
        lower = audit.append_event(slow, instance, "test.slow_writer", {})
        higher = audit.append_event(quick, instance, "test.quick_writer", {})
        quick.commit()
        assert audit.followed_events(database, iid, follow) == [] and follow.after == last
        slow.commit()
    got, deadline = [], time.monotonic() + 5
    while not got and time.monotonic() < deadline:
        got = audit.followed_events(database, iid, follow)
    assert [e["id"] for e in got] == [lower["id"], higher["id"]]
