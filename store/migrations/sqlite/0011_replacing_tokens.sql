-- An enrollment token may replace an id's accepted key only when an administrator asked for it
-- (`halite key token create <id> --replace`); existing tokens do not.
ALTER TABLE tokens ADD COLUMN replaces_key INTEGER NOT NULL DEFAULT 0;
