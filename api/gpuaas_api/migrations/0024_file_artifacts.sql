-- File artifacts (docs/control-service.md "File artifacts"): a file addressed by its sha256 digest (model weights,
-- a data set, a script), its bytes in the content store or fetched from a source URL under an allowlisted prefix
-- (the file_artifact_sources setting). The reference is `<name>@sha256:<hex>`; registry is '' and repository the
-- name, so every artifact keeps the same columns.
ALTER TABLE artifacts DROP CONSTRAINT artifacts_kind_check;
ALTER TABLE artifacts ADD CONSTRAINT artifacts_kind_check
    CHECK (kind IN ('oci', 'launchable', 'controller', 'collection', 'file'));
-- size in bytes and media type: what the publisher's upload or declaration said (NULL for other kinds); source: the
-- URL the hosts fetch the bytes from, NULL when the content store holds them.
ALTER TABLE artifacts ADD COLUMN size bigint CHECK (size IS NULL OR size >= 0);
ALTER TABLE artifacts ADD COLUMN media_type text;
ALTER TABLE artifacts ADD COLUMN source text;
ALTER TABLE artifacts ADD CONSTRAINT artifacts_file_fields
    CHECK (kind = 'file' OR (size IS NULL AND media_type IS NULL AND source IS NULL));

-- The files a version pins, one per name its adapter declares (adapter `files:`): every run gets each by digest.
CREATE TABLE version_files (
    version_id  uuid NOT NULL REFERENCES app_versions(id),
    name        text NOT NULL,
    artifact_id uuid NOT NULL REFERENCES artifacts(id),
    PRIMARY KEY (version_id, name)
);
CREATE INDEX version_files_artifact ON version_files (artifact_id);
