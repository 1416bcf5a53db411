//! `[files]`: the file root served to minions as `halite://` and its parts shared by every
//! tenant, and the check at start that the root serves none of the master's own secrets. The
//! file server itself is `files.rs`.

use std::path::{Component, Path, PathBuf};

use super::MasterConfig;

/// `[files]`: the directory served to minions as `halite://`; off when unset.
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct FilesConfig {
    /// The file root, e.g. `/srv/halite`. It may not hold the master's state directory or
    /// key files, nor be inside the state directory.
    pub root: Option<PathBuf>,
    /// Parts of the root (relative paths, e.g. `common`) every tenant's minions may read
    /// beside their own tenant's part (`<root>/<tenant>/`); see `file_scope.rs`.
    pub shared: Vec<PathBuf>,
}

impl MasterConfig {
    /// The master's own secret files, never served whatever path leads to them.
    pub fn secret_files(&self) -> Vec<PathBuf> {
        let database = self.database_path();
        // SQLite's write-ahead log, shared memory and rollback journal hold the database's pages.
        let companions = ["-wal", "-shm", "-journal"].map(|suffix| {
            let mut name = database.clone().into_os_string();
            name.push(suffix);
            PathBuf::from(name)
        });
        let mut files = vec![self.key_path(), self.root_key_path(), database];
        files.extend(companions);
        files.extend(self.gateway.tls_key.iter().cloned());
        files.extend(self.store.password_file.iter().cloned());
        files
    }
}

/// Why `[files] root` may not be served, found at start ([`check_root`]).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum FileRootError {
    /// The root is the state directory or holds it.
    #[error(
        "files: root {root} is or contains the master's state directory {state_dir}: every minion could read \
         the master's keys (whoever holds root.key is root) and its database. Set [files] root to a directory \
         that holds only the files to serve, outside {state_dir}, or move state_dir out of the root"
    )]
    HoldsStateDir {
        /// The file root (resolved).
        root: PathBuf,
        /// The state directory (resolved).
        state_dir: PathBuf,
    },
    /// The root is inside the state directory.
    #[error(
        "files: root {root} is inside the master's state directory {state_dir}, which only the master may \
         read. Set [files] root to a directory of its own outside {state_dir}"
    )]
    InStateDir {
        /// The file root (resolved).
        root: PathBuf,
        /// The state directory (resolved).
        state_dir: PathBuf,
    },
    /// The root holds one of the master's secret files named in the config.
    #[error(
        "files: root {root} contains {file}, a secret of the master's: every minion could read it. Move it \
         out of the root (and change its path in the config), or set [files] root to another directory"
    )]
    HoldsSecret {
        /// The file root (resolved).
        root: PathBuf,
        /// The secret file (resolved).
        file: PathBuf,
    },
    /// A shared part that is not a path beneath the root.
    #[error("files: shared part {0:?} must be a relative path of plain names beneath the root (like \"common\")")]
    BadShared(PathBuf),
}

/// Refuses a `[files] root` that would serve the master's own secrets: one that is, holds or
/// lies inside the state directory, or holds a key file the config names. Paths are compared
/// resolved (links followed); a part not yet created (a first start) is taken as written.
pub fn check_root(config: &MasterConfig) -> Result<(), FileRootError> {
    if let Some(part) = config.files.shared.iter().find(|part| !crate::file_scope::valid_shared_part(part)) {
        return Err(FileRootError::BadShared(part.clone()));
    }
    let Some(root) = &config.files.root else { return Ok(()) };
    let root = resolved(root);
    let state_dir = resolved(&config.state_dir);
    if state_dir.starts_with(&root) {
        return Err(FileRootError::HoldsStateDir { root, state_dir });
    }
    if root.starts_with(&state_dir) {
        return Err(FileRootError::InStateDir { root, state_dir });
    }
    let mut secrets = config.secret_files();
    secrets.push(config.certificate_path());
    for file in secrets.iter().map(|file| resolved(file)) {
        if file.starts_with(&root) {
            return Err(FileRootError::HoldsSecret { root, file });
        }
    }
    Ok(())
}

/// `path` absolute with every link resolved, as far as it exists; the rest as written, with
/// `.` and `..` applied.
fn resolved(path: &Path) -> PathBuf {
    let absolute = std::env::current_dir().map(|dir| dir.join(path)).unwrap_or_else(|_| path.to_owned());
    let mut rest = Vec::new();
    let mut existing = absolute.as_path();
    let mut out = loop {
        if let Ok(real) = existing.canonicalize() {
            break real;
        }
        match (existing.parent(), existing.file_name()) {
            (Some(parent), Some(name)) => {
                rest.push(name.to_owned());
                existing = parent;
            }
            // `..` at the end, or the root itself unreadable: as written.
            _ => {
                rest.clear();
                break PathBuf::new();
            }
        }
    };
    if out.as_os_str().is_empty() {
        for component in absolute.components() {
            match component {
                Component::ParentDir => {
                    out.pop();
                }
                Component::CurDir => {}
                other => out.push(other),
            }
        }
        return out;
    }
    out.extend(rest.iter().rev());
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A scratch directory, removed on drop.
    struct Scratch(PathBuf);

    impl Scratch {
        fn new(name: &str) -> Self {
            let dir = Scratch(std::env::temp_dir().join(format!("halite-files-config-{name}-{}", std::process::id())));
            let _ = std::fs::remove_dir_all(&dir.0);
            std::fs::create_dir_all(dir.0.join("root/app")).unwrap();
            dir
        }

        fn path(&self) -> &Path {
            &self.0
        }
    }

    impl Drop for Scratch {
        fn drop(&mut self) {
            let _ = std::fs::remove_dir_all(&self.0);
        }
    }

    fn config(state_dir: &Path, root: &Path) -> MasterConfig {
        let mut config = MasterConfig { state_dir: state_dir.to_owned(), ..MasterConfig::default() };
        config.files.root = Some(root.to_owned());
        config
    }

    #[test]
    fn a_root_holding_the_masters_secrets_is_refused() {
        let dir = Scratch::new("check");
        let base = dir.path();
        let state = base.join("srv/state");
        std::fs::create_dir_all(&state).unwrap();
        std::os::unix::fs::symlink(base.join("srv"), base.join("srv-link")).unwrap();
        let holds = |e: Result<(), FileRootError>| matches!(e, Err(FileRootError::HoldsStateDir { .. }));
        assert!(holds(check_root(&config(&state, &state))), "the state directory itself");
        assert!(holds(check_root(&config(&state, &base.join("srv")))), "its parent");
        assert!(holds(check_root(&config(&state, &base.join("srv-link")))), "its parent through a link");
        assert!(holds(check_root(&config(&base.join("srv/not-yet/state"), &base.join("srv")))), "one not created yet");
        assert!(holds(check_root(&config(&state, Path::new("/")))), "the whole disk");
        let inside = check_root(&config(&state, &base.join("srv-link/state/files")));
        assert!(matches!(inside, Err(FileRootError::InStateDir { .. })), "{inside:?}");
        let mut tls = config(&state, &base.join("root"));
        tls.gateway.tls_key = Some(base.join("root/app/tls.key"));
        let err = check_root(&tls).unwrap_err();
        assert!(matches!(err, FileRootError::HoldsSecret { .. }), "{err:?}");
        assert!(check_root(&config(&state, &base.join("root"))).is_ok());
        assert!(check_root(&MasterConfig::default()).is_ok(), "no root, nothing to check");
        let message = check_root(&config(&state, &base.join("srv"))).unwrap_err().to_string();
        assert!(message.contains("[files] root") && message.contains(state.to_str().unwrap()), "{message}");
        assert!(message.contains("outside"), "the message says what to do: {message}");
    }
}
