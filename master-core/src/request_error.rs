//! The typed error every request handler answers with: a kind the client can act on, and a
//! message for people. A store failure is answered by its class only; its detail is logged.

use halite_protocol::message::{ErrorKind, ResponseBody};

use crate::store::StoreError;

/// Why a request was not carried out.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RequestError {
    /// What the client can do about it.
    pub kind: ErrorKind,
    /// For people: what was wrong.
    pub message: String,
}

impl RequestError {
    /// An error of `kind`.
    pub fn new(kind: ErrorKind, message: impl Into<String>) -> Self {
        RequestError { kind, message: message.into() }
    }

    /// The request itself is wrong.
    pub fn bad_request(message: impl Into<String>) -> Self {
        RequestError::new(ErrorKind::BadRequest, message)
    }

    /// The asker may not do this.
    pub fn forbidden(message: impl Into<String>) -> Self {
        RequestError::new(ErrorKind::Forbidden, message)
    }

    /// What it names does not exist (or is not the asker's to see).
    pub fn not_found(message: impl Into<String>) -> Self {
        RequestError::new(ErrorKind::NotFound, message)
    }

    /// It clashes with what is there.
    pub fn conflict(message: impl Into<String>) -> Self {
        RequestError::new(ErrorKind::Conflict, message)
    }
}

impl From<StoreError> for RequestError {
    fn from(error: StoreError) -> Self {
        tracing::warn!(%error, "a request failed in the store");
        RequestError::new(ErrorKind::Internal, format!("the master could not complete it ({})", error.class()))
    }
}

/// What a request handler answers.
pub type Reply = Result<ResponseBody, RequestError>;
