-- A job's rollout (what was asked, where it is), as JSON; NULL for a job sent to all at once.
ALTER TABLE jobs ADD COLUMN rollout TEXT;
-- `queued` (not yet dispatched by its rollout) is unfinished too.
DROP INDEX job_minions_unfinished;
CREATE INDEX job_minions_unfinished ON job_minions(jid) WHERE state IN ('waiting', 'sent', 'running', 'queued');
