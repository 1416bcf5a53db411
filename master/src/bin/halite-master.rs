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
    #[arg(long, global = true)]
    log_level: Option<String>,
    #[command(subcommand)]
    command: Option<Command>,
}

#[derive(clap::Subcommand)]
enum Command {
    /// Copies this master's SQLite database (from its state directory) into an empty
    /// PostgreSQL database; then set `[store] url` to it. Stop the master first.
    MigrateStore {
        /// The target, `postgres://user@host:port/database` (PG* variables fill what is left out).
        #[arg(long, value_name = "URL")]
        to: String,
        /// A file whose first line is the target's password.
        #[arg(long, value_name = "FILE")]
        password_file: Option<PathBuf>,
    },
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
    match cli.command {
        None => runtime.block_on(halite_master::run(config, halite_transport::shutdown_signal()))?,
        Some(Command::MigrateStore { to, password_file }) => {
            let target = halite_master::store::StoreConfig { url: Some(to), password_file };
            let copied = runtime.block_on(halite_master::migrate_store(&config, &target))?;
            for (table, rows) in copied {
                println!("{table:<18} {rows:>10} rows");
            }
            println!("copied to {}; set [store] url in the config to use it", target.describe());
        }
    }
    Ok(())
}
