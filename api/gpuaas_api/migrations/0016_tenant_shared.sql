-- Issue 26: tenant-shared runtimes (docs/tenant-shared.md). A tenant-shared runtime is an instance with
-- control_plane_scope 'tenant', owned like every instance by one project (its owner: the tenant's cost center
-- for the control plane); other projects of the tenant attach to it, contribute workers and submit into their
-- own accounts.

-- Until now a mode or a scope was only a label: every instance deployed and served its own project alone. Say so,
-- so that no earlier instance becomes a shared runtime without attachments (or two of them break the index below).
UPDATE app_instances SET operating_mode = 'tenant_dedicated', control_plane_scope = 'project',
                         tenant_boundary_mode = 'tenant_isolated'
 WHERE operating_mode <> 'tenant_dedicated' OR control_plane_scope <> 'project';

-- One shared runtime per tenant, app and environment.
ALTER TABLE app_instances ADD COLUMN environment text NOT NULL DEFAULT 'default'
    CHECK (environment ~ '^[a-z][a-z0-9-]{0,31}$');
CREATE UNIQUE INDEX app_instances_one_shared_runtime ON app_instances (tenant_id, app_slug, environment)
    WHERE control_plane_scope = 'tenant' AND deleted_at IS NULL;
-- The projects a tenant admin may attach to it (their entitlement is checked too).
ALTER TABLE app_instances ADD COLUMN attachable_project_ids uuid[] NOT NULL DEFAULT '{}';

-- A member placed on another attached project's allocation: that project contributed it, owns its capacity and
-- is charged for it. NULL: the instance's own project.
ALTER TABLE app_instance_members ADD COLUMN source_project_id uuid REFERENCES projects(id);

-- A project attached to a shared runtime: its principals may use it, into its own account.
CREATE TABLE instance_attachments (
    id          uuid PRIMARY KEY DEFAULT gen_random_uuid(),
    seq         bigint GENERATED ALWAYS AS IDENTITY UNIQUE,
    instance_id uuid NOT NULL REFERENCES app_instances(id),
    tenant_id   uuid NOT NULL REFERENCES tenants(id),
    project_id  uuid NOT NULL REFERENCES projects(id),
    -- the instance's own project, attached when the runtime is created and never detached
    owner       boolean NOT NULL DEFAULT false,
    status      text NOT NULL CHECK (status IN ('attached', 'detached')),
    reason      text NOT NULL DEFAULT '',
    created_by  uuid,
    created_at  timestamptz NOT NULL DEFAULT now(),
    detached_by uuid,
    detached_at timestamptz
);
CREATE UNIQUE INDEX instance_attachments_live ON instance_attachments (instance_id, project_id)
    WHERE status = 'attached';
CREATE INDEX instance_attachments_project ON instance_attachments (project_id) WHERE status = 'attached';

-- Cross-project submission, denied by default: a grant lets one principal of an attached project submit into
-- another attached project's account; it adds exactly that association in the runtime.
CREATE TABLE submit_grants (
    id                uuid PRIMARY KEY DEFAULT gen_random_uuid(),
    seq               bigint GENERATED ALWAYS AS IDENTITY UNIQUE,
    instance_id       uuid NOT NULL REFERENCES app_instances(id),
    principal_kind    text NOT NULL CHECK (principal_kind IN ('user', 'service_account')),
    principal_id      uuid NOT NULL,
    target_project_id uuid NOT NULL REFERENCES projects(id),
    reason            text NOT NULL,
    created_by        uuid NOT NULL,
    created_at        timestamptz NOT NULL DEFAULT now(),
    revoked_by        uuid,
    revoked_at        timestamptz
);
CREATE UNIQUE INDEX submit_grants_live ON submit_grants (instance_id, principal_kind, principal_id, target_project_id)
    WHERE revoked_at IS NULL;
