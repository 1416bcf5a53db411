-- A master that hears the end of a job it did not publish finds the deployment in progress on
-- it by its job (rows from before the job had a column, with it empty, by their document).
CREATE INDEX deployments_jid ON deployments(jid);
