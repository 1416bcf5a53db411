//! Validation of node names (minion ids, principals) that may reach file names and logs.

/// Longest id accepted.
pub const MAX_ID_LEN: usize = 128;

/// Why an id was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum IdError {
    /// Empty.
    #[error("id is empty")]
    Empty,
    /// Longer than [`MAX_ID_LEN`].
    #[error("id is longer than {MAX_ID_LEN} bytes")]
    TooLong,
    /// `.` or `..`, or starts with `.` or `-`.
    #[error("id {0:?} must not start with '.' or '-'")]
    BadStart(String),
    /// A character outside `A-Z a-z 0-9 . _ -`.
    #[error("id {0:?} may only contain letters, digits, '.', '_' and '-'")]
    BadCharacter(String),
}

/// Checks a minion id or principal name: 1 to 128 bytes of `A-Z a-z 0-9 . _ -`, not starting
/// with `.` or `-`. That excludes path separators, NUL, `..`, whitespace and shell/glob
/// metacharacters, so an id is safe as a file name and inside a target expression.
pub fn validate(id: &str) -> Result<(), IdError> {
    if id.is_empty() {
        return Err(IdError::Empty);
    }
    if id.len() > MAX_ID_LEN {
        return Err(IdError::TooLong);
    }
    if id.starts_with('.') || id.starts_with('-') {
        return Err(IdError::BadStart(id.to_owned()));
    }
    if !id.bytes().all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b'-')) {
        return Err(IdError::BadCharacter(id.to_owned()));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_that_could_escape_a_directory_are_refused() {
        assert_eq!(validate("web1.example.com"), Ok(()));
        assert_eq!(validate("db_2-a"), Ok(()));
        for bad in ["", "..", ".hidden", "-rf", "a/b", "a\\0b", "a\0b", "a b", "web*", "../etc"] {
            assert!(validate(bad).is_err(), "{bad:?} accepted");
        }
        assert_eq!(validate(&"a".repeat(129)), Err(IdError::TooLong));
    }
}
