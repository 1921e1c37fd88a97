"""Workers wake on the event: accepting an operation notifies the queue's channel and an idle worker
claims it at once, not at its next poll. Every worker here polls every 30 s, so a claim within a
few seconds can only come from the notification; the last test restarts the database under an idle
worker and its listener connects again.

This module runs on an embedded PostgreSQL of its own (the `pg_uri` fixture below overrides the
session's), so it can stop and start it."""

from __future__ import annotations

import dataclasses
import shutil
import tempfile
import threading
import time
from pathlib import Path

import psycopg
import pytest
from api.conftest import TEMPLATE
from gpuaas_api import db as dbmod
from gpuaas_api.embedded_db import EmbeddedPostgres
from psycopg.conninfo import make_conninfo

from .helpers import make_instance, wait_for, wait_op

SA = "service_account"
POLL_SECONDS = 30.0
PICKUP_SECONDS = 3.0  # a tenth of the poll: only a notification explains a claim this fast


@pytest.fixture(scope="module")
def server():
    datadir = Path(tempfile.mkdtemp(prefix="gpuaas-wakeup-"))
    srv = EmbeddedPostgres(datadir / "pg")
    srv.start()
    yield srv
    srv.stop()
    shutil.rmtree(datadir, ignore_errors=True)


@pytest.fixture(scope="module")
def pg_uri(server):
    with psycopg.connect(server.uri, autocommit=True) as conn:
        conn.execute(f"CREATE DATABASE {TEMPLATE}")
    dbmod.upgrade(make_conninfo(server.uri, dbname=TEMPLATE))
    return server.uri


@pytest.fixture
def slow_poll(ops):
    ops.settings = dataclasses.replace(ops.settings, poll_seconds=POLL_SECONDS)
    return ops


def listening(ops) -> bool:
    rows = ops.sql("SELECT 1 FROM pg_stat_activity WHERE datname = current_database() AND query LIKE 'LISTEN %%'")
    return bool(rows)


def pickup_seconds(ops, op_id: str) -> float:
    (row,) = ops.sql("SELECT extract(epoch FROM claimed_at - created_at) AS s FROM operations WHERE id = %s",
                     (op_id,))
    return float(row["s"])


def test_an_idle_worker_claims_an_accepted_operation_on_its_notification(slow_poll):
    ops = slow_poll
    instance, _ = make_instance(ops, "wake")
    worker = ops.start_worker(concurrency=2)
    wait_for(lambda: listening(ops), 30, what="the worker's listener")
    first = ops.w.call(SA, "POST", f"/v1/instances/{instance['id']}/deploy", 202).json()
    assert wait_op(ops, first["id"])["status"] == "succeeded"
    # Both claim loops looked at the queue after the first run and found it empty: they now sleep
    # for a whole poll unless something wakes them.
    time.sleep(1.0)
    second = ops.w.call(SA, "POST", f"/v1/instances/{instance['id']}/reconfigure", 202,
                        json={"parameters": {"round": 2}}).json()
    assert wait_op(ops, second["id"])["status"] == "succeeded"
    for op in (first, second):
        assert pickup_seconds(ops, op["id"]) < PICKUP_SECONDS, op
    # stop wakes the idle loops too: the worker ends long before its next poll
    worker.stop.set()
    wait_for(lambda: not any(t.name.startswith(("worker-", "listener-")) and t.is_alive()
                             for t in threading.enumerate()), 5, what="the worker to stop")


def test_the_listener_connects_again_after_a_database_restart(slow_poll, server):
    ops = slow_poll
    instance, _ = make_instance(ops, "restart-wake")
    ops.start_worker()
    wait_for(lambda: listening(ops), 30, what="the worker's listener")
    server.stop()
    try:
        time.sleep(2.0)  # the listener finds the database gone and keeps trying
    finally:
        server.start()
    wait_for(lambda: listening(ops), 30, what="the listener to connect again")
    time.sleep(1.0)  # the reconnect's own wake-up has passed; the loops sleep for a whole poll again
    op = ops.w.call(SA, "POST", f"/v1/instances/{instance['id']}/deploy", 202).json()
    assert wait_op(ops, op["id"])["status"] == "succeeded"
    assert pickup_seconds(ops, op["id"]) < PICKUP_SECONDS
