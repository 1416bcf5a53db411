//! The HTTP/JSON gateway for engines in other languages: configs, deployments and jobs over
//! REST (routes shaped like Heat's `software_configs` and `software_deployments`), bus events
//! as server-sent events, and an OpenAPI document of all of it at `/v1/openapi.json`.
//!
//! Off unless `[gateway] listen` is set. Plain HTTP only on loopback; any other address needs
//! `tls_cert` and `tls_key`. Every request carries `Authorization: Bearer <token>`; a token
//! (`halite principal token NAME`) acts as one principal, with exactly its ACL: requests go
//! through the master's core as an in-process client session, the same path as the CLI's.
//! It does not hold state of its own.

mod audit;
mod auth;
mod connections;
mod errors;
pub(crate) mod fleet;
pub(crate) mod local;
mod openapi;
mod principals;
mod routes;
mod tls;

pub use crate::config::gateway::{GatewayConfig, GatewayConfigError};
pub use tls::TlsError;

use std::net::SocketAddr;

use tokio::sync::mpsc;

use local::LocalCommand;

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
    Tls(#[from] TlsError),
}

/// A bound gateway, ready to serve.
pub(crate) struct Gateway {
    listener: tokio::net::TcpListener,
    tls: Option<tokio_rustls::TlsAcceptor>,
    commands: mpsc::Sender<LocalCommand>,
    limits: connections::Limits,
    metrics: crate::metrics::Metrics,
    enrollment: fleet::Enrollment,
}

impl Gateway {
    /// Binds the configured address and loads TLS material. `None` when the gateway is off.
    pub(crate) async fn bind(
        config: &GatewayConfig,
        commands: mpsc::Sender<LocalCommand>,
        metrics: crate::metrics::Metrics,
        enrollment: fleet::Enrollment,
    ) -> Result<Option<Self>, GatewayError> {
        let Some(listen) = &config.listen else { return Ok(None) };
        let tls = match (&config.tls_cert, &config.tls_key) {
            (Some(cert), Some(key)) => Some(tls::acceptor(cert, key)?),
            _ => None,
        };
        let listener = tokio::net::TcpListener::bind(listen)
            .await
            .map_err(|source| GatewayError::Listen { addr: listen.clone(), source })?;
        let limits = connections::Limits::new(
            config.max_connections,
            halite_transport::open_files_limit(),
            config.header_timeout_secs,
            config.idle_timeout_secs,
        );
        Ok(Some(Gateway { listener, tls, commands, limits, metrics, enrollment }))
    }

    /// The address actually bound.
    pub(crate) fn local_addr(&self) -> Option<SocketAddr> {
        self.listener.local_addr().ok()
    }

    /// Serves until the process ends (the master aborts it at shutdown).
    pub(crate) async fn serve(self) {
        let app = routes::router(self.commands, self.metrics, self.enrollment);
        let (limits, tls) = (self.limits, self.tls);
        connections::accept(self.listener, limits, move |stream| {
            let (app, tls) = (app.clone(), tls.clone());
            let peer = stream.peer_addr().ok();
            async move {
                match tls {
                    None => connections::serve_http(stream, peer, app, limits).await,
                    Some(acceptor) => {
                        let handshake = tokio::time::timeout(limits.header_timeout, acceptor.accept(stream));
                        if let Ok(Ok(stream)) = handshake.await {
                            connections::serve_http(stream, peer, app, limits).await;
                        }
                    }
                }
            }
        })
        .await;
    }
}

/// Serves `app` over plain HTTP on `listener` with the gateway's connection limits (the
/// metrics endpoint).
pub(crate) async fn serve_plain(listener: tokio::net::TcpListener, app: axum::Router) {
    let limits = connections::Limits::new(64, halite_transport::open_files_limit(), 10, 60);
    connections::accept(listener, limits, move |stream| {
        let peer = stream.peer_addr().ok();
        connections::serve_http(stream, peer, app.clone(), limits)
    })
    .await;
}

#[cfg(test)]
mod tests {
    use super::*;

    fn config(listen: &str, tls: bool) -> GatewayConfig {
        GatewayConfig {
            listen: Some(listen.into()),
            tls_cert: tls.then(|| "cert.pem".into()),
            tls_key: tls.then(|| "key.pem".into()),
            ..GatewayConfig::default()
        }
    }

    #[test]
    fn plain_http_only_on_loopback() {
        assert!(GatewayConfig::default().validate().is_ok(), "off by default");
        assert!(config("127.0.0.1:8506", false).validate().is_ok());
        assert!(config("[::1]:8506", false).validate().is_ok());
        let error = config("0.0.0.0:8506", false).validate().unwrap_err().to_string();
        assert!(error.contains("not a loopback address"), "{error}");
        assert!(config("0.0.0.0:8506", true).validate().is_ok());
        assert!(config("localhost:80", false).validate().unwrap_err().to_string().contains("ip:port"));
        let half = GatewayConfig { tls_key: None, ..config("127.0.0.1:1", true) };
        assert!(half.validate().unwrap_err().to_string().contains("go together"));
    }

    #[test]
    fn the_master_config_refuses_an_exposed_plain_gateway() {
        let error = crate::MasterConfig::parse("[gateway]\nlisten = \"10.0.0.1:8506\"\n").unwrap_err().to_string();
        assert!(error.starts_with("gateway: listen"), "{error}");
        let error = crate::MasterConfig::parse("[gateway]\nlisen = \"127.0.0.1:1\"\n").unwrap_err().to_string();
        assert!(error.contains("lisen"), "{error}");
    }
}
