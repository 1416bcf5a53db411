//! `halite-master`: the master daemon.

use std::path::PathBuf;

use anyhow::Context;
use clap::Parser;
use halite_master::config::{MasterConfig, DEFAULT_PATH};

/// The halite master daemon.
#[derive(Parser)]
#[command(version, about)]
struct Cli {
    /// Config file (TOML).
    #[arg(short, long, default_value = DEFAULT_PATH)]
    config: PathBuf,
    /// Start even if the database's write-ahead log (`master.db-wal`) is missing after an
    /// unclean stop, or damaged, going on with what SQLite can read.
    #[arg(long)]
    accept_wal_loss: bool,
    /// Log level or filter, instead of the config's `log` (Salt's level names work too).
    #[arg(long)]
    log_level: Option<String>,
}

fn main() -> std::process::ExitCode {
    let cli = Cli::parse();
    match run(cli) {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(error) => {
            eprintln!("halite-master: {error:#}");
            std::process::ExitCode::FAILURE
        }
    }
}

fn run(cli: Cli) -> anyhow::Result<()> {
    let mut config = MasterConfig::load(&cli.config)?;
    config.accept_wal_loss = cli.accept_wal_loss;
    let level = cli.log_level.as_deref().unwrap_or(&config.log);
    halite_transport::logging::init(level, config.log_format).map_err(anyhow::Error::msg).context("log")?;
    // Every minion is a connection: use all the descriptors the hard limit allows.
    match halite_transport::raise_open_files(None) {
        Ok(limit) => tracing::debug!(limit, "open-file limit"),
        Err(error) => tracing::warn!(%error, "open-file limit unchanged"),
    }
    let runtime = tokio::runtime::Builder::new_multi_thread().enable_all().build()?;
    runtime.block_on(async move { halite_master::run(config, halite_transport::shutdown_signal()).await })?;
    Ok(())
}
