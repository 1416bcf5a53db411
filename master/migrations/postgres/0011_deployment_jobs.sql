-- The job a deployment waits on, in a column of its own: a job's end finishes the deployment
-- only while the deployment still waits on that job (another master may have updated it, with a
-- new job, since the end was read), and a master that hears the end of a job it did not publish
-- finds its deployment by it. Rows from before carry none until next written, and are finished
-- as before.
ALTER TABLE deployments ADD COLUMN jid TEXT NOT NULL DEFAULT '';
CREATE INDEX deployments_jid ON deployments(jid);
