//! HTTPS for the gateway: rustls with the configured PEM certificate chain and key.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use tokio_rustls::rustls::pki_types::pem::{self, PemObject};
use tokio_rustls::rustls::pki_types::{CertificateDer, PrivateKeyDer};
use tokio_rustls::rustls::{self, ServerConfig};
use tokio_rustls::TlsAcceptor;

/// Loads the certificate chain and key.
pub(super) fn acceptor(cert: &Path, key: &Path) -> Result<TlsAcceptor, TlsError> {
    let certs: Vec<CertificateDer<'static>> = CertificateDer::pem_file_iter(cert)
        .and_then(|certs| certs.collect::<Result<_, _>>())
        .map_err(|error| TlsError::Cert { path: cert.to_owned(), error })?;
    if certs.is_empty() {
        return Err(TlsError::NoCertificate(cert.to_owned()));
    }
    let key = PrivateKeyDer::from_pem_file(key).map_err(|error| TlsError::Key { path: key.to_owned(), error })?;
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let config = ServerConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(TlsError::Versions)?
        .with_no_client_auth()
        .with_single_cert(certs, key)
        .map_err(TlsError::Pair)?;
    Ok(TlsAcceptor::from(Arc::new(config)))
}

/// Why the gateway's certificate or key could not be loaded; each names the config key.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum TlsError {
    /// The certificate file could not be read or is not PEM.
    #[error("tls_cert {}: {error}", .path.display())]
    Cert {
        /// The file.
        path: PathBuf,
        /// Why.
        error: pem::Error,
    },
    /// The certificate file holds no certificate.
    #[error("tls_cert {}: no certificate in it", .0.display())]
    NoCertificate(PathBuf),
    /// The key file could not be read or holds no key.
    #[error("tls_key {}: {error}", .path.display())]
    Key {
        /// The file.
        path: PathBuf,
        /// Why.
        error: pem::Error,
    },
    /// The crypto provider offers no safe protocol version.
    #[error("{0}")]
    Versions(rustls::Error),
    /// The key does not go with the certificate, or either is unusable.
    #[error("tls_cert/tls_key: {0}")]
    Pair(rustls::Error),
}
