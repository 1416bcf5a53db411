//! The audit trail through the SDK: pages of records as the asker may read them, the header an
//! export starts with, and the master's check of every chain.

use halite_protocol::audit::{AuditRecord, ExportHeader};
use halite_protocol::message::{AuditFilter, AuditVerification, RequestBody, ResponseBody};

use crate::error::ClientError;
use crate::Client;

use crate::admin::unexpected;

impl Client {
    /// Audit records after the record `after` (an id of a page before) that `filter` keeps, in
    /// store order, at most `limit`: root and administrators read every record, a tenant's
    /// principal its tenant's, any other principal its own.
    pub async fn audit(
        &self,
        filter: AuditFilter,
        after: Option<i64>,
        limit: u32,
    ) -> Result<Vec<AuditRecord>, ClientError> {
        match self.request(RequestBody::AuditList { filter, after, limit }).await? {
            ResponseBody::Audit(records) => Ok(records),
            other => Err(unexpected("audit", &other)),
        }
    }

    /// What an export of the audit trail starts with (root and administrators).
    pub async fn audit_header(&self) -> Result<ExportHeader, ClientError> {
        match self.request(RequestBody::AuditHeader).await? {
            ResponseBody::AuditHeader(header) => Ok(*header),
            other => Err(unexpected("audit_header", &other)),
        }
    }

    /// The master's check of every audit chain in its store (root and administrators).
    pub async fn audit_verify(&self) -> Result<AuditVerification, ClientError> {
        match self.request(RequestBody::AuditVerify).await? {
            ResponseBody::AuditVerified(verified) => Ok(verified),
            other => Err(unexpected("audit_verify", &other)),
        }
    }
}
