//! Which part of the file root a minion may read: the file root belongs to tenants as minion
//! ids do. A top-level directory named after a registered tenant (`<root>/proja/`, served as
//! `halite://proja/…`) is that tenant's part. A tenant's minion reads only its own part and
//! the parts `[files] shared` names (read-only, as everything served is); a minion of no
//! tenant reads the whole root but the tenants' parts. Anything else is answered exactly as
//! a file that does not exist, before the file system is asked, so neither the answer nor its
//! time tells whether it exists.
//!
//! A part is opened beneath its own directory (`halite-master`'s `files_beneath.rs`), so no link inside a
//! tenant's part (or a shared one) leads out of it.

use std::collections::BTreeSet;
use std::path::{Component, Path, PathBuf};

use halite_protocol::message::tenant_part;

/// What one minion may read of the file root.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum FileScope {
    /// A minion in no registered tenant: everything but the tenants' parts.
    Untenanted {
        /// The registered tenants, whose parts it does not read.
        tenants: BTreeSet<String>,
    },
    /// A tenant's minion: its own part and the shared ones.
    Tenant {
        /// Its tenant.
        tenant: String,
        /// The shared parts (paths relative to the root).
        shared: Vec<PathBuf>,
    },
}

/// Where a path in scope is opened: beneath the part's directory (`None`: the root itself),
/// the rest of the path.
pub type Place<'a> = (Option<PathBuf>, &'a Path);

impl FileScope {
    /// The scope of `minion` given the registered tenants and the shared parts.
    pub fn of<'a>(minion: &str, tenants: impl IntoIterator<Item = &'a str>, shared: &[PathBuf]) -> Self {
        let tenants: BTreeSet<String> = tenants.into_iter().map(str::to_owned).collect();
        match tenant_part(minion).filter(|tenant| tenants.contains(*tenant)) {
            Some(tenant) => FileScope::Tenant { tenant: tenant.to_owned(), shared: shared.to_vec() },
            None => FileScope::Untenanted { tenants },
        }
    }

    /// Where `relative` (plain names only) is opened, or `None` if it is outside the scope.
    pub fn place<'a>(&self, relative: &'a Path) -> Option<Place<'a>> {
        let first = match relative.components().next()? {
            Component::Normal(name) => name.to_str()?,
            _ => return None,
        };
        match self {
            FileScope::Untenanted { tenants } => (!tenants.contains(first)).then_some((None, relative)),
            FileScope::Tenant { tenant, shared } => {
                let own = std::iter::once(Path::new(tenant.as_str()));
                let mut parts: Vec<&Path> = own.chain(shared.iter().map(PathBuf::as_path)).collect();
                // The longest part first: a shared part inside another is opened as itself.
                parts.sort_by_key(|part| std::cmp::Reverse(part.components().count()));
                parts.into_iter().find_map(|part| {
                    let rest = relative.strip_prefix(part).ok()?;
                    (!rest.as_os_str().is_empty()).then(|| (Some(part.to_owned()), rest))
                })
            }
        }
    }
}

/// Whether `part` (a `[files] shared` entry) is a path beneath the root: relative, plain names.
pub fn valid_shared_part(part: &Path) -> bool {
    !part.as_os_str().is_empty() && part.components().all(|c| matches!(c, Component::Normal(_)))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn scope(minion: &str) -> FileScope {
        FileScope::of(minion, ["proja", "projb"], &[PathBuf::from("common"), PathBuf::from("base/pkgs")])
    }

    fn place(scope: &FileScope, path: &str) -> Option<(Option<String>, String)> {
        scope
            .place(Path::new(path))
            .map(|(base, rest)| (base.map(|b| b.display().to_string()), rest.display().to_string()))
    }

    #[test]
    fn a_tenants_minion_reads_its_part_and_the_shared_ones_only() {
        let a = scope("proja-web1");
        assert_eq!(place(&a, "proja/plans/db.yaml"), Some((Some("proja".into()), "plans/db.yaml".into())));
        assert_eq!(place(&a, "common/motd"), Some((Some("common".into()), "motd".into())));
        assert_eq!(place(&a, "base/pkgs/x.deb"), Some((Some("base/pkgs".into()), "x.deb".into())));
        for outside in ["projb/plans/db.yaml", "top.yaml", "proja", "base/other", "base", "projab/x", "PROJA/x"] {
            assert_eq!(place(&a, outside), None, "{outside}");
        }
    }

    #[test]
    fn a_minion_of_no_tenant_reads_all_but_the_tenants_parts() {
        for minion in ["web1", "projc-web1", "proja"] {
            let s = scope(minion);
            assert_eq!(place(&s, "top.yaml"), Some((None, "top.yaml".into())), "{minion}");
            assert_eq!(place(&s, "common/motd"), Some((None, "common/motd".into())));
            assert_eq!(place(&s, "projb/plans/db.yaml"), None);
            assert_eq!(place(&s, "proja/x"), None);
        }
    }

    #[test]
    fn shared_parts_are_plain_relative_paths() {
        assert!(valid_shared_part(Path::new("common")));
        assert!(valid_shared_part(Path::new("base/pkgs")));
        for bad in ["", "/etc", "../x", "a/../b", "./a"] {
            assert!(!valid_shared_part(Path::new(bad)), "{bad}");
        }
    }
}
