-- Key and principal rows carry the signature of the master that wrote them (its public key and
-- an ed25519 signature over the row); masters register their key, and their certificate from a
-- cluster key if they have one, so the others can check those signatures and announcements.
-- Rows from before are signed once by the master whose start applies this migration
-- (store/signed_rows.rs).
ALTER TABLE keys ADD COLUMN signer BYTEA;
ALTER TABLE keys ADD COLUMN signature BYTEA;
ALTER TABLE principals ADD COLUMN signer BYTEA;
ALTER TABLE principals ADD COLUMN signature BYTEA;
CREATE TABLE masters (
    public_key BYTEA PRIMARY KEY,
    id TEXT COLLATE "C" NOT NULL,
    certificate BYTEA,
    updated_at BIGINT NOT NULL
);
