//! `halite run`: publish, stream returns, finish with every minion in a final state.

use std::collections::BTreeMap;
use std::io::IsTerminal;
use std::process::ExitCode;

use clap::Args;
use halite_client::{Client, JobEvent, JobSpec};
use halite_protocol::message::{is_identifier, parse_cli_args, JobReturn, MinionJobState};
use serde_json::{json, Value};

use crate::output::{self, paint, Format};
use crate::rollout_args::RolloutArgs;
use crate::target_args::TargetArgs;
use crate::{duration, EXIT_TARGETS_FAILED};

/// What a minion still going when `run` stopped waiting is shown with.
const STILL_GOING: &str = "no return yet: the job goes on (halite jobs show JID)";

/// Exit code after Ctrl-C (128 + SIGINT, as shells report it).
const EXIT_INTERRUPTED: u8 = 130;

#[derive(Args)]
pub(crate) struct RunArgs {
    /// How the target is read.
    #[command(flatten)]
    target_kind: TargetArgs,
    /// How long this command waits for returns (30s, 5m, ...; 0: until the job ends), as
    /// Salt's -t. The job goes on past it; the command then says how to follow it.
    #[arg(short, long, default_value = "30s", value_parser = duration::parse)]
    timeout: std::time::Duration,
    /// How long each minion may run the job before it is stopped and reported `timed_out`
    /// (0: no limit; the job runs until its minion returns or it is cancelled).
    #[arg(long = "job-timeout", default_value = "1h", value_parser = duration::parse)]
    job_timeout: std::time::Duration,
    /// Wait this long for offline minions and deliver when they connect (default: report them offline).
    #[arg(long, value_parser = duration::parse)]
    ttl: Option<std::time::Duration>,
    /// Print the jid and return at once.
    #[arg(long = "async")]
    pub(crate) detach: bool,
    /// Print every minion's return together once all have returned (Salt's --static), not
    /// each as it comes, and no progress line.
    #[arg(long = "static")]
    pub(crate) all_at_once: bool,
    /// How the job reaches its targets over time.
    #[command(flatten)]
    rollout: RolloutArgs,
    /// Minion target (a glob by default).
    target: String,
    /// Function, e.g. test.ping.
    function: String,
    /// Arguments: positional values and key=value pairs (values parse as JSON when they can).
    args: Vec<String>,
}

impl RunArgs {
    /// A glob-targeted run with default options (for the demo).
    pub(crate) fn glob(target: &str, function: &str, args: &[&str]) -> Self {
        RunArgs {
            target_kind: TargetArgs::default(),
            timeout: std::time::Duration::from_secs(30),
            job_timeout: std::time::Duration::from_secs(3600),
            ttl: None,
            detach: false,
            all_at_once: false,
            rollout: RolloutArgs::default(),
            target: target.into(),
            function: function.into(),
            args: args.iter().map(|a| (*a).to_owned()).collect(),
        }
    }
}

pub(crate) async fn run(client: &Client, mut args: RunArgs, format: Format) -> anyhow::Result<ExitCode> {
    if args.target_kind.list {
        args.target = list_target(&args.target, &args.args)?;
    }
    let target = args.target_kind.target(&args.target).map_err(anyhow::Error::msg)?;
    let mut spec = JobSpec::new(target, &args.function);
    (spec.args, spec.kwargs) = arguments(&args.args)?;
    spec.timeout_ms = args.job_timeout.as_millis() as u64;
    spec.ttl_ms = args.ttl.map_or(0, |t| t.as_millis() as u64);
    spec.rollout = args.rollout.rollout();
    let rolled_out = spec.rollout.is_some();
    let published = client.publish(spec).await?;
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
        eprintln!("halite: {}", unknown_named(&published.unknown));
        return Ok(ExitCode::from(EXIT_TARGETS_FAILED));
    }
    // Ids the target named that no minion has come as updates like the others (`unknown`).
    let width = published.minions.iter().chain(&published.unknown).map(String::len).max().unwrap_or(0);
    let mut finals: BTreeMap<String, (MinionJobState, Option<JobReturn>)> = BTreeMap::new();
    // Each target's latest state, for a rollout's progress line.
    let mut latest: BTreeMap<String, MinionJobState> = BTreeMap::new();
    // On a terminal, a one-line progress counter on stderr, rewritten in place.
    let progress = format == Format::Table && !args.all_at_once && std::io::stderr().is_terminal();
    let total = published.minions.len() + published.unknown.len();
    // A table of several minions prints identical results once, at the end (a terminal shows
    // the progress meanwhile); a rollout, long by design, prints each minion as it ends.
    let streamed = format == Format::Table && !args.all_at_once && (rolled_out || total == 1);
    // Listening from here on: a Ctrl-C while waiting tells the jid instead of dying silently.
    let interrupted = tokio::signal::ctrl_c();
    tokio::pin!(interrupted);
    // How long this command waits (the job does not end with it).
    let waited = async {
        match args.timeout {
            std::time::Duration::ZERO => std::future::pending().await,
            limit => tokio::time::sleep(limit).await,
        }
    };
    tokio::pin!(waited);
    let mut gave_up = false;
    loop {
        if progress && rolled_out {
            eprint!("\r{}, job {}\x1b[K", rollout_progress(&latest, total), published.jid);
        } else if progress {
            eprint!("\r{} of {total} minion(s) finished, job {}\x1b[K", finals.len(), published.jid);
        }
        let event = tokio::select! {
            event = client.next_job_event(&published.jid) => event?,
            _ = &mut interrupted => {
                if progress {
                    eprint!("\r\x1b[K");
                }
                eprintln!(
                    "\nhalite: interrupted; job {jid} goes on without this command. Follow it with: halite jobs show {jid}",
                    jid = published.jid
                );
                return Ok(ExitCode::from(EXIT_INTERRUPTED));
            }
            _ = &mut waited => {
                gave_up = true;
                break;
            }
        };
        match event {
            JobEvent::Done => break,
            JobEvent::Update(update) => {
                latest.insert(update.minion.clone(), update.state);
                if format == Format::Ndjson {
                    // The same fields as `--out json` gives each minion, with its jid and id.
                    let mut line = result_value(update.state, update.ret.as_ref());
                    line["jid"] = json!(published.jid);
                    line["minion"] = json!(update.minion);
                    output::print_document(format, &line);
                }
                if update.state.is_final() {
                    if progress {
                        eprint!("\r\x1b[K");
                    }
                    if streamed {
                        print_final(&update.minion, width, update.state, update.ret.as_ref());
                    }
                    finals.insert(update.minion, (update.state, update.ret));
                }
            }
        }
    }
    if progress {
        eprint!("\r\x1b[K");
    }
    // Minions still going when this command stopped waiting: shown as they are, not failed.
    let going: Vec<(String, MinionJobState)> = if gave_up {
        published
            .minions
            .iter()
            .filter(|id| !finals.contains_key(*id))
            .map(|id| (id.clone(), latest.get(id).copied().unwrap_or(MinionJobState::Sent)))
            .collect()
    } else {
        Vec::new()
    };
    if format == Format::Table && !streamed {
        crate::grouped::print_grouped(finals.iter().map(|(minion, (state, ret))| crate::grouped::Final {
            minion,
            state: *state,
            ret: ret.as_ref(),
        }));
    }
    // A minion still going that left in the middle (stopped, cut off) is told as offline, with
    // what becomes of its part, as the master sees it.
    let mut away: BTreeMap<String, String> = BTreeMap::new();
    if gave_up && !going.is_empty() {
        if let Ok(detail) = client.job(&published.jid).await {
            away = detail.minions.into_iter().filter_map(|m| Some((m.minion, m.away?))).collect();
        }
    }
    if gave_up {
        for (id, state) in &going {
            let detail = away.get(id).map_or(STILL_GOING, String::as_str);
            match format {
                Format::Table => {
                    let said = match away.get(id) {
                        Some(away) => away.clone(),
                        None => format!("{}: no return yet", state.as_str()),
                    };
                    println!("{}  {}", paint(&format!("{id:<width$}"), "1"), paint(&said, "33"))
                }
                Format::Ndjson => output::print_document(
                    format,
                    &json!({ "jid": published.jid, "minion": id, "state": state.as_str(), "detail": detail }),
                ),
                _ => {}
            }
        }
        eprintln!(
            "halite: stopped waiting after {:?} (-t); job {jid} goes on. Follow it with: halite jobs show {jid}",
            args.timeout,
            jid = published.jid
        );
    }
    let ok = finals.values().filter(|(state, _)| *state == MinionJobState::Returned).count();
    if rolled_out && format == Format::Table {
        // Why the rollout stopped early, when it did.
        if let Ok(detail) = client.job(&published.jid).await {
            if let Some(reason) = detail.summary.rollout.and_then(|r| r.reason) {
                println!("\nrollout stopped: {reason}");
            }
        }
    }
    match format {
        Format::Table => {
            let states = finals.iter().map(|(minion, (state, _))| (minion.as_str(), state.as_str()));
            let going_states = going.iter().map(|(minion, state)| (minion.as_str(), state.as_str()));
            crate::grouped::print_summary(&published.jid, states.chain(going_states));
        }
        Format::Ndjson => {
            let mut counts: BTreeMap<&str, usize> = BTreeMap::new();
            let going_states = going.iter().map(|(_, state)| state.as_str());
            let finished = finals.values().map(|(state, _)| state.as_str());
            for state in finished.chain(going_states) {
                *counts.entry(state).or_default() += 1;
            }
            let total: usize = counts.values().sum();
            output::print_document(
                format,
                &json!({ "jid": published.jid, "done": !gave_up, "minions": total, "states": counts }),
            );
        }
        Format::Json | Format::Yaml => {
            let mut minions: serde_json::Map<String, Value> =
                finals.iter().map(|(id, (state, ret))| (id.clone(), result_value(*state, ret.as_ref()))).collect();
            for (id, state) in &going {
                let detail = away.get(id).map_or(STILL_GOING, String::as_str);
                minions.insert(id.clone(), json!({ "state": state.as_str(), "detail": detail }));
            }
            output::print_document(format, &json!({ "jid": published.jid, "minions": minions }));
        }
        // Salt's txt: `minion: return`, or what became of a minion without one.
        Format::Txt => {
            let mut lines: serde_json::Map<String, Value> = finals
                .iter()
                .map(|(id, (state, ret))| {
                    let value = match ret {
                        Some(ret) => ret.outputs.clone(),
                        None => json!(format!("{}: {}", state.as_str(), describe(*state))),
                    };
                    (id.clone(), value)
                })
                .collect();
            for (id, state) in &going {
                lines.insert(id.clone(), json!(format!("{}: {STILL_GOING}", state.as_str())));
            }
            output::print_document(format, &Value::Object(lines));
        }
    }
    Ok(if ok == finals.len() && going.is_empty() { ExitCode::SUCCESS } else { ExitCode::from(EXIT_TARGETS_FAILED) })
}

/// A `-L` target as given, or read from the file it names (`@FILE`; `@-`: standard input).
pub(crate) fn list_target(target: &str, words: &[String]) -> anyhow::Result<String> {
    let Some(path) = target.strip_prefix('@') else { return Ok(target.to_owned()) };
    if path == "-" && words.iter().any(|w| w.ends_with("=@-")) {
        anyhow::bail!("-L @- and an argument =@- cannot both read standard input");
    }
    read_named(path, "-L ")
}

/// The text of the file at `path`, or of standard input for `-`; errors say `{what}@{path}`.
fn read_named(path: &str, what: &str) -> anyhow::Result<String> {
    if path == "-" {
        let mut text = String::new();
        std::io::Read::read_to_string(&mut std::io::stdin(), &mut text)
            .map_err(|e| anyhow::anyhow!("{what}@-: standard input is not readable text: {e}"))?;
        return Ok(text);
    }
    std::fs::read_to_string(path).map_err(|e| anyhow::anyhow!("{what}@{path}: {e}"))
}

/// Positional and `key=value` arguments as `parse_cli_args` reads them, except `key=@path`: the
/// value is the file's text (`key=@-`: standard input), read here, so a large file needs no
/// shell quoting and meets no argument-length limit. `key=@@…` passes a literal `@…`.
fn arguments(words: &[String]) -> anyhow::Result<(Vec<Value>, BTreeMap<String, Value>)> {
    let mut plain = Vec::with_capacity(words.len());
    let mut from_files = Vec::new();
    for word in words {
        match word.split_once("=@") {
            Some((key, rest)) if is_identifier(key) && rest.starts_with('@') => plain.push(format!("{key}={rest}")),
            Some((key, path)) if is_identifier(key) => {
                from_files.push((key.to_owned(), Value::String(read_named(path, &format!("{key}="))?)));
            }
            _ => plain.push(word.clone()),
        }
    }
    let (positional, mut keyword) = parse_cli_args(&plain);
    keyword.extend(from_files);
    Ok((positional, keyword))
}

pub(crate) fn result_value(state: MinionJobState, ret: Option<&JobReturn>) -> Value {
    match ret {
        Some(ret) => json!({
            "state": state.as_str(),
            "success": ret.success,
            "retcode": ret.retcode,
            "return": ret.outputs,
            "truncated": ret.truncated,
            "duration_ms": ret.duration_ms,
        }),
        None => json!({ "state": state.as_str(), "detail": describe(state) }),
    }
}

/// A rollout's progress: how many targets are done, running, waiting, failed, skipped.
fn rollout_progress(latest: &BTreeMap<String, MinionJobState>, total: usize) -> String {
    use MinionJobState::*;
    let count = |pick: &dyn Fn(MinionJobState) -> bool| latest.values().filter(|s| pick(**s)).count();
    let done = count(&|s| s == Returned);
    let running = count(&|s| matches!(s, Sent | Running));
    let waiting = count(&|s| s == Waiting);
    let failed = count(&|s| matches!(s, Failed | TimedOut | Denied | Expired | Offline | Unknown));
    let skipped = count(&|s| matches!(s, Skipped | Cancelled));
    let queued = total.saturating_sub(done + running + waiting + failed + skipped);
    format!(
        "{done} done, {running} running, {waiting} waiting, {queued} queued, {failed} failed, {skipped} skipped of {total}"
    )
}

/// What `--async` says on standard error of the ids its target named that no minion has.
pub(crate) fn unknown_named(unknown: &[String]) -> String {
    const SHOWN: usize = 20;
    let mut named = unknown.iter().take(SHOWN).cloned().collect::<Vec<_>>().join(", ");
    if unknown.len() > SHOWN {
        named.push_str(&format!(" and {} more", unknown.len() - SHOWN));
    }
    format!("no such minion: {named} (no accepted key with that id that you may target); the job shows them as unknown")
}

pub(crate) fn describe(state: MinionJobState) -> &'static str {
    match state {
        MinionJobState::Offline => "minion not connected; no TTL, so the job was not queued",
        MinionJobState::Expired => "minion did not connect before the job's TTL ran out",
        MinionJobState::TimedOut => "no return before the timeout; the job may still be running",
        MinionJobState::Cancelled => "cancelled before it finished",
        MinionJobState::Failed => "the job failed",
        MinionJobState::Denied => "the minion's policy does not allow this function",
        MinionJobState::Skipped => "not started: the rollout stopped first",
        MinionJobState::Queued => "not started yet: waiting for its turn in the rollout",
        MinionJobState::Unknown => "no such minion (no accepted key with this id that you may target)",
        _ => "",
    }
}

pub(crate) fn state_colour(state: MinionJobState) -> &'static str {
    match state {
        MinionJobState::Returned => "32",
        MinionJobState::Failed | MinionJobState::TimedOut | MinionJobState::Denied => "31",
        _ => "33",
    }
}

/// One minion's final state as `run` prints it (and `jobs show`).
pub(crate) fn print_final(minion: &str, width: usize, state: MinionJobState, ret: Option<&JobReturn>) {
    print_line(minion, width, state, &final_detail(state, ret));
}

/// A line of results: the minion (or the minions sharing it), the state, what it returned.
pub(crate) fn print_line(minions: &str, width: usize, state: MinionJobState, detail: &str) {
    let label = paint(&format!("{:<9}", state.as_str()), state_colour(state));
    println!("{minions:<width$}  {label}  {}", output::terminal_safe(detail));
}

/// What the table shows of a final state: the return, or what the state means. A return's
/// process id is left out (`--out json` has it): it differs on every minion, and would keep
/// identical results from being shown once.
pub(crate) fn final_detail(state: MinionJobState, ret: Option<&JobReturn>) -> String {
    match ret {
        Some(ret) if ret.outputs.is_object() || ret.outputs.is_array() => {
            let body = match ret.outputs.as_object() {
                Some(map) if map.contains_key("pid") => {
                    let mut shown = map.clone();
                    shown.remove("pid");
                    output::return_text(&Value::Object(shown))
                }
                _ => output::return_text(&ret.outputs),
            };
            let indented: Vec<String> = body.lines().map(|l| format!("    {l}")).collect();
            format!("\n{}", indented.join("\n"))
        }
        Some(ret) => output::compact(&ret.outputs),
        None => describe(state).to_owned(),
    }
}

#[cfg(test)]
mod tests {
    use clap::Parser;

    #[derive(Parser)]
    struct Wrap {
        #[command(flatten)]
        run: super::RunArgs,
    }

    /// One default for how long a job may run: the CLI's is the SDKs' and the gateway's.
    #[test]
    fn the_default_job_timeout_is_every_publishers() {
        let parsed = Wrap::try_parse_from(["halite", "web1", "test.ping"]).unwrap();
        let default = halite_protocol::message::DEFAULT_JOB_TIMEOUT_MS;
        assert_eq!(parsed.run.job_timeout.as_millis(), u128::from(default));
    }

    #[test]
    fn rollout_options_make_a_rollout_and_bad_amounts_are_named() {
        let parsed = Wrap::try_parse_from([
            "halite",
            "-b",
            "10%",
            "--batch-wait",
            "5s",
            "--max-errors",
            "1",
            "--canary",
            "2",
            "--abort-on",
            "minion/*/alarm/*",
            "web*",
            "test.ping",
        ])
        .unwrap();
        let rollout = parsed.run.rollout.rollout().unwrap();
        assert_eq!(rollout.batch, Some(halite_protocol::message::Amount::Percent(10)));
        assert_eq!((rollout.batch_wait_ms, rollout.canary), (5_000, 2));
        assert_eq!(rollout.max_errors, Some(halite_protocol::message::Amount::Count(1)));
        assert_eq!(rollout.abort_on, ["minion/*/alarm/*"]);
        assert!(Wrap::try_parse_from(["halite", "web*", "test.ping"]).unwrap().run.rollout.rollout().is_none());
        let error = Wrap::try_parse_from(["halite", "-b", "150%", "web*", "test.ping"]).err().unwrap().to_string();
        assert!(error.contains("not a percentage from 1% to 100%"), "{error}");
        let error = Wrap::try_parse_from(["halite", "-b", "ten", "web*", "test.ping"]).err().unwrap().to_string();
        assert!(error.contains("not a count or a percentage"), "{error}");
        let error = Wrap::try_parse_from(["halite", "-b", "0", "web*", "test.ping"]).err().unwrap().to_string();
        assert!(error.contains("a batch of 0 starts nothing"), "a usage error, as -b 150% is: {error}");
    }

    #[test]
    fn t_is_how_long_the_command_waits_and_the_job_timeout_is_its_own_flag() {
        let parsed = Wrap::try_parse_from(["halite", "web1", "test.ping"]).unwrap();
        assert_eq!(parsed.run.timeout, std::time::Duration::from_secs(30), "as Salt's -t: the wait");
        assert_eq!(parsed.run.job_timeout, std::time::Duration::from_secs(3600), "a long job is not killed");
        let parsed = Wrap::try_parse_from(["halite", "-t", "5s", "--job-timeout", "0", "web1", "test.ping"]).unwrap();
        assert_eq!((parsed.run.timeout.as_secs(), parsed.run.job_timeout.as_secs()), (5, 0));
    }
}
