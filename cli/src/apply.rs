//! `halite apply`: the plans the master keeps, applied to the targeted minions (Salt's
//! `state.apply`). Publishes `plan.apply` (each minion reads the master's top file and runs the
//! plans it is given, or the plans named here), then shows each minion's steps as a table with
//! a summary line, as Salt's highstate output does.

use std::collections::BTreeMap;
use std::process::ExitCode;

use clap::Args;
use halite_client::{Client, JobEvent, JobSpec};
use halite_protocol::message::{JobReturn, MinionJobState};
use serde_json::{json, Value};

use crate::output::{self, paint, Format};
use crate::rollout_args::RolloutArgs;
use crate::run::{describe, result_value, state_colour};
use crate::target_args::TargetArgs;
use crate::{duration, EXIT_TARGETS_FAILED};

#[derive(Args)]
pub(crate) struct ApplyArgs {
    /// Call every step with test=true: show what would change (diffs included), change nothing.
    #[arg(long)]
    test: bool,
    /// The top file on the master (a halite:// URL); plans are named under the plans/
    /// directory beside it.
    #[arg(long, value_name = "URL", default_value = "halite://top.yaml")]
    top: String,
    /// How the target is read.
    #[command(flatten)]
    target_kind: TargetArgs,
    /// How long this command waits for returns (0: until the job ends), as `halite run -t`.
    #[arg(short, long, default_value = "5m", value_parser = duration::parse)]
    timeout: std::time::Duration,
    /// How long each minion may take over its plans before they are stopped (0: no limit).
    #[arg(long = "job-timeout", default_value = "1h", value_parser = duration::parse)]
    job_timeout: std::time::Duration,
    /// Wait this long for offline minions and apply when they connect.
    #[arg(long, value_parser = duration::parse)]
    ttl: Option<std::time::Duration>,
    /// Print the jid and return at once.
    #[arg(long = "async")]
    pub(crate) detach: bool,
    /// How the job reaches its targets over time.
    #[command(flatten)]
    rollout: RolloutArgs,
    /// Minion target (a glob by default).
    target: String,
    /// Plans to apply instead of those the top file gives each minion (names under plans/, or
    /// halite:// URLs).
    plans: Vec<String>,
}

impl ApplyArgs {
    /// The `plan.apply` job these arguments ask for.
    /// Salt's `state.apply web test=True` spelling: a `test=` word among the plans is the
    /// `--test` flag, not a plan.
    fn salt_test_word(&mut self) -> anyhow::Result<()> {
        let mut plans = Vec::new();
        for word in std::mem::take(&mut self.plans) {
            match word.split_once('=') {
                Some(("test", value)) => match value.to_ascii_lowercase().as_str() {
                    "true" | "yes" | "1" => self.test = true,
                    "false" | "no" | "0" => self.test = false,
                    _ => anyhow::bail!("test={value}: give test=True or test=False (or --test)"),
                },
                Some((key, _)) => anyhow::bail!(
                    "{word}: halite apply takes plans and --test (test=True); {key}= is no argument of it"
                ),
                None => plans.push(word),
            }
        }
        self.plans = plans;
        Ok(())
    }

    fn spec(&self) -> anyhow::Result<JobSpec> {
        let target = self.target_kind.target(&self.target).map_err(anyhow::Error::msg)?;
        let mut spec = JobSpec::new(target, "plan.apply");
        spec.kwargs.insert("top".into(), json!(self.top));
        if !self.plans.is_empty() {
            spec.kwargs.insert("plans".into(), json!(self.plans));
        }
        if self.test {
            spec.kwargs.insert("test".into(), json!(true));
        }
        spec.timeout_ms = self.job_timeout.as_millis() as u64;
        spec.ttl_ms = self.ttl.map_or(0, |t| t.as_millis() as u64);
        spec.rollout = self.rollout.rollout();
        Ok(spec)
    }
}

pub(crate) async fn apply(client: &Client, mut args: ApplyArgs, format: Format) -> anyhow::Result<ExitCode> {
    if args.target_kind.list {
        args.target = crate::run::list_target(&args.target, &[])?;
    }
    args.salt_test_word()?;
    let published = client.publish(args.spec()?).await?;
    if args.detach {
        match format {
            Format::Table => println!("{}", published.jid),
            _ => output::print_document(
                format,
                &json!({ "jid": published.jid, "minions": published.minions, "unknown": published.unknown }),
            ),
        }
        if published.unknown.is_empty() {
            return Ok(ExitCode::SUCCESS);
        }
        eprintln!("halite: {}", crate::run::unknown_named(&published.unknown));
        return Ok(ExitCode::from(EXIT_TARGETS_FAILED));
    }
    // Ids the target named that no minion has come as updates too (`unknown`).
    let total = published.minions.len() + published.unknown.len();
    let mut finals: BTreeMap<String, (MinionJobState, Option<JobReturn>)> = BTreeMap::new();
    let waited = async {
        match args.timeout {
            std::time::Duration::ZERO => std::future::pending().await,
            limit => tokio::time::sleep(limit).await,
        }
    };
    tokio::pin!(waited);
    let interrupted = tokio::signal::ctrl_c();
    tokio::pin!(interrupted);
    let mut gave_up = false;
    while finals.len() < total {
        let event = tokio::select! {
            event = client.next_job_event(&published.jid) => event?,
            _ = &mut waited => { gave_up = true; break; }
            _ = &mut interrupted => { gave_up = true; break; }
        };
        match event {
            JobEvent::Done => break,
            JobEvent::Update(update) if update.state.is_final() => {
                if format == Format::Table {
                    print_minion(&update.minion, update.state, update.ret.as_ref());
                }
                if format == Format::Ndjson {
                    let mut line = result_value(update.state, update.ret.as_ref());
                    line["jid"] = json!(published.jid);
                    line["minion"] = json!(update.minion);
                    output::print_document(format, &line);
                }
                finals.insert(update.minion, (update.state, update.ret));
            }
            JobEvent::Update(_) => {}
        }
    }
    let waiting: Vec<&String> = published.minions.iter().filter(|id| !finals.contains_key(*id)).collect();
    if gave_up {
        eprintln!(
            "halite: stopped waiting; job {jid} goes on for {} minion(s). Follow it with: halite jobs show {jid}",
            waiting.len(),
            jid = published.jid
        );
    }
    let failed = finals.values().filter(|(state, _)| *state != MinionJobState::Returned).count();
    match format {
        Format::Table => println!(
            "\n{total} minion(s), job {}: {} applied, {failed} failed, {} without a return yet",
            published.jid,
            finals.len() - failed,
            waiting.len()
        ),
        Format::Json | Format::Yaml => {
            let mut minions: serde_json::Map<String, Value> =
                finals.iter().map(|(id, (state, ret))| (id.clone(), result_value(*state, ret.as_ref()))).collect();
            for id in &waiting {
                minions.insert((*id).clone(), json!({ "state": "waiting", "detail": "no return yet" }));
            }
            output::print_document(format, &json!({ "jid": published.jid, "minions": minions }));
        }
        Format::Txt => {
            let lines: serde_json::Map<String, Value> =
                finals.iter().map(|(id, (state, _))| (id.clone(), json!(state.as_str()))).collect();
            output::print_document(format, &Value::Object(lines));
        }
        Format::Ndjson => {}
    }
    Ok(if failed == 0 && waiting.is_empty() { ExitCode::SUCCESS } else { ExitCode::from(EXIT_TARGETS_FAILED) })
}

/// One minion's plans: its id and state, then the step table (or what went wrong).
fn print_minion(minion: &str, state: MinionJobState, ret: Option<&JobReturn>) {
    println!("{}  {}", paint(minion, "1"), paint(state.as_str(), state_colour(state)));
    let text = match ret {
        Some(ret) => output::return_text(&ret.outputs),
        None => format!("{}\n", describe(state)),
    };
    for line in text.lines() {
        match line {
            "" => println!(),
            line => println!("    {}", output::terminal_safe(line)),
        }
    }
}
