-- Issue 8: an app version's artifact may be a collection build held in the platform's content store
-- (kind 'collection'); a run executes exactly that build, by its digest.

ALTER TABLE artifacts DROP CONSTRAINT artifacts_kind_check;
ALTER TABLE artifacts ADD CONSTRAINT artifacts_kind_check CHECK (kind IN ('oci', 'launchable', 'controller', 'collection'));
