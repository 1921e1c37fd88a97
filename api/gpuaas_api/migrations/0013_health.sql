-- Issue 23: day-2 health. The platform reads each running instance's health on its own (health/) and
-- keeps what it saw: the instance's conditions, each member's runtime detail, and the hosts a forced
-- removal left behind for cleanup.

-- `degraded`: the instance runs and its control plane answers, but a member is failed.
ALTER TABLE app_instances DROP CONSTRAINT app_instances_status_check;
ALTER TABLE app_instances ADD CONSTRAINT app_instances_status_check
    CHECK (status IN ('created', 'starting', 'running', 'degraded', 'stopping', 'stopped', 'failed'));

-- health: the last check's record ({checked_at, conditions: [{type, status, reason, message,
-- last_transition_at}], failed_by_check}); health_due_at: when the next check is due; the lease keeps
-- one check in flight per instance, whichever worker runs it.
ALTER TABLE app_instances
    ADD COLUMN health jsonb NOT NULL DEFAULT '{}'::jsonb,
    ADD COLUMN health_due_at timestamptz NOT NULL DEFAULT now(),
    ADD COLUMN health_lease_until timestamptz,
    ADD COLUMN health_worker text;
-- The scheduler's question, on every round: which checkable instances are due, oldest first per tenant?
CREATE INDEX app_instances_health_due ON app_instances (tenant_id, health_due_at)
    WHERE deleted_at IS NULL AND status IN ('running', 'degraded', 'failed');

-- runtime: what the last check read of the member ({checked_at, reachable, observed, details}).
ALTER TABLE app_instance_members ADD COLUMN runtime jsonb NOT NULL DEFAULT '{}'::jsonb;

-- A host a forced removal could not reach: cleaned by the app's cleanup playbook once it answers again;
-- until then no new member is placed on it.
CREATE TABLE host_cleanups (
    id             uuid PRIMARY KEY DEFAULT gen_random_uuid(),
    instance_id    uuid NOT NULL REFERENCES app_instances(id),
    member_id      uuid NOT NULL REFERENCES app_instance_members(id),
    app_version_id uuid NOT NULL REFERENCES app_versions(id),
    allocation_id  uuid NOT NULL REFERENCES allocations(id),
    host_name      text NOT NULL,
    node_name      text NOT NULL,
    role           text NOT NULL,
    reason         text NOT NULL,
    status         text NOT NULL DEFAULT 'pending' CHECK (status IN ('pending', 'done')),
    attempts       integer NOT NULL DEFAULT 0,
    last_error     text,
    next_try_at    timestamptz NOT NULL DEFAULT now(),
    lease_until    timestamptz,
    correlation_id text NOT NULL,
    created_at     timestamptz NOT NULL DEFAULT now(),
    done_at        timestamptz
);
CREATE UNIQUE INDEX host_cleanups_open ON host_cleanups (allocation_id, host_name) WHERE status = 'pending';
CREATE INDEX host_cleanups_due ON host_cleanups (next_try_at) WHERE status = 'pending';
