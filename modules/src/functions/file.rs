//! `file.*`: manage files and directories.

use std::fs;
#[cfg(feature = "files")]
use std::io::Write;
use std::os::unix::fs::MetadataExt;
#[cfg(feature = "files")]
use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
#[cfg(feature = "files")]
use std::path::Path;
use std::path::PathBuf;

use nix::unistd::{Gid, Group, Uid, User};
use schemars::JsonSchema;
use serde::Deserialize;
use serde_json::{json, Value};

use crate::{Context, ModuleError, Output, Typed};

/// Largest file `file.managed` diffs and `file.read` returns by default.
const READ_CAP: u64 = 1024 * 1024;

/// Largest file `file.managed backup=true` copies.
#[cfg(feature = "files")]
const BACKUP_CAP: u64 = 1 << 30;

#[cfg(feature = "files")]
fn io(path: &Path) -> impl Fn(std::io::Error) -> ModuleError + '_ {
    move |e| ModuleError::Failed(format!("{}: {e}", path.display()))
}

fn absolute(name: &str) -> Result<PathBuf, ModuleError> {
    let path = PathBuf::from(name);
    if !path.is_absolute() {
        return Err(ModuleError::BadArguments(format!("{name:?} is not an absolute path")));
    }
    Ok(path)
}

/// An absolute path the minion lets this call touch for `access` (never its own secrets),
/// resolved: what the function then works on.
#[cfg(feature = "files")]
fn guarded(cx: &Context, name: &str, access: crate::Access) -> Result<PathBuf, ModuleError> {
    cx.paths().check(&absolute(name)?, access)
}

#[cfg(feature = "files")]
fn parse_mode(mode: &Option<String>) -> Result<Option<u32>, ModuleError> {
    match mode {
        None => Ok(None),
        Some(text) => u32::from_str_radix(text.trim_start_matches("0o"), 8)
            .ok()
            .filter(|m| *m <= 0o7777)
            .map(Some)
            .ok_or_else(|| ModuleError::BadArguments(format!("mode {text:?} is not an octal mode like \"0644\""))),
    }
}

#[cfg(feature = "files")]
/// A numeric uid is taken as is (files may belong to uids without a passwd entry); a name must
/// exist.
fn uid_of(user: &Option<String>) -> Result<Option<Uid>, ModuleError> {
    let Some(user) = user else { return Ok(None) };
    match user.parse::<u32>() {
        Ok(uid) => Ok(Some(Uid::from_raw(uid))),
        Err(_) => Ok(Some(crate::runner::lookup_user(user)?.uid)),
    }
}

#[cfg(feature = "files")]
fn gid_of(group: &Option<String>) -> Result<Option<Gid>, ModuleError> {
    group.as_deref().map(crate::runner::lookup_group).transpose().map(|gid| gid.map(Gid::from_raw))
}

#[cfg(feature = "files")]
fn selinux_enabled() -> bool {
    Path::new("/sys/fs/selinux/enforce").exists()
}

#[cfg(feature = "files")]
/// What differs between a path's metadata and what is wanted, as human phrases.
fn attribute_changes(
    meta: Option<&fs::Metadata>,
    mode: Option<u32>,
    uid: Option<Uid>,
    gid: Option<Gid>,
) -> Vec<String> {
    let mut changes = Vec::new();
    if let Some(mode) = mode {
        if meta.is_none_or(|m| m.mode() & 0o7777 != mode) {
            changes.push(format!("mode {mode:04o}"));
        }
    }
    if let Some(uid) = uid {
        if meta.is_none_or(|m| m.uid() != uid.as_raw()) {
            changes.push(format!("owner {uid}"));
        }
    }
    if let Some(gid) = gid {
        if meta.is_none_or(|m| m.gid() != gid.as_raw()) {
            changes.push(format!("group {gid}"));
        }
    }
    changes
}

/// Sets a file's or directory's mode and owners through a descriptor opened without following
/// a link there (a link swapped in after the checks changes nothing it points to).
#[cfg(feature = "files")]
fn apply_attributes(
    cx: &Context,
    path: &Path,
    mode: Option<u32>,
    uid: Option<Uid>,
    gid: Option<Gid>,
) -> Result<(), ModuleError> {
    if mode.is_none() && uid.is_none() && gid.is_none() {
        return Ok(());
    }
    let flags = nix::fcntl::OFlag::O_NOFOLLOW | nix::fcntl::OFlag::O_NONBLOCK | nix::fcntl::OFlag::O_NOCTTY;
    let entry = fs::OpenOptions::new().read(true).custom_flags(flags.bits()).open(path).map_err(io(path))?;
    // What was opened is judged too: a hard link to a secret swapped in is the secret.
    cx.paths().judge_inode(&entry.metadata().map_err(io(path))?, path)?;
    if uid.is_some() || gid.is_some() {
        nix::unistd::fchown(std::os::unix::io::AsRawFd::as_raw_fd(&entry), uid, gid)
            .map_err(|e| ModuleError::Failed(format!("{}: chown: {e}", path.display())))?;
    }
    if let Some(mode) = mode {
        entry.set_permissions(fs::Permissions::from_mode(mode)).map_err(io(path))?;
    }
    Ok(())
}

#[cfg(feature = "files")]
async fn apply_selinux(cx: &Context, path: &Path, context: &Option<String>) -> Result<Option<String>, ModuleError> {
    let Some(context) = context else { return Ok(None) };
    if !selinux_enabled() {
        return Err(ModuleError::Failed("selinux_context given, but SELinux is not enabled on this host".into()));
    }
    let current = cx.runner.check(&["stat", "-c", "%C", &path.display().to_string()]).await?;
    if current.trim() == context {
        return Ok(None);
    }
    if !cx.test {
        cx.runner.check(&["chcon", context.as_str(), &path.display().to_string()]).await?;
    }
    Ok(Some(format!("SELinux context {context}")))
}

#[cfg(feature = "files")]
pub(crate) struct Managed;

#[cfg(feature = "files")]
#[derive(Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub(crate) struct ManagedArgs {
    /// Absolute path of the file.
    name: String,
    /// The file's whole content (or give `source`).
    #[serde(default)]
    contents: Option<String>,
    /// Where the content comes from instead: `halite://path`, a file the master serves from
    /// its `[files] root`, fetched in parts and checked against the SHA-256 the master gives.
    #[serde(default)]
    source: Option<String>,
    /// With `source`: the SHA-256 the file must have (`sha256:<hex>`); a different file on the
    /// master fails the call and nothing is written.
    #[serde(default)]
    source_hash: Option<String>,
    /// Octal mode, e.g. "0644" (new files default to 0644).
    #[serde(default)]
    mode: Option<String>,
    /// Owner (name or uid).
    #[serde(default)]
    user: Option<String>,
    /// Group (name or gid).
    #[serde(default)]
    group: Option<String>,
    /// SELinux context to set (chcon); an error when SELinux is not enabled.
    #[serde(default)]
    selinux_context: Option<String>,
    /// Keep the previous content as `<name>.halite-bak` when replacing it.
    #[serde(default)]
    backup: bool,
    /// Create missing parent directories.
    #[serde(default)]
    makedirs: bool,
}

#[cfg(feature = "files")]
impl Typed for Managed {
    const NAME: &'static str = "file.managed";
    const DOC: &'static str = "Makes a file have exactly this content, mode, owner and group. The content is \
         given (contents) or served by the master (source=halite://path, like Salt's salt://; its SHA-256 is \
         checked, and compared with the file's before anything is fetched). The content is replaced \
         atomically (a temporary file in the same directory, synced, then renamed), so readers never see a \
         partial file. details carries a unified diff of the content (given, or served and at most 1 MiB of \
         text; larger or binary served files by their SHA-256), with test=true too.";
    const POSITIONAL: &'static [&'static str] = &["name"];
    type Args = ManagedArgs;
    async fn run(&self, args: ManagedArgs, cx: &Context) -> Result<Output, ModuleError> {
        let resolved = guarded(cx, &args.name, crate::Access::Write)?;
        // Worked on through its pinned directory (a missing one is made, then pinned, below).
        let mut pinned = match resolved.parent().filter(|p| p.is_dir()) {
            Some(_) => Some(cx.paths().pin(&resolved, crate::Access::Write)?),
            None => None,
        };
        let mut path = pinned.as_ref().map_or_else(|| resolved.clone(), |p| p.path.clone());
        let (mode, uid, gid) = (parse_mode(&args.mode)?, uid_of(&args.user)?, gid_of(&args.group)?);
        let meta = fs::symlink_metadata(&path).ok();
        if meta.as_ref().is_some_and(|m| !m.is_file()) {
            return Err(ModuleError::Failed(format!("{} exists and is not a regular file", path.display())));
        }
        let content = Content::of(&args, cx).await?;
        // A served file already fetched whole (to show its diff).
        let mut fetched: Option<Vec<u8>> = None;
        let (content_changes, diff) = match &content {
            Content::Given(contents) => {
                let old = old_content(cx, &path, meta.as_ref()).await?;
                let changes = meta.is_none() || old.as_deref() != Some(contents.as_bytes());
                let diff = match (&old, changes) {
                    (_, false) => String::new(),
                    (Some(old), true) => text_diff(&args.name, old, contents.as_bytes())
                        .unwrap_or_else(|| "(binary content: no diff)".into()),
                    (None, true) if meta.is_some() => "(previous content too large to diff)".into(),
                    (None, true) => match text_diff(&args.name, b"", contents.as_bytes()) {
                        Some(diff) => format!("new file\n{diff}"),
                        None => "new file (binary content: no diff)".into(),
                    },
                };
                (changes, diff)
            }
            Content::Served { url, first } => {
                let old_digest = match &meta {
                    Some(_) => Some(cx.paths().digest(&path).await?),
                    None => None,
                };
                let changes = old_digest.as_deref() != Some(first.sha256.as_str());
                // A text small enough is fetched now (and written from here): the change is shown
                // as a diff, as for given content; otherwise by its digests.
                if changes && first.size <= READ_CAP {
                    let mut served = Vec::with_capacity(first.size as usize);
                    let source = crate::master_files::source_path(url)?;
                    crate::master_files::copy_to(cx, source, first.clone(), &mut served).await?;
                    fetched = Some(served);
                }
                let diff = match (&old_digest, changes) {
                    (_, false) => String::new(),
                    (Some(old_digest), true) => {
                        let old = old_content(cx, &path, meta.as_ref()).await?;
                        match (old, &fetched) {
                            (Some(old), Some(new)) => text_diff(&args.name, &old, new),
                            _ => None,
                        }
                        .unwrap_or_else(|| {
                            format!("sha256 {old_digest} -> {} ({url}, {} bytes)", first.sha256, first.size)
                        })
                    }
                    (None, true) => match fetched.as_deref().and_then(|new| text_diff(&args.name, b"", new)) {
                        Some(diff) => format!("new file: {url}\n{diff}"),
                        None => format!("new file: {url}, sha256 {}, {} bytes", first.sha256, first.size),
                    },
                };
                (changes, diff)
            }
        };
        let wanted_mode = mode.or(meta.as_ref().map_or(Some(0o644), |_| None));
        let mut changes = if content_changes { vec!["content".to_owned()] } else { Vec::new() };
        changes.extend(attribute_changes(meta.as_ref(), wanted_mode, uid, gid));
        if let Some(change) = apply_selinux(cx, &path, &args.selinux_context).await.or_else(|e| {
            if meta.is_none() && cx.test {
                Ok(None)
            } else {
                Err(e)
            }
        })? {
            changes.push(change);
        }
        let details = json!({ "diff": diff, "changes": changes });
        if changes.is_empty() {
            return Ok(Output::change(false, format!("{} is already in the correct state", args.name), details));
        }
        if cx.test {
            return Ok(Output::change(
                true,
                format!("{} would be updated: {}", args.name, changes.join(", ")),
                details,
            ));
        }
        if pinned.is_none() {
            let parent = resolved.parent().ok_or_else(|| ModuleError::BadArguments("no parent directory".into()))?;
            if args.makedirs {
                fs::create_dir_all(parent).map_err(io(parent))?;
            }
            let made = cx.paths().pin(&resolved, crate::Access::Write)?;
            path = made.path.clone();
            pinned = Some(made);
        }
        let parent = path.parent().ok_or_else(|| ModuleError::BadArguments("no parent directory".into()))?;
        // Errors name the file as the caller wrote it, not the directory handle it is reached by.
        let named = Path::new(&args.name);
        if content_changes {
            if args.backup && meta.is_some() {
                let backup = PathBuf::from(format!("{}.halite-bak", path.display()));
                cx.paths().copy(&path, &backup, BACKUP_CAP).await?;
            }
            let keep_mode = meta.as_ref().map(|m| m.mode() & 0o7777);
            // A name of its own: writers at once each rename a whole file into place.
            let name = path.file_name().and_then(|n| n.to_str()).unwrap_or("file");
            let (mut file, tmp) =
                crate::temp_file::create_beside(parent, name, wanted_mode.or(keep_mode).unwrap_or(0o644))
                    .map_err(io(named))?;
            let written = match (content, fetched) {
                (Content::Given(contents), _) => file.write_all(contents.as_bytes()).map_err(io(named)),
                (Content::Served { .. }, Some(served)) => file.write_all(&served).map_err(io(named)),
                (Content::Served { url, first }, None) => {
                    let path = crate::master_files::source_path(&url)?;
                    crate::master_files::copy_to(cx, path, first, &mut file).await
                }
            };
            if let Err(error) = written.and_then(|()| file.sync_all().map_err(io(named))) {
                let _ = fs::remove_file(&tmp);
                return Err(error);
            }
            let (keep_uid, keep_gid) =
                (meta.as_ref().map(|m| Uid::from_raw(m.uid())), meta.as_ref().map(|m| Gid::from_raw(m.gid())));
            let placed = apply_attributes(cx, &tmp, wanted_mode.or(keep_mode), uid.or(keep_uid), gid.or(keep_gid))
                .and_then(|()| fs::rename(&tmp, &path).map_err(io(named)));
            if let Err(error) = placed {
                let _ = fs::remove_file(&tmp);
                return Err(error);
            }
            fs::File::open(parent).and_then(|d| d.sync_all()).map_err(io(named))?;
        } else {
            apply_attributes(cx, &path, wanted_mode, uid, gid)?;
        }
        apply_selinux(cx, &path, &args.selinux_context).await?;
        // The directory stays open until here: `path` names the entry through it.
        drop(pinned);
        Ok(Output::change(true, format!("{} updated: {}", args.name, changes.join(", ")), details))
    }
}

/// A file's current content when it is small enough to diff.
#[cfg(feature = "files")]
async fn old_content(cx: &Context, path: &Path, meta: Option<&fs::Metadata>) -> Result<Option<Vec<u8>>, ModuleError> {
    match meta {
        Some(m) if m.len() <= READ_CAP => Ok(Some(cx.paths().read(path, READ_CAP).await?.content)),
        _ => Ok(None),
    }
}

/// A unified diff of two texts; `None` when either is not text (not UTF-8, or holds NUL).
#[cfg(feature = "files")]
fn text_diff(name: &str, old: &[u8], new: &[u8]) -> Option<String> {
    let text = |bytes: &[u8]| std::str::from_utf8(bytes).ok().filter(|t| !t.contains('\0')).map(str::to_owned);
    let (old, new) = (text(old)?, text(new)?);
    Some(similar::TextDiff::from_lines(old.as_str(), new.as_str()).unified_diff().header(name, name).to_string())
}

#[cfg(feature = "files")]
/// Where `file.managed`'s content comes from.
enum Content {
    /// `contents`.
    Given(String),
    /// `source=halite://...`: the master's first part (with the whole file's size and digest).
    Served { url: String, first: halite_protocol::message::FileChunk },
}

#[cfg(feature = "files")]
impl Content {
    async fn of(args: &ManagedArgs, cx: &Context) -> Result<Content, ModuleError> {
        match (&args.contents, &args.source) {
            (Some(contents), None) => {
                if args.source_hash.is_some() {
                    return Err(ModuleError::BadArguments("source_hash goes with source, not contents".into()));
                }
                Ok(Content::Given(contents.clone()))
            }
            (None, Some(url)) => {
                let unused = "nothing was written";
                let first =
                    crate::master_files::first_part_checked(cx, url, args.source_hash.as_deref(), unused).await?;
                Ok(Content::Served { url: url.clone(), first })
            }
            (Some(_), Some(_)) => Err(ModuleError::BadArguments("give contents or source, not both".into())),
            (None, None) => {
                Err(ModuleError::BadArguments("give the file's contents, or its source (halite://path)".into()))
            }
        }
    }
}

#[cfg(feature = "files")]
pub(crate) struct Absent;

#[cfg(feature = "files")]
#[derive(Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub(crate) struct AbsentArgs {
    /// Absolute path; a directory is removed with its contents.
    name: String,
}

#[cfg(feature = "files")]
impl Typed for Absent {
    const NAME: &'static str = "file.absent";
    const DOC: &'static str = "Makes sure a path does not exist (files, links and directory trees are removed).";
    const POSITIONAL: &'static [&'static str] = &["name"];
    type Args = AbsentArgs;
    async fn run(&self, args: AbsentArgs, cx: &Context) -> Result<Output, ModuleError> {
        let resolved = guarded(cx, &args.name, crate::Access::Remove)?;
        if resolved == Path::new("/") {
            return Err(ModuleError::BadArguments("refusing to remove /".into()));
        }
        if !resolved.parent().is_some_and(Path::is_dir) {
            return Ok(Output::change(false, format!("{} is already absent", args.name), json!({})));
        }
        // Removed through its pinned directory: a directory swapped for a link meanwhile
        // leads nowhere else.
        let pinned = cx.paths().pin(&resolved, crate::Access::Remove)?;
        let path = pinned.path.clone();
        let Ok(meta) = fs::symlink_metadata(&path) else {
            return Ok(Output::change(false, format!("{} is already absent", args.name), json!({})));
        };
        if cx.test {
            return Ok(Output::change(true, format!("{} would be removed", args.name), json!({})));
        }
        // Nothing in the tree is one of the secrets, and no mount point (a bind mount of them)
        // is crossed.
        cx.paths().judge_tree(&path, crate::Access::Remove)?;
        if meta.is_dir() { fs::remove_dir_all(&path) } else { fs::remove_file(&path) }.map_err(io(&path))?;
        Ok(Output::change(true, format!("{} removed", args.name), json!({ "removed": args.name })))
    }
}

#[cfg(feature = "files")]
pub(crate) struct Directory;

#[cfg(feature = "files")]
#[derive(Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub(crate) struct DirectoryArgs {
    /// Absolute path of the directory.
    name: String,
    /// Octal mode, e.g. "0755" (new directories default to 0755).
    #[serde(default)]
    mode: Option<String>,
    /// Owner (name or uid).
    #[serde(default)]
    user: Option<String>,
    /// Group (name or gid).
    #[serde(default)]
    group: Option<String>,
    /// Create missing parent directories.
    #[serde(default)]
    makedirs: bool,
}

#[cfg(feature = "files")]
impl Typed for Directory {
    const NAME: &'static str = "file.directory";
    const DOC: &'static str = "Makes sure a directory exists with this mode, owner and group.";
    const POSITIONAL: &'static [&'static str] = &["name"];
    type Args = DirectoryArgs;
    async fn run(&self, args: DirectoryArgs, cx: &Context) -> Result<Output, ModuleError> {
        let resolved = guarded(cx, &args.name, crate::Access::Write)?;
        if args.makedirs && !cx.test {
            if let Some(parent) = resolved.parent() {
                fs::create_dir_all(parent).map_err(io(parent))?;
            }
        }
        let pinned = match resolved.parent().filter(|p| p.is_dir()) {
            Some(_) => Some(cx.paths().pin(&resolved, crate::Access::Write)?),
            None => None,
        };
        let path = pinned.as_ref().map_or_else(|| resolved.clone(), |p| p.path.clone());
        let (mode, uid, gid) = (parse_mode(&args.mode)?, uid_of(&args.user)?, gid_of(&args.group)?);
        let meta = fs::symlink_metadata(&path).ok();
        if meta.as_ref().is_some_and(|m| !m.is_dir()) {
            return Err(ModuleError::Failed(format!("{} exists and is not a directory", path.display())));
        }
        let wanted_mode = mode.or(meta.as_ref().map_or(Some(0o755), |_| None));
        let mut changes = if meta.is_none() { vec!["created".to_owned()] } else { Vec::new() };
        changes.extend(attribute_changes(meta.as_ref(), wanted_mode, uid, gid));
        if changes.is_empty() {
            return Ok(Output::change(false, format!("{} is already in the correct state", args.name), json!({})));
        }
        if cx.test {
            return Ok(Output::change(
                true,
                format!("{} would change: {}", args.name, changes.join(", ")),
                json!({ "changes": changes }),
            ));
        }
        if meta.is_none() {
            if args.makedirs { fs::create_dir_all(&path) } else { fs::create_dir(&path) }.map_err(io(&path))?;
        }
        apply_attributes(cx, &path, wanted_mode, uid, gid)?;
        Ok(Output::change(
            true,
            format!("{} updated: {}", args.name, changes.join(", ")),
            json!({ "changes": changes }),
        ))
    }
}

pub(crate) struct Read;

#[derive(Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub(crate) struct ReadArgs {
    /// Absolute path of the file.
    name: String,
    /// Most bytes returned (default 1 MiB); the rest is cut and `truncated` set.
    #[serde(default)]
    max_bytes: Option<u64>,
}

impl Typed for Read {
    const NAME: &'static str = "file.read";
    const DOC: &'static str = "Returns a regular file's content as text (invalid UTF-8 is replaced), capped in size. \
         Never the minion's own secrets (its state directory, enrollment file, config), and only beneath \
         [policy] read_paths when the minion sets them; a FIFO or device is refused, never waited on.";
    const POSITIONAL: &'static [&'static str] = &["name"];
    type Args = ReadArgs;
    async fn run(&self, args: ReadArgs, cx: &Context) -> Result<Output, ModuleError> {
        let path = absolute(&args.name)?;
        let cap = args.max_bytes.unwrap_or(READ_CAP).min(16 * READ_CAP);
        let read = cx.paths().read(&path, cap).await?;
        Ok(Output { value: json!(String::from_utf8_lossy(&read.content)), retcode: 0, truncated: read.truncated })
    }
}

pub(crate) struct Stat;

#[derive(Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub(crate) struct StatArgs {
    /// Absolute path.
    name: String,
}

impl Typed for Stat {
    const NAME: &'static str = "file.stat";
    const DOC: &'static str =
        "Returns {exists, type, size, mode, uid, gid, user, group, mtime} of a path (links are not followed).";
    const POSITIONAL: &'static [&'static str] = &["name"];
    type Args = StatArgs;
    async fn run(&self, args: StatArgs, cx: &Context) -> Result<Output, ModuleError> {
        let Some((path, meta)) = cx.paths().lstat(&absolute(&args.name)?)? else {
            return Ok(Output::ok(json!({ "exists": false })));
        };
        let kind = if meta.is_dir() {
            "directory"
        } else if meta.file_type().is_symlink() {
            "symlink"
        } else if meta.is_file() {
            "file"
        } else {
            "other"
        };
        let user = User::from_uid(Uid::from_raw(meta.uid())).ok().flatten().map(|u| u.name);
        let group = Group::from_gid(Gid::from_raw(meta.gid())).ok().flatten().map(|g| g.name);
        let mut value = json!({
            "exists": true,
            "type": kind,
            "size": meta.len(),
            "mode": format!("{:04o}", meta.mode() & 0o7777),
            "uid": meta.uid(),
            "gid": meta.gid(),
            "user": user,
            "group": group,
            "mtime": meta.mtime(),
        });
        if kind == "symlink" {
            value["target"] = Value::String(fs::read_link(&path).map(|t| t.display().to_string()).unwrap_or_default());
        }
        Ok(Output::ok(value))
    }
}

#[cfg(test)]
#[cfg(feature = "files")]
mod tests {
    use super::*;
    use crate::{Args, Function};

    fn call(f: &dyn Function, args: Value, test: bool) -> Result<Output, ModuleError> {
        let Value::Object(map) = args else { panic!("object expected") };
        let cx = Context { test, ..Context::default() };
        tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap()
            .block_on(f.call(Args::new(vec![], map.into_iter().collect()), &cx))
    }

    /// Fifty writers of one path at once (jobs of one minion, or minions sharing the directory):
    /// each succeeds, the file holds one writer's whole content, and no temporary file is left.
    #[test]
    fn concurrent_writers_of_one_path_all_succeed_and_one_whole_content_wins() {
        let d = dir("concurrent");
        let path = d.join("shared.conf");
        let name = path.display().to_string();
        let contents: Vec<String> = (0..50).map(|i| format!("writer {i}\n").repeat(1000)).collect();
        let results: Vec<Result<Output, ModuleError>> = std::thread::scope(|scope| {
            let writers: Vec<_> = contents
                .iter()
                .map(|c| {
                    let name = &name;
                    scope.spawn(move || call(&Managed, json!({"name": name, "contents": c}), false))
                })
                .collect();
            writers.into_iter().map(|w| w.join().unwrap()).collect()
        });
        for result in &results {
            assert!(result.is_ok(), "{result:?}");
        }
        let written = fs::read_to_string(&path).unwrap();
        assert!(contents.contains(&written), "one writer's whole content: {} bytes", written.len());
        let left: Vec<_> = fs::read_dir(&d).unwrap().map(|e| e.unwrap().file_name()).collect();
        assert_eq!(left, [std::ffi::OsString::from("shared.conf")], "no temporary file is left");
    }

    fn dir(name: &str) -> PathBuf {
        let d = std::env::temp_dir().join(format!("halite-file-{name}-{}", std::process::id()));
        let _ = fs::remove_dir_all(&d);
        fs::create_dir_all(&d).unwrap();
        d
    }

    #[test]
    fn managed_writes_atomically_is_idempotent_and_diffs() {
        let d = dir("managed");
        let path = d.join("conf");
        let name = path.display().to_string();
        let preview = call(&Managed, json!({"name": name, "contents": "a\n"}), true).unwrap();
        assert_eq!(preview.value["changed"], true);
        assert!(!path.exists(), "test=true wrote the file");
        let diff = preview.value["details"]["diff"].as_str().unwrap();
        assert!(diff.starts_with("new file\n") && diff.contains("+a\n"), "a new file's diff: {diff}");
        let first =
            call(&Managed, json!({"name": name, "contents": "a\nb\n", "mode": "0640", "user": "nobody"}), false)
                .unwrap();
        assert_eq!(first.value["changed"], true);
        let meta = fs::metadata(&path).unwrap();
        assert_eq!(meta.mode() & 0o7777, 0o640);
        assert_eq!(meta.uid(), User::from_name("nobody").unwrap().unwrap().uid.as_raw());
        let again =
            call(&Managed, json!({"name": name, "contents": "a\nb\n", "mode": "0640", "user": "nobody"}), false)
                .unwrap();
        assert_eq!(again.value["changed"], false, "{}", again.value);
        let edit = call(&Managed, json!({"name": name, "contents": "a\nc\n", "backup": true}), false).unwrap();
        assert!(edit.value["details"]["diff"].as_str().unwrap().contains("-b\n+c\n"), "{}", edit.value);
        assert_eq!(fs::read_to_string(&path).unwrap(), "a\nc\n");
        assert_eq!(fs::read_to_string(format!("{name}.halite-bak")).unwrap(), "a\nb\n");
        assert_eq!(fs::metadata(&path).unwrap().mode() & 0o7777, 0o640, "mode kept across replacement");
        assert!(call(&Managed, json!({"name": "relative", "contents": ""}), false).is_err());
        let selinux = call(
            &Managed,
            json!({"name": name, "contents": "a\nc\n", "selinux_context": "system_u:object_r:etc_t:s0"}),
            false,
        );
        if !selinux_enabled() {
            assert!(selinux.unwrap_err().to_string().contains("SELinux is not enabled"));
        }
    }

    #[test]
    fn directory_absent_read_and_stat() {
        let d = dir("dirs");
        let sub = d.join("a/b");
        let name = sub.display().to_string();
        assert!(call(&Directory, json!({"name": name}), false).is_err(), "parent missing without makedirs");
        let made = call(&Directory, json!({"name": name, "makedirs": true, "mode": "0700"}), false).unwrap();
        assert_eq!(made.value["changed"], true);
        assert_eq!(call(&Directory, json!({"name": name, "mode": "0700"}), false).unwrap().value["changed"], false);
        let stat = call(&Stat, json!({"name": name}), false).unwrap();
        assert_eq!(stat.value["type"], "directory");
        assert_eq!(stat.value["mode"], "0700");
        fs::write(sub.join("f"), "hello world").unwrap();
        let read = call(&Read, json!({"name": sub.join("f").display().to_string(), "max_bytes": 5}), false).unwrap();
        assert_eq!(read.value, "hello");
        assert!(read.truncated);
        let top = d.join("a").display().to_string();
        assert_eq!(call(&Absent, json!({"name": top}), true).unwrap().value["changed"], true);
        assert!(d.join("a").exists());
        assert_eq!(call(&Absent, json!({"name": top}), false).unwrap().value["changed"], true);
        assert!(!d.join("a").exists());
        assert_eq!(call(&Absent, json!({"name": top}), false).unwrap().value["changed"], false);
        assert_eq!(call(&Stat, json!({"name": top}), false).unwrap().value, json!({"exists": false}));
    }
}
