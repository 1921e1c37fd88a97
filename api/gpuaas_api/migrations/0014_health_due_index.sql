-- Issue 23: a health claim whose cost does not grow with the number of tenants (bench/bench_health.py).
-- The claim walks checkable instances in due order (health/service.py CLAIM) instead of visiting every
-- tenant's head of the (tenant_id, health_due_at) index: one claim of one instance reads one entry,
-- plus the leased ones ahead of it. A failed instance is checkable only while a check failed it, so one
-- an operation failed is left out of the index: it would stay due forever and be read by every claim.
DROP INDEX app_instances_health_due;
CREATE INDEX app_instances_health_due ON app_instances (health_due_at, id)
    WHERE deleted_at IS NULL
      AND (status IN ('running', 'degraded') OR (status = 'failed' AND status_reason LIKE 'health check: %'));
-- The tenants with a check in flight (health/service.py IN_FLIGHT, so that they yield to the others): a
-- lease is cleared when its check ends, so this index holds only the checks running now.
CREATE INDEX app_instances_health_leased ON app_instances (health_lease_until) WHERE health_lease_until IS NOT NULL;
-- What a check must leave alone (health/service.py _busy): an instance's open operations, without
-- reading its whole history.
CREATE INDEX operations_open_by_instance ON operations (instance_id) WHERE status IN ('queued', 'running');
