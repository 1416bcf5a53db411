//! `halite-master`: the master daemon.

use std::path::PathBuf;

use anyhow::Context;
use clap::Parser;
use halite_master::config::{MasterConfig, DEFAULT_PATH};

#[path = "halite-master/man.rs"]
mod man;

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
    /// Begin with an empty SQLite store although this master ran before and its database is
    /// missing or empty (without it, such a start is refused).
    #[arg(long)]
    init: bool,
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
    /// A cluster key certifying each master's own key (minions pin the cluster key).
    #[command(subcommand)]
    Cluster(ClusterCommand),
    /// Repairs the tenants of the store. Stop the masters first.
    #[command(subcommand)]
    Tenant(TenantCommand),
    /// Print this program's man page (roff); with --dir, write it and one page per command
    /// into DIR, as packages install them.
    #[command(hide = true)]
    Man {
        /// Write every page (halite-master.8, halite-master-cluster-init.8, ...) into this
        /// directory.
        #[arg(long, value_name = "DIR")]
        dir: Option<PathBuf>,
    },
}

#[derive(clap::Subcommand)]
enum TenantCommand {
    /// Gives the tenant OLD the name NEW (without '-') in every principal confined to it: a
    /// store holding tenants whose names overlap (`acme` and `acme-dev`) is served again once
    /// every such tenant is renamed. Its minions' ids (OLD-...) are not changed: re-enroll them
    /// as NEW-... for the tenant to reach them.
    Rename {
        /// The tenant's name now.
        old: String,
        /// Its new name: an id without '-'.
        new: String,
    },
}

#[derive(clap::Subcommand)]
enum ClusterCommand {
    /// Creates the cluster key in DIR: cluster.key (keep it offline) and cluster.pub (what
    /// minions and clients pin, as master_key).
    Init {
        /// Where to write them.
        dir: PathBuf,
    },
    /// Certifies this master's key and id with the cluster key, into state_dir/master.cert.
    Certify {
        /// The cluster's secret key file.
        #[arg(long, value_name = "FILE")]
        cluster_key: PathBuf,
    },
    /// Prints the revocation of a master's key, to add to every master's revoked_masters.
    Revoke {
        /// The cluster's secret key file.
        #[arg(long, value_name = "FILE")]
        cluster_key: PathBuf,
        /// The retired master's master.pub.
        master_pub: PathBuf,
    },
}

fn main() -> std::process::ExitCode {
    let cli = Cli::parse();
    match run(cli) {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(error) => {
            eprintln!(
                "halite-master: {}",
                halite_transport::error_text::one_line(error.chain().map(|e| e.to_string()))
            );
            std::process::ExitCode::FAILURE
        }
    }
}

fn run(cli: Cli) -> anyhow::Result<()> {
    // The cluster key's own commands (and the man page) need no master config.
    match &cli.command {
        Some(Command::Man { dir }) => return man::run(dir.as_deref()),
        Some(Command::Cluster(ClusterCommand::Init { dir })) => {
            let (path, key) = halite_master::init_cluster_key(dir)?;
            println!("cluster key created; minions and clients pin {} ({})", path.display(), key.fingerprint());
            return Ok(());
        }
        Some(Command::Cluster(ClusterCommand::Revoke { cluster_key, master_pub })) => {
            println!("{}", halite_master::revoke(cluster_key, master_pub)?);
            return Ok(());
        }
        _ => {}
    }
    let mut config = MasterConfig::load(&cli.config)?;
    config.accept_wal_loss = cli.accept_wal_loss;
    config.init = cli.init;
    let level = cli.log_level.as_deref().unwrap_or(&config.log);
    halite_transport::logging::init(level, config.log_format).map_err(anyhow::Error::msg).context("log")?;
    // Every minion is a connection: use all the descriptors the hard limit allows.
    match halite_transport::raise_open_files(None) {
        Ok(limit) => tracing::debug!(limit, "open-file limit"),
        Err(error) => tracing::warn!(%error, "open-file limit unchanged"),
    }
    // Before the runtime's threads exist: large blocks go back to the system when freed.
    halite_master::memory::return_freed_memory();
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
        Some(Command::Tenant(TenantCommand::Rename { old, new })) => {
            let renamed = runtime.block_on(halite_master::rename_tenant(&config, &old, &new))?;
            if renamed.is_empty() {
                anyhow::bail!("no principal is confined to tenant {old:?}");
            }
            println!("tenant {old} renamed {new} for principals {}", renamed.join(", "));
        }
        Some(Command::Cluster(ClusterCommand::Certify { cluster_key })) => {
            let path = halite_master::certify(&config, &cluster_key)?;
            println!("certificate written to {}; restart the master to present it", path.display());
        }
        Some(Command::Cluster(ClusterCommand::Init { .. } | ClusterCommand::Revoke { .. }) | Command::Man { .. }) => {}
    }
    Ok(())
}
