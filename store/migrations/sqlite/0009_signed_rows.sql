-- Key and principal rows carry the signature of the master that wrote them (its public key and
-- an ed25519 signature over the row); masters register their key, and their certificate from a
-- cluster key if they have one, so the others can check those signatures. Rows from before are
-- signed once by the master whose start applies this migration (store/signed_rows.rs).
ALTER TABLE keys ADD COLUMN signer BLOB;
ALTER TABLE keys ADD COLUMN signature BLOB;
ALTER TABLE principals ADD COLUMN signer BLOB;
ALTER TABLE principals ADD COLUMN signature BLOB;
CREATE TABLE masters (
    public_key BLOB PRIMARY KEY,
    id TEXT NOT NULL,
    certificate BLOB,
    updated_at INTEGER NOT NULL
);
