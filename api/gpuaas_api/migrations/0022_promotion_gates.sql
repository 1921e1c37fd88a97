-- Gated promotion (docs/control-service.md "Promotion gates"): what moving an artifact or a version up proves.
--
-- A gate is one run of the checks the platform defines for a step:
--   staging: a collection artifact draft -> staged: the descriptor checks, ansible-lint (production profile) and
--            ansible-test sanity on the exact build (settings promotion_staging_checks);
--   smoke:   a version draft -> canary: a deploy and a decommission of the version on allocations the publisher
--            names, through the ordinary operation path (an instance marked with smoke_gate_id).
-- A worker claims a queued gate (lease, as operations do), records each check's result, and on a pass makes the
-- transition itself; a failed gate leaves the artifact or version where it was, with the reason recorded.
CREATE TABLE promotion_gates (
    id                uuid PRIMARY KEY DEFAULT gen_random_uuid(),
    seq               bigint GENERATED ALWAYS AS IDENTITY UNIQUE,
    kind              text NOT NULL CHECK (kind IN ('staging', 'smoke')),
    app_slug          text NOT NULL REFERENCES app_manifests(slug),
    -- staging: the artifact being staged; smoke: the collection artifact of the version under test
    artifact_id       uuid NOT NULL REFERENCES artifacts(id),
    app_version_id    uuid REFERENCES app_versions(id) CHECK ((kind = 'smoke') = (app_version_id IS NOT NULL)),
    status            text NOT NULL DEFAULT 'queued' CHECK (status IN ('queued', 'running', 'passed', 'failed')),
    -- the checks as they ran: [{name, status: passed|failed, summary, findings: [{rule, path, line, message}]}]
    checks            jsonb NOT NULL DEFAULT '[]'::jsonb,
    -- smoke: {project_id, allocation_ids, topology, instance_id, ...}: what the publisher named and what ran
    smoke             jsonb,
    -- one line: why the gate failed (NULL while it runs or when it passed)
    reason            text,
    correlation_id    text NOT NULL,
    requested_by_kind text NOT NULL,
    requested_by      uuid,
    lease_owner       text,
    lease_expires_at  timestamptz,
    created_at        timestamptz NOT NULL DEFAULT now(),
    started_at        timestamptz,
    finished_at       timestamptz
);
CREATE INDEX promotion_gates_open ON promotion_gates (seq) WHERE status IN ('queued', 'running');
CREATE INDEX promotion_gates_artifact ON promotion_gates (artifact_id, seq);
CREATE INDEX promotion_gates_version ON promotion_gates (app_version_id, seq) WHERE app_version_id IS NOT NULL;
-- One open gate of a kind per artifact (staging) or version (smoke): a second request gets the open one.
CREATE UNIQUE INDEX promotion_gates_one_open ON promotion_gates (kind, COALESCE(app_version_id, artifact_id))
    WHERE status IN ('queued', 'running');

-- When an artifact entered its status: retirement waits promotion_retire_grace_seconds after deprecation.
ALTER TABLE artifacts ADD COLUMN status_changed_at timestamptz NOT NULL DEFAULT now();
UPDATE artifacts SET status_changed_at = updated_at;

-- The instance a smoke gate deploys and decommissions: not a tenant's canary instance, never counted as one.
ALTER TABLE app_instances ADD COLUMN smoke_gate_id uuid REFERENCES promotion_gates(id);

-- The catalog's timeline: every gate's outcome (and what else happens to an app's artifacts and versions that a
-- publisher follows), with the correlation id of the request or run it came from. tenant_id: the app's tenant for
-- a private app (NULL: the platform catalog), so that a listing shows a tenant only its own catalog's events.
CREATE TABLE catalog_events (
    id              bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    app_slug        text NOT NULL REFERENCES app_manifests(slug),
    tenant_id       uuid REFERENCES tenants(id),
    artifact_id     uuid REFERENCES artifacts(id),
    app_version_id  uuid REFERENCES app_versions(id),
    gate_id         uuid REFERENCES promotion_gates(id),
    type            text NOT NULL,
    payload         jsonb NOT NULL DEFAULT '{}'::jsonb,
    correlation_id  text NOT NULL,
    occurred_at     timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX catalog_events_app ON catalog_events (app_slug, id);
CREATE INDEX catalog_events_artifact ON catalog_events (artifact_id, id) WHERE artifact_id IS NOT NULL;
CREATE INDEX catalog_events_correlation ON catalog_events (correlation_id);
