//! `halite://` sources: files the master serves from its file root, fetched in parts through
//! the minion's session (`Context::files`) and checked against the SHA-256 the master gives.
//! Every build has them: central plans are read this way even where no function copies files.

use std::io::Write;
use std::time::Duration;

use halite_protocol::message::{ErrorKind, FileChunk};
use sha2::{Digest, Sha256};
use tokio::sync::oneshot;

use crate::{Context, FileRequest, ModuleError};

/// The scheme of master-served sources.
const SCHEME: &str = "halite://";

/// Times a part is asked again when the master is busy reading files for others.
const BUSY_RETRIES: u32 = 20;

/// The path of a `halite://` URL.
pub(crate) fn source_path(source: &str) -> Result<&str, ModuleError> {
    match source.strip_prefix(SCHEME) {
        Some(path) if !path.trim_start_matches('/').is_empty() => Ok(path),
        _ => Err(ModuleError::BadArguments(format!(
            "source {source:?} is not a halite:// URL (halite://path under the master's file root)"
        ))),
    }
}

/// A `source_hash` as `sha256:<hex>` or bare hex: the lowercase hex digest.
#[cfg_attr(not(any(feature = "files", feature = "cmd")), allow(dead_code))]
pub(crate) fn expected_digest(hash: &str) -> Result<String, ModuleError> {
    let hex = hash.strip_prefix("sha256:").or_else(|| hash.strip_prefix("sha256=")).unwrap_or(hash).to_lowercase();
    if hex.len() == 64 && hex.bytes().all(|b| b.is_ascii_hexdigit()) {
        Ok(hex)
    } else {
        Err(ModuleError::BadArguments(format!("source_hash {hash:?} is not a SHA-256 digest (sha256:<64 hex digits>)")))
    }
}

/// One part of `halite://path` from `offset` on.
pub(crate) async fn part(cx: &Context, path: &str, offset: u64) -> Result<FileChunk, ModuleError> {
    asked(cx, path, offset).await?.map_err(|(_, why)| ModuleError::Failed(why))
}

/// One part of `halite://path` from `offset` on, or the master's refusal with its kind (busy
/// is asked again here).
async fn asked(cx: &Context, path: &str, offset: u64) -> Result<Result<FileChunk, (ErrorKind, String)>, ModuleError> {
    let Some(files) = &cx.files else {
        return Err(ModuleError::Failed(format!(
            "{SCHEME}{path}: halite:// sources need a master (this is a local call)"
        )));
    };
    for _ in 0..BUSY_RETRIES {
        let (reply, answer) = oneshot::channel();
        let request = FileRequest { path: path.to_owned(), offset, reply };
        files.send(request).await.map_err(|_| ModuleError::Failed("the minion is shutting down".into()))?;
        match answer.await {
            Ok(Err((ErrorKind::LimitExceeded, _))) => tokio::time::sleep(Duration::from_millis(250)).await,
            Ok(answer) => return Ok(answer),
            Err(_) => return Err(ModuleError::Failed(format!("{SCHEME}{path}: no session with the master"))),
        }
    }
    Err(ModuleError::Failed(format!("{SCHEME}{path}: the master stayed too busy to serve it")))
}

/// The text of `url` (a `halite://` URL) when it is at most `max` bytes of UTF-8; `None` when
/// the master has no such file. The size is checked on the first part, before the rest is asked
/// for.
pub(crate) async fn read_text(cx: &Context, url: &str, max: u64) -> Result<Option<String>, ModuleError> {
    let path = source_path(url)?;
    let first = match asked(cx, path, 0).await? {
        Ok(first) => first,
        Err((ErrorKind::NotFound, _)) => return Ok(None),
        Err((_, why)) => return Err(ModuleError::Failed(why)),
    };
    if first.size > max {
        return Err(ModuleError::Failed(format!("{url}: {} bytes, more than the {max} it may have", first.size)));
    }
    let mut bytes = Vec::with_capacity(first.size as usize);
    copy_to(cx, path, first, &mut bytes).await?;
    String::from_utf8(bytes).map(Some).map_err(|_| ModuleError::Failed(format!("{url}: not UTF-8 text")))
}

/// The first part of `url` (a `halite://` URL), checked against `source_hash` when one is given;
/// `unused` says what was left undone when it does not match ("nothing was written").
#[cfg_attr(not(any(feature = "files", feature = "cmd")), allow(dead_code))]
pub(crate) async fn first_part_checked(
    cx: &Context,
    url: &str,
    source_hash: Option<&str>,
    unused: &str,
) -> Result<FileChunk, ModuleError> {
    let path = source_path(url)?;
    let expected = source_hash.map(expected_digest).transpose()?;
    let first = part(cx, path, 0).await?;
    match expected {
        Some(expected) if expected != first.sha256 => Err(ModuleError::Failed(format!(
            "{url} on the master has sha256 {}, not the source_hash {expected}; {unused}",
            first.sha256
        ))),
        _ => Ok(first),
    }
}

/// Writes the whole of `halite://path` to `out`, starting from its `first` part (offset 0),
/// and checks that what was written has the digest every part announced.
pub(crate) async fn copy_to(
    cx: &Context,
    path: &str,
    first: FileChunk,
    out: &mut impl Write,
) -> Result<(), ModuleError> {
    let failed = |e: std::io::Error| ModuleError::Failed(format!("writing {SCHEME}{path}: {e}"));
    let mut hasher = Sha256::new();
    let (size, sha256) = (first.size, first.sha256.clone());
    let mut offset = 0u64;
    let mut chunk = first;
    loop {
        if chunk.size != size || chunk.sha256 != sha256 || chunk.offset != offset {
            return Err(ModuleError::Failed(format!("{SCHEME}{path} changed on the master while it was being copied")));
        }
        hasher.update(&chunk.data);
        out.write_all(&chunk.data).map_err(failed)?;
        offset += chunk.data.len() as u64;
        if offset >= size || chunk.data.is_empty() {
            break;
        }
        chunk = part(cx, path, offset).await?;
    }
    let got = halite_protocol::hex::encode(&hasher.finalize());
    if offset != size || got != sha256 {
        return Err(ModuleError::Failed(format!(
            "{SCHEME}{path}: received {offset} bytes with sha256 {got}, but the master announced {size} bytes with \
             sha256 {sha256}"
        )));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sources_and_digests_are_checked_before_anything_is_fetched() {
        assert_eq!(source_path("halite://app/conf").unwrap(), "app/conf");
        for bad in ["salt://app/conf", "/etc/x", "halite://", "halite:///"] {
            let Err(ModuleError::BadArguments(why)) = source_path(bad) else { panic!("{bad} accepted") };
            assert!(why.contains("halite://"), "{why}");
        }
        let hex = "ab".repeat(32);
        assert_eq!(expected_digest(&format!("sha256:{}", hex.to_uppercase())).unwrap(), hex);
        assert_eq!(expected_digest(&hex).unwrap(), hex);
        assert!(expected_digest("md5:abc").is_err());
    }

    #[tokio::test]
    async fn a_local_call_is_told_it_needs_a_master() {
        let Err(ModuleError::Failed(why)) = part(&Context::default(), "x", 0).await else { panic!() };
        assert!(why.contains("need a master"), "{why}");
    }
}
