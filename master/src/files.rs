//! Files the master serves to minions from one directory (`[files] root`), as Salt serves
//! `salt://` from its file roots: a minion's `file.managed source=halite://path` reads them
//! in parts (`file_get` → `file_chunk`), each part carrying the whole file's SHA-256 so the
//! minion can check what it assembled.
//!
//! Reading and hashing happen on tokio's blocking pool, never on the core's thread; the core
//! only forwards the request and sends the answer ([`Master::serve_file`], `Input::File`).
//! Every accepted minion may read every file under the root (Salt's rule for its file
//! roots); nothing outside it is reachable: paths are relative, without `..`, and resolved
//! (symbolic links included) to a place inside the root.

use std::collections::HashMap;
use std::io::{Read, Seek, SeekFrom};
use std::os::unix::fs::MetadataExt;
use std::path::{Component, Path, PathBuf};
use std::sync::{Arc, Mutex};

use halite_protocol::message::{ErrorKind, FileChunk, FileGet, Message, FILE_CHUNK_BYTES};
use halite_transport::PeerId;
use sha2::{Digest, Sha256};

use crate::net::Net;
use crate::server::Master;
use crate::store::Store;

/// `[files]`: the directory served to minions as `halite://`; off when unset.
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct FilesConfig {
    /// The file root, e.g. `/srv/halite`.
    pub root: Option<PathBuf>,
}

/// File reads in flight at once; more are refused (the minion tries again).
const MAX_IN_FLIGHT: usize = 64;

/// Digests remembered (by path, size, modification time and inode) before the memory is
/// cleared: a large file is hashed once, not once per part.
const MAX_DIGESTS: usize = 1024;

/// A finished read, for the core to send.
#[derive(Debug)]
pub(crate) struct FileServed {
    peer: PeerId,
    request_id: u64,
    answer: Result<FileChunk, (ErrorKind, String)>,
}

/// What the core keeps for serving files.
#[derive(Debug, Default)]
pub(crate) struct FileServer {
    in_flight: usize,
    digests: Arc<Mutex<HashMap<DigestKey, String>>>,
}

#[derive(Debug, Clone, PartialEq, Eq, Hash)]
struct DigestKey {
    path: PathBuf,
    size: u64,
    modified_ns: i128,
    inode: u64,
}

impl<S: Store, N: Net> Master<S, N> {
    /// A minion's `file_get`: read on the blocking pool, answered when done.
    pub(crate) fn serve_file(&mut self, peer: PeerId, minion: &str, request: FileGet) {
        let refuse = |master: &mut Self, kind, why: String| {
            master.send_error(peer, kind, why, Some(request.request_id.to_string()));
        };
        let Some(root) = self.config.files.root.clone() else {
            return refuse(self, ErrorKind::NotFound, "this master serves no files ([files] root is not set)".into());
        };
        if self.files.in_flight >= MAX_IN_FLIGHT {
            return refuse(self, ErrorKind::LimitExceeded, "the master is busy reading files; try again".into());
        }
        self.files.in_flight += 1;
        tracing::debug!(%minion, path = %request.path, offset = request.offset, "file requested");
        let digests = self.files.digests.clone();
        let done = self.file_tx.clone();
        tokio::spawn(async move {
            let FileGet { request_id, path, offset } = request;
            let read = tokio::task::spawn_blocking(move || read_part(&root, &path, offset, &digests)).await;
            let answer = read
                .unwrap_or_else(|e| Err((ErrorKind::Internal, format!("reading the file failed: {e}"))))
                .map(|chunk| FileChunk { request_id, ..chunk });
            let _ = done.send(FileServed { peer, request_id, answer });
        });
    }

    /// A read finished: its answer goes to the minion if it is still connected.
    pub(crate) fn file_served(&mut self, served: FileServed) {
        self.files.in_flight = self.files.in_flight.saturating_sub(1);
        if !self.sessions.conns.contains_key(&served.peer) {
            return;
        }
        match served.answer {
            Ok(chunk) => self.send(served.peer, &Message::FileChunk(chunk)),
            Err((kind, why)) => self.send_error(served.peer, kind, why, Some(served.request_id.to_string())),
        }
    }
}

/// Where `path` (a `halite://` URL's path) is under `root`, if it is a regular file inside it.
pub(crate) fn resolve(root: &Path, path: &str) -> Result<PathBuf, (ErrorKind, String)> {
    let bad = |why: &str| (ErrorKind::BadRequest, format!("halite://{path}: {why}"));
    let relative = Path::new(path.trim_start_matches('/'));
    if path.is_empty() || path.len() > 4096 || path.contains('\0') {
        return Err(bad("not a file path"));
    }
    if relative.components().any(|c| !matches!(c, Component::Normal(_))) {
        return Err(bad("the path may not contain '..' or '.'"));
    }
    let root = root.canonicalize().map_err(|e| (ErrorKind::Internal, format!("the file root: {e}")))?;
    let full = root
        .join(relative)
        .canonicalize()
        .map_err(|_| (ErrorKind::NotFound, format!("halite://{path}: no such file on the master")))?;
    if !full.starts_with(&root) {
        return Err(bad("it leads outside the master's file root"));
    }
    if !full.is_file() {
        return Err((ErrorKind::NotFound, format!("halite://{path}: not a regular file on the master")));
    }
    Ok(full)
}

/// The part of the file from `offset` on, with the whole file's size and digest.
fn read_part(
    root: &Path,
    path: &str,
    offset: u64,
    digests: &Mutex<HashMap<DigestKey, String>>,
) -> Result<FileChunk, (ErrorKind, String)> {
    let full = resolve(root, path)?;
    let failed = |e: std::io::Error| (ErrorKind::Internal, format!("halite://{path}: {e}"));
    let mut file = std::fs::File::open(&full).map_err(failed)?;
    let meta = file.metadata().map_err(failed)?;
    let key = DigestKey {
        path: full,
        size: meta.len(),
        modified_ns: i128::from(meta.mtime()) * 1_000_000_000 + i128::from(meta.mtime_nsec()),
        inode: meta.ino(),
    };
    let known = digests.lock().unwrap_or_else(std::sync::PoisonError::into_inner).get(&key).cloned();
    let sha256 = match known {
        Some(sha256) => sha256,
        None => {
            let mut hasher = Sha256::new();
            std::io::copy(&mut file, &mut hasher).map_err(failed)?;
            let sha256 = halite_protocol::hex::encode(&hasher.finalize());
            let mut digests = digests.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
            if digests.len() >= MAX_DIGESTS {
                digests.clear();
            }
            digests.insert(key.clone(), sha256.clone());
            sha256
        }
    };
    if offset > key.size {
        return Err((
            ErrorKind::BadRequest,
            format!("halite://{path}: offset {offset} is past its end ({})", key.size),
        ));
    }
    file.seek(SeekFrom::Start(offset)).map_err(failed)?;
    let mut data = Vec::with_capacity(FILE_CHUNK_BYTES.min((key.size - offset) as usize));
    file.take(FILE_CHUNK_BYTES as u64).read_to_end(&mut data).map_err(failed)?;
    Ok(FileChunk { request_id: 0, size: key.size, sha256, offset, data })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A scratch directory holding a file root (`root/`) and a file beside it, removed on drop.
    struct Scratch(PathBuf);

    impl Scratch {
        fn path(&self) -> &Path {
            &self.0
        }
    }

    impl Drop for Scratch {
        fn drop(&mut self) {
            let _ = std::fs::remove_dir_all(&self.0);
        }
    }

    fn root(name: &str) -> Scratch {
        let dir = Scratch(std::env::temp_dir().join(format!("halite-files-{name}-{}", std::process::id())));
        let _ = std::fs::remove_dir_all(dir.path());
        std::fs::create_dir_all(dir.path().join("root/app")).unwrap();
        std::fs::write(dir.path().join("root/app/conf"), b"hello").unwrap();
        std::fs::write(dir.path().join("secret"), b"outside").unwrap();
        std::os::unix::fs::symlink(dir.path().join("secret"), dir.path().join("root/escape")).unwrap();
        std::os::unix::fs::symlink("app/conf", dir.path().join("root/inside")).unwrap();
        dir
    }

    #[test]
    fn only_regular_files_inside_the_root_are_served() {
        let dir = root("resolve");
        let root = dir.path().join("root");
        assert!(resolve(&root, "app/conf").is_ok());
        assert!(resolve(&root, "/app/conf").is_ok(), "a leading slash is the root's");
        assert!(resolve(&root, "inside").is_ok(), "a link that stays inside is followed");
        for (path, kind) in [
            ("../secret", ErrorKind::BadRequest),
            ("app/../../secret", ErrorKind::BadRequest),
            ("./app/conf", ErrorKind::BadRequest),
            ("escape", ErrorKind::BadRequest),
            ("app", ErrorKind::NotFound),
            ("missing", ErrorKind::NotFound),
            ("", ErrorKind::BadRequest),
        ] {
            let Err((got, why)) = resolve(&root, path) else { panic!("{path:?} was served") };
            assert_eq!(got, kind, "{path:?}: {why}");
            assert!(why.contains("halite://"), "the error names the URL: {why}");
        }
    }

    #[test]
    fn parts_carry_the_whole_files_digest_and_a_change_shows() {
        let dir = root("parts");
        let root = dir.path().join("root");
        let big: Vec<u8> = (0..FILE_CHUNK_BYTES + 10).map(|i| (i % 251) as u8).collect();
        std::fs::write(root.join("big"), &big).unwrap();
        let digests = Mutex::default();
        let first = read_part(&root, "big", 0, &digests).unwrap();
        let second = read_part(&root, "big", first.data.len() as u64, &digests).unwrap();
        assert_eq!((first.data.len(), second.data.len()), (FILE_CHUNK_BYTES, 10));
        assert_eq!(first.sha256, second.sha256);
        assert_eq!(first.sha256, halite_protocol::hex::encode(&Sha256::digest(&big)));
        let end = read_part(&root, "big", big.len() as u64, &digests).unwrap();
        assert!(end.data.is_empty());
        assert!(read_part(&root, "big", big.len() as u64 + 1, &digests).is_err());
        std::fs::write(root.join("big"), b"changed").unwrap();
        assert_ne!(read_part(&root, "big", 0, &digests).unwrap().sha256, first.sha256);
    }
}
