CREATE TABLE software_configs (
    id TEXT PRIMARY KEY,
    body TEXT NOT NULL,
    created_at INTEGER NOT NULL
);
CREATE INDEX software_configs_created ON software_configs(created_at);
CREATE TABLE deployments (
    id TEXT PRIMARY KEY,
    server_id TEXT NOT NULL,
    status TEXT NOT NULL,
    relay_pending INTEGER NOT NULL,
    body TEXT NOT NULL,
    created_at INTEGER NOT NULL,
    updated_at INTEGER NOT NULL
);
CREATE INDEX deployments_server ON deployments(server_id);
CREATE INDEX deployments_open ON deployments(status, relay_pending);
CREATE TABLE api_tokens (
    token_hash BLOB PRIMARY KEY,
    principal TEXT NOT NULL,
    created_at INTEGER NOT NULL
);
