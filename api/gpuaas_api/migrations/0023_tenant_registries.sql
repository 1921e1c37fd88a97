-- Tenant-private registries (docs/control-service.md "Tenant-private registries"): a tenant admin registers a
-- registry of its own (a host and its credentials) whose images back the tenant's private app versions; runs of the
-- tenant's instances get its credentials. Only hosts a platform admin allowlisted may be registered.
CREATE TABLE registry_allowlist (
    host            text PRIMARY KEY,
    seq             bigint GENERATED ALWAYS AS IDENTITY UNIQUE,
    note            text NOT NULL DEFAULT '',
    added_by_kind   text NOT NULL,
    added_by        uuid,
    created_at      timestamptz NOT NULL DEFAULT now()
);

-- The password is Fernet-encrypted with the service's secret key (secrets/service.py cipher), never kept in clear
-- and never answered. A deleted registry keeps its row without the password (deleted_at): a run of a version that
-- pins an image of it then fails with that reason instead of pulling without credentials.
CREATE TABLE tenant_registries (
    id                  uuid PRIMARY KEY DEFAULT gen_random_uuid(),
    seq                 bigint GENERATED ALWAYS AS IDENTITY UNIQUE,
    tenant_id           uuid NOT NULL REFERENCES tenants(id),
    name                text NOT NULL,
    host                text NOT NULL,
    username            text NOT NULL,
    password_sealed     bytea CHECK ((deleted_at IS NULL) = (password_sealed IS NOT NULL)),
    created_by_kind     text NOT NULL,
    created_by          uuid,
    created_at          timestamptz NOT NULL DEFAULT now(),
    credentials_rotated_at timestamptz,
    deleted_at          timestamptz
);
CREATE UNIQUE INDEX tenant_registries_host ON tenant_registries (tenant_id, host) WHERE deleted_at IS NULL;
CREATE UNIQUE INDEX tenant_registries_name ON tenant_registries (tenant_id, name) WHERE deleted_at IS NULL;
CREATE INDEX tenant_registries_by_host ON tenant_registries (host);
