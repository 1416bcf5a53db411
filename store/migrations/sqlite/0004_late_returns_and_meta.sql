ALTER TABLE job_minions ADD COLUMN late INTEGER NOT NULL DEFAULT 0;
CREATE TABLE meta (
    key TEXT PRIMARY KEY,
    value TEXT NOT NULL
);
INSERT INTO meta (key, value) SELECT 'last_jid', jid FROM jobs ORDER BY jid DESC LIMIT 1;
