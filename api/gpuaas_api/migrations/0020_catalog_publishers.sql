-- Publishers and tenant-private apps (docs/control-service.md "Publishers"): an app is in the platform catalog
-- (tenant_id NULL: seen and used by every tenant) or in one tenant's private catalog (seen and used only inside
-- that tenant). Artifacts and versions are in their app's catalog.
ALTER TABLE app_manifests ADD COLUMN tenant_id uuid REFERENCES tenants(id);
