//! The typed error every request handler answers with: a kind the client can act on, and a
//! message for people. A store failure is answered by its class only; its detail is logged.

use halite_protocol::message::{ErrorKind, ResponseBody};

use crate::store::StoreError;

/// Why a request was not carried out.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct RequestError {
    pub(crate) kind: ErrorKind,
    pub(crate) message: String,
}

impl RequestError {
    pub(crate) fn new(kind: ErrorKind, message: impl Into<String>) -> Self {
        RequestError { kind, message: message.into() }
    }

    pub(crate) fn bad_request(message: impl Into<String>) -> Self {
        RequestError::new(ErrorKind::BadRequest, message)
    }

    pub(crate) fn forbidden(message: impl Into<String>) -> Self {
        RequestError::new(ErrorKind::Forbidden, message)
    }

    pub(crate) fn not_found(message: impl Into<String>) -> Self {
        RequestError::new(ErrorKind::NotFound, message)
    }

    pub(crate) fn conflict(message: impl Into<String>) -> Self {
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
pub(crate) type Reply = Result<ResponseBody, RequestError>;
