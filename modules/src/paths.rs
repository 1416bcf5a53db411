//! Which paths functions may touch for a caller: never the minion's own secrets (its key and
//! state directory, journal included, its enrollment file, its config), whatever the policy
//! allows; and, when the minion's `[policy] read_paths` lists directories, reads only beneath
//! them.
//!
//! Paths are judged where they really lead: a read opens the file first (without blocking, so a
//! FIFO or a device never stalls the runtime) and judges the path the kernel opened (from
//! `/proc/self/fd`), so neither a symbolic link nor one swapped in after a check reaches a
//! secret. Stat, write and removal judge the path with its directories resolved.

use std::collections::HashSet;
use std::fs;
use std::io::Read;
use std::os::unix::fs::{FileTypeExt, MetadataExt, OpenOptionsExt};
use std::os::unix::io::AsRawFd;
use std::path::{Component, Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use crate::ModuleError;

/// What a function does with a path, for [`PathGuard`] to judge.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Access {
    /// Read its content or metadata.
    Read,
    /// Create or replace it.
    Write,
    /// Remove it (a directory with its contents).
    Remove,
}

/// The paths functions may not touch, and where they may read.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct PathGuard {
    /// The minion's secrets, resolved: nothing beneath them is read, written, listed or
    /// stat'ed, and nothing above them is removed.
    protected: Vec<PathBuf>,
    /// `[policy] read_paths`, resolved: when set, reads happen only beneath one of them.
    read_paths: Option<Vec<PathBuf>>,
}

/// A file read for a caller.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ReadFile {
    /// At most the cap's bytes.
    pub content: Vec<u8>,
    /// Whether the file held more.
    pub truncated: bool,
}

impl PathGuard {
    /// A guard over `protected` (files or directories; those that do not exist yet are kept
    /// as given) and, if given, reads confined to `read_paths`.
    pub fn new(protected: &[PathBuf], read_paths: Option<&[PathBuf]>) -> Self {
        // Fully resolved where they exist (a state directory may itself be a link).
        let full = |path: &PathBuf| path.canonicalize().unwrap_or_else(|_| resolve(path));
        PathGuard {
            protected: protected.iter().map(full).collect(),
            read_paths: read_paths.map(|paths| paths.iter().map(full).collect()),
        }
    }

    /// Whether `path` (resolved) may be touched for `access`; the refusal names why.
    pub fn check(&self, path: &Path, access: Access) -> Result<PathBuf, ModuleError> {
        let resolved = resolve(path);
        self.judge(&resolved, access)?;
        // What a read, a chmod or a diff would follow the last link to is judged too (a
        // removal removes the link itself).
        if access != Access::Remove {
            if let Ok(target) = resolved.canonicalize() {
                self.judge(&target, access)?;
            }
        }
        Ok(resolved)
    }

    fn judge(&self, resolved: &Path, access: Access) -> Result<(), ModuleError> {
        if let Some(secret) = self.protected.iter().find(|p| resolved.starts_with(p)) {
            return Err(ModuleError::Denied(format!(
                "{} is the minion's own ({}): no function reads or changes it",
                resolved.display(),
                secret.display()
            )));
        }
        if access == Access::Remove {
            if let Some(secret) = self.protected.iter().find(|p| p.starts_with(resolved)) {
                return Err(ModuleError::Denied(format!(
                    "{} holds the minion's own {}: it is not removed",
                    resolved.display(),
                    secret.display()
                )));
            }
        }
        if access == Access::Read {
            if let Some(allowed) = &self.read_paths {
                if !allowed.iter().any(|dir| resolved.starts_with(dir)) {
                    return Err(ModuleError::Denied(format!(
                        "{} is outside the minion's [policy] read_paths",
                        resolved.display()
                    )));
                }
            }
        }
        Ok(())
    }

    /// The device and inode of every protected file and directory (two levels down), so a
    /// hard link or a bind mount that names one elsewhere is known for what it is.
    fn protected_inodes(&self) -> HashSet<(u64, u64)> {
        fn add(path: &Path, depth: u32, inodes: &mut HashSet<(u64, u64)>) {
            let Ok(meta) = fs::symlink_metadata(path) else { return };
            inodes.insert((meta.dev(), meta.ino()));
            if meta.is_dir() && depth > 0 {
                for entry in fs::read_dir(path).into_iter().flatten().flatten() {
                    add(&entry.path(), depth - 1, inodes);
                }
            }
        }
        let mut inodes = HashSet::new();
        for path in &self.protected {
            add(path, 2, &mut inodes);
        }
        inodes
    }

    /// Refuses what the metadata shows is one of the minion's own files (by device and inode,
    /// however it is named: a hard link, a bind mount).
    pub fn judge_inode(&self, meta: &fs::Metadata, shown: &Path) -> Result<(), ModuleError> {
        judge_inode_in(&self.protected_inodes(), meta, shown)
    }

    /// Whether `path` may be written or removed, judged by name and, when something is there
    /// already, by what it is; for a directory tree to remove, by everything in it: a tree
    /// holding one of the secrets, or a mount point (a bind mount of them), is refused.
    pub fn judge_tree(&self, path: &Path, access: Access) -> Result<(), ModuleError> {
        self.check(path, access)?;
        let Ok(top) = fs::symlink_metadata(path) else { return Ok(()) };
        let inodes = self.protected_inodes();
        judge_inode_in(&inodes, &top, path)?;
        if access != Access::Remove || !top.is_dir() {
            return Ok(());
        }
        let mut pending = vec![path.to_path_buf()];
        while let Some(dir) = pending.pop() {
            for entry in fs::read_dir(&dir).map_err(|e| ModuleError::Failed(format!("{}: {e}", dir.display())))? {
                let entry = entry.map_err(|e| ModuleError::Failed(format!("{}: {e}", dir.display())))?;
                let meta =
                    entry.metadata().map_err(|e| ModuleError::Failed(format!("{}: {e}", entry.path().display())))?;
                if inodes.contains(&(meta.dev(), meta.ino())) {
                    return Err(ModuleError::Denied(format!(
                        "{} holds {}, one of the minion's own files: it is not removed",
                        path.display(),
                        entry.path().display()
                    )));
                }
                if meta.is_dir() {
                    if meta.dev() != top.dev() {
                        return Err(ModuleError::Denied(format!(
                            "{} holds a mount point ({}): it is not removed",
                            path.display(),
                            entry.path().display()
                        )));
                    }
                    pending.push(entry.path());
                }
            }
        }
        Ok(())
    }

    /// The metadata of `path` itself (a link is not followed), for a caller that may read it:
    /// `None` when nothing is there.
    pub fn lstat(&self, path: &Path) -> Result<Option<(PathBuf, fs::Metadata)>, ModuleError> {
        let resolved = self.check(path, Access::Read)?;
        let Ok(meta) = fs::symlink_metadata(&resolved) else { return Ok(None) };
        self.judge_inode(&meta, &resolved)?;
        Ok(Some((resolved, meta)))
    }

    /// Pins the directory `path` is in, for a function that then works on `path` through it:
    /// the directory is opened once and judged where it really is, and the path returned
    /// names the entry through that open directory (`/proc/self/fd/N/name`), so swapping a
    /// directory along the path for a link afterwards redirects nothing.
    pub fn pin(&self, path: &Path, access: Access) -> Result<Pinned, ModuleError> {
        let resolved = self.check(path, access)?;
        let failed = |e: std::io::Error| ModuleError::Failed(format!("{}: {e}", resolved.display()));
        let (Some(parent), Some(name)) = (resolved.parent(), resolved.file_name()) else {
            return Err(ModuleError::BadArguments(format!("{} names no entry of a directory", resolved.display())));
        };
        let dir = fs::OpenOptions::new()
            .read(true)
            .custom_flags(libc_flags::PATH | libc_flags::DIRECTORY)
            .open(parent)
            .map_err(failed)?;
        let fd_path = PathBuf::from(format!("/proc/self/fd/{}", dir.as_raw_fd()));
        let (real_parent, entry) = match fs::read_link(&fd_path) {
            Ok(real) => (real, fd_path.join(name)),
            // No /proc (a bare chroot): the resolved path, as checked.
            Err(_) => (parent.to_path_buf(), resolved.clone()),
        };
        let real = real_parent.join(name);
        self.judge(&real, access)?;
        if let Ok(meta) = fs::symlink_metadata(&entry) {
            let inodes = self.protected_inodes();
            judge_inode_in(&inodes, &meta, &real)?;
            if access != Access::Remove {
                if let Ok(target) = fs::metadata(&entry) {
                    judge_inode_in(&inodes, &target, &real)?;
                }
            }
        }
        Ok(Pinned { _dir: dir, path: entry, shown: resolved })
    }

    /// Opens the regular file at `path` for reading without blocking (a FIFO or a device is
    /// refused, never waited on), judged by where the kernel really opened it and by what it
    /// is. Blocking: call it off the runtime's threads.
    pub fn open_blocking(&self, path: &Path) -> Result<fs::File, ModuleError> {
        self.check(path, Access::Read)?;
        self.open_regular(path)
    }

    /// Opens a regular file the minion reads for itself on a caller's behalf (a stored plan):
    /// as [`Self::open_blocking`], never one of the minion's secrets, but not confined to
    /// `[policy] read_paths`.
    pub fn open_own_blocking(&self, path: &Path) -> Result<fs::File, ModuleError> {
        let unconfined = PathGuard { read_paths: None, ..self.clone() };
        unconfined.check(path, Access::Read)?;
        unconfined.open_regular(path)
    }

    fn open_regular(&self, path: &Path) -> Result<fs::File, ModuleError> {
        let failed = |e: std::io::Error| ModuleError::Failed(format!("{}: {e}", path.display()));
        let file = fs::OpenOptions::new()
            .read(true)
            .custom_flags(libc_flags::NONBLOCK | libc_flags::NOCTTY)
            .open(path)
            .map_err(failed)?;
        let meta = file.metadata().map_err(failed)?;
        if !meta.file_type().is_file() {
            let kind = match meta.file_type() {
                t if t.is_dir() => "a directory",
                t if t.is_fifo() => "a FIFO",
                t if t.is_char_device() || t.is_block_device() => "a device",
                t if t.is_socket() => "a socket",
                _ => "not a regular file",
            };
            return Err(ModuleError::Failed(format!("{}: {kind}, not a regular file", path.display())));
        }
        // Where the kernel really opened it, links and all (without /proc, what was checked).
        if let Ok(opened) = fs::read_link(format!("/proc/self/fd/{}", file.as_raw_fd())) {
            self.judge(&opened, Access::Read)?;
        }
        self.judge_inode(&meta, path)?;
        Ok(file)
    }

    /// Reads at most `cap` bytes of the regular file at `path`, off the runtime's threads
    /// ([`Self::open_blocking`]).
    pub async fn read(&self, path: &Path, cap: u64) -> Result<ReadFile, ModuleError> {
        let (guard, path) = (self.clone(), path.to_path_buf());
        blocking(move || {
            let file = guard.open_blocking(&path)?;
            let mut content = Vec::new();
            file.take(cap.saturating_add(1))
                .read_to_end(&mut content)
                .map_err(|e| ModuleError::Failed(format!("{}: {e}", path.display())))?;
            let truncated = content.len() as u64 > cap;
            content.truncate(usize::try_from(cap).unwrap_or(usize::MAX));
            Ok(ReadFile { content, truncated })
        })
        .await
    }

    /// The SHA-256 (lowercase hex) of the regular file at `path`, read off the runtime's
    /// threads ([`Self::open_blocking`]).
    pub async fn digest(&self, path: &Path) -> Result<String, ModuleError> {
        use sha2::Digest;
        let (guard, path) = (self.clone(), path.to_path_buf());
        // The work stops soon after the call is dropped (its timeout, a cancel): it checks
        // between reads.
        let stop = StopOnDrop(Arc::new(AtomicBool::new(false)));
        let stopped = stop.0.clone();
        let digest = blocking(move || {
            let failed = |e: std::io::Error| ModuleError::Failed(format!("{}: {e}", path.display()));
            let mut file = guard.open_blocking(&path)?;
            let mut hasher = sha2::Sha256::new();
            let mut buffer = vec![0; 1 << 20];
            loop {
                if stopped.load(Ordering::Relaxed) {
                    return Err(ModuleError::Failed(format!("{}: hashing stopped", path.display())));
                }
                match file.read(&mut buffer).map_err(failed)? {
                    0 => break,
                    n => hasher.update(&buffer[..n]),
                }
            }
            Ok(halite_protocol::hex::encode(&hasher.finalize()))
        })
        .await;
        drop(stop);
        digest
    }

    /// Copies the regular file at `from` (at most `cap` bytes long) to a new file `to`, off the
    /// runtime's threads, stopping when the call is dropped.
    pub async fn copy(&self, from: &Path, to: &Path, cap: u64) -> Result<(), ModuleError> {
        let (guard, from, to) = (self.clone(), from.to_path_buf(), to.to_path_buf());
        let stop = StopOnDrop(Arc::new(AtomicBool::new(false)));
        let stopped = stop.0.clone();
        let copied = blocking(move || {
            let mut source = guard.open_blocking(&from)?;
            let failed = |e: std::io::Error| ModuleError::Failed(format!("{}: {e}", to.display()));
            let size = source.metadata().map_err(failed)?.len();
            if size > cap {
                return Err(ModuleError::Failed(format!(
                    "{} is {size} bytes, more than a backup copies ({cap}); nothing was changed",
                    from.display()
                )));
            }
            // Copied beside `to`, then renamed over it: copies made at once never remove
            // each other's file, and `to` always holds one whole copy.
            let dir =
                to.parent().ok_or_else(|| ModuleError::Failed(format!("{}: no parent directory", to.display())))?;
            let name = to.file_name().and_then(|n| n.to_str()).unwrap_or("copy");
            let (mut copy, tmp) = crate::temp_file::create_beside(dir, name, 0o600).map_err(failed)?;
            let mut buffer = vec![0; 1 << 20];
            let written = (|| {
                loop {
                    if stopped.load(Ordering::Relaxed) {
                        return Err(ModuleError::Failed(format!("{}: copy stopped", to.display())));
                    }
                    match source.read(&mut buffer).map_err(failed)? {
                        0 => break,
                        n => std::io::Write::write_all(&mut copy, &buffer[..n]).map_err(failed)?,
                    }
                }
                let mode = source.metadata().map_err(failed)?.permissions();
                copy.set_permissions(mode).map_err(failed)?;
                fs::rename(&tmp, &to).map_err(failed)
            })();
            if written.is_err() {
                let _ = fs::remove_file(&tmp);
            }
            written
        })
        .await;
        drop(stop);
        copied
    }
}

/// Refuses metadata whose device and inode are among `inodes` (the protected ones).
fn judge_inode_in(inodes: &HashSet<(u64, u64)>, meta: &fs::Metadata, shown: &Path) -> Result<(), ModuleError> {
    if inodes.contains(&(meta.dev(), meta.ino())) {
        return Err(ModuleError::Denied(format!(
            "{} is the minion's own (the same file as one of its secrets): no function reads or changes it",
            shown.display()
        )));
    }
    Ok(())
}

/// A path pinned by [`PathGuard::pin`]: work on `path`, show `shown`.
#[derive(Debug)]
pub struct Pinned {
    _dir: fs::File,
    /// The entry, through its open directory.
    pub path: PathBuf,
    /// The entry as resolved, for messages.
    pub shown: PathBuf,
}

/// Sets its flag when dropped: tells blocking work its caller is gone.
struct StopOnDrop(Arc<AtomicBool>);

impl Drop for StopOnDrop {
    fn drop(&mut self) {
        self.0.store(true, Ordering::Relaxed);
    }
}

/// Runs blocking file work on tokio's blocking pool.
async fn blocking<T: Send + 'static>(
    work: impl FnOnce() -> Result<T, ModuleError> + Send + 'static,
) -> Result<T, ModuleError> {
    tokio::task::spawn_blocking(work).await.map_err(|e| ModuleError::Failed(format!("file work failed: {e}")))?
}

/// The open(2) flags std does not name.
mod libc_flags {
    pub(super) const NONBLOCK: i32 = nix::fcntl::OFlag::O_NONBLOCK.bits();
    pub(super) const NOCTTY: i32 = nix::fcntl::OFlag::O_NOCTTY.bits();
    pub(super) const PATH: i32 = nix::fcntl::OFlag::O_PATH.bits();
    pub(super) const DIRECTORY: i32 = nix::fcntl::OFlag::O_DIRECTORY.bits();
}

/// `path` as the kernel resolves it, all but its last component: the directories it names are
/// resolved (links followed, `..` taken after them, as `realpath` does) as far as they exist,
/// and the last component is kept as written, so a link there is judged where it stands (and
/// what it points to, when opened or followed). A part below a missing directory is kept as
/// written, `..` and all cut.
fn resolve(path: &Path) -> PathBuf {
    let Some(name) = path.file_name().map(ToOwned::to_owned) else {
        // Ends in `..`: a directory, resolved whole.
        return path.canonicalize().unwrap_or_else(|_| path.to_path_buf());
    };
    let parent = path.parent().map(Path::to_path_buf).unwrap_or_default();
    // The deepest ancestor that exists is resolved, the rest kept as written.
    let mut existing = parent.as_path();
    let mut rest = Vec::new();
    loop {
        if let Ok(real) = existing.canonicalize() {
            let mut out = real;
            for part in rest.iter().rev() {
                out.push(part);
            }
            out.push(&name);
            return out;
        }
        match (existing.file_name(), existing.parent()) {
            (Some(part), Some(up)) => {
                rest.push(part.to_owned());
                existing = up;
            }
            _ => return path.components().filter(|c| matches!(c, Component::RootDir | Component::Normal(_))).collect(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn scratch(name: &str) -> PathBuf {
        let dir = std::env::temp_dir().join(format!("halite-paths-{name}-{}", std::process::id()));
        let _ = fs::remove_dir_all(&dir);
        fs::create_dir_all(dir.join("state")).unwrap();
        fs::create_dir_all(dir.join("open")).unwrap();
        fs::write(dir.join("state/minion.key"), b"secret").unwrap();
        fs::write(dir.join("open/note"), b"hello").unwrap();
        dir
    }

    fn rt() -> tokio::runtime::Runtime {
        tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap()
    }

    #[test]
    fn secrets_are_refused_however_they_are_named() {
        let dir = scratch("names");
        let guard = PathGuard::new(&[dir.join("state")], None);
        std::os::unix::fs::symlink(dir.join("state/minion.key"), dir.join("open/link")).unwrap();
        std::os::unix::fs::symlink(dir.join("state"), dir.join("open/dirlink")).unwrap();
        rt().block_on(async {
            assert_eq!(guard.read(&dir.join("open/note"), 100).await.unwrap().content, b"hello");
            for path in [
                dir.join("state/minion.key"),
                dir.join("open/../state/minion.key"),
                dir.join("open/link"),
                dir.join("open/dirlink/minion.key"),
                dir.join("open/dirlink/../state/minion.key"),
                dir.join("state/./minion.key"),
            ] {
                let refused = guard.read(&path, 100).await.unwrap_err();
                assert!(matches!(refused, ModuleError::Denied(_)), "{}: {refused}", path.display());
            }
        });
        assert!(guard.check(&dir.join("state/new"), Access::Write).is_err());
        assert!(guard.check(&dir.join("open/dirlink/x"), Access::Write).is_err());
        assert!(guard.check(&dir.join("open/link"), Access::Write).is_err(), "a chmod would follow the link");
        assert!(guard.check(&dir.join("open/link"), Access::Remove).is_ok(), "removing the link itself");
        assert!(guard.check(&dir, Access::Remove).is_err(), "removing what holds a secret");
        assert!(guard.check(&dir, Access::Read).is_ok());
        assert!(guard.check(&dir.join("open/note"), Access::Remove).is_ok());
    }

    #[test]
    fn a_hard_link_to_a_secret_is_refused() {
        let dir = scratch("hard");
        let guard = PathGuard::new(&[dir.join("state")], None);
        fs::hard_link(dir.join("state/minion.key"), dir.join("open/alias")).unwrap();
        rt().block_on(async {
            let refused = guard.read(&dir.join("open/alias"), 100).await.unwrap_err();
            assert!(refused.to_string().contains("the same file as one of its secrets"), "{refused}");
        });
        assert!(guard.pin(&dir.join("open/alias"), Access::Write).is_err());
    }

    #[test]
    fn a_tree_holding_a_secret_is_not_removed() {
        let dir = scratch("tree");
        fs::create_dir_all(dir.join("open/t/deep")).unwrap();
        fs::hard_link(dir.join("state/minion.key"), dir.join("open/t/deep/k")).unwrap();
        let guard = PathGuard::new(&[dir.join("state")], None);
        let refused = guard.judge_tree(&dir.join("open/t"), Access::Remove).unwrap_err();
        assert!(refused.to_string().contains("one of the minion's own files"), "{refused}");
        fs::remove_file(dir.join("open/t/deep/k")).unwrap();
        assert!(guard.judge_tree(&dir.join("open/t"), Access::Remove).is_ok());
    }

    #[test]
    fn a_pinned_path_stays_where_it_was_judged() {
        let dir = scratch("pin");
        fs::create_dir_all(dir.join("open/d")).unwrap();
        let guard = PathGuard::new(&[dir.join("state")], None);
        let pinned = guard.pin(&dir.join("open/d/minion.key"), Access::Write).unwrap();
        // The directory is swapped for a link to the secrets after the check.
        fs::rename(dir.join("open/d"), dir.join("open/gone")).unwrap();
        std::os::unix::fs::symlink(dir.join("state"), dir.join("open/d")).unwrap();
        fs::write(&pinned.path, b"written").unwrap();
        assert_eq!(fs::read(dir.join("state/minion.key")).unwrap(), b"secret", "the secret is untouched");
        assert_eq!(fs::read(dir.join("open/gone/minion.key")).unwrap(), b"written", "written where it was judged");
    }

    #[test]
    fn reads_stay_within_read_paths_when_set() {
        let dir = scratch("allow");
        let guard = PathGuard::new(&[dir.join("state")], Some(&[dir.join("open")]));
        assert!(guard.check(&dir.join("open/note"), Access::Read).is_ok());
        let refused = guard.check(Path::new("/etc/hostname"), Access::Read).unwrap_err();
        assert!(refused.to_string().contains("read_paths"), "{refused}");
        assert!(guard.check(Path::new("/etc/hostname"), Access::Write).is_ok(), "writes are the policy's");
    }

    #[test]
    fn a_fifo_or_a_device_is_refused_without_blocking() {
        let dir = scratch("fifo");
        let fifo = dir.join("open/fifo");
        nix::unistd::mkfifo(&fifo, nix::sys::stat::Mode::from_bits_truncate(0o600)).unwrap();
        let guard = PathGuard::default();
        rt().block_on(async {
            let read = tokio::time::timeout(std::time::Duration::from_secs(5), guard.read(&fifo, 100)).await;
            let refused = read.expect("the read returned at once").unwrap_err();
            assert!(refused.to_string().contains("FIFO"), "{refused}");
            let refused = guard.read(Path::new("/dev/null"), 100).await.unwrap_err();
            assert!(refused.to_string().contains("device"), "{refused}");
            let refused = guard.read(&dir, 100).await.unwrap_err();
            assert!(refused.to_string().contains("directory"), "{refused}");
        });
    }
}
