//! `halite jobs list`: the newest jobs, when each started, who published it and how its
//! minions stand, narrowed as Salt's `jobs.list_jobs` search is (function, target, caller,
//! state, time).

use std::process::ExitCode;

use clap::Args;
use halite_client::Client;
use halite_protocol::message::{JobFilter, MinionJobState};

use crate::output::{self, Format};

#[derive(Args)]
pub(crate) struct JobListArgs {
    /// How many (the newest first).
    #[arg(long, default_value_t = 20)]
    limit: u32,
    /// Only jobs of functions matching this glob (`pkg.*`).
    #[arg(long, value_name = "GLOB")]
    function: Option<String>,
    /// Only jobs whose target, as it was given, matches this glob (`web*`).
    #[arg(long, value_name = "GLOB")]
    target: Option<String>,
    /// Only jobs published by principals matching this glob (`root`, `heat-*`).
    #[arg(long, value_name = "GLOB")]
    caller: Option<String>,
    /// Only jobs with at least one minion in this state (failed, timed_out, running, ...).
    #[arg(long, value_parser = parse_state)]
    state: Option<MinionJobState>,
    /// Only jobs published since then: a time ago (30m, 2d) or a UTC time (2026-11-26 14:00).
    #[arg(long, value_name = "WHEN", value_parser = parse_when)]
    since: Option<u64>,
    /// Only jobs published before then: a time ago (1h) or a UTC time (2026-11-26T16:00:00Z).
    #[arg(long, value_name = "WHEN", value_parser = parse_when)]
    until: Option<u64>,
}

pub(crate) async fn list(client: &Client, args: JobListArgs, format: Format) -> anyhow::Result<ExitCode> {
    let filter = JobFilter {
        function: args.function,
        target: args.target,
        caller: args.caller,
        state: args.state,
        since_ms: args.since,
        until_ms: args.until,
    };
    let jobs = client.jobs_filtered(args.limit, filter).await?;
    if format != Format::Table {
        output::print_document(format, &serde_json::to_value(&jobs)?);
        return Ok(ExitCode::SUCCESS);
    }
    let rows: Vec<Vec<String>> = jobs
        .iter()
        .map(|j| {
            let states: Vec<String> = j.states.iter().map(|(s, n)| format!("{n} {}", s.as_str())).collect();
            vec![
                j.jid.clone(),
                crate::admin::format_time(j.created_at_ms),
                j.function.clone(),
                shortened(&j.target.expr),
                j.caller.clone(),
                states.join(", "),
            ]
        })
        .collect();
    output::print_table(&["JID", "STARTED (UTC)", "FUNCTION", "TARGET", "CALLER", "MINIONS"], &rows);
    Ok(ExitCode::SUCCESS)
}

/// A target as a table cell: a long list is cut (`--out json` has it whole).
fn shortened(target: &str) -> String {
    const SHOWN: usize = 48;
    match target.char_indices().nth(SHOWN) {
        Some((at, _)) => format!("{}… ({} bytes)", &target[..at], target.len()),
        None => target.to_owned(),
    }
}

fn parse_state(text: &str) -> Result<MinionJobState, String> {
    MinionJobState::parse(text).ok_or_else(|| {
        format!(
            "{text:?} is not a job state (waiting, sent, running, returned, failed, timed_out, offline, cancelled, \
             expired, denied, queued, skipped, unknown)"
        )
    })
}

/// A point in time as Unix milliseconds: a duration ago, or a UTC date and time.
fn parse_when(text: &str) -> Result<u64, String> {
    if let Some(at) = halite_protocol::time::parse_utc(text) {
        return Ok(at);
    }
    let ago = crate::duration::parse(text)
        .map_err(|_| format!("{text:?} is neither a time ago (30m, 2d) nor a UTC time (2026-11-26 14:00)"))?;
    let now = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap_or_default();
    Ok(now.saturating_sub(ago).as_millis() as u64)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn times_are_a_while_ago_or_a_utc_time_and_states_are_named() {
        assert_eq!(parse_when("1970-01-02"), Ok(86_400_000));
        let unix_ms = || std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_millis() as u64;
        let before = unix_ms();
        let hour_ago = parse_when("1h").unwrap();
        let after = unix_ms();
        // Read between the two clock readings, an hour back.
        assert!((before - 3_600_000..=after - 3_600_000).contains(&hour_ago), "{hour_ago} vs {before}..{after}");
        assert!(parse_when("yesterday").unwrap_err().contains("neither a time ago"));
        assert_eq!(parse_state("timed_out"), Ok(MinionJobState::TimedOut));
        assert!(parse_state("broken").unwrap_err().contains("timed_out"));
    }
}
