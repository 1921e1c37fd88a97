-- Issue 7, finding 9: an email is unique within its tenant (platform operators: among themselves), not
-- across the platform, so creating a user cannot reveal that another tenant has that email.

ALTER TABLE users DROP CONSTRAINT users_email_key;
CREATE UNIQUE INDEX users_tenant_email ON users (coalesce(tenant_id, '00000000-0000-0000-0000-000000000000'::uuid),
                                                 lower(email));
