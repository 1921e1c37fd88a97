-- Whose content a digest is (docs/control-service.md "Publishers"): one row per scope that uploaded it, the
-- uploader's tenant, or NULL for the platform's own principals. A tenant's principal reads a digest only when its
-- tenant or the platform uploaded it (platform content is every tenant's); the platform's principals read every
-- digest. Without it, any publisher could download another tenant's private build by digest, or learn from
-- HEAD or PUT that it is stored. The executor reads the store server-side and does not look here.
CREATE TABLE content_scopes (
    -- No foreign key: a store may keep its blobs on the local disk alone (ContentStore without a database); the
    -- blob itself is looked up in the store, and blobs are never deleted.
    digest      text NOT NULL CHECK (digest ~ '^sha256:[0-9a-f]{64}$'),
    tenant_id   uuid REFERENCES tenants(id),
    created_at  timestamptz NOT NULL DEFAULT now()
);
CREATE UNIQUE INDEX content_scopes_tenant ON content_scopes (digest, tenant_id) WHERE tenant_id IS NOT NULL;
CREATE UNIQUE INDEX content_scopes_platform ON content_scopes (digest) WHERE tenant_id IS NULL;

-- What the store held before scopes were recorded is the platform's, readable as before by every publisher: nothing
-- recorded whose upload was whose (a build a tenant's publisher uploaded since 0020 included).
INSERT INTO content_scopes (digest, tenant_id) SELECT digest, NULL FROM content_blobs;
