-- Deployment groups: one config to several servers, rolled out. The group is a JSON document;
-- `open` (1 while in progress) is what a restarted master resumes.
CREATE TABLE deployment_groups (
    id TEXT PRIMARY KEY,
    open INTEGER NOT NULL,
    body TEXT NOT NULL,
    created_at INTEGER NOT NULL,
    updated_at INTEGER NOT NULL
);
CREATE INDEX deployment_groups_open ON deployment_groups(open);
