-- Tokens get an id to list and revoke them by (the first 6 bytes of their hash, in hex), and
-- gateway tokens an expiry (NULL: never).
ALTER TABLE api_tokens ADD COLUMN id TEXT;
ALTER TABLE api_tokens ADD COLUMN expires_at INTEGER;
UPDATE api_tokens SET id = lower(hex(substr(token_hash, 1, 6)));
ALTER TABLE tokens ADD COLUMN id TEXT;
UPDATE tokens SET id = lower(hex(substr(token_hash, 1, 6)));
