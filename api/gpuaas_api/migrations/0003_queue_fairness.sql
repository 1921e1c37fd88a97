-- Fair claims and quotas (issue 7). A claim takes the queue head of the tenant with the fewest
-- running operations, then of the tenant served longest ago (its latest claimed_at), then the oldest.
ALTER TABLE operations ADD COLUMN claimed_at timestamptz;
CREATE INDEX operations_tenant_claims ON operations (tenant_id, claimed_at);
CREATE INDEX operations_running_by_tenant ON operations (tenant_id) WHERE status = 'running';
-- The per-project quota on open operations counts these.
CREATE INDEX operations_open_by_project ON operations (project_id) WHERE status IN ('queued', 'running');
