//! Client errors.

use halite_protocol::message::ErrorKind;

/// Why a client operation failed.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ClientError {
    /// Local configuration (master config, key files).
    #[error("{0}")]
    Config(String),
    /// The master could not be reached or the handshake failed.
    #[error("cannot connect to the master at {addr}: {reason}")]
    Connect {
        /// The address.
        addr: String,
        /// Why.
        reason: String,
    },
    /// The connection dropped.
    #[error("lost the connection to the master: {0}")]
    Disconnected(String),
    /// The master answered with an error.
    #[error("{message}")]
    Master {
        /// What kind.
        kind: ErrorKind,
        /// The master's words.
        message: String,
    },
    /// The master sent something this client cannot use.
    #[error("unexpected answer from the master: {0}")]
    Protocol(String),
    /// The master did not answer a request in time (the request may or may not have been
    /// carried out: read back before retrying a publish).
    #[error("the master did not answer within {0:?}")]
    Timeout(std::time::Duration),
}
