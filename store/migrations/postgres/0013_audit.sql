-- The audit trail: one hash chain per master (chain = its id), each record signed by it.
-- The filter columns repeat what the body (the hashed JSON) says; the body is what counts.
CREATE TABLE audit (
    id BIGSERIAL PRIMARY KEY,
    chain TEXT NOT NULL,
    seq BIGINT NOT NULL,
    at_ms BIGINT NOT NULL,
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
    seq BIGINT NOT NULL,
    hash TEXT NOT NULL,
    signer TEXT NOT NULL,
    signature TEXT NOT NULL
);
