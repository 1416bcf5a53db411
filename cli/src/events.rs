//! `halite events`: stream bus events as they happen.

use std::process::ExitCode;

use clap::Args;
use halite_client::Client;
use serde_json::json;

use crate::output::{self, paint, Format};

#[derive(Args)]
pub(crate) struct EventsArgs {
    /// Tag globs (default: everything this principal may see).
    patterns: Vec<String>,
    /// Exit after this many events.
    #[arg(long)]
    count: Option<u64>,
}

#[derive(Args)]
pub(crate) struct FireArgs {
    /// The tag, under engine/<principal>/ (e.g. `alarm/latency`).
    tag: String,
    /// The event's data, as JSON (default null).
    data: Option<String>,
}

/// `halite fire TAG [DATA]`: one event on the bus; prints its full tag.
pub(crate) async fn fire(client: &Client, args: FireArgs, format: Format) -> anyhow::Result<ExitCode> {
    let data = match args.data.as_deref() {
        None => serde_json::Value::Null,
        Some(text) => {
            serde_json::from_str(text).map_err(|e| anyhow::anyhow!("the event's data is not JSON ({e}): {text}"))?
        }
    };
    let tag = client.fire_event(&args.tag, data).await?;
    match format {
        Format::Table => println!("{tag}"),
        _ => output::print_document(format, &json!({ "tag": tag })),
    }
    Ok(ExitCode::SUCCESS)
}

pub(crate) async fn run(client: &Client, args: EventsArgs, format: Format) -> anyhow::Result<ExitCode> {
    let patterns = if args.patterns.is_empty() { vec!["*".to_owned()] } else { args.patterns };
    let mut events = client.subscribe(patterns).await?;
    let mut seen = 0u64;
    while args.count.is_none_or(|n| seen < n) {
        let event = events.next_event().await?;
        // When this command received it (the bus carries no time of its own).
        let at = halite_protocol::time::iso8601_utc(now_ms());
        match format {
            Format::Table => println!("{at}  {}  {}", paint(&event.tag, "36"), output::compact(&event.data)),
            _ => output::print_document(
                Format::Ndjson,
                &json!({ "tag": event.tag, "data": event.data, "received_at": at }),
            ),
        }
        seen += 1;
    }
    Ok(ExitCode::SUCCESS)
}

fn now_ms() -> u64 {
    let since = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap_or_default();
    u64::try_from(since.as_millis()).unwrap_or(u64::MAX)
}
