-- Where each running master answers its readiness (`/readyz`), refreshed every few seconds
-- while it reaches the database: a master that cannot reach it asks the others there, from
-- the list it read last, before handing its minions over. By address: a cluster's masters may
-- share a key and an id.
CREATE TABLE master_readiness (
    ready_url TEXT COLLATE "C" PRIMARY KEY,
    master_id TEXT COLLATE "C" NOT NULL,
    public_key BYTEA NOT NULL,
    -- The database's time, in milliseconds since the epoch.
    updated_at BIGINT NOT NULL
);
