//! Files written beside their target and renamed into place: each writer gets a name of its
//! own, so writers running at once (two jobs on one minion, two minions sharing a directory)
//! never remove or truncate each other's file, and the target always holds one writer's whole
//! content.

use std::collections::hash_map::RandomState;
use std::fs;
use std::hash::{BuildHasher, Hasher};
use std::io;
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};

/// How many names are tried before giving up (each collision is another writer's live file).
const ATTEMPTS: usize = 16;

/// A new, empty file in `dir` named after `name` (`.NAME.halite-PID-N-RANDOM`), created with
/// `mode` and refusing to follow a link, with its path.
pub(crate) fn create_beside(dir: &Path, name: &str, mode: u32) -> io::Result<(fs::File, PathBuf)> {
    let mut last = None;
    for _ in 0..ATTEMPTS {
        let path = dir.join(format!(".{name}.halite-{}", unique_suffix()));
        match fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(mode)
            .custom_flags(nix::fcntl::OFlag::O_NOFOLLOW.bits())
            .open(&path)
        {
            Ok(file) => return Ok((file, path)),
            Err(error) if error.kind() == io::ErrorKind::AlreadyExists => last = Some(error),
            Err(error) => return Err(error),
        }
    }
    Err(last.unwrap_or_else(|| io::Error::from(io::ErrorKind::AlreadyExists)))
}

/// This process, a counter, and 64 random bits: unique among this minion's writers by the
/// first two, among other hosts' (a shared filesystem) by the last.
fn unique_suffix() -> String {
    static NEXT: AtomicU64 = AtomicU64::new(0);
    // `RandomState` is seeded from the operating system's randomness for each instance.
    let random = RandomState::new().build_hasher().finish();
    format!("{}-{}-{random:016x}", std::process::id(), NEXT.fetch_add(1, Ordering::Relaxed))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_writer_gets_a_file_of_its_own() {
        let dir = std::env::temp_dir().join(format!("halite-temp-beside-{}", std::process::id()));
        fs::create_dir_all(&dir).unwrap();
        let paths: Vec<PathBuf> = (0..100).map(|_| create_beside(&dir, "x", 0o600).unwrap().1).collect();
        let distinct: std::collections::HashSet<&PathBuf> = paths.iter().collect();
        assert_eq!(distinct.len(), 100);
        assert!(paths.iter().all(|p| p.file_name().unwrap().to_str().unwrap().starts_with(".x.halite-")));
        fs::remove_dir_all(&dir).unwrap();
    }
}
