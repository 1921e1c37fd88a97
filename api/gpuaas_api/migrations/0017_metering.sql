-- Issue 26: app-runtime usage metering (docs/metering.md). Records of what an instance used, each charged to one
-- project, written idempotently by the metering pass (api/gpuaas_api/metering/): a member's live seconds per UTC
-- hour and every job allocation its scheduler ran. Never an allocation's GPU-hours: those are billed apart.

CREATE TABLE usage_records (
    id                uuid PRIMARY KEY DEFAULT gen_random_uuid(),
    seq               bigint GENERATED ALWAYS AS IDENTITY UNIQUE,
    dimension         text NOT NULL CHECK (dimension IN ('member_seconds', 'job')),
    tenant_id         uuid NOT NULL REFERENCES tenants(id),
    -- the project charged (metering/attribution.py), and as what
    project_id        uuid NOT NULL REFERENCES projects(id),
    charged_as        text NOT NULL CHECK (charged_as IN ('project', 'tenant_shared_owner')),
    -- a job whose account names no project of the instance: charged to the instance's own project
    unattributed      boolean NOT NULL DEFAULT false,
    instance_id       uuid NOT NULL REFERENCES app_instances(id),
    -- member_seconds: one row per member and UTC hour
    member_id         uuid REFERENCES app_instance_members(id),
    role              text,
    host_name         text,
    node_name         text,
    bucket_start      timestamptz,
    seconds           integer CHECK (seconds BETWEEN 0 AND 3600),
    -- job: one row per allocation, keyed by instance, job id and submit time (a runtime may reuse an id after it lost
    -- its state)
    job_id            text,
    submit_time       timestamptz,
    account           text,
    runtime_user      text,
    state             text,
    start_time        timestamptz,
    end_time          timestamptz,
    elapsed_seconds   bigint CHECK (elapsed_seconds >= 0),
    cpus              integer,
    gpus              integer,
    memory_mb         bigint,
    nodes             integer,
    core_seconds      bigint,
    gpu_seconds       bigint,
    memory_mb_seconds bigint,
    -- when the usage counts in a window: an hour's start, a job's end
    counted_at        timestamptz NOT NULL GENERATED ALWAYS AS (coalesce(bucket_start, end_time)) STORED,
    recorded_at       timestamptz NOT NULL DEFAULT now(),
    updated_at        timestamptz NOT NULL DEFAULT now(),
    CHECK (dimension <> 'member_seconds' OR (member_id IS NOT NULL AND bucket_start IS NOT NULL AND seconds IS NOT NULL
                                             AND job_id IS NULL)),
    CHECK (dimension <> 'job' OR (job_id IS NOT NULL AND submit_time IS NOT NULL AND end_time IS NOT NULL
                                  AND member_id IS NULL AND bucket_start IS NULL))
);
-- The keys a pass upserts by: reading a window again never adds a second row.
CREATE UNIQUE INDEX usage_records_member_hour ON usage_records (member_id, bucket_start)
    WHERE dimension = 'member_seconds';
CREATE UNIQUE INDEX usage_records_job ON usage_records (instance_id, job_id, submit_time) WHERE dimension = 'job';
CREATE INDEX usage_records_project ON usage_records (project_id, counted_at);
CREATE INDEX usage_records_tenant ON usage_records (tenant_id, counted_at);
CREATE INDEX usage_records_instance ON usage_records (instance_id, dimension, counted_at);

-- How far each instance is metered, per dimension. A pass locks the row (FOR UPDATE SKIP LOCKED: one worker meters
-- an instance at a time) and moves metered_until in the transaction that writes the records up to it.
CREATE TABLE metering_cursors (
    instance_id   uuid NOT NULL REFERENCES app_instances(id),
    dimension     text NOT NULL CHECK (dimension IN ('member_seconds', 'job')),
    metered_until timestamptz NOT NULL,
    last_pass_at  timestamptz,
    -- why the last pass could not read this instance (its gateway did not answer, say); NULL once one could
    last_error    text,
    last_error_at timestamptz,
    PRIMARY KEY (instance_id, dimension)
);

-- A member's live time comes from its status moves on the timeline (instances/service.py set_member_status): this
-- index reads them without the runs' task events around them.
CREATE INDEX instance_events_member_moves ON instance_events (app_instance_id, id)
    WHERE member_id IS NOT NULL AND type LIKE 'member\_%' AND payload ? 'to';
