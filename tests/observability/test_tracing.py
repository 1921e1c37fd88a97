"""One trace from a request to the run it caused, read from OpenTelemetry's in-memory exporter: the
request's span (continuing the caller's traceparent), the trace id recorded on the operation, and the
worker's operation span under the request span, with its prepare, run and record spans under it."""

from __future__ import annotations

import pytest
from gpuaas_api.observability import tracing
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import SpanKind, format_span_id, format_trace_id
from operations.helpers import make_instance, wait_for, wait_op

SA = "service_account"
CALLER_TRACE = "4bf92f3577b34da6a3ce929d0e0e4736"
CALLER_SPAN = "00f067aa0ba902b7"


@pytest.fixture
def spans():
    exporter = InMemorySpanExporter()
    tracing.install(exporter, service_name="gpuaas-tests", batch=False)
    yield exporter
    tracing.uninstall()


def test_a_trace_runs_from_the_request_to_the_run(ops, spans):
    instance, _ = make_instance(ops, "traced")
    op = ops.w.call(SA, "POST", f"/v1/instances/{instance['id']}/deploy", 202,
                    headers={"traceparent": f"00-{CALLER_TRACE}-{CALLER_SPAN}-01"}).json()
    (row,) = ops.sql("SELECT trace_id, trace_parent FROM operations WHERE id = %s", (op["id"],))
    assert row["trace_id"] == CALLER_TRACE  # the caller's trace, continued

    (request,) = [s for s in spans.get_finished_spans() if s.name == "POST /v1/instances/{instance_id}/deploy"]
    assert request.kind == SpanKind.SERVER and format_trace_id(request.context.trace_id) == CALLER_TRACE
    assert format_span_id(request.parent.span_id) == CALLER_SPAN
    assert request.attributes["http.route"] == "/v1/instances/{instance_id}/deploy"
    assert request.attributes["http.response.status_code"] == 202
    assert row["trace_parent"] == f"00-{CALLER_TRACE}-{format_span_id(request.context.span_id)}-01"

    ops.start_worker()
    assert wait_op(ops, op["id"])["status"] == "succeeded"
    finished = wait_for(lambda: [s for s in spans.get_finished_spans() if s.name == "operation deploy"], 10,
                        what="the operation's span")
    (run,) = finished
    assert run.kind == SpanKind.CONSUMER and run.context.trace_id == request.context.trace_id
    assert run.parent.span_id == request.context.span_id
    assert run.attributes["gpuaas.operation.id"] == op["id"]
    assert run.attributes["gpuaas.instance.id"] == instance["id"]
    assert run.attributes["gpuaas.operation.result"] == "succeeded"
    assert run.resource.attributes["service.name"] == "gpuaas-tests"
    children = {s.name: s for s in spans.get_finished_spans() if s.parent and s.parent.span_id == run.context.span_id}
    assert set(children) == {"prepare", "run", "record"}
    assert children["run"].attributes["gpuaas.run.status"] == "successful"
    assert run.start_time <= children["prepare"].start_time < children["run"].start_time
    assert children["run"].end_time <= children["record"].start_time <= children["record"].end_time <= run.end_time


def test_a_request_without_a_traceparent_starts_a_trace(ops, spans):
    instance, _ = make_instance(ops, "fresh")
    op = ops.w.call(SA, "POST", f"/v1/instances/{instance['id']}/deploy", 202).json()
    (request,) = [s for s in spans.get_finished_spans() if s.name == "POST /v1/instances/{instance_id}/deploy"]
    assert request.parent is None
    (row,) = ops.sql("SELECT trace_id FROM operations WHERE id = %s", (op["id"],))
    assert row["trace_id"] == format_trace_id(request.context.trace_id)
    tracing.uninstall()  # off again: nothing is recorded on the next operation
    second = ops.w.call(SA, "POST", f"/v1/instances/{instance['id']}/reconfigure", 202, json={}).json()
    (row,) = ops.sql("SELECT trace_id, trace_parent FROM operations WHERE id = %s", (second["id"],))
    assert row == {"trace_id": None, "trace_parent": None}
