//! A deployment signal's relay as the core sees it: what it asks for and how it ended. The
//! sending (HTTP, retries, the checked addresses) is the driver's (`halite-master`'s
//! `relay.rs`).

use crate::config::signal_hosts::Refused;

/// heat-config-notify's limit: Heat refuses bodies over `max_json_body_size` (1 MiB).
pub const MAX_BODY: usize = 950_000;

/// What a relay asks for.
#[derive(Debug, Clone)]
pub struct RelayRequest {
    /// The deployment.
    pub deployment_id: String,
    /// The derived config whose signal this is (a newer one supersedes it).
    pub derived_config_id: String,
    /// Where to.
    pub url: String,
    /// `POST` or `PUT`.
    pub verb: &'static str,
    /// The JSON body.
    pub body: Vec<u8>,
}

/// How a relay ended.
#[derive(Debug, Clone)]
pub struct RelayDone {
    /// The request.
    pub request: RelayRequest,
    /// The final HTTP status, or why no response came (for the master's log only: an engine
    /// learns only whether its signal was relayed).
    pub result: Result<u16, Failure>,
    /// Its end was written, and the write failed in a way that may have landed: a read that
    /// finds it no longer pending then tells it (it was stored, and nothing told it yet).
    pub written_in_doubt: bool,
}

/// Why a relay sent nothing, or got no answer.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Failure {
    /// The allowlist refused the URL or an address its host resolves to.
    #[error(transparent)]
    Refused(#[from] Refused),
    /// Sent, but no response came (after the retries).
    #[error("{0}")]
    NoAnswer(String),
}
