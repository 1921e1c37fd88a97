-- Issue 9: runtime secrets of purpose artifact_pull: a credential per run, for pulling one repository,
-- live until the run ends (revoked_at) or its timeout passes (expires_at). Only the password's SHA-256
-- is kept; the run gets the password itself.

CREATE TABLE runtime_secrets (
    id            uuid PRIMARY KEY DEFAULT gen_random_uuid(),
    instance_id   uuid NOT NULL REFERENCES app_instances(id),
    operation_id  uuid NOT NULL REFERENCES operations(id),
    purpose       text NOT NULL CHECK (purpose IN ('artifact_pull')),
    registry      text NOT NULL,
    repository    text NOT NULL,
    username      text NOT NULL UNIQUE,
    secret_sha256 bytea NOT NULL,
    expires_at    timestamptz NOT NULL,
    revoked_at    timestamptz,
    created_at    timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX runtime_secrets_operation ON runtime_secrets (operation_id) WHERE revoked_at IS NULL;
