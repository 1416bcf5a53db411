-- A job's rollout (what was asked, where it is), as JSON; NULL for a job sent to all at once.
ALTER TABLE jobs ADD COLUMN rollout TEXT;
