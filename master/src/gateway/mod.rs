//! The HTTP/JSON gateway for engines in other languages: configs, deployments and jobs over
//! REST (routes shaped like Heat's `software_configs` and `software_deployments`), bus events
//! as server-sent events, and an OpenAPI document of all of it at `/v1/openapi.json`.
//!
//! Off unless `[gateway] listen` is set. Plain HTTP only on loopback; any other address needs
//! `tls_cert` and `tls_key`. Every request carries `Authorization: Bearer <token>`; a token
//! (`halite principal token NAME`) acts as one principal, with exactly its ACL: requests go
//! through the master's core as an in-process client session, the same path as the CLI's.
//! It does not hold state of its own.

mod errors;
pub(crate) mod local;
mod openapi;
mod routes;
mod tls;

use std::net::SocketAddr;
use std::path::PathBuf;

use serde::Deserialize;
use tokio::sync::mpsc;

use local::LocalCommand;

/// `[gateway]` in the master config.
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct GatewayConfig {
    /// Address to listen on, e.g. `127.0.0.1:8506`; the gateway is off when unset.
    pub listen: Option<String>,
    /// PEM certificate chain; with `tls_key`, serves HTTPS.
    pub tls_cert: Option<PathBuf>,
    /// PEM private key.
    pub tls_key: Option<PathBuf>,
}

impl GatewayConfig {
    /// Checks the address and that plain HTTP stays on loopback.
    pub fn validate(&self) -> Result<(), String> {
        let Some(listen) = &self.listen else { return Ok(()) };
        let addr: SocketAddr = listen.parse().map_err(|_| format!("listen: {listen:?} is not an ip:port address"))?;
        match (&self.tls_cert, &self.tls_key) {
            (Some(_), Some(_)) => Ok(()),
            (None, None) if addr.ip().is_loopback() => Ok(()),
            (None, None) => Err(format!(
                "listen: {listen} is not a loopback address; set tls_cert and tls_key to serve it over HTTPS"
            )),
            _ => Err("tls_cert and tls_key go together".into()),
        }
    }
}

/// Why the gateway could not start.
#[derive(Debug, thiserror::Error)]
pub enum GatewayError {
    /// The address could not be bound.
    #[error("gateway: cannot listen on {addr}: {source}")]
    Listen {
        /// The address.
        addr: String,
        /// Why.
        source: std::io::Error,
    },
    /// The certificate or key could not be loaded.
    #[error("gateway: {0}")]
    Tls(String),
}

/// A bound gateway, ready to serve.
pub(crate) struct Gateway {
    listener: tokio::net::TcpListener,
    tls: Option<tokio_rustls::TlsAcceptor>,
    commands: mpsc::Sender<LocalCommand>,
}

impl Gateway {
    /// Binds the configured address and loads TLS material. `None` when the gateway is off.
    pub(crate) async fn bind(
        config: &GatewayConfig,
        commands: mpsc::Sender<LocalCommand>,
    ) -> Result<Option<Self>, GatewayError> {
        let Some(listen) = &config.listen else { return Ok(None) };
        let tls = match (&config.tls_cert, &config.tls_key) {
            (Some(cert), Some(key)) => Some(tls::acceptor(cert, key).map_err(GatewayError::Tls)?),
            _ => None,
        };
        let listener = tokio::net::TcpListener::bind(listen)
            .await
            .map_err(|source| GatewayError::Listen { addr: listen.clone(), source })?;
        Ok(Some(Gateway { listener, tls, commands }))
    }

    /// The address actually bound.
    pub(crate) fn local_addr(&self) -> Option<SocketAddr> {
        self.listener.local_addr().ok()
    }

    /// Serves until the process ends (the master aborts it at shutdown).
    pub(crate) async fn serve(self) {
        let app = routes::router(self.commands);
        match self.tls {
            None => {
                if let Err(error) = axum::serve(self.listener, app).await {
                    tracing::warn!(%error, "gateway stopped");
                }
            }
            Some(acceptor) => tls::serve(self.listener, acceptor, app).await,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn config(listen: &str, tls: bool) -> GatewayConfig {
        GatewayConfig {
            listen: Some(listen.into()),
            tls_cert: tls.then(|| "cert.pem".into()),
            tls_key: tls.then(|| "key.pem".into()),
        }
    }

    #[test]
    fn plain_http_only_on_loopback() {
        assert!(GatewayConfig::default().validate().is_ok(), "off by default");
        assert!(config("127.0.0.1:8506", false).validate().is_ok());
        assert!(config("[::1]:8506", false).validate().is_ok());
        let error = config("0.0.0.0:8506", false).validate().unwrap_err();
        assert!(error.contains("not a loopback address"), "{error}");
        assert!(config("0.0.0.0:8506", true).validate().is_ok());
        assert!(config("localhost:80", false).validate().unwrap_err().contains("ip:port"));
        let half = GatewayConfig { tls_key: None, ..config("127.0.0.1:1", true) };
        assert!(half.validate().unwrap_err().contains("go together"));
    }

    #[test]
    fn the_master_config_refuses_an_exposed_plain_gateway() {
        let error = crate::MasterConfig::parse("[gateway]\nlisten = \"10.0.0.1:8506\"\n").unwrap_err();
        assert!(error.starts_with("gateway: listen"), "{error}");
        let error = crate::MasterConfig::parse("[gateway]\nlisen = \"127.0.0.1:1\"\n").unwrap_err();
        assert!(error.contains("lisen"), "{error}");
    }
}
