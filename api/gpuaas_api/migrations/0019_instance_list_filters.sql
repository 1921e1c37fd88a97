-- The instance list filtered by status or by app (GET /v1/projects/{id}/instances?status=...&app_slug=...):
-- newest first within the project and that status or app, so that a page reads its own rows however few
-- instances match. Without them the list walked the project's (project_id, seq) index and filtered: a status or
-- an app that few or none of the project's instances have read every row, 21-28 ms of PostgreSQL at 100,000
-- instances in one project and growing with it (bench/bench_api_instances.py --scale large).
CREATE INDEX app_instances_project_status ON app_instances (project_id, status, seq DESC) WHERE deleted_at IS NULL;
CREATE INDEX app_instances_project_app ON app_instances (project_id, app_slug, seq DESC) WHERE deleted_at IS NULL;
