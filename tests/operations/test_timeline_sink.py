"""The worker's event sink: a run hands its events over without waiting for the database, and they reach
the timeline complete and in order once the database lets them in."""

from __future__ import annotations

import threading

import psycopg
from gpuaas_api.executor.worker import _EventSink
from gpuaas_api.instances import service as instances

from .helpers import make_instance

EVENTS = 40


def test_a_run_hands_its_events_over_while_the_timeline_is_locked_and_they_arrive_in_order(ops):
    instance, _ = make_instance(ops, "sink")
    with ops.database.transaction() as conn:
        row = instances.get_instance(conn, instance["id"])
    sink = _EventSink(ops.database, row, "sink-under-lock")
    with psycopg.connect(ops.db_url) as blocker:
        # Every INSERT into the timeline now waits for this transaction, as a slow commit would.
        blocker.execute("LOCK TABLE instance_events IN EXCLUSIVE MODE")

        def run_events():
            for i in range(EVENTS):
                sink.append("run.task_ok", {"host": "w1", "task": f"task {i}", "play": "p", "changed": False})

        run = threading.Thread(target=run_events)
        run.start()
        run.join(timeout=30)  # a sink that committed in append would wait here for the lock: a deadlock guard
        assert not run.is_alive(), "append waited for the database"
        written = blocker.execute("SELECT count(*) FROM instance_events WHERE correlation_id = 'sink-under-lock'")
        assert written.fetchone()[0] == 0  # nothing got past the lock, yet the run went on
        blocker.rollback()
    sink.close()
    rows = ops.sql("SELECT type, payload->>'task' AS task FROM instance_events WHERE correlation_id = %s ORDER BY id",
                   ("sink-under-lock",))
    assert [(r["type"], r["task"]) for r in rows] == [("run.task_ok", f"task {i}") for i in range(EVENTS)]
