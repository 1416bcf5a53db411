//! `halite-minion`: the minion daemon, and `call` for running a function locally.

use std::path::PathBuf;

use anyhow::Context as _;
use clap::{Parser, Subcommand};
use halite_minion::config::{MinionConfig, DEFAULT_PATH};

#[path = "halite-minion/man.rs"]
mod man;

/// The halite minion.
#[derive(Parser)]
#[command(version, about)]
struct Cli {
    /// Config file (TOML). A missing default file means all defaults.
    #[arg(short, long)]
    config: Option<PathBuf>,
    /// Log level or filter, instead of the config's `log` (Salt's level names work too).
    #[arg(long, global = true)]
    log_level: Option<String>,
    #[command(subcommand)]
    command: Option<Command>,
}

/// How `call` prints its result.
#[derive(Clone, Copy, clap::ValueEnum)]
enum CallOut {
    /// `{"local": ...}`, indented.
    Json,
    /// `{"local": ...}` on one line.
    Compact,
    /// The value itself, for shell scripts.
    Txt,
}

/// A local call's result as `out` asks.
fn render_call(out: CallOut, value: serde_json::Value) -> anyhow::Result<String> {
    let text = |v: &serde_json::Value| match v {
        serde_json::Value::String(s) => s.clone(),
        other => other.to_string(),
    };
    Ok(match out {
        CallOut::Json => format!("{}\n", serde_json::to_string_pretty(&serde_json::json!({ "local": value }))?),
        CallOut::Compact => format!("{}\n", serde_json::json!({ "local": value })),
        CallOut::Txt => match &value {
            serde_json::Value::Object(map) => map.iter().map(|(k, v)| format!("{k}: {}\n", text(v))).collect(),
            other => format!("{}\n", text(other)),
        },
    })
}

#[derive(Subcommand)]
enum Command {
    /// Run the daemon (the default).
    Run,
    /// Run a function locally without a master and print its result (as salt-call).
    Call {
        /// How to print the result: `json` (`{"local": ...}`, indented), `compact` (the same on
        /// one line) or `txt` (the value itself: a string as it is, an object one `key: value`
        /// line per key).
        #[arg(long, value_enum, default_value_t = CallOut::Json)]
        out: CallOut,
        /// Function, e.g. test.ping.
        function: String,
        /// Arguments: positional values and key=value pairs.
        args: Vec<String>,
    },
    /// Print the documentation of every built-in function as Markdown (docs/modules.md).
    Doc,
    /// Print this program's man page (roff); with --dir, write it and one page per command
    /// into DIR, as packages install them.
    #[command(hide = true)]
    Man {
        /// Write every page (halite-minion.8, halite-minion-call.8, ...) into this directory.
        #[arg(long, value_name = "DIR")]
        dir: Option<PathBuf>,
    },
}

fn main() -> std::process::ExitCode {
    let cli = Cli::parse();
    match run(cli) {
        Ok(code) => code,
        Err(error) => {
            eprintln!(
                "halite-minion: {}",
                halite_transport::error_text::one_line(error.chain().map(|e| e.to_string()))
            );
            std::process::ExitCode::FAILURE
        }
    }
}

/// Writes `text` to standard output; a reader that went away (`| head`) is not an error.
fn print_out(text: impl AsRef<[u8]>) -> std::io::Result<()> {
    use std::io::Write as _;
    let mut out = std::io::stdout().lock();
    match out.write_all(text.as_ref()).and_then(|()| out.flush()) {
        Err(error) if error.kind() == std::io::ErrorKind::BrokenPipe => Ok(()),
        other => other,
    }
}

fn load_config(path: Option<PathBuf>) -> anyhow::Result<MinionConfig> {
    match path {
        Some(path) => Ok(MinionConfig::load(&path)?),
        None if std::path::Path::new(DEFAULT_PATH).exists() => Ok(MinionConfig::load(DEFAULT_PATH.as_ref())?),
        None => Ok(MinionConfig::default()),
    }
}

fn run(cli: Cli) -> anyhow::Result<std::process::ExitCode> {
    match cli.command.unwrap_or(Command::Run) {
        Command::Man { dir } => {
            man::run(dir.as_deref())?;
            Ok(std::process::ExitCode::SUCCESS)
        }
        Command::Doc => {
            print_out(halite_modules::docs::render_markdown(&halite_modules::Registry::standard()))?;
            Ok(std::process::ExitCode::SUCCESS)
        }
        Command::Call { out, function, args } => {
            let config = load_config(cli.config)?;
            // Local calls are latency-sensitive: one thread, no logging set-up.
            let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build()?;
            let ret = runtime.block_on(halite_minion::call_local(&config, &function, &args));
            print_out(render_call(out, ret.outputs)?)?;
            Ok(if ret.success { std::process::ExitCode::SUCCESS } else { std::process::ExitCode::FAILURE })
        }
        Command::Run => {
            let config = load_config(cli.config)?;
            let level = cli.log_level.as_deref().unwrap_or(&config.log);
            halite_transport::logging::init(level, config.log_format).map_err(anyhow::Error::msg).context("log")?;
            let runtime = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build()?;
            runtime.block_on(halite_minion::run(config, halite_transport::shutdown_signal()))?;
            Ok(std::process::ExitCode::SUCCESS)
        }
    }
}
