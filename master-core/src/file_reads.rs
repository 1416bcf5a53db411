//! What the core keeps for serving files to minions: the reads in flight (in all and per
//! minion) and the admission of a new one, the digests already computed, and a finished read's
//! answer. Opening and reading the files is the driver's (`halite-master`'s `files.rs`).

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};

use halite_protocol::message::{ErrorKind, ErrorMessage, FileChunk, FileGet, Message};
use halite_transport::PeerId;

use crate::config::MasterConfig;
use crate::file_scope::FileScope;

/// File reads in flight at once; more are refused (the minion tries again).
pub const MAX_IN_FLIGHT: usize = 64;

/// File reads in flight for one minion at once: one minion's many fetches leave room for the
/// others'.
pub const MAX_IN_FLIGHT_PER_MINION: usize = 8;

/// A finished read, for the core to send.
#[derive(Debug)]
pub struct FileServed {
    pub peer: PeerId,
    pub minion: String,
    pub request_id: u64,
    pub answer: Result<FileChunk, (ErrorKind, String)>,
}

/// Why a file read has no place now (to be tried again).
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum ReadsBusy {
    /// The minion has this many reads in flight already.
    #[error("{0} of this minion's file reads are already in flight (at most {MAX_IN_FLIGHT_PER_MINION}); try again")]
    Minion(usize),
    /// The master has as many reads in flight as it allows.
    #[error("the master is busy reading files; try again")]
    Master,
}

/// What the core keeps for serving files.
#[derive(Debug, Default)]
pub struct FileServer {
    in_flight: usize,
    /// Reads in flight by minion id (only minions with some).
    per_minion: HashMap<String, usize>,
    digests: Digests,
}

impl FileServer {
    /// Takes a place for one more read of `minion`'s, or says why there is none.
    pub fn admit(&mut self, minion: &str) -> Result<(), ReadsBusy> {
        let mine = self.per_minion.get(minion).copied().unwrap_or(0);
        if mine >= MAX_IN_FLIGHT_PER_MINION {
            return Err(ReadsBusy::Minion(mine));
        }
        if self.in_flight >= MAX_IN_FLIGHT {
            return Err(ReadsBusy::Master);
        }
        self.in_flight += 1;
        *self.per_minion.entry(minion.to_owned()).or_default() += 1;
        Ok(())
    }

    /// Reads in flight, and the minions that have some (for tests).
    #[cfg(any(test, feature = "testing"))]
    pub fn in_flight(&self) -> (usize, &HashMap<String, usize>) {
        (self.in_flight, &self.per_minion)
    }

    /// Gives back the place of a finished read of `minion`'s.
    pub fn release(&mut self, minion: &str) {
        self.in_flight = self.in_flight.saturating_sub(1);
        if let Some(mine) = self.per_minion.get_mut(minion) {
            *mine = mine.saturating_sub(1);
            if *mine == 0 {
                self.per_minion.remove(minion);
            }
        }
    }
}

/// What identifies one content of one file, from the opened descriptor's `fstat`: a
/// rewritten file changes its change time (which, unlike the modification time, nobody
/// sets), a replaced one its inode.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct DigestKey {
    pub dev: u64,
    pub inode: u64,
    pub size: u64,
    pub modified_ns: i128,
    pub changed_ns: i128,
}

/// The digests computed so far, shared with the reads in flight.
pub type Digests = Arc<Mutex<HashMap<DigestKey, String>>>;

/// A read the core admitted, for the loop to start on the blocking pool (`halite-master`'s `files::start`).
pub struct FileRead {
    pub peer: PeerId,
    pub minion: String,
    pub request: FileGet,
    pub root: PathBuf,
    pub scope: FileScope,
    pub secrets: Vec<PathBuf>,
    pub digests: Digests,
}

impl FileServer {
    /// A minion's `file_get`: the read to start (within `scope`, the part of the root the
    /// minion may read), or the error to answer at once (no file root, or no place for one
    /// more read).
    pub fn request(
        &mut self,
        config: &MasterConfig,
        peer: PeerId,
        minion: &str,
        scope: FileScope,
        request: FileGet,
    ) -> Result<FileRead, ErrorMessage> {
        let refuse =
            |kind, message: String| ErrorMessage { kind, message, request: Some(request.request_id.to_string()) };
        let Some(root) = config.files.root.clone() else {
            return Err(refuse(ErrorKind::NotFound, "this master serves no files ([files] root is not set)".into()));
        };
        if let Err(why) = self.admit(minion) {
            return Err(refuse(ErrorKind::LimitExceeded, why.to_string()));
        }
        tracing::debug!(%minion, path = %request.path, offset = request.offset, "file requested");
        let (digests, secrets) = (self.digests.clone(), config.secret_files());
        Ok(FileRead { peer, minion: minion.to_owned(), request, root, scope, secrets, digests })
    }

    /// A read finished: its place is given back; the answer for its peer (the part, or an
    /// error naming the request), to send if the peer is still connected.
    pub fn finished(&mut self, served: FileServed) -> (PeerId, Message) {
        self.release(&served.minion);
        let answer = match served.answer {
            Ok(chunk) => Message::FileChunk(chunk),
            Err((kind, message)) => {
                Message::Error(ErrorMessage { kind, message, request: Some(served.request_id.to_string()) })
            }
        };
        (served.peer, answer)
    }
}
