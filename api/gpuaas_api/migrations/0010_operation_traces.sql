-- Issue 11 (observability): the trace an operation belongs to. Accepting an operation while tracing
-- is on records the accepting request's trace id (32 hex digits, what a trace store is searched by)
-- and its W3C traceparent, from which the worker that runs the operation continues the trace. Both
-- stay NULL while tracing is off.
ALTER TABLE operations ADD COLUMN trace_id text, ADD COLUMN trace_parent text;
CREATE INDEX operations_trace ON operations (trace_id) WHERE trace_id IS NOT NULL;
