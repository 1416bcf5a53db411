-- The audit trail: one hash chain per master (chain = its id), each record signed by it.
-- The filter columns repeat what the body (the hashed JSON) says; the body is what counts.
CREATE TABLE audit (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    chain TEXT NOT NULL,
    seq INTEGER NOT NULL,
    at_ms INTEGER NOT NULL,
    principal TEXT NOT NULL,
    tenant TEXT,
    action TEXT NOT NULL,
    decision TEXT NOT NULL,
    minions TEXT NOT NULL,
    body TEXT NOT NULL,
    prev TEXT NOT NULL,
    hash TEXT NOT NULL,
    signer TEXT NOT NULL,
    signature TEXT NOT NULL,
    UNIQUE (chain, seq)
);
CREATE INDEX audit_at ON audit(at_ms);
-- Where a pruned chain starts: its last record removed, signed.
CREATE TABLE audit_checkpoints (
    chain TEXT PRIMARY KEY,
    seq INTEGER NOT NULL,
    hash TEXT NOT NULL,
    signer TEXT NOT NULL,
    signature TEXT NOT NULL
);
