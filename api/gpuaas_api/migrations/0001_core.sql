-- Core schema of the control service: IAM, catalog with artifact trust, policy,
-- allocations, project-owned clustered app instances, audit log and event timeline.
-- Forward-only: never edit a migration that has shipped; add a new numbered file instead.

CREATE TABLE tenants (
    id           uuid PRIMARY KEY DEFAULT gen_random_uuid(),
    seq          bigint GENERATED ALWAYS AS IDENTITY UNIQUE,
    name         text NOT NULL UNIQUE,
    display_name text NOT NULL,
    created_at   timestamptz NOT NULL DEFAULT now()
);

CREATE TABLE projects (
    id           uuid PRIMARY KEY DEFAULT gen_random_uuid(),
    seq          bigint GENERATED ALWAYS AS IDENTITY UNIQUE,
    tenant_id    uuid NOT NULL REFERENCES tenants(id),
    name         text NOT NULL,
    display_name text NOT NULL,
    created_at   timestamptz NOT NULL DEFAULT now(),
    UNIQUE (tenant_id, name)
);

-- Users belong to one tenant, or to none (platform operators).
CREATE TABLE users (
    id           uuid PRIMARY KEY DEFAULT gen_random_uuid(),
    seq          bigint GENERATED ALWAYS AS IDENTITY UNIQUE,
    tenant_id    uuid REFERENCES tenants(id),
    email        text NOT NULL UNIQUE,
    display_name text NOT NULL,
    disabled     boolean NOT NULL DEFAULT false,
    created_at   timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX users_tenant ON users (tenant_id, seq);

-- Service accounts are owned by exactly one project and act only inside it.
CREATE TABLE service_accounts (
    id           uuid PRIMARY KEY DEFAULT gen_random_uuid(),
    seq          bigint GENERATED ALWAYS AS IDENTITY UNIQUE,
    tenant_id    uuid NOT NULL REFERENCES tenants(id),
    project_id   uuid NOT NULL REFERENCES projects(id),
    name         text NOT NULL,
    description  text NOT NULL DEFAULT '',
    disabled     boolean NOT NULL DEFAULT false,
    created_at   timestamptz NOT NULL DEFAULT now(),
    UNIQUE (project_id, name)
);

CREATE TABLE role_bindings (
    id             uuid PRIMARY KEY DEFAULT gen_random_uuid(),
    seq            bigint GENERATED ALWAYS AS IDENTITY UNIQUE,
    principal_kind text NOT NULL CHECK (principal_kind IN ('user', 'service_account')),
    principal_id   uuid NOT NULL,
    role           text NOT NULL,
    scope_kind     text NOT NULL CHECK (scope_kind IN ('platform', 'tenant', 'project')),
    tenant_id      uuid REFERENCES tenants(id),
    project_id     uuid REFERENCES projects(id),
    created_at     timestamptz NOT NULL DEFAULT now(),
    created_by     uuid,
    CHECK ((scope_kind = 'platform' AND tenant_id IS NULL AND project_id IS NULL)
        OR (scope_kind = 'tenant' AND tenant_id IS NOT NULL AND project_id IS NULL)
        OR (scope_kind = 'project' AND tenant_id IS NOT NULL AND project_id IS NOT NULL))
);
CREATE UNIQUE INDEX role_bindings_unique ON role_bindings
    (principal_kind, principal_id, role, scope_kind,
     coalesce(tenant_id, '00000000-0000-0000-0000-000000000000'::uuid),
     coalesce(project_id, '00000000-0000-0000-0000-000000000000'::uuid));
CREATE INDEX role_bindings_principal ON role_bindings (principal_kind, principal_id);
CREATE INDEX role_bindings_tenant ON role_bindings (tenant_id, seq);

-- Only the sha256 of a token is stored; the token itself is shown once.
CREATE TABLE api_tokens (
    id             uuid PRIMARY KEY DEFAULT gen_random_uuid(),
    seq            bigint GENERATED ALWAYS AS IDENTITY UNIQUE,
    token_hash     text NOT NULL UNIQUE,
    principal_kind text NOT NULL CHECK (principal_kind IN ('user', 'service_account')),
    principal_id   uuid NOT NULL,
    name           text NOT NULL,
    created_at     timestamptz NOT NULL DEFAULT now(),
    expires_at     timestamptz NOT NULL,
    revoked_at     timestamptz,
    last_used_at   timestamptz
);
CREATE INDEX api_tokens_principal ON api_tokens (principal_kind, principal_id, seq);

-- Catalog -----------------------------------------------------------------------------------

CREATE TABLE app_manifests (
    slug            text PRIMARY KEY,
    seq             bigint GENERATED ALWAYS AS IDENTITY UNIQUE,
    display_name    text NOT NULL,
    description     text NOT NULL DEFAULT '',
    runtime_backend text NOT NULL,
    operating_modes text[] NOT NULL,
    created_at      timestamptz NOT NULL DEFAULT now()
);

CREATE TABLE artifacts (
    id         uuid PRIMARY KEY DEFAULT gen_random_uuid(),
    seq        bigint GENERATED ALWAYS AS IDENTITY UNIQUE,
    app_slug   text NOT NULL REFERENCES app_manifests(slug),
    kind       text NOT NULL CHECK (kind IN ('oci', 'launchable', 'controller')),
    reference  text NOT NULL,
    registry   text NOT NULL,
    repository text NOT NULL,
    digest     text NOT NULL,
    status     text NOT NULL DEFAULT 'draft'
               CHECK (status IN ('draft', 'staged', 'canary', 'active', 'deprecated', 'retired')),
    created_at timestamptz NOT NULL DEFAULT now(),
    updated_at timestamptz NOT NULL DEFAULT now(),
    UNIQUE (app_slug, reference)
);

CREATE TABLE app_versions (
    id              uuid PRIMARY KEY DEFAULT gen_random_uuid(),
    seq             bigint GENERATED ALWAYS AS IDENTITY UNIQUE,
    app_slug        text NOT NULL REFERENCES app_manifests(slug),
    version         text NOT NULL,
    artifact_id     uuid NOT NULL REFERENCES artifacts(id),
    compatibility   jsonb NOT NULL,
    runtime_profile jsonb NOT NULL,
    adapter         jsonb NOT NULL,
    status          text NOT NULL DEFAULT 'draft' CHECK (status IN ('draft', 'active', 'deprecated')),
    created_at      timestamptz NOT NULL DEFAULT now(),
    updated_at      timestamptz NOT NULL DEFAULT now(),
    UNIQUE (app_slug, version)
);
CREATE INDEX app_versions_artifact ON app_versions (artifact_id);

-- Policy ------------------------------------------------------------------------------------

CREATE TABLE entitlements (
    id         uuid PRIMARY KEY DEFAULT gen_random_uuid(),
    seq        bigint GENERATED ALWAYS AS IDENTITY UNIQUE,
    tenant_id  uuid NOT NULL REFERENCES tenants(id),
    project_id uuid NOT NULL REFERENCES projects(id),
    app_slug   text NOT NULL REFERENCES app_manifests(slug),
    created_at timestamptz NOT NULL DEFAULT now(),
    UNIQUE (project_id, app_slug)
);

CREATE TABLE policy_overlays (
    id         uuid PRIMARY KEY DEFAULT gen_random_uuid(),
    seq        bigint GENERATED ALWAYS AS IDENTITY UNIQUE,
    scope_kind text NOT NULL CHECK (scope_kind IN ('global', 'tenant', 'project')),
    tenant_id  uuid REFERENCES tenants(id),
    project_id uuid REFERENCES projects(id),
    dimension  text NOT NULL CHECK (dimension IN ('region', 'capacity_shape', 'sku', 'artifact_registry')),
    effect     text NOT NULL CHECK (effect IN ('allow', 'deny')),
    "values"   text[] NOT NULL,
    created_at timestamptz NOT NULL DEFAULT now(),
    CHECK ((scope_kind = 'global' AND tenant_id IS NULL AND project_id IS NULL)
        OR (scope_kind = 'tenant' AND tenant_id IS NOT NULL AND project_id IS NULL)
        OR (scope_kind = 'project' AND tenant_id IS NOT NULL AND project_id IS NOT NULL))
);
CREATE UNIQUE INDEX policy_overlays_unique ON policy_overlays
    (scope_kind, coalesce(tenant_id, '00000000-0000-0000-0000-000000000000'::uuid),
     coalesce(project_id, '00000000-0000-0000-0000-000000000000'::uuid), dimension, effect);

-- Allocations -------------------------------------------------------------------------------

CREATE TABLE allocations (
    id             uuid PRIMARY KEY DEFAULT gen_random_uuid(),
    seq            bigint GENERATED ALWAYS AS IDENTITY UNIQUE,
    tenant_id      uuid NOT NULL REFERENCES tenants(id),
    project_id     uuid NOT NULL REFERENCES projects(id),
    name           text NOT NULL,
    capacity_shape text NOT NULL CHECK (capacity_shape IN ('baremetal', 'gpu_slice')),
    sku            text,
    gpu_count      integer NOT NULL CHECK (gpu_count >= 0),
    region         text NOT NULL,
    exclusive      boolean NOT NULL,
    hosts          jsonb NOT NULL,
    created_at     timestamptz NOT NULL DEFAULT now(),
    released_at    timestamptz,
    UNIQUE (project_id, name)
);
CREATE INDEX allocations_project ON allocations (project_id, seq);

-- App instances -----------------------------------------------------------------------------

CREATE TABLE app_instances (
    id                   uuid PRIMARY KEY DEFAULT gen_random_uuid(),
    seq                  bigint GENERATED ALWAYS AS IDENTITY UNIQUE,
    tenant_id            uuid NOT NULL REFERENCES tenants(id),
    project_id           uuid NOT NULL REFERENCES projects(id),
    name                 text NOT NULL,
    app_slug             text NOT NULL REFERENCES app_manifests(slug),
    app_version_id       uuid NOT NULL REFERENCES app_versions(id),
    previous_version_id  uuid REFERENCES app_versions(id),
    status               text NOT NULL DEFAULT 'created'
                         CHECK (status IN ('created', 'starting', 'running', 'stopping', 'stopped', 'failed')),
    status_reason        text NOT NULL DEFAULT '',
    operating_mode       text NOT NULL CHECK (operating_mode IN ('tenant_dedicated', 'platform_managed')),
    operating_mode_hint  text,
    control_plane_scope  text NOT NULL CHECK (control_plane_scope IN ('project', 'tenant', 'platform')),
    runtime_backend      text NOT NULL,
    tenant_boundary_mode text NOT NULL CHECK (tenant_boundary_mode IN ('tenant_isolated', 'shared_service')),
    bound_capacity_shape text NOT NULL,
    topology             jsonb NOT NULL,
    labels               jsonb NOT NULL DEFAULT '{}'::jsonb,
    created_by           uuid,
    created_at           timestamptz NOT NULL DEFAULT now(),
    updated_at           timestamptz NOT NULL DEFAULT now(),
    deleted_at           timestamptz
);
CREATE UNIQUE INDEX app_instances_live_name ON app_instances (project_id, name) WHERE deleted_at IS NULL;
CREATE INDEX app_instances_project ON app_instances (project_id, seq DESC) WHERE deleted_at IS NULL;
CREATE INDEX app_instances_version ON app_instances (app_version_id) WHERE deleted_at IS NULL;

CREATE TABLE app_instance_members (
    id              uuid PRIMARY KEY DEFAULT gen_random_uuid(),
    seq             bigint GENERATED ALWAYS AS IDENTITY UNIQUE,
    instance_id     uuid NOT NULL REFERENCES app_instances(id),
    role            text NOT NULL,
    allocation_id   uuid NOT NULL REFERENCES allocations(id),
    host_name       text NOT NULL,
    node_name       text NOT NULL,
    status          text NOT NULL DEFAULT 'pending'
                    CHECK (status IN ('pending', 'joining', 'active', 'draining', 'drained',
                                      'removing', 'removed', 'failed')),
    status_reason   text NOT NULL DEFAULT '',
    last_correlation_id text,
    created_at      timestamptz NOT NULL DEFAULT now(),
    updated_at      timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX app_instance_members_instance ON app_instance_members (instance_id, seq);
CREATE INDEX app_instance_members_allocation ON app_instance_members (allocation_id) WHERE status <> 'removed';
-- One live member per role and host inside an instance.
CREATE UNIQUE INDEX app_instance_members_live_host ON app_instance_members (instance_id, role, allocation_id, host_name)
    WHERE status <> 'removed';

-- Audit and events --------------------------------------------------------------------------
-- Both carry the same correlation context so one correlation_id explains an incident end to end.

CREATE TABLE audit_log (
    id                  bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    occurred_at         timestamptz NOT NULL DEFAULT now(),
    correlation_id      text NOT NULL,
    actor_kind          text NOT NULL,
    actor_id            uuid,
    action              text NOT NULL,
    target_kind         text NOT NULL,
    target_id           text,
    break_glass         boolean NOT NULL DEFAULT false,
    reason              text NOT NULL DEFAULT '',
    before              jsonb,
    after               jsonb,
    tenant_id           uuid,
    project_id          uuid,
    app_slug            text,
    app_instance_id     uuid,
    operating_mode      text,
    control_plane_scope text,
    runtime_backend     text
);
CREATE INDEX audit_log_tenant ON audit_log (tenant_id, id DESC);
CREATE INDEX audit_log_project ON audit_log (project_id, id DESC);
CREATE INDEX audit_log_correlation ON audit_log (correlation_id);

CREATE TABLE instance_events (
    id                  bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    app_instance_id     uuid NOT NULL REFERENCES app_instances(id),
    member_id           uuid REFERENCES app_instance_members(id),
    type                text NOT NULL,
    occurred_at         timestamptz NOT NULL DEFAULT now(),
    payload             jsonb NOT NULL DEFAULT '{}'::jsonb,
    correlation_id      text NOT NULL,
    tenant_id           uuid NOT NULL,
    project_id          uuid NOT NULL,
    app_slug            text NOT NULL,
    operating_mode      text NOT NULL,
    control_plane_scope text NOT NULL,
    runtime_backend     text NOT NULL
);
CREATE INDEX instance_events_instance ON instance_events (app_instance_id, id);
CREATE INDEX instance_events_correlation ON instance_events (correlation_id);
