//! `event.send`: hand an event to the master over the minion's session.

use schemars::JsonSchema;
use serde::Deserialize;
use serde_json::json;

use crate::{Context, ModuleError, OutgoingEvent, Output, Typed};

pub(crate) struct Send;

#[derive(Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub(crate) struct SendArgs {
    /// Tag, relative to this minion's namespace (`deploy/done` arrives as `minion/<id>/deploy/done`).
    tag: String,
    /// Event body.
    #[serde(default)]
    data: serde_json::Value,
}

/// Whether a tag is acceptable: 1–255 bytes of `A-Za-z0-9_.-/`, not starting with `/`, no `..`.
pub(crate) fn valid_tag(tag: &str) -> bool {
    !tag.is_empty()
        && tag.len() <= 255
        && !tag.starts_with('/')
        && !tag.split('/').any(|part| part == ".." || part.is_empty())
        && tag.bytes().all(|b| b.is_ascii_alphanumeric() || matches!(b, b'_' | b'.' | b'-' | b'/'))
}

impl Typed for Send {
    const NAME: &'static str = "event.send";
    const DOC: &'static str = "Sends an event to the master. The master namespaces the tag under this minion's \
         authenticated id and delivers it only where its ACL allows; needs the minion daemon (not a local call).";
    const POSITIONAL: &'static [&'static str] = &["tag", "data"];
    type Args = SendArgs;
    async fn run(&self, a: SendArgs, cx: &Context) -> Result<Output, ModuleError> {
        if !valid_tag(&a.tag) {
            return Err(ModuleError::BadArguments(format!(
                "{:?} is not a valid tag (A-Z a-z 0-9 _ . - /, no ..)",
                a.tag
            )));
        }
        let Some(events) = &cx.events else {
            return Err(ModuleError::Failed("no master connection: event.send needs the minion daemon".into()));
        };
        if cx.test {
            return Ok(Output::change(true, format!("would send {}", a.tag), json!({})));
        }
        events
            .try_send(OutgoingEvent { tag: a.tag.clone(), data: a.data })
            .map_err(|_| ModuleError::Failed("the event queue is full or closed".into()))?;
        Ok(Output::change(true, format!("sent {}", a.tag), json!({ "tag": a.tag })))
    }
}

#[cfg(test)]
mod tests {
    use super::valid_tag;

    #[test]
    fn tags_cannot_climb_or_smuggle() {
        assert!(valid_tag("deploy/done"));
        assert!(valid_tag("app.v1/status-ok"));
        for bad in ["", "/abs", "a/../b", "a//b", "a b", "halite/job\n", &"x".repeat(256)] {
            assert!(!valid_tag(bad), "{bad:?}");
        }
    }
}
