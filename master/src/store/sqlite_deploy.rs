//! [`DeployStore`] on SQLite: configs and deployments as JSON documents with indexed columns.

use halite_protocol::message::{status, SoftwareConfig};
use sqlx::Row;

use super::deploy::{DeployStore, DeploymentRecord};
use super::deploy_records::{config_from_json, config_json, record_from_json, record_json};
use super::sqlite::db_int;
use super::{SqliteStore, StoreError};
impl DeployStore for SqliteStore {
    async fn put_config(&self, config: &SoftwareConfig, now_ms: u64) -> Result<(), StoreError> {
        sqlx::query("INSERT INTO software_configs (id, body, created_at) VALUES (?, ?, ?)")
            .bind(&config.id)
            .bind(config_json(config))
            .bind(db_int(now_ms))
            .execute(self.pool())
            .await?;
        Ok(())
    }

    async fn config(&self, id: &str) -> Result<Option<SoftwareConfig>, StoreError> {
        let row =
            sqlx::query("SELECT body FROM software_configs WHERE id = ?").bind(id).fetch_optional(self.pool()).await?;
        row.map(|r| config_from_json(&r.try_get::<String, _>("body")?)).transpose()
    }

    async fn configs(&self, limit: u32) -> Result<Vec<SoftwareConfig>, StoreError> {
        let rows = sqlx::query("SELECT body FROM software_configs ORDER BY created_at DESC, id LIMIT ?")
            .bind(i64::from(limit))
            .fetch_all(self.pool())
            .await?;
        rows.iter().map(|r| config_from_json(&r.try_get::<String, _>("body")?)).collect()
    }

    async fn delete_config(&self, id: &str) -> Result<bool, StoreError> {
        let done = sqlx::query("DELETE FROM software_configs WHERE id = ?").bind(id).execute(self.pool()).await?;
        Ok(done.rows_affected() == 1)
    }

    async fn put_deployment(&self, record: &DeploymentRecord, now_ms: u64) -> Result<(), StoreError> {
        sqlx::query(
            "INSERT INTO deployments (id, server_id, status, relay_pending, body, created_at, updated_at)
             VALUES (?, ?, ?, ?, ?, ?, ?)
             ON CONFLICT(id) DO UPDATE SET server_id = excluded.server_id, status = excluded.status,
               relay_pending = excluded.relay_pending, body = excluded.body, updated_at = excluded.updated_at",
        )
        .bind(&record.deployment.id)
        .bind(&record.deployment.server_id)
        .bind(&record.deployment.status)
        .bind(record.relay_pending)
        .bind(record_json(record))
        .bind(db_int(now_ms))
        .bind(db_int(now_ms))
        .execute(self.pool())
        .await?;
        Ok(())
    }

    async fn deployment(&self, id: &str) -> Result<Option<DeploymentRecord>, StoreError> {
        let row = sqlx::query("SELECT body FROM deployments WHERE id = ?").bind(id).fetch_optional(self.pool()).await?;
        row.map(|r| record_from_json(&r.try_get::<String, _>("body")?)).transpose()
    }

    async fn deployments(&self, server_id: Option<&str>) -> Result<Vec<DeploymentRecord>, StoreError> {
        let rows = match server_id {
            Some(server) => {
                sqlx::query("SELECT body FROM deployments WHERE server_id = ? ORDER BY created_at DESC, id")
                    .bind(server)
                    .fetch_all(self.pool())
                    .await?
            }
            None => {
                sqlx::query("SELECT body FROM deployments ORDER BY created_at DESC, id").fetch_all(self.pool()).await?
            }
        };
        rows.iter().map(|r| record_from_json(&r.try_get::<String, _>("body")?)).collect()
    }

    async fn open_deployments(&self) -> Result<Vec<DeploymentRecord>, StoreError> {
        let rows = sqlx::query("SELECT body FROM deployments WHERE status = ? OR relay_pending = 1")
            .bind(status::IN_PROGRESS)
            .fetch_all(self.pool())
            .await?;
        rows.iter().map(|r| record_from_json(&r.try_get::<String, _>("body")?)).collect()
    }

    async fn delete_deployment(&self, id: &str) -> Result<bool, StoreError> {
        let done = sqlx::query("DELETE FROM deployments WHERE id = ?").bind(id).execute(self.pool()).await?;
        Ok(done.rows_affected() == 1)
    }

    async fn create_api_token(&self, hash: &[u8; 32], principal: &str, now_ms: u64) -> Result<(), StoreError> {
        sqlx::query("INSERT INTO api_tokens (token_hash, principal, created_at) VALUES (?, ?, ?)")
            .bind(&hash[..])
            .bind(principal)
            .bind(db_int(now_ms))
            .execute(self.pool())
            .await?;
        Ok(())
    }

    async fn api_token_principal(&self, hash: &[u8; 32]) -> Result<Option<String>, StoreError> {
        let row = sqlx::query("SELECT principal FROM api_tokens WHERE token_hash = ?")
            .bind(&hash[..])
            .fetch_optional(self.pool())
            .await?;
        row.map(|r| r.try_get::<String, _>("principal").map_err(StoreError::from)).transpose()
    }
}
