-- Issue 9: a version may pin a workload artifact (an OCI image, by its own digest) besides the
-- collection build its runs execute; a version may be in canary, bound only by instances that opted
-- in to canary versions.

ALTER TABLE app_versions ADD COLUMN workload_artifact_id uuid REFERENCES artifacts(id);
CREATE INDEX app_versions_workload_artifact ON app_versions (workload_artifact_id)
    WHERE workload_artifact_id IS NOT NULL;
ALTER TABLE app_versions DROP CONSTRAINT app_versions_status_check;
ALTER TABLE app_versions ADD CONSTRAINT app_versions_status_check
    CHECK (status IN ('draft', 'canary', 'active', 'deprecated'));
ALTER TABLE app_instances ADD COLUMN canary boolean NOT NULL DEFAULT false;
