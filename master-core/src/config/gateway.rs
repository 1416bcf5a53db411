//! `[gateway]`: where the HTTP gateway listens and its TLS files, checked when the config is
//! read. The gateway itself is `gateway/`.

use std::net::SocketAddr;
use std::path::PathBuf;

use serde::Deserialize;

/// `[gateway]` in the master config.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct GatewayConfig {
    /// Address to listen on, e.g. `127.0.0.1:8506`; the gateway is off when unset.
    pub listen: Option<String>,
    /// PEM certificate chain; with `tls_key`, serves HTTPS.
    pub tls_cert: Option<PathBuf>,
    /// PEM private key.
    pub tls_key: Option<PathBuf>,
    /// Connections served at once (never more than a quarter of the open-file limit).
    pub max_connections: usize,
    /// Seconds a client has to send a request's headers (and its TLS handshake).
    pub header_timeout_secs: u64,
    /// Seconds of silence after which a connection is closed.
    pub idle_timeout_secs: u64,
    /// Days a new gateway token is valid unless its creation says otherwise (0: forever).
    pub token_ttl_days: u64,
}

impl Default for GatewayConfig {
    fn default() -> Self {
        GatewayConfig {
            listen: None,
            tls_cert: None,
            tls_key: None,
            max_connections: 512,
            header_timeout_secs: 10,
            idle_timeout_secs: 60,
            token_ttl_days: 90,
        }
    }
}

impl GatewayConfig {
    /// Checks the address and that plain HTTP stays on loopback.
    pub fn validate(&self) -> Result<(), GatewayConfigError> {
        let Some(listen) = &self.listen else { return Ok(()) };
        let addr: SocketAddr = listen.parse().map_err(|_| GatewayConfigError::Listen(listen.clone()))?;
        match (&self.tls_cert, &self.tls_key) {
            (Some(_), Some(_)) => Ok(()),
            (None, None) if addr.ip().is_loopback() => Ok(()),
            (None, None) => Err(GatewayConfigError::NotLoopback(listen.clone())),
            _ => Err(GatewayConfigError::HalfTls),
        }
    }
}

/// What is wrong in the gateway's config.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum GatewayConfigError {
    /// `listen` is not an address.
    #[error("listen: {0:?} is not an ip:port address")]
    Listen(String),
    /// Plain HTTP on an address other machines reach.
    #[error("listen: {0} is not a loopback address; set tls_cert and tls_key to serve it over HTTPS")]
    NotLoopback(String),
    /// Only one of `tls_cert` and `tls_key`.
    #[error("tls_cert and tls_key go together")]
    HalfTls,
}
