"""A Python client generated from the service's OpenAPI document (openapi-python-client, offline, into a
temporary directory) runs one lifecycle against the app served over real HTTP with a real worker: create
an instance (201 + Location), merge its labels, deploy it (202 + Location) and follow the operation to
its end, read the timeline over REST and as the event stream (one timestamp format), and read an error
envelope whose code is the enumeration's."""

from __future__ import annotations

import importlib
import json
import re
import subprocess
import sys
import time
import uuid
from pathlib import Path

import httpx
import pytest
from gpuaas_api.app import create_app
from gpuaas_api.config import Settings
from operations.helpers import TEST_APP, serving

GENERATOR = str(Path(sys.executable).parent / "openapi-python-client")
PACKAGE = "gpuaas_generated_client"
TIMESTAMP = re.compile(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(\.\d{1,6})?Z$")


@pytest.fixture(scope="module")
def generated(tmp_path_factory):
    """The client package, generated from the document and imported."""
    root = tmp_path_factory.mktemp("openapi-client")
    document = root / "openapi.json"
    document.write_text(json.dumps(create_app(database=object(), settings=Settings()).openapi()))
    config = root / "config.json"
    # No formatter hooks (the generated code is used, not read), and the run artifacts' tar.gz read as bytes.
    config.write_text(json.dumps({"post_hooks": [], "package_name_override": PACKAGE,
                                  "content_type_overrides": {"application/gzip": "application/octet-stream"}}))
    run = subprocess.run([GENERATOR, "generate", "--path", str(document), "--config", str(config), "--meta", "none",
                          "--output-path", str(root / PACKAGE)], capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, run.stdout + run.stderr
    assert "Warning" not in run.stdout, run.stdout  # every operation and response made it into the client
    sys.path.insert(0, str(root))
    try:
        yield importlib.import_module(PACKAGE)
    finally:
        sys.path.remove(str(root))


def module(name: str):
    return importlib.import_module(f"{PACKAGE}.{name}")


def generated_operation(tag: str, operation_id: str):
    """The generated module of one operation: api/<tag>/<operationId>.py."""
    return module(f"api.{tag}.{operation_id}")


def test_generated_client_runs_a_lifecycle(generated, ops, app):
    models = module("models")
    ops.start_worker()
    marker = ops.marker_root / "gen-1"
    marker.mkdir()
    with serving(app) as url:
        client = generated.Client(base_url=url, headers=ops.w.headers("service_account"),
                                  raise_on_unexpected_status=True)
        create = generated_operation("instances", "instances_create")
        body = models.InstanceCreate.from_dict({
            "name": "gen-1", "app_slug": TEST_APP, "allocation_ids": [ops.ids["alloc_ops"]],
            "topology": [{"role": "controller", "count": 1}, {"role": "worker", "count": 1}],
            "parameters": {"marker_dir": str(marker)}, "labels": {"change": "1", "gone": "1", "stay": "1"}})
        created = create.sync_detailed(project_id=uuid.UUID(ops.ids["project_a1"]), client=client, body=body)
        assert created.status_code == 201
        instance = created.parsed
        assert isinstance(instance, models.Instance)
        assert created.headers["location"] == f"/v1/instances/{instance.id}"
        assert httpx.get(url + created.headers["location"], headers=ops.w.headers("service_account")).json()[
            "id"] == str(instance.id)

        # PATCH of labels is a JSON merge: add one, change one, delete one with null, the other untouched.
        update = generated_operation("instances", "instances_update")
        patched = update.sync(instance_id=instance.id, client=client, body=models.InstanceUpdate.from_dict(
            {"labels": {"change": "2", "gone": None, "added": "1"}}))
        assert patched.labels.to_dict() == {"change": "2", "stay": "1", "added": "1"}

        deploy = generated_operation("operations", "instances_deploy")
        accepted = deploy.sync_detailed(instance_id=instance.id, client=client)
        assert accepted.status_code == 202
        operation = accepted.parsed
        assert accepted.headers["location"] == f"/v1/operations/{operation.id}"

        get_operation = generated_operation("operations", "operations_get")
        deadline = time.monotonic() + 120
        while operation.status.value not in ("succeeded", "failed", "canceled") and time.monotonic() < deadline:
            time.sleep(0.3)
            operation = get_operation.sync(operation_id=operation.id, client=client)
        assert operation.status.value == "succeeded", operation.to_dict()
        got = generated_operation("instances", "instances_get").sync(instance_id=instance.id, client=client)
        assert got.status.value == "running"

        # One timestamp format: the REST timeline and the event stream carry the same strings.
        events = generated_operation("instances", "events_list").sync_detailed(instance_id=instance.id, client=client)
        rest = {e["id"]: e for e in json.loads(events.content)["items"]}
        assert rest
        stream = httpx.get(f"{url}/v1/instances/{instance.id}/events/stream", params={"max_seconds": 1},
                           headers=ops.w.headers("service_account"), timeout=30).text
        streamed = {e["id"]: e for e in (json.loads(line[len("data: "):]) for line in stream.splitlines()
                                         if line.startswith("data: "))}
        assert set(streamed) == set(rest)
        for event_id, event in rest.items():
            assert TIMESTAMP.match(event["occurred_at"]), event["occurred_at"]
            assert streamed[event_id]["occurred_at"] == event["occurred_at"]
        raw_operation = httpx.get(f"{url}/v1/operations/{operation.id}", headers=ops.w.headers("service_account"))
        assert TIMESTAMP.match(raw_operation.json()["created_at"])

        # An error answers in the envelope, its code one of the enumeration's.
        lenient = generated.Client(base_url=url, headers=ops.w.headers("service_account"))
        missing = generated_operation("instances", "instances_get").sync(instance_id=uuid.uuid4(), client=lenient)
        assert isinstance(missing, models.ErrorEnvelope)
        assert missing.error.code.value == "not_found"
