-- Everything an engine creates records the principal that created it: only it, root and
-- administrators see and change it. Rows stored before owners existed belong to root.
ALTER TABLE software_configs ADD COLUMN owner TEXT NOT NULL DEFAULT 'root';
ALTER TABLE deployments ADD COLUMN owner TEXT NOT NULL DEFAULT 'root';
ALTER TABLE tokens ADD COLUMN owner TEXT NOT NULL DEFAULT 'root';
ALTER TABLE api_tokens ADD COLUMN owner TEXT NOT NULL DEFAULT 'root';
CREATE INDEX software_configs_owner ON software_configs(owner, created_at);
CREATE INDEX deployments_owner ON deployments(owner);
