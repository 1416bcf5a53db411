-- Enrollment and gateway token rows carry the signature of the master that wrote them, like key
-- and principal rows: a row written past the masters enrolls nothing and opens no session.
-- Rows from before are signed once by the master whose start applies this migration
-- (store/signed_rows.rs). A token that replaces an accepted key names the key it replaces
-- (signed with the row): once that key is no longer the accepted one, the token replaces
-- nothing, even if its row is put back unused.
ALTER TABLE tokens ADD COLUMN signer BYTEA;
ALTER TABLE tokens ADD COLUMN signature BYTEA;
ALTER TABLE api_tokens ADD COLUMN signer BYTEA;
ALTER TABLE api_tokens ADD COLUMN signature BYTEA;
ALTER TABLE tokens ADD COLUMN replaced_key BYTEA;
