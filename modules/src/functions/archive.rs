//! `archive.extract`: unpack tar, tar.gz, tar.xz and zip archives, safely.
//!
//! Every entry is checked before anything is written: no absolute paths, no `..`, no links
//! whose target leaves the destination, no device files, and nothing written through an
//! existing symlink. One bad entry refuses the whole archive, so a malicious archive never
//! half-extracts.

use std::fs::{self, File};
use std::io::{self, Read};
use std::path::{Component, Path, PathBuf};

use schemars::JsonSchema;
use serde::Deserialize;
use serde_json::json;
use sha2::{Digest, Sha256};

use crate::{Context, ModuleError, Output, Typed};

pub(crate) struct Extract;

#[derive(Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub(crate) struct ExtractArgs {
    /// Absolute path of the archive on the minion.
    name: String,
    /// Absolute path of the directory to extract into (created if missing).
    dest: String,
    /// Expected SHA-256 of the archive: `sha256=<hex>`, `sha256:<hex>` or bare hex. Required unless skip_verify.
    #[serde(default)]
    source_hash: Option<String>,
    /// Extract without checking the checksum.
    #[serde(default)]
    skip_verify: bool,
    /// Skip extraction (changed=false) when this path already exists.
    #[serde(default)]
    if_missing: Option<String>,
}

impl Typed for Extract {
    const NAME: &'static str = "archive.extract";
    const DOC: &'static str = "Extracts a tar, tar.gz, tar.xz or zip archive (format detected from its content) after \
         verifying its SHA-256. Refuses archives with absolute paths, `..` components, links pointing outside \
         the destination, device files, or entries that would be written through a symlink; nothing is \
         extracted from a refused archive.";
    const POSITIONAL: &'static [&'static str] = &["name", "dest"];
    type Args = ExtractArgs;
    async fn run(&self, args: ExtractArgs, cx: &Context) -> Result<Output, ModuleError> {
        let (archive, dest) = (PathBuf::from(&args.name), PathBuf::from(&args.dest));
        if !archive.is_absolute() || !dest.is_absolute() {
            return Err(ModuleError::BadArguments("name and dest must be absolute paths".into()));
        }
        // Never the minion's own secrets, read or written; the archive is a regular file (a
        // FIFO would stall the read).
        let archive = cx.paths().check(&archive, crate::Access::Read)?;
        let dest = cx.paths().check(&dest, crate::Access::Write)?;
        if !fs::metadata(&archive).map_err(failed(&archive))?.is_file() {
            return Err(ModuleError::Failed(format!("{}: not a regular file", archive.display())));
        }
        if let Some(marker) = &args.if_missing {
            if cx.paths().check(Path::new(marker), crate::Access::Read)?.exists() {
                return Ok(Output::change(false, format!("{marker} exists; nothing extracted"), json!({})));
            }
        }
        match (args.source_hash.clone(), args.skip_verify) {
            (Some(expected), _) => {
                let archive = archive.clone();
                tokio::task::spawn_blocking(move || verify(&archive, &expected))
                    .await
                    .map_err(|e| ModuleError::Failed(e.to_string()))??;
            }
            (None, true) => {}
            (None, false) => {
                return Err(ModuleError::BadArguments("source_hash is required (or skip_verify=true)".into()));
            }
        }
        let format = detect(&archive)?;
        let entries = tokio::task::spawn_blocking({
            let (archive, dest, guard) = (archive.clone(), dest.clone(), cx.paths().clone());
            move || check_all(&archive, &dest, format, &guard)
        })
        .await
        .map_err(|e| ModuleError::Failed(e.to_string()))??;
        if cx.test {
            return Ok(Output::change(
                true,
                format!("{} entries would be extracted", entries.len()),
                json!({ "entries": entries }),
            ));
        }
        let count = entries.len();
        let guard = cx.paths().clone();
        tokio::task::spawn_blocking(move || extract_all(&archive, &dest, format, &guard))
            .await
            .map_err(|e| ModuleError::Failed(e.to_string()))??;
        Ok(Output::change(true, format!("extracted {count} entries into {}", args.dest), json!({ "entries": entries })))
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Format {
    Tar,
    TarGz,
    TarXz,
    Zip,
}

fn failed(path: &Path) -> impl Fn(io::Error) -> ModuleError + '_ {
    move |e| ModuleError::Failed(format!("{}: {e}", path.display()))
}

fn verify(archive: &Path, expected: &str) -> Result<(), ModuleError> {
    let hex = expected.trim_start_matches("sha256=").trim_start_matches("sha256:").to_ascii_lowercase();
    if hex.len() != 64 || !hex.bytes().all(|b| b.is_ascii_hexdigit()) {
        return Err(ModuleError::BadArguments(format!("source_hash {expected:?} is not a SHA-256")));
    }
    let mut hasher = Sha256::new();
    io::copy(&mut File::open(archive).map_err(failed(archive))?, &mut hasher).map_err(failed(archive))?;
    let actual = halite_protocol::hex::encode(&hasher.finalize());
    if actual != hex {
        return Err(ModuleError::Failed(format!(
            "checksum mismatch for {}: expected {hex}, got {actual}",
            archive.display()
        )));
    }
    Ok(())
}

fn detect(archive: &Path) -> Result<Format, ModuleError> {
    let mut magic = [0u8; 6];
    let n = File::open(archive).and_then(|mut f| f.read(&mut magic)).map_err(failed(archive))?;
    Ok(match &magic[..n] {
        [0x1f, 0x8b, ..] => Format::TarGz,
        [0xfd, b'7', b'z', b'X', b'Z', 0] => Format::TarXz,
        [b'P', b'K', 3, 4, ..] => Format::Zip,
        _ => Format::Tar,
    })
}

/// Lexically resolves `relative` under `base`; `None` if it is absolute or climbs out.
fn inside(relative: &Path) -> Option<PathBuf> {
    let mut out = PathBuf::new();
    for component in relative.components() {
        match component {
            Component::Normal(part) => out.push(part),
            Component::CurDir => {}
            Component::ParentDir => {
                if !out.pop() {
                    return None;
                }
            }
            Component::RootDir | Component::Prefix(_) => return None,
        }
    }
    Some(out)
}

enum Kind {
    File,
    Dir,
    Symlink(PathBuf),
    Hardlink(PathBuf),
}

/// Checks one entry; returns its path relative to the destination. `links`: the symlinks
/// earlier entries of the archive make (nothing is written or reached through them either).
fn check_entry(
    dest: &Path,
    name: &Path,
    kind: &Kind,
    links: &mut Links,
    guard: &crate::PathGuard,
) -> Result<PathBuf, ModuleError> {
    let refuse = |why: &str| Err(ModuleError::Failed(format!("archive refused: entry {}: {why}", name.display())));
    if name.is_absolute() {
        return refuse("absolute path");
    }
    if name.components().any(|c| c == Component::ParentDir) {
        return refuse("contains ..");
    }
    let Some(relative) = inside(name) else { return refuse("escapes the destination") };
    match kind {
        Kind::Symlink(target) => {
            if target.is_absolute() {
                return refuse("symlink to an absolute path");
            }
            // A `..` is judged by the kernel after the links before it, which a chain of links
            // in the archive can point anywhere: links may only point down.
            if target.components().any(|c| c == Component::ParentDir) {
                return refuse("symlink target contains ..");
            }
            let parent = relative.parent().unwrap_or(Path::new(""));
            if inside(&parent.join(target)).is_none() {
                return refuse("symlink points outside the destination");
            }
        }
        Kind::Hardlink(target) => {
            if target.is_absolute() || inside(target).is_none() {
                return refuse("hard link points outside the destination");
            }
            // The file it links to is reached without following any link, on disk or made by
            // the archive.
            if through_a_link(dest, target, true) || links.along(target) {
                return refuse("hard link target is reached through a symlink");
            }
        }
        Kind::File | Kind::Dir => {}
    }
    // Never write through a symlink that already exists under the destination, nor replace one.
    // A symlink entry replaces a link already there (extracting again); anything else would
    // write or chmod through it.
    let last = !matches!(kind, Kind::Symlink(_));
    let along = match relative.parent() {
        Some(parent) if !last => links.along(parent),
        _ => links.along(&relative),
    };
    if through_a_link(dest, &relative, last) || along {
        return refuse("would be written through an existing symlink");
    }
    // Never one of the minion's secrets, written or linked to, whatever the destination.
    guard.judge_tree(&dest.join(&relative), crate::Access::Write)?;
    if let Kind::Hardlink(target) = kind {
        guard.judge_tree(&dest.join(target), crate::Access::Write)?;
    }
    if matches!(kind, Kind::Symlink(_)) {
        links.0.insert(relative.clone());
    }
    Ok(relative)
}

/// The symlinks an archive's earlier entries make, by their path under the destination.
#[derive(Default)]
struct Links(std::collections::HashSet<PathBuf>);

impl Links {
    /// Whether `relative`, or a directory along it, is one of them.
    fn along(&self, relative: &Path) -> bool {
        relative.ancestors().any(|a| !a.as_os_str().is_empty() && self.0.contains(a))
    }
}

/// Whether any directory along `relative` under `dest` (and its last part, when `last`) is a
/// symbolic link on disk.
fn through_a_link(dest: &Path, relative: &Path, last: bool) -> bool {
    let mut walk = dest.to_path_buf();
    let mut parts = relative.components().peekable();
    while let Some(part) = parts.next() {
        walk.push(part);
        let judged = last || parts.peek().is_some();
        if judged && fs::symlink_metadata(&walk).is_ok_and(|m| m.file_type().is_symlink()) {
            return true;
        }
    }
    false
}

fn tar_reader(archive: &Path, format: Format) -> Result<tar::Archive<Box<dyn Read>>, ModuleError> {
    let file = File::open(archive).map_err(failed(archive))?;
    let reader: Box<dyn Read> = match format {
        Format::TarGz => Box::new(flate2::read::GzDecoder::new(file)),
        Format::TarXz => Box::new(liblzma::read::XzDecoder::new(file)),
        _ => Box::new(file),
    };
    Ok(tar::Archive::new(reader))
}

/// Why a tar entry is refused.
#[derive(Debug, thiserror::Error)]
enum TarEntryError {
    /// A symlink or hard link whose target cannot be read.
    #[error("link without a target")]
    LinkWithoutTarget,
    /// Neither a file, a directory, a link nor a header the reader consumes.
    #[error("unsupported entry type {0:?}")]
    Unsupported(tar::EntryType),
}

/// The entry's kind; `None` for the extension headers that describe the next entry.
fn tar_kind(entry: &tar::Entry<'_, Box<dyn Read>>) -> Result<Option<Kind>, TarEntryError> {
    let link = || entry.link_name().ok().flatten().map(|l| l.into_owned()).ok_or(TarEntryError::LinkWithoutTarget);
    Ok(Some(match entry.header().entry_type() {
        tar::EntryType::Regular | tar::EntryType::Continuous => Kind::File,
        tar::EntryType::Directory => Kind::Dir,
        tar::EntryType::Symlink => Kind::Symlink(link()?),
        tar::EntryType::Link => Kind::Hardlink(link()?),
        tar::EntryType::XGlobalHeader
        | tar::EntryType::XHeader
        | tar::EntryType::GNULongName
        | tar::EntryType::GNULongLink => return Ok(None),
        other => return Err(TarEntryError::Unsupported(other)),
    }))
}

fn zip_kind<R: Read>(file: &mut zip::read::ZipFile<'_, R>) -> Result<Kind, ModuleError> {
    const S_IFMT: u32 = 0o170000;
    const S_IFLNK: u32 = 0o120000;
    if file.unix_mode().is_some_and(|m| m & S_IFMT == S_IFLNK) {
        let mut target = String::new();
        file.read_to_string(&mut target).map_err(|e| ModuleError::Failed(e.to_string()))?;
        return Ok(Kind::Symlink(PathBuf::from(target)));
    }
    Ok(if file.is_dir() { Kind::Dir } else { Kind::File })
}

/// First pass: every entry checked, nothing written. Returns the entry names.
fn check_all(
    archive: &Path,
    dest: &Path,
    format: Format,
    guard: &crate::PathGuard,
) -> Result<Vec<String>, ModuleError> {
    let mut names = Vec::new();
    let mut links = Links::default();
    if format == Format::Zip {
        let mut zip = zip::ZipArchive::new(File::open(archive).map_err(failed(archive))?)
            .map_err(|e| ModuleError::Failed(format!("{}: {e}", archive.display())))?;
        for i in 0..zip.len() {
            let mut file = zip.by_index(i).map_err(|e| ModuleError::Failed(e.to_string()))?;
            let name = PathBuf::from(file.name());
            let kind = zip_kind(&mut file)?;
            check_entry(dest, &name, &kind, &mut links, guard)?;
            names.push(name.display().to_string());
        }
        return Ok(names);
    }
    let mut tar = tar_reader(archive, format)?;
    for entry in tar.entries().map_err(failed(archive))? {
        let entry = entry.map_err(failed(archive))?;
        let name = entry.path().map_err(failed(archive))?.into_owned();
        let kind = match tar_kind(&entry) {
            Ok(Some(kind)) => kind,
            Ok(None) => continue,
            Err(why) => return Err(ModuleError::Failed(format!("archive refused: entry {}: {why}", name.display()))),
        };
        check_entry(dest, &name, &kind, &mut links, guard)?;
        names.push(name.display().to_string());
    }
    Ok(names)
}

/// Second pass: extraction, re-checking each entry (the archive file could have changed).
fn extract_all(archive: &Path, dest: &Path, format: Format, guard: &crate::PathGuard) -> Result<(), ModuleError> {
    fs::create_dir_all(dest).map_err(failed(dest))?;
    let mut links = Links::default();
    if format == Format::Zip {
        let mut zip = zip::ZipArchive::new(File::open(archive).map_err(failed(archive))?)
            .map_err(|e| ModuleError::Failed(e.to_string()))?;
        for i in 0..zip.len() {
            let mut file = zip.by_index(i).map_err(|e| ModuleError::Failed(e.to_string()))?;
            let name = PathBuf::from(file.name());
            let kind = zip_kind(&mut file)?;
            let target = dest.join(check_entry(dest, &name, &kind, &mut links, guard)?);
            if let Some(parent) = target.parent() {
                fs::create_dir_all(parent).map_err(failed(parent))?;
            }
            match kind {
                Kind::Dir => fs::create_dir_all(&target).map_err(failed(&target))?,
                Kind::Symlink(link) => {
                    // Replaces a link already there (extracting again).
                    let _ = fs::remove_file(&target);
                    std::os::unix::fs::symlink(link, &target).map_err(failed(&target))?;
                }
                Kind::File | Kind::Hardlink(_) => {
                    // A new file, never written through whatever was there (a hard link).
                    let _ = fs::remove_file(&target);
                    let mut out =
                        fs::OpenOptions::new().write(true).create_new(true).open(&target).map_err(failed(&target))?;
                    io::copy(&mut file, &mut out).map_err(failed(&target))?;
                    if let Some(mode) = file.unix_mode() {
                        use std::os::unix::fs::PermissionsExt;
                        fs::set_permissions(&target, fs::Permissions::from_mode(mode & 0o777))
                            .map_err(failed(&target))?;
                    }
                }
            }
        }
        return Ok(());
    }
    let mut tar = tar_reader(archive, format)?;
    for entry in tar.entries().map_err(failed(archive))? {
        let mut entry = entry.map_err(failed(archive))?;
        let name = entry.path().map_err(failed(archive))?.into_owned();
        let kind = match tar_kind(&entry) {
            Ok(Some(kind)) => kind,
            Ok(None) | Err(_) => continue,
        };
        let target = dest.join(check_entry(dest, &name, &kind, &mut links, guard)?);
        if let Some(parent) = target.parent() {
            fs::create_dir_all(parent).map_err(failed(parent))?;
        }
        match kind {
            Kind::Hardlink(link) => {
                let source = dest.join(inside(&link).unwrap_or_default());
                let _ = fs::remove_file(&target);
                fs::hard_link(&source, &target).map_err(failed(&target))?;
            }
            Kind::File | Kind::Symlink(_) => {
                // A new file or link, never written through whatever was there (a hard link).
                let _ = fs::remove_file(&target);
                entry.unpack(&target).map_err(failed(&target))?;
            }
            Kind::Dir => {
                entry.unpack(&target).map_err(failed(&target))?;
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{Args, Function};
    use std::process::Command;

    fn call(args: serde_json::Value) -> Result<Output, ModuleError> {
        let serde_json::Value::Object(map) = args else { panic!("object expected") };
        tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap()
            .block_on(Extract.call(Args::new(vec![], map.into_iter().collect()), &Context::default()))
    }

    fn sha(path: &Path) -> String {
        let mut h = Sha256::new();
        io::copy(&mut File::open(path).unwrap(), &mut h).unwrap();
        format!("sha256={}", halite_protocol::hex::encode(&h.finalize()))
    }

    fn workdir(name: &str) -> PathBuf {
        let d = std::env::temp_dir().join(format!("halite-archive-{name}-{}", std::process::id()));
        let _ = fs::remove_dir_all(&d);
        fs::create_dir_all(d.join("src/app/sub")).unwrap();
        fs::write(d.join("src/app/readme"), "hello\n").unwrap();
        fs::write(d.join("src/app/sub/data"), "data\n").unwrap();
        std::os::unix::fs::symlink("sub/data", d.join("src/app/link")).unwrap();
        d
    }

    fn sh(dir: &Path, script: &str) {
        let status = Command::new("sh").arg("-c").arg(script).current_dir(dir).status().unwrap();
        assert!(status.success(), "{script}");
    }

    #[test]
    fn tar_gz_xz_and_zip_extract_with_a_verified_checksum() {
        let d = workdir("good");
        sh(&d, "tar -C src -cf a.tar app && tar -C src -czf a.tgz app && tar -C src -cJf a.txz app && (cd src && zip -qry ../a.zip app)");
        for archive in ["a.tar", "a.tgz", "a.txz", "a.zip"] {
            let path = d.join(archive);
            let dest = d.join(format!("out-{archive}"));
            let out = call(json!({"name": path.display().to_string(), "dest": dest.display().to_string(), "source_hash": sha(&path)})).unwrap();
            assert_eq!(out.value["changed"], true);
            assert_eq!(fs::read_to_string(dest.join("app/sub/data")).unwrap(), "data\n", "{archive}");
            assert_eq!(fs::read_link(dest.join("app/link")).unwrap(), PathBuf::from("sub/data"), "{archive}");
        }
        let path = d.join("a.tgz").display().to_string();
        let dest = d.join("x").display().to_string();
        let err = call(json!({"name": path, "dest": dest})).unwrap_err();
        assert!(err.to_string().contains("source_hash is required"));
        let wrong = format!("sha256={}", "0".repeat(64));
        let err = call(json!({"name": path, "dest": dest, "source_hash": wrong})).unwrap_err();
        assert!(err.to_string().contains("checksum mismatch"));
        let skipped = call(
            json!({"name": path, "dest": dest, "skip_verify": true, "if_missing": d.join("src").display().to_string()}),
        )
        .unwrap();
        assert_eq!(skipped.value["changed"], false);
    }

    #[test]
    fn malicious_archives_are_refused_whole() {
        let d = workdir("evil");
        // `..` entry (GNU tar keeps it with -P), absolute entry, symlink escapes.
        sh(&d, "echo x > victim && tar -cPf dotdot.tar src/app/readme ../$(basename $PWD)/victim");
        sh(&d, "tar -cPf absolute.tar src/app/readme $PWD/victim");
        sh(&d, "mkdir -p l && ln -s /etc l/etc && tar -cf abslink.tar -C l etc");
        sh(&d, "mkdir -p r && ln -s ../../outside r/up && tar -cf rellink.tar -C r up");
        sh(&d, "mkdir -p z && ln -s /etc z/evil && (cd z && zip -qry ../evil.zip evil)");
        // A chain of links whose text stays inside but which the kernel resolves out.
        sh(&d, "mkdir -p c/h && ln -s ../.. c/h/y && ln -s y/../.. c/h/x && tar -cf chain.tar -C c h");
        // A hard link whose target is reached through a link of the archive.
        sh(
            &d,
            "mkdir -p k/real && echo s > k/real/f && ln -s real k/via && ln k/real/f k/hl && \
                tar -cf hardlink.tar -C k via real/f && tar -rf hardlink.tar -C k --hard-dereference real/f && true",
        );
        sh(&d, "python3 -c \"import tarfile;t=tarfile.open('hardlink.tar','w');i=tarfile.TarInfo('via');i.type=tarfile.SYMTYPE;i.linkname='real';t.addfile(i);i=tarfile.TarInfo('real');i.type=tarfile.DIRTYPE;t.addfile(i);i=tarfile.TarInfo('hl');i.type=tarfile.LNKTYPE;i.linkname='via/f';t.addfile(i);t.close()\"");
        for (archive, why) in [
            ("dotdot.tar", "contains .."),
            ("absolute.tar", "absolute path"),
            ("abslink.tar", "symlink to an absolute path"),
            ("rellink.tar", "symlink target contains .."),
            ("chain.tar", "symlink target contains .."),
            ("hardlink.tar", "hard link target is reached through a symlink"),
            ("evil.zip", "symlink to an absolute path"),
        ] {
            let path = d.join(archive);
            let dest = d.join(format!("out-{archive}"));
            let err = call(
                json!({"name": path.display().to_string(), "dest": dest.display().to_string(), "skip_verify": true}),
            )
            .unwrap_err()
            .to_string();
            assert!(err.contains(why), "{archive}: {err}");
            assert!(!dest.exists() || fs::read_dir(&dest).unwrap().next().is_none(), "{archive} half-extracted");
        }
        // A symlink already in the destination is never written through.
        let dest = d.join("pre");
        fs::create_dir_all(&dest).unwrap();
        std::os::unix::fs::symlink("/tmp", dest.join("app")).unwrap();
        sh(&d, "tar -C src -cf plain.tar app");
        let err = call(json!({"name": d.join("plain.tar").display().to_string(), "dest": dest.display().to_string(), "skip_verify": true}))
            .unwrap_err();
        assert!(err.to_string().contains("through an existing symlink"), "{err}");
        // Nor is one already there replaced by a file written through it.
        let dest = d.join("pre-file");
        fs::create_dir_all(&dest).unwrap();
        std::os::unix::fs::symlink(d.join("victim-file"), dest.join("w")).unwrap();
        sh(&d, "mkdir -p wf && echo attacker > wf/w && tar -C wf -cf w.tar w");
        let err = call(json!({"name": d.join("w.tar").display().to_string(), "dest": dest.display().to_string(), "skip_verify": true}))
            .unwrap_err();
        assert!(err.to_string().contains("through an existing symlink"), "{err}");
        assert!(!d.join("victim-file").exists());
    }

    #[test]
    fn no_entry_reaches_the_minions_secrets_whatever_the_destination() {
        let d = workdir("secrets");
        fs::create_dir_all(d.join("m/state")).unwrap();
        fs::write(d.join("m/state/minion.key"), "KEY").unwrap();
        sh(&d, "mkdir -p a/state && echo PWNED > a/state/minion.key && tar -C a -cf over.tar state/minion.key");
        sh(&d, "python3 -c \"import tarfile;t=tarfile.open('hl.tar','w');i=tarfile.TarInfo('hl');i.type=tarfile.LNKTYPE;i.linkname='state/minion.key';t.addfile(i);t.close()\"");
        let dispatcher = std::sync::Arc::new(crate::Dispatcher {
            registry: std::sync::Arc::new(crate::Registry::standard()),
            policy: crate::Policy::allow_all(),
            plans_dir: d.clone(),
            deploy: Default::default(),
            paths: crate::PathGuard::new(&[d.join("m/state")], None),
        });
        let cx = Context { dispatcher: Some(dispatcher), ..Context::default() };
        let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
        for archive in ["over.tar", "hl.tar"] {
            let args = json!({"name": d.join(archive).display().to_string(), "dest": d.join("m").display().to_string(), "skip_verify": true});
            let serde_json::Value::Object(map) = args else { panic!() };
            let refused =
                runtime.block_on(Extract.call(Args::new(vec![], map.into_iter().collect()), &cx)).unwrap_err();
            assert!(refused.to_string().contains("the minion's own"), "{archive}: {refused}");
        }
        assert_eq!(fs::read_to_string(d.join("m/state/minion.key")).unwrap(), "KEY");
        assert!(!d.join("m/hl").exists());
    }
}
