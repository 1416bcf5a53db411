-- Each write of a deployment group is guarded by the revision it read: a write made on an
-- older read (another master's update in between, a retry after a write that landed) is refused
-- instead of overwriting.
ALTER TABLE deployment_groups ADD COLUMN revision BIGINT NOT NULL DEFAULT 1;
