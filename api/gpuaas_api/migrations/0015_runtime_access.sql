-- Issue 25: tenants use their clusters through the platform (docs/scheduler.md).
-- access_sync applies an instance's access map after a binding or a key changed.
ALTER TABLE operations DROP CONSTRAINT operations_kind_check;
ALTER TABLE operations ADD CONSTRAINT operations_kind_check CHECK (kind IN ('deploy', 'member_add', 'member_drain',
    'member_resume', 'member_remove', 'member_replace', 'reconfigure', 'upgrade', 'rollback', 'access_sync',
    'decommission', 'refresh'));

-- A principal's runtime identity: its Unix user name and uid, the same on every instance of the platform, so
-- that a job's owner on any cluster names one principal. Kept after the principal is disabled: a uid is never
-- given to someone else.
CREATE SEQUENCE runtime_identity_uid START 200001;
CREATE TABLE runtime_identities (
    principal_kind text NOT NULL CHECK (principal_kind IN ('user', 'service_account')),
    principal_id   uuid NOT NULL,
    name           text NOT NULL UNIQUE CHECK (name ~ '^[a-z][a-z0-9-]{0,31}$'),
    uid            integer NOT NULL UNIQUE DEFAULT nextval('runtime_identity_uid'),
    created_at     timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (principal_kind, principal_id)
);

-- Users' SSH public keys, synced to the login hosts of the instances they may log in to.
CREATE TABLE ssh_keys (
    id          uuid PRIMARY KEY DEFAULT gen_random_uuid(),
    seq         bigint GENERATED ALWAYS AS IDENTITY UNIQUE,
    user_id     uuid NOT NULL REFERENCES users(id),
    name        text NOT NULL,
    public_key  text NOT NULL,
    fingerprint text NOT NULL,
    created_at  timestamptz NOT NULL DEFAULT now(),
    UNIQUE (user_id, name),
    UNIQUE (user_id, fingerprint)
);
