-- Issue 22 (finding 1): a run may outlive the operation that started it (its worker was killed and
-- another worker ended the operation through lease recovery). The operation keeps the machine that
-- ran its latest attempt (run_host, its host name) after the lease is released, and when that run was
-- proven to have ended (run_ended_at): by the worker that recorded its outcome, or by a sweep on the
-- run's own machine. Until then the operation says its run may still be live.
ALTER TABLE operations ADD COLUMN run_host text, ADD COLUMN run_ended_at timestamptz;
-- The sweep's question, on every loop of every worker: which ended or re-queued operations of this
-- machine have a run not proven ended? (Rows from before this migration have no run_host.)
CREATE INDEX operations_runs_unproven ON operations (run_host)
    WHERE run_ended_at IS NULL AND run_host IS NOT NULL AND status <> 'running';
