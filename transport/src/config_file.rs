//! Reading a daemon's TOML config file with errors that name the file (the parser's message
//! names the key, line and column).

use std::path::{Path, PathBuf};

/// Why a config file could not be loaded.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    /// The file could not be read.
    #[error("{path}: {source}")]
    Read {
        /// The file.
        path: PathBuf,
        /// Why.
        source: std::io::Error,
    },
    /// The contents are invalid; the message names the key.
    #[error("{path}: {message}")]
    Invalid {
        /// The file.
        path: PathBuf,
        /// What is wrong.
        message: String,
    },
}

/// Reads `path` and parses it with `parse`, attaching the path to either kind of failure (an
/// invalid file's message is the parser's error, displayed).
pub fn load<T, E: std::fmt::Display>(path: &Path, parse: impl FnOnce(&str) -> Result<T, E>) -> Result<T, ConfigError> {
    let text = std::fs::read_to_string(path).map_err(|source| ConfigError::Read { path: path.to_owned(), source })?;
    parse(&text).map_err(|error| ConfigError::Invalid { path: path.to_owned(), message: error.to_string() })
}
