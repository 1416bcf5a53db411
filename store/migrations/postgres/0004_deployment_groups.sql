-- Deployment groups: one config to several servers, rolled out. The group is a JSON document;
-- `open` (1 while in progress) is what a restarted master resumes.
CREATE TABLE deployment_groups (
    id TEXT COLLATE "C" PRIMARY KEY,
    open BIGINT NOT NULL,
    body TEXT NOT NULL,
    created_at BIGINT NOT NULL,
    updated_at BIGINT NOT NULL
);
CREATE INDEX deployment_groups_open ON deployment_groups(open);
