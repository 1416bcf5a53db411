CREATE TABLE principals (
    name TEXT PRIMARY KEY,
    public_key BLOB NOT NULL,
    acl TEXT NOT NULL,
    updated_at INTEGER NOT NULL
);
