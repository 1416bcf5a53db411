CREATE TABLE keys (
    id TEXT NOT NULL,
    public_key BLOB NOT NULL,
    state TEXT NOT NULL,
    updated_at INTEGER NOT NULL,
    PRIMARY KEY (id, public_key)
);
CREATE TABLE tokens (
    token_hash BLOB PRIMARY KEY,
    minion TEXT NOT NULL,
    expires_at INTEGER NOT NULL,
    used_at INTEGER
);
CREATE TABLE minions (
    id TEXT PRIMARY KEY,
    grains TEXT NOT NULL,
    functions TEXT NOT NULL,
    last_seen INTEGER NOT NULL
);
CREATE TABLE jobs (
    jid TEXT PRIMARY KEY,
    function TEXT NOT NULL,
    target_kind TEXT NOT NULL,
    target_expr TEXT NOT NULL,
    args TEXT NOT NULL,
    kwargs TEXT NOT NULL,
    caller TEXT NOT NULL,
    created_at INTEGER NOT NULL,
    timeout_ms INTEGER NOT NULL,
    ttl_ms INTEGER NOT NULL,
    body BLOB NOT NULL,
    signature BLOB NOT NULL
);
CREATE TABLE job_minions (
    jid TEXT NOT NULL REFERENCES jobs(jid) ON DELETE CASCADE,
    minion TEXT NOT NULL,
    state TEXT NOT NULL,
    ret TEXT,
    updated_at INTEGER NOT NULL,
    PRIMARY KEY (jid, minion)
);
CREATE INDEX job_minions_state ON job_minions(state);
CREATE INDEX jobs_created ON jobs(created_at);
