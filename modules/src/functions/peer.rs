//! `peer.publish`: ask the master to run a function on other minions, where a `[[peers]]` rule
//! on the master allows exactly that.

use std::collections::BTreeMap;

use halite_protocol::message::{JobSpec, PublishRequest, Target, TargetKind};
use schemars::JsonSchema;
use serde::Deserialize;
use serde_json::json;
use tokio::sync::oneshot;

use crate::{Context, ModuleError, Output, PeerRequest, Typed};

pub(crate) struct Publish;

#[derive(Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub(crate) struct PublishArgs {
    /// Target expression.
    target: String,
    /// How to read the target, by Salt's names: glob (default), list, pcre (or regex), grain,
    /// grain_pcre, ipcidr, compound or nodegroup.
    #[serde(default)]
    tgt_type: Option<String>,
    /// Function to run on the targets.
    function: String,
    /// Its positional arguments.
    #[serde(default)]
    args: Vec<serde_json::Value>,
    /// Its keyword arguments.
    #[serde(default)]
    kwargs: BTreeMap<String, serde_json::Value>,
    /// Per-minion timeout, seconds (default 3600, as every publisher's).
    #[serde(default)]
    timeout: Option<f64>,
}

impl Typed for Publish {
    const NAME: &'static str = "peer.publish";
    const DOC: &'static str = "Asks the master to run a function on other minions and returns {jid, minions}. The \
         master allows it only where one of its [[peers]] rules names this minion and the function; a target wider \
         than the rules' targets (`'*'`) is narrowed to the minions they cover, and the call fails with the \
         master's reason when none is left or no rule allows the function.";
    const POSITIONAL: &'static [&'static str] = &["target", "function"];
    type Args = PublishArgs;
    async fn run(&self, a: PublishArgs, cx: &Context) -> Result<Output, ModuleError> {
        let target = salt_target(a.tgt_type.as_deref(), a.target)?;
        let Some(peer) = &cx.peer else {
            return Err(ModuleError::Failed("no master connection: peer.publish needs the minion daemon".into()));
        };
        if cx.test {
            return Ok(Output::change(
                true,
                format!("would ask the master to run {} on {}", a.function, target.expr),
                json!({}),
            ));
        }
        let timeout_ms =
            a.timeout.map_or(halite_protocol::message::DEFAULT_JOB_TIMEOUT_MS, |t| (t.max(0.001) * 1000.0) as u64);
        let request = PublishRequest {
            request_id: 0,
            spec: JobSpec { args: a.args, kwargs: a.kwargs, timeout_ms, ..JobSpec::new(target, a.function) },
            // The master allows it only if this job's caller may run it too.
            on_behalf_of: Some(cx.caller.clone()),
        };
        let (reply, answer) = oneshot::channel();
        peer.send(PeerRequest { request, reply })
            .await
            .map_err(|_| ModuleError::Failed("the minion is shutting down".into()))?;
        match answer.await {
            Ok(Ok(published)) => Ok(Output::change(
                true,
                format!("job {} published", published.jid),
                json!({ "jid": published.jid, "minions": published.minions }),
            )),
            Ok(Err(reason)) => Err(ModuleError::Failed(format!("the master refused: {reason}"))),
            Err(_) => Err(ModuleError::Failed("lost the connection to the master before it answered".into())),
        }
    }
}

/// The target `expr` read as Salt's `publish.publish` reads `tgt_type`: `grain_pcre` and
/// `ipcidr` are the one-term compound targets `P@` and `S@`, `pcre` is halite's `regex`.
fn salt_target(tgt_type: Option<&str>, expr: String) -> Result<Target, ModuleError> {
    let kind = match tgt_type.unwrap_or("glob") {
        "glob" => TargetKind::Glob,
        "list" => TargetKind::List,
        "pcre" | "regex" => TargetKind::Regex,
        "grain" => TargetKind::Grain,
        "compound" => TargetKind::Compound,
        "nodegroup" => TargetKind::Nodegroup,
        engine @ ("grain_pcre" | "ipcidr") => {
            let prefix = if engine == "grain_pcre" { "P@" } else { "S@" };
            return Target::one_term(prefix, &expr).ok_or_else(|| {
                ModuleError::BadArguments(format!("tgt_type {engine}: the target cannot hold whitespace"))
            });
        }
        other => {
            return Err(ModuleError::BadArguments(format!(
                "unknown tgt_type {other:?}: expected glob, list, pcre, regex, grain, grain_pcre, ipcidr, compound or nodegroup"
            )))
        }
    };
    Ok(Target { kind, expr })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn salts_tgt_type_names_are_read_as_salt_reads_them() {
        let read = |tgt_type: &str, expr: &str| salt_target(Some(tgt_type), expr.into()).map(|t| (t.kind, t.expr));
        assert_eq!(read("pcre", "web\\d+").unwrap(), (TargetKind::Regex, "web\\d+".into()));
        assert_eq!(read("grain_pcre", "os:deb.*").unwrap(), (TargetKind::Compound, "P@os:deb.*".into()));
        assert_eq!(read("ipcidr", "10.0.0.0/8").unwrap(), (TargetKind::Compound, "S@10.0.0.0/8".into()));
        assert_eq!(salt_target(None, "web*".into()).unwrap().kind, TargetKind::Glob);
        let spaced = read("ipcidr", "10.0.0.0/8 or web1").unwrap_err().to_string();
        assert!(spaced.contains("cannot hold whitespace"), "{spaced}");
        let unknown = read("pillar", "role:web").unwrap_err().to_string();
        assert!(unknown.contains("unknown tgt_type \"pillar\"") && unknown.contains("grain_pcre"), "{unknown}");
    }
}
