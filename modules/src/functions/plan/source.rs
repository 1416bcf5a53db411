//! Where a plan's text comes from: a file stored on the minion (`plans_dir`), or one the master
//! serves (`halite://`), named by a URL or by a name the extensions are tried for.

use std::path::PathBuf;

use super::document::{self, Syntax};
use super::step::{self, Placed};
use crate::{Context, ModuleError, PathGuard};

/// Most bytes of a plan or top file.
pub(crate) const MAX_PLAN: u64 = 1 << 20;

/// The steps of the file `file` (its name, for errors) holding `text`.
pub(crate) fn steps(text: &str, syntax: Syntax, file: &str) -> Result<Vec<Placed>, ModuleError> {
    let tree = document::parse(text, syntax).map_err(|e| step::at(file, e.line, e.message))?;
    step::from_document(tree, file)
}

/// A plan stored on the minion: `<plans_dir>/<name>` with the first extension that exists.
pub(crate) async fn stored(cx: &Context, name: &str) -> Result<Vec<Placed>, ModuleError> {
    let dispatcher = cx.dispatcher.as_ref().ok_or_else(|| ModuleError::Failed("no registry in this context".into()))?;
    if halite_protocol::id::validate(name).is_err() {
        return Err(ModuleError::BadArguments(format!("{name:?} is not a plan name")));
    }
    let mut extensions = Syntax::EXTENSIONS;
    // TOML first, as stored plans always were.
    extensions.sort_by_key(|(_, syntax)| *syntax != Syntax::Toml);
    for (extension, syntax) in extensions {
        let path = dispatcher.plans_dir.join(format!("{name}.{extension}"));
        if let Some(text) = read_stored(&dispatcher.paths, path.clone()).await? {
            return steps(&text, syntax, &path.display().to_string());
        }
    }
    Err(ModuleError::Failed(format!(
        "no plan {name} in {} ({name}.toml, .yaml, .yml or .json)",
        dispatcher.plans_dir.display()
    )))
}

/// A stored plan's text (`None` if there is no such file), read off the runtime's threads
/// without blocking on what is not a regular file, and never one of the minion's secrets (a
/// link planted in the plans directory would otherwise have its target echoed back in a parse
/// error).
async fn read_stored(guard: &PathGuard, path: PathBuf) -> Result<Option<String>, ModuleError> {
    use std::io::Read as _;
    let guard = guard.clone();
    tokio::task::spawn_blocking(move || {
        if std::fs::symlink_metadata(&path).is_err() {
            return Ok(None);
        }
        let failed = |e: std::io::Error| ModuleError::Failed(format!("{}: {e}", path.display()));
        let file = guard.open_own_blocking(&path)?;
        let mut text = String::new();
        file.take(MAX_PLAN + 1).read_to_string(&mut text).map_err(failed)?;
        if text.len() as u64 > MAX_PLAN {
            return Err(ModuleError::Failed(format!(
                "{}: larger than a plan may be ({MAX_PLAN} bytes)",
                path.display()
            )));
        }
        Ok(Some(text))
    })
    .await
    .map_err(|e| ModuleError::Failed(format!("reading the plan failed: {e}")))?
}

/// A plan the master serves at `url`, whose extension says its syntax.
pub(crate) async fn fetched(cx: &Context, url: &str) -> Result<Vec<Placed>, ModuleError> {
    let syntax = syntax_of(url)?;
    let text = crate::master_files::read_text(cx, url, MAX_PLAN)
        .await?
        .ok_or_else(|| ModuleError::Failed(format!("{url}: no such file on the master")))?;
    steps(&text, syntax, url)
}

/// The syntax a URL's extension names.
pub(crate) fn syntax_of(url: &str) -> Result<Syntax, ModuleError> {
    Syntax::of(url)
        .ok_or_else(|| ModuleError::BadArguments(format!("{url}: a plan's name ends in .yaml, .yml, .toml or .json")))
}

/// The plan `name` under `base` (a `halite://` directory): `name` as it is when it ends in a
/// plan's extension, else the first of `name.yaml`, `.yml`, `.toml`, `.json` the master has.
/// A name that is itself a `halite://` URL is fetched as it is.
pub(crate) async fn named(cx: &Context, base: &str, name: &str) -> Result<Vec<Placed>, ModuleError> {
    if name.starts_with("halite://") {
        return fetched(cx, name).await;
    }
    check_name(name)?;
    let base = base.trim_end_matches('/');
    if Syntax::of(name).is_some() {
        return fetched(cx, &format!("{base}/{name}")).await;
    }
    for (extension, syntax) in Syntax::EXTENSIONS {
        let url = format!("{base}/{name}.{extension}");
        if let Some(text) = crate::master_files::read_text(cx, &url, MAX_PLAN).await? {
            return steps(&text, syntax, &url);
        }
    }
    Err(ModuleError::Failed(format!("no plan {name} on the master ({base}/{name}.yaml, .yml, .toml or .json)")))
}

/// A plan name: words of letters, digits, `_`, `-` and `.`, separated by `/` (subdirectories),
/// none of them `.` or `..`.
fn check_name(name: &str) -> Result<(), ModuleError> {
    let word_ok = |w: &str| {
        !w.is_empty()
            && w != "."
            && w != ".."
            && w.bytes().all(|b| b.is_ascii_alphanumeric() || matches!(b, b'_' | b'-' | b'.'))
    };
    if name.len() <= 256 && name.split('/').all(word_ok) {
        Ok(())
    } else {
        Err(ModuleError::BadArguments(format!(
            "{name:?} is not a plan name (letters, digits, _ - . and / between words)"
        )))
    }
}
