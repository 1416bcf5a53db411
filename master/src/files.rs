//! Files the master serves to minions from one directory (`[files] root`), as Salt serves
//! `salt://` from its file roots: a minion's `file.managed source=halite://path` reads them
//! in parts (`file_get` → `file_chunk`), each part carrying the whole file's SHA-256 so the
//! minion can check what it assembled.
//!
//! Reading and hashing happen on tokio's blocking pool, never on the core's thread: the core
//! admits a request (`FileServer::request`), the loop starts the read it returns, and the
//! answer comes back as an input (`Input::File`, `FileServer::finished`).
//! The root belongs to tenants as minion ids do (`file_scope.rs`): a tenant's minion reads
//! only `<root>/<tenant>/` and the shared parts, a minion of no tenant all but the tenants'
//! parts; whatever is outside a minion's scope is answered as a file that does not exist.
//! Nothing outside the root is reachable: paths are relative, without `..`, and opened
//! beneath a descriptor of the root, links followed only while they stay inside it
//! (`files_beneath`). What is read and hashed is the opened descriptor, never the path again,
//! so a directory swapped for a link between two steps leads nowhere; and a file that is one
//! of the master's own secrets (its keys, its database) is refused even if a hard link or a
//! bind mount puts it under the root. A root that holds the state directory is refused at
//! start ([`check_root`]).
//!
//! Reads in flight are bounded in total and per minion, so one minion cannot keep the others
//! waiting: past its own cap it is told `limit_exceeded` (and tries again) while the others
//! are still served.

use std::collections::HashMap;
use std::fs::File;
use std::io::Read;
use std::os::fd::AsFd;
use std::os::unix::fs::{FileExt, MetadataExt};
use std::path::{Component, Path, PathBuf};
use std::sync::Mutex;

use halite_protocol::message::{ErrorKind, FileChunk, FileGet, FILE_CHUNK_BYTES};
use sha2::{Digest, Sha256};
use tokio::sync::mpsc;

pub use crate::config::files::{check_root, FileRootError, FilesConfig};
pub(crate) use crate::file_reads::{DigestKey, FileRead, FileServed};
use crate::file_scope::FileScope;
use crate::files_beneath::open_beneath;

/// Digests remembered (by device, inode, size, modification and change time) before the
/// memory is cleared: a large file is hashed once, not once per part.
const MAX_DIGESTS: usize = 1024;

/// What identifies the content of the file `meta` describes.
fn digest_key(meta: &std::fs::Metadata) -> DigestKey {
    let ns = |secs: i64, nsecs: i64| i128::from(secs) * 1_000_000_000 + i128::from(nsecs);
    DigestKey {
        dev: meta.dev(),
        inode: meta.ino(),
        size: meta.len(),
        modified_ns: ns(meta.mtime(), meta.mtime_nsec()),
        changed_ns: ns(meta.ctime(), meta.ctime_nsec()),
    }
}

/// Reads and hashes on tokio's blocking pool what the core admitted; the answer comes back to
/// the core through `done` (`Input::File`).
pub(crate) fn start(read: FileRead, done: mpsc::UnboundedSender<FileServed>) {
    let FileRead { peer, minion, request, root, scope, secrets, digests } = read;
    tokio::spawn(async move {
        let FileGet { request_id, path, offset } = request;
        let read =
            tokio::task::spawn_blocking(move || read_part(&root, &scope, &path, offset, &digests, &secrets)).await;
        let answer = read
            .unwrap_or_else(|e| Err((ErrorKind::Internal, format!("reading the file failed: {e}"))))
            .map(|chunk| FileChunk { request_id, ..chunk });
        let _ = done.send(FileServed { peer, minion, request_id, answer });
    });
}

/// `halite://path` opened beneath `root`, within `scope`, with its `fstat`: a regular file
/// inside the part of the root the minion may read. Nothing is looked up by path after this;
/// the descriptor is what is read.
pub(crate) fn open(
    root: &Path,
    scope: &FileScope,
    path: &str,
) -> Result<(File, std::fs::Metadata), (ErrorKind, String)> {
    let bad = |why: &str| (ErrorKind::BadRequest, format!("halite://{path}: {why}"));
    let relative = Path::new(path.trim_start_matches('/'));
    if path.is_empty() || path.len() > 4096 || path.contains('\0') || relative.as_os_str().is_empty() {
        return Err(bad("not a file path"));
    }
    if relative.components().any(|c| !matches!(c, Component::Normal(_))) {
        return Err(bad("the path may not contain '..' or '.'"));
    }
    let not_found = || (ErrorKind::NotFound, format!("halite://{path}: no such file on the master"));
    let not_regular = || (ErrorKind::NotFound, format!("halite://{path}: not a regular file on the master"));
    // Outside the scope is answered as missing before anything is opened.
    let Some((part, rest)) = scope.place(relative) else { return Err(not_found()) };
    let root_dir = File::open(root).map_err(|e| (ErrorKind::Internal, format!("the file root: {e}")))?;
    let base = match &part {
        None => root_dir,
        // A part's own directory, opened beneath the root; what is not one is missing.
        Some(part) => {
            let dir = open_beneath(root_dir.as_fd(), part).map_err(|_| not_found())?;
            if !dir.metadata().is_ok_and(|meta| meta.is_dir()) {
                return Err(not_found());
            }
            dir
        }
    };
    let file = open_beneath(base.as_fd(), rest).map_err(|e| match e.raw_os_error() {
        Some(libc::ENOENT | libc::ENOTDIR | libc::ENAMETOOLONG) => not_found(),
        // A link out of a part: what it leads to is outside the scope.
        Some(libc::EXDEV) if part.is_some() => not_found(),
        Some(libc::EXDEV) => bad("it leads outside the master's file root"),
        Some(libc::ELOOP) => bad("too many links on the way"),
        Some(libc::ENXIO | libc::ENODEV | libc::EISDIR) => not_regular(),
        Some(libc::EACCES) => (ErrorKind::Forbidden, format!("halite://{path}: the master may not read it")),
        _ => (ErrorKind::Internal, format!("halite://{path}: {e}")),
    })?;
    let meta = file.metadata().map_err(|e| (ErrorKind::Internal, format!("halite://{path}: {e}")))?;
    if !meta.file_type().is_file() {
        return Err(not_regular());
    }
    Ok((file, meta))
}

/// The part of the file from `offset` on, with the whole file's size and digest; refused if
/// the file is one of `secrets` (by device and inode: a hard link or bind mount is no way
/// around it).
fn read_part(
    root: &Path,
    scope: &FileScope,
    path: &str,
    offset: u64,
    digests: &Mutex<HashMap<DigestKey, String>>,
    secrets: &[PathBuf],
) -> Result<FileChunk, (ErrorKind, String)> {
    let (file, meta) = open(root, scope, path)?;
    let secret = secrets
        .iter()
        .filter_map(|p| std::fs::metadata(p).ok())
        .any(|s| (s.dev(), s.ino()) == (meta.dev(), meta.ino()));
    if secret {
        tracing::warn!(path, "a file request reached one of the master's own secret files; refused");
        return Err((
            ErrorKind::Forbidden,
            format!("halite://{path}: one of the master's own secret files, never served"),
        ));
    }
    let failed = |e: std::io::Error| (ErrorKind::Internal, format!("halite://{path}: {e}"));
    let key = digest_key(&meta);
    let known = digests.lock().unwrap_or_else(std::sync::PoisonError::into_inner).get(&key).cloned();
    let sha256 = match known {
        Some(sha256) => sha256,
        None => {
            let mut hasher = Sha256::new();
            std::io::copy(&mut (&file).take(key.size), &mut hasher).map_err(failed)?;
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
    let want = FILE_CHUNK_BYTES.min(usize::try_from(key.size - offset).unwrap_or(usize::MAX));
    let mut data = vec![0u8; want];
    let mut filled = 0;
    while filled < want {
        match file.read_at(&mut data[filled..], offset + filled as u64) {
            Ok(0) => break,
            Ok(n) => filled += n,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(e) => return Err(failed(e)),
        }
    }
    data.truncate(filled);
    Ok(FileChunk { request_id: 0, size: key.size, sha256, offset, data })
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;

    use halite_protocol::message::Message;
    use halite_transport::PeerId;

    use crate::config::MasterConfig;
    use crate::file_reads::{FileServer, ReadsBusy, MAX_IN_FLIGHT, MAX_IN_FLIGHT_PER_MINION};

    /// The scope of a minion of no tenant, with no tenants registered.
    fn whole() -> FileScope {
        FileScope::Untenanted { tenants: Default::default() }
    }

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
        std::os::unix::fs::symlink("../secret", dir.path().join("root/relative-escape")).unwrap();
        dir
    }

    fn read(root: &Path, path: &str) -> Result<FileChunk, (ErrorKind, String)> {
        read_part(root, &whole(), path, 0, &Mutex::default(), &[])
    }

    #[test]
    fn only_regular_files_inside_the_root_are_served() {
        let dir = root("resolve");
        let root = dir.path().join("root");
        assert_eq!(read(&root, "app/conf").unwrap().data, b"hello");
        assert_eq!(read(&root, "/app/conf").unwrap().data, b"hello", "a leading slash is the root's");
        assert_eq!(read(&root, "inside").unwrap().data, b"hello", "a link that stays inside is followed");
        for (path, kind) in [
            ("../secret", ErrorKind::BadRequest),
            ("app/../../secret", ErrorKind::BadRequest),
            ("./app/conf", ErrorKind::BadRequest),
            ("escape", ErrorKind::BadRequest),
            ("relative-escape", ErrorKind::BadRequest),
            ("app", ErrorKind::NotFound),
            ("missing", ErrorKind::NotFound),
            ("app/conf/below", ErrorKind::NotFound),
            ("", ErrorKind::BadRequest),
            ("/", ErrorKind::BadRequest),
        ] {
            let Err((got, why)) = read(&root, path) else { panic!("{path:?} was served") };
            assert_eq!(got, kind, "{path:?}: {why}");
            assert!(why.contains("halite://"), "the error names the URL: {why}");
        }
        let (_, why) = read(&root, "escape").unwrap_err();
        assert!(why.contains("outside the master's file root"), "{why}");
        let (_, why) = read(&root, "app").unwrap_err();
        assert!(why.contains("not a regular file"), "{why}");
    }

    #[test]
    fn a_directory_is_refused_even_through_a_link() {
        let dir = root("directory");
        let root = dir.path().join("root");
        std::os::unix::fs::symlink("app", root.join("dir-link")).unwrap();
        for path in ["app", "dir-link", "/app/"] {
            let (kind, why) = read(&root, path).unwrap_err();
            assert_eq!(kind, ErrorKind::NotFound, "{path}: {why}");
            assert!(why.contains("not a regular file"), "{path}: {why}");
        }
    }

    #[test]
    #[allow(unsafe_code)]
    fn a_fifo_is_refused_without_blocking() {
        let dir = root("fifo");
        let root = dir.path().join("root");
        let fifo = std::ffi::CString::new(root.join("pipe").into_os_string().into_encoded_bytes()).unwrap();
        // SAFETY: mkfifo(3) only reads the live NUL-terminated path.
        assert_eq!(unsafe { libc::mkfifo(fifo.as_ptr(), 0o600) }, 0, "{}", std::io::Error::last_os_error());
        std::os::unix::fs::symlink("pipe", root.join("pipe-link")).unwrap();
        let (tx, rx) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            let _ = tx.send([read(&root, "pipe"), read(&root, "pipe-link")]);
        });
        // Nobody ever writes the FIFO: a blocking open would never return.
        let answers = rx.recv_timeout(std::time::Duration::from_secs(10)).expect("opening a FIFO blocked");
        for answer in answers {
            let (kind, why) = answer.unwrap_err();
            assert_eq!(kind, ErrorKind::NotFound, "{why}");
            assert!(why.contains("not a regular file"), "{why}");
        }
    }

    /// The race: a directory under the root swapped for a link out of it and back,
    /// as fast as possible, while its file is fetched. The path checked and the file opened
    /// must be the same; nothing from outside is ever served.
    #[test]
    fn a_directory_swapped_for_a_link_out_never_serves_what_is_outside() {
        let dir = root("race");
        let root = dir.path().join("root");
        let (inside, parked, outside) = (root.join("d"), root.join("d.parked"), dir.path().join("state"));
        std::fs::create_dir_all(&inside).unwrap();
        std::fs::create_dir_all(&outside).unwrap();
        std::fs::write(inside.join("root.key"), b"decoy").unwrap();
        std::fs::write(outside.join("root.key"), b"THE MASTER'S KEY").unwrap();
        let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
        let swapper = {
            let stop = stop.clone();
            std::thread::spawn(move || {
                while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                    std::fs::rename(&inside, &parked).unwrap();
                    std::os::unix::fs::symlink(&outside, &inside).unwrap();
                    std::thread::yield_now();
                    std::fs::remove_file(&inside).unwrap();
                    std::fs::rename(&parked, &inside).unwrap();
                }
            })
        };
        let digests = Mutex::default();
        let (mut served, mut refused) = (0, 0);
        let started = std::time::Instant::now();
        while started.elapsed() < std::time::Duration::from_secs(2) || served == 0 || refused == 0 {
            assert!(started.elapsed() < std::time::Duration::from_secs(30), "{served} served, {refused} refused");
            match read_part(&root, &whole(), "d/root.key", 0, &digests, &[]) {
                Ok(chunk) => {
                    assert_eq!(chunk.data, b"decoy", "served from outside the root");
                    served += 1;
                }
                Err(_) => refused += 1,
            }
        }
        stop.store(true, std::sync::atomic::Ordering::Relaxed);
        swapper.join().unwrap();
    }

    #[test]
    fn parts_carry_the_whole_files_digest_and_a_change_shows() {
        let dir = root("parts");
        let root = dir.path().join("root");
        let big: Vec<u8> = (0..FILE_CHUNK_BYTES + 10).map(|i| (i % 251) as u8).collect();
        std::fs::write(root.join("big"), &big).unwrap();
        let digests = Mutex::default();
        let first = read_part(&root, &whole(), "big", 0, &digests, &[]).unwrap();
        let second = read_part(&root, &whole(), "big", first.data.len() as u64, &digests, &[]).unwrap();
        assert_eq!((first.data.len(), second.data.len()), (FILE_CHUNK_BYTES, 10));
        assert_eq!(first.sha256, second.sha256);
        assert_eq!(first.sha256, halite_protocol::hex::encode(&Sha256::digest(&big)));
        let end = read_part(&root, &whole(), "big", big.len() as u64, &digests, &[]).unwrap();
        assert!(end.data.is_empty());
        assert!(read_part(&root, &whole(), "big", big.len() as u64 + 1, &digests, &[]).is_err());
        std::fs::write(root.join("big"), b"changed").unwrap();
        assert_ne!(read_part(&root, &whole(), "big", 0, &digests, &[]).unwrap().sha256, first.sha256);
    }

    /// The digest remembered belongs to what the descriptor's fstat describes: a file rewritten
    /// in place with the same size and its old modification time put back is hashed again.
    #[test]
    fn a_file_rewritten_with_its_old_size_and_time_is_hashed_again() {
        let dir = root("rewrite");
        let root = dir.path().join("root");
        let digests = Mutex::default();
        let first = read_part(&root, &whole(), "app/conf", 0, &digests, &[]).unwrap();
        let modified = std::fs::metadata(root.join("app/conf")).unwrap().modified().unwrap();
        std::thread::sleep(std::time::Duration::from_millis(20));
        let file = std::fs::OpenOptions::new().write(true).open(root.join("app/conf")).unwrap();
        file.write_all_at(b"HELLO", 0).unwrap();
        file.set_modified(modified).unwrap();
        drop(file);
        let second = read_part(&root, &whole(), "app/conf", 0, &digests, &[]).unwrap();
        assert_eq!(second.data, b"HELLO");
        assert_ne!(second.sha256, first.sha256, "the digest of what is served now");
        assert_eq!(second.sha256, halite_protocol::hex::encode(&Sha256::digest(b"HELLO")));
    }

    #[test]
    fn the_masters_secret_files_are_refused_even_by_a_hard_link() {
        let dir = root("secret");
        let root = dir.path().join("root");
        std::fs::hard_link(root.join("app/conf"), root.join("alias")).unwrap();
        let secrets = [dir.path().join("missing.key"), root.join("app/conf")];
        for path in ["app/conf", "alias", "inside"] {
            let (kind, why) = read_part(&root, &whole(), path, 0, &Mutex::default(), &secrets).unwrap_err();
            assert_eq!(kind, ErrorKind::Forbidden, "{path}: {why}");
        }
    }

    #[test]
    fn the_databases_log_and_shared_memory_are_secrets_too() {
        let config = MasterConfig { state_dir: "/var/lib/halite/master".into(), ..MasterConfig::default() };
        let secrets = config.secret_files();
        for name in ["master.db", "master.db-wal", "master.db-shm", "master.db-journal", "master.key", "root.key"] {
            assert!(secrets.contains(&config.state_dir.join(name)), "{name}: {secrets:?}");
        }
    }

    #[test]
    fn one_minion_at_its_cap_leaves_room_for_the_others() {
        let mut server = FileServer::default();
        for _ in 0..MAX_IN_FLIGHT_PER_MINION {
            server.admit("greedy").unwrap();
        }
        let why = server.admit("greedy").unwrap_err().to_string();
        assert!(why.contains("this minion's file reads"), "{why}");
        server.admit("other").unwrap();
        server.release("greedy");
        server.admit("greedy").unwrap();
        // The overall cap still holds when many minions each stay under theirs.
        let mut admitted = 2 + MAX_IN_FLIGHT_PER_MINION - 1;
        for i in 0.. {
            match server.admit(&format!("m{}", i / MAX_IN_FLIGHT_PER_MINION)) {
                Ok(()) => admitted += 1,
                Err(why) => {
                    assert_eq!(why, ReadsBusy::Master);
                    break;
                }
            }
        }
        assert_eq!(admitted, MAX_IN_FLIGHT);
        for _ in 0..MAX_IN_FLIGHT_PER_MINION {
            server.release("greedy");
        }
        assert!(!server.in_flight().1.contains_key("greedy"), "a minion with nothing in flight is forgotten");
    }

    /// Without a root, or past its cap, a request is answered at once with an error naming
    /// it; an admitted read's answer goes to the peer that asked and gives its place back.
    #[test]
    fn a_request_is_admitted_as_a_read_or_refused_with_its_answer() {
        let get = |request_id| FileGet { request_id, path: "app/conf".into(), offset: 0 };
        let error_of = |message: Message| match message {
            Message::Error(error) => (error.kind, error.request),
            other => panic!("{other:?}"),
        };
        let mut server = FileServer::default();
        let refused = server.request(&MasterConfig::default(), PeerId(1), "web1", whole(), get(7)).err().unwrap();
        assert_eq!((refused.kind, refused.request), (ErrorKind::NotFound, Some("7".into())));
        assert_eq!(server.in_flight().0, 0, "a refused request takes no place");

        let dir = root("request");
        let config = config(&dir.path().join("state"), &dir.path().join("root"));
        let mut reads = Vec::new();
        for id in 0..MAX_IN_FLIGHT_PER_MINION as u64 {
            reads.push(server.request(&config, PeerId(1), "web1", whole(), get(id)).unwrap());
        }
        let refused = server.request(&config, PeerId(1), "web1", whole(), get(99)).err().unwrap();
        assert_eq!((refused.kind, refused.request), (ErrorKind::LimitExceeded, Some("99".into())));
        assert_eq!((reads[0].peer, reads[0].root.as_path()), (PeerId(1), dir.path().join("root").as_path()));
        assert!(reads[0].secrets.contains(&config.key_path()), "the read knows the secrets it must refuse");

        let part = FileChunk { request_id: 3, offset: 0, size: 5, sha256: "x".into(), data: b"hello".to_vec() };
        let (peer, answer) =
            server.finished(FileServed { peer: PeerId(1), minion: "web1".into(), request_id: 3, answer: Ok(part) });
        assert!(matches!((peer, answer), (PeerId(1), Message::FileChunk(c)) if c.request_id == 3));
        let failed = Err((ErrorKind::NotFound, "gone".into()));
        let (_, answer) =
            server.finished(FileServed { peer: PeerId(1), minion: "web1".into(), request_id: 4, answer: failed });
        assert_eq!(error_of(answer), (ErrorKind::NotFound, Some("4".into())));
        assert_eq!(server.in_flight().0, MAX_IN_FLIGHT_PER_MINION - 2, "each answer gives its place back");
        assert!(server.request(&config, PeerId(1), "web1", whole(), get(100)).is_ok());
    }

    /// The same on the core: a minion sending more requests than its cap is told
    /// `limit_exceeded` for the extra one while another minion's request is served.
    #[test]
    fn a_minion_past_its_cap_is_refused_while_another_is_served() {
        use crate::server::Input;
        use crate::sim::Sim;
        use halite_protocol::message::ErrorMessage;

        let dir = root("sim");
        let root = dir.path().join("root");
        let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
        runtime.block_on(async {
            let mut sim = Sim::with_config(|config| config.files.root = Some(root.clone())).await;
            let mut greedy = sim.minion("greedy").await;
            let mut other = sim.minion("other").await;
            greedy.recv(&sim);
            other.recv(&sim);
            let get = |request_id| Message::FileGet(FileGet { request_id, path: "app/conf".into(), offset: 0 });
            for id in 0..=MAX_IN_FLIGHT_PER_MINION as u64 {
                greedy.send(&mut sim, &get(id)).await;
            }
            let refused = greedy.recv(&sim);
            let extra = MAX_IN_FLIGHT_PER_MINION.to_string();
            assert!(
                matches!(refused.as_slice(), [Message::Error(ErrorMessage { kind: ErrorKind::LimitExceeded, request: Some(r), .. })] if *r == extra),
                "{refused:?}"
            );
            other.send(&mut sim, &get(100)).await;
            assert!(other.recv(&sim).is_empty(), "the other minion's request is not refused");
            let rx = sim.file_reads();
            let mut finished = Vec::new();
            for _ in 0..=MAX_IN_FLIGHT_PER_MINION {
                finished.push(rx.recv().await.unwrap());
            }
            for served in finished {
                sim.step(Input::File(served)).await;
            }
            let answers = other.recv(&sim);
            assert!(
                matches!(answers.as_slice(), [Message::FileChunk(c)] if c.request_id == 100 && c.data == b"hello"),
                "{answers:?}"
            );
            assert_eq!(greedy.recv(&sim).len(), MAX_IN_FLIGHT_PER_MINION);
            assert_eq!(sim.files().in_flight().0, 0);
        });
    }

    fn config(state_dir: &Path, root: &Path) -> MasterConfig {
        let mut config = MasterConfig { state_dir: state_dir.to_owned(), ..MasterConfig::default() };
        config.files.root = Some(root.to_owned());
        config
    }
}
