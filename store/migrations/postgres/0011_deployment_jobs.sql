-- The job a deployment waits on, in a column of its own: a job's end finishes the deployment
-- only while the deployment still waits on that job (another master may have updated it, with a
-- new job, since the end was read). Rows from before carry none until next written, and are
-- finished as before.
ALTER TABLE deployments ADD COLUMN jid TEXT NOT NULL DEFAULT '';
