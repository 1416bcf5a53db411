//! Daemon logging: one filter (from the config's `log`, `--log-level`, or `RUST_LOG`, which
//! wins when set), Salt's level names accepted, colour only on a terminal (and never with
//! `NO_COLOR`), and one line per event on stderr, as text or as JSON objects.

use std::fmt;
use std::io::IsTerminal;

use serde::Deserialize;
use tracing::field::{Field, Visit};
use tracing::{Event, Subscriber};
use tracing_subscriber::filter::Targets;
use tracing_subscriber::fmt::format::Writer;
use tracing_subscriber::fmt::{FmtContext, FormatEvent, FormatFields};
use tracing_subscriber::layer::SubscriberExt as _;
use tracing_subscriber::registry::LookupSpan;
use tracing_subscriber::util::SubscriberInitExt as _;

/// How log lines are written.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum LogFormat {
    /// Human-readable text.
    #[default]
    Text,
    /// One JSON object per line: `ts`, `level`, `target`, `message` and the event's fields.
    Json,
}

/// The level names accepted, with Salt's spellings as aliases.
const LEVELS: &[(&str, &str)] = &[
    ("trace", "trace"),
    ("all", "trace"),
    ("garbage", "trace"),
    ("debug", "debug"),
    ("profile", "debug"),
    ("info", "info"),
    ("warn", "warn"),
    ("warning", "warn"),
    ("error", "error"),
    ("critical", "error"),
    ("off", "off"),
    ("quiet", "off"),
];

/// Translates a filter (`info`, `warning`, `halite_master=debug,info`) into `tracing` terms,
/// refusing unknown level names with the list of valid ones (an unknown level used to log
/// nothing at all).
pub fn translate(spec: &str) -> Result<String, LogError> {
    let mut out = Vec::new();
    for directive in spec.split(',').map(str::trim).filter(|d| !d.is_empty()) {
        let (target, level) = match directive.rsplit_once('=') {
            Some((target, level)) => (Some(target), level),
            None if directive.chars().all(|c| c.is_ascii_alphabetic()) => (None, directive),
            // A bare target (`halite_master`) means everything from it.
            None => (Some(directive), "trace"),
        };
        let lower = level.to_ascii_lowercase();
        let Some((_, level)) = LEVELS.iter().find(|(name, _)| *name == lower) else {
            return Err(LogError::UnknownLevel(level.to_owned()));
        };
        out.push(match target {
            Some(target) => format!("{target}={level}"),
            None => (*level).to_owned(),
        });
    }
    if out.is_empty() {
        return Err(LogError::Empty);
    }
    // `debug` is about halite: the libraries' own debug lines (every SQL statement, every
    // HTTP frame) drown it; `trace` shows them too, as does naming a library's target.
    if out.iter().any(|d| d == "debug") {
        for quiet in DEPENDENCY_NOISE {
            if !out.iter().any(|d| d.starts_with(&format!("{quiet}="))) {
                out.push(format!("{quiet}=info"));
            }
        }
    }
    Ok(out.join(","))
}

/// Libraries whose debug lines a bare `debug` leaves out.
const DEPENDENCY_NOISE: &[&str] =
    &["sqlx", "hyper", "hyper_util", "h2", "rustls", "tower", "tower_http", "axum", "mio"];

/// The filter to use: `RUST_LOG` when set, else `spec` (the config's or `--log-level`). Filters
/// are per-target levels (`translate` accepts nothing else), so `Targets` is the whole filter:
/// no regex engine in the daemons for it.
pub fn filter(spec: &str) -> Result<Targets, LogError> {
    let chosen = match std::env::var("RUST_LOG") {
        Ok(env) if !env.trim().is_empty() => translate(&env).map_err(|e| LogError::Env(Box::new(e)))?,
        _ => translate(spec)?,
    };
    chosen.parse::<Targets>().map_err(|source| LogError::Filter { filter: chosen, source })
}

/// Installs the process's logger on stderr.
pub fn init(spec: &str, format: LogFormat) -> Result<(), LogError> {
    let filter = filter(spec)?;
    let lines = tracing_subscriber::fmt::layer().with_writer(std::io::stderr);
    let installed = match format {
        LogFormat::Text => {
            let colour = std::io::stderr().is_terminal() && std::env::var_os("NO_COLOR").is_none();
            tracing_subscriber::registry().with(lines.with_ansi(colour)).with(filter).try_init()
        }
        LogFormat::Json => {
            tracing_subscriber::registry().with(lines.with_ansi(false).event_format(JsonLines)).with(filter).try_init()
        }
    };
    installed.map_err(LogError::Install)
}

/// Why a log filter was refused or the logger could not be installed.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum LogError {
    /// A level name that is neither `tracing`'s nor Salt's.
    #[error(
        "unknown log level {0:?}: use trace, debug, info, warn (or warning), error (or critical) or off \
         (or quiet), optionally per target as in \"halite_master=debug,info\""
    )]
    UnknownLevel(String),
    /// No directive at all.
    #[error("empty log level")]
    Empty,
    /// `RUST_LOG` is set and invalid.
    #[error("RUST_LOG: {0}")]
    Env(Box<LogError>),
    /// The translated filter did not parse.
    #[error("log filter {filter:?}: {source}")]
    Filter {
        /// The filter, in `tracing` terms.
        filter: String,
        /// Why.
        source: tracing_subscriber::filter::ParseError,
    },
    /// Another logger is already installed.
    #[error("installing the logger: {0}")]
    Install(tracing_subscriber::util::TryInitError),
}

/// Formats each event as one JSON object on one line.
struct JsonLines;

impl<S, N> FormatEvent<S, N> for JsonLines
where
    S: Subscriber + for<'a> LookupSpan<'a>,
    N: for<'a> FormatFields<'a> + 'static,
{
    fn format_event(&self, _: &FmtContext<'_, S, N>, mut writer: Writer<'_>, event: &Event<'_>) -> fmt::Result {
        let now_micros = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| u64::try_from(d.as_micros()).unwrap_or(u64::MAX));
        let meta = event.metadata();
        let mut line = serde_json::Map::new();
        line.insert("ts".into(), halite_protocol::time::iso8601_utc_micros(now_micros).into());
        line.insert("level".into(), meta.level().as_str().to_ascii_lowercase().into());
        line.insert("target".into(), meta.target().into());
        event.record(&mut Fields(&mut line));
        writeln!(writer, "{}", serde_json::Value::Object(line))
    }
}

/// Collects an event's fields into the JSON object (`message` for the message itself).
struct Fields<'a>(&'a mut serde_json::Map<String, serde_json::Value>);

impl Visit for Fields<'_> {
    fn record_str(&mut self, field: &Field, value: &str) {
        self.0.insert(field.name().into(), value.into());
    }
    fn record_i64(&mut self, field: &Field, value: i64) {
        self.0.insert(field.name().into(), value.into());
    }
    fn record_u64(&mut self, field: &Field, value: u64) {
        self.0.insert(field.name().into(), value.into());
    }
    fn record_bool(&mut self, field: &Field, value: bool) {
        self.0.insert(field.name().into(), value.into());
    }
    fn record_debug(&mut self, field: &Field, value: &dyn fmt::Debug) {
        self.0.insert(field.name().into(), format!("{value:?}").into());
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn salt_level_names_are_accepted_and_unknown_ones_named() {
        assert_eq!(translate("warning").unwrap(), "warn");
        assert_eq!(translate("CRITICAL").unwrap(), "error");
        assert_eq!(translate("halite_master=debug, info").unwrap(), "halite_master=debug,info");
        let debug = translate("debug").unwrap();
        assert!(debug.starts_with("debug,") && debug.contains("sqlx=info"), "libraries stay quiet at debug: {debug}");
        assert_eq!(translate("trace").unwrap(), "trace", "trace shows everything");
        assert!(!translate("debug,sqlx=debug").unwrap().contains("sqlx=info"), "named, a library is heard");
        assert_eq!(translate("quiet").unwrap(), "off");
        let error = translate("loud").unwrap_err().to_string();
        assert!(error.contains("\"loud\"") && error.contains("warning"), "{error}");
        assert!(translate("halite_master=verbose").is_err());
        assert!(translate("").is_err());
    }
}
