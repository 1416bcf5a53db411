-- Tokens get an id to list and revoke them by (the first 6 bytes of their hash, in hex), and
-- gateway tokens an expiry (NULL: never).
ALTER TABLE api_tokens ADD COLUMN id TEXT, ADD COLUMN expires_at BIGINT;
UPDATE api_tokens SET id = encode(substring(token_hash from 1 for 6), 'hex');
ALTER TABLE tokens ADD COLUMN id TEXT;
UPDATE tokens SET id = encode(substring(token_hash from 1 for 6), 'hex');
