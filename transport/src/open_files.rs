//! The open-file limit: every connection is a file descriptor, and the usual soft limit of
//! 1,024 would cap a master (or a swarm) at about a thousand minions.

use nix::sys::resource::{getrlimit, setrlimit, Resource};

/// Raises the soft `RLIMIT_NOFILE` to `needed` (to the hard limit when `None`) and returns the
/// new soft limit. When the hard limit is below `needed`, the error says exactly how to allow it.
pub fn raise_open_files(needed: Option<u64>) -> Result<u64, OpenFilesError> {
    let (soft, hard) = getrlimit(Resource::RLIMIT_NOFILE).map_err(OpenFilesError::Read)?;
    let wanted = needed.unwrap_or(hard);
    if soft >= wanted {
        return Ok(soft);
    }
    if hard < wanted {
        return Err(OpenFilesError::HardLimit { wanted, hard });
    }
    setrlimit(Resource::RLIMIT_NOFILE, wanted, hard).map_err(OpenFilesError::Raise)?;
    Ok(wanted)
}

/// Why the open-file limit could not be raised.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum OpenFilesError {
    /// `getrlimit` failed.
    #[error("reading the open-file limit: {0}")]
    Read(nix::Error),
    /// Only root may raise the hard limit; the message says how.
    #[error(
        "{wanted} open files are needed but the hard limit is {hard}. As root, run `ulimit -Hn {wanted}` in \
         this shell (or set `LimitNOFILE={wanted}` for a systemd unit, or `* hard nofile {wanted}` in \
         /etc/security/limits.conf), then try again"
    )]
    HardLimit {
        /// The soft limit asked for.
        wanted: u64,
        /// The hard limit.
        hard: u64,
    },
    /// `setrlimit` failed.
    #[error("raising the open-file limit: {0}")]
    Raise(nix::Error),
}

/// The process's current soft limit on open files, if it can be read.
pub fn open_files_limit() -> Option<u64> {
    getrlimit(Resource::RLIMIT_NOFILE).ok().map(|(soft, _)| soft)
}
