-- Bus events too large for a NOTIFY payload, kept for the other masters to read (briefly: rows
-- older than an hour are deleted as new ones arrive).
CREATE TABLE cluster_events (
    id BIGSERIAL PRIMARY KEY,
    tag TEXT NOT NULL,
    data TEXT NOT NULL,
    created_at BIGINT NOT NULL
);
CREATE INDEX cluster_events_created ON cluster_events(created_at);
