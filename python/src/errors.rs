//! SDK errors as the exceptions of `halite.errors` (defined in Python, beside their docs).

use halite_client::ClientError;
use pyo3::prelude::*;

/// The Python exception for `error`, made by `halite.errors._from_native(variant, message,
/// kind, addr)`.
pub(crate) fn to_py(error: ClientError) -> PyErr {
    let (variant, kind, addr) = match &error {
        ClientError::Config(_) => ("config", None, None),
        ClientError::Connect { addr, .. } => ("connect", None, Some(addr.clone())),
        ClientError::Disconnected(_) => ("disconnected", None, None),
        ClientError::Master { kind, .. } => ("master", Some(kind_name(kind)), None),
        ClientError::Protocol(_) => ("protocol", None, None),
        ClientError::Timeout(_) => ("timeout", None, None),
        _ => ("protocol", None, None),
    };
    let message = match &error {
        // The master's words alone: the kind is the exception's class.
        ClientError::Master { message, .. } => message.clone(),
        other => other.to_string(),
    };
    Python::attach(|py| {
        let made = py
            .import("halite.errors")
            .and_then(|errors| errors.getattr("_from_native"))
            .and_then(|factory| factory.call1((variant, message.as_str(), kind.as_deref(), addr.as_deref())));
        match made {
            Ok(exception) => PyErr::from_value(exception),
            Err(import_failed) => import_failed,
        }
    })
}

/// A `halite.errors.InvalidArgument` (a `HaliteError`, and a `ValueError`) naming what was
/// wrong with what Python passed in.
pub(crate) fn bad_argument(what: impl std::fmt::Display) -> PyErr {
    let message = what.to_string();
    Python::attach(|py| {
        let made = py
            .import("halite.errors")
            .and_then(|errors| errors.getattr("_from_native"))
            .and_then(|factory| factory.call1(("argument", message.as_str(), None::<&str>, None::<&str>)));
        match made {
            Ok(exception) => PyErr::from_value(exception),
            Err(_) => pyo3::exceptions::PyValueError::new_err(message),
        }
    })
}

/// The wire name of an error kind (`not_found`, ...).
fn kind_name(kind: &halite_protocol::message::ErrorKind) -> String {
    match serde_json::to_value(kind) {
        Ok(serde_json::Value::String(name)) => name,
        _ => "other".to_owned(),
    }
}
