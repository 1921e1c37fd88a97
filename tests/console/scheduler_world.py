"""An instance whose jobs and nodes routes answer: the test app deployed by a real worker run, its scheduler
the toy one (tests/operations/toy_scheduler.py, a test double of a runtime's gateway: it checks the platform's
signed tokens and scopes as a gateway must, its jobs never run) on loopback. The console tests and the
client's jobs and nodes tests (tests/api/test_cli_jobs.py) share it."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from pathlib import Path

from operations.helpers import instance_secrets, make_instance, wait_op
from operations.toy_scheduler import ToyScheduler, point_at


@contextlib.contextmanager
def scheduled_instance(ops, name: str, nodes: tuple[str, ...] = ("n1", "n2")) -> Iterator[
        tuple[dict, ToyScheduler, Path]]:
    """The instance (deployed: running, its members active), its toy scheduler and its marker directory (where
    the test app's runs write down what they got, the access map among it). The worker that deployed it keeps
    running, for the access syncs that key and role changes queue."""
    instance, marker = make_instance(ops, name, workers=1)
    ops.start_worker()
    deploy = ops.w.call("service_account", "POST", f"/v1/instances/{instance['id']}/deploy", 202).json()
    assert wait_op(ops, deploy["id"])["status"] == "succeeded"
    key = instance_secrets(ops, instance["id"])["scheduler_key"]
    with ToyScheduler(key, instance["id"], nodes=list(nodes)) as toy:
        point_at(ops.sql, instance["id"], toy.port)
        yield instance, toy, marker
