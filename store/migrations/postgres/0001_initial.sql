-- The PostgreSQL schema: the same tables as SQLite's final schema. Text keys compare byte-wise
-- (COLLATE "C") so jids, ids and names sort as they do on SQLite whatever the database's locale.
CREATE TABLE keys (
    id TEXT COLLATE "C" NOT NULL,
    public_key BYTEA NOT NULL,
    state TEXT NOT NULL,
    updated_at BIGINT NOT NULL,
    PRIMARY KEY (id, public_key)
);
CREATE TABLE tokens (
    token_hash BYTEA PRIMARY KEY,
    minion TEXT COLLATE "C" NOT NULL,
    expires_at BIGINT NOT NULL,
    used_at BIGINT
);
CREATE INDEX tokens_minion ON tokens(minion);
CREATE TABLE minions (
    id TEXT COLLATE "C" PRIMARY KEY,
    grains TEXT NOT NULL,
    functions TEXT NOT NULL,
    last_seen BIGINT NOT NULL
);
CREATE TABLE jobs (
    jid TEXT COLLATE "C" PRIMARY KEY,
    function TEXT NOT NULL,
    target_kind TEXT NOT NULL,
    target_expr TEXT NOT NULL,
    args TEXT NOT NULL,
    kwargs TEXT NOT NULL,
    caller TEXT COLLATE "C" NOT NULL,
    created_at BIGINT NOT NULL,
    timeout_ms BIGINT NOT NULL,
    ttl_ms BIGINT NOT NULL,
    body BYTEA NOT NULL,
    signature BYTEA NOT NULL
);
CREATE INDEX jobs_created ON jobs(created_at);
CREATE TABLE job_minions (
    jid TEXT COLLATE "C" NOT NULL REFERENCES jobs(jid) ON DELETE CASCADE,
    minion TEXT COLLATE "C" NOT NULL,
    state TEXT NOT NULL,
    ret TEXT,
    late BOOLEAN NOT NULL DEFAULT FALSE,
    updated_at BIGINT NOT NULL,
    PRIMARY KEY (jid, minion)
);
-- Only unfinished slots are looked up by state; the partial index stays small.
CREATE INDEX job_minions_unfinished ON job_minions(jid) WHERE state IN ('waiting', 'sent', 'running');
CREATE TABLE principals (
    name TEXT COLLATE "C" PRIMARY KEY,
    public_key BYTEA NOT NULL,
    acl TEXT NOT NULL,
    updated_at BIGINT NOT NULL
);
CREATE TABLE software_configs (
    id TEXT COLLATE "C" PRIMARY KEY,
    body TEXT NOT NULL,
    created_at BIGINT NOT NULL
);
CREATE INDEX software_configs_created ON software_configs(created_at);
CREATE TABLE deployments (
    id TEXT COLLATE "C" PRIMARY KEY,
    server_id TEXT COLLATE "C" NOT NULL,
    status TEXT NOT NULL,
    relay_pending BOOLEAN NOT NULL,
    body TEXT NOT NULL,
    created_at BIGINT NOT NULL,
    updated_at BIGINT NOT NULL
);
CREATE INDEX deployments_server ON deployments(server_id);
CREATE INDEX deployments_open ON deployments(status, relay_pending);
CREATE TABLE api_tokens (
    token_hash BYTEA PRIMARY KEY,
    principal TEXT COLLATE "C" NOT NULL,
    created_at BIGINT NOT NULL
);
CREATE TABLE meta (
    key TEXT COLLATE "C" PRIMARY KEY,
    value TEXT COLLATE "C" NOT NULL
);
