//! `halite`: the admin CLI.
//!
//! Exit codes: 0 success (for `run`: every targeted minion returned successfully); 1 an error
//! (bad input, master unreachable or refusing, no minion matched); 2 invalid command-line usage;
//! 3 `run` finished but at least one minion failed, timed out, was offline, cancelled or expired.

mod admin;
mod apply;
mod audit;
mod complete;
mod demo;
mod deploy;
mod duration;
mod events;
mod grouped;
mod job_list;
mod man;
mod output;
mod plan_table;
mod principal;
mod rollout_args;
mod run;
mod target_args;

use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Args, Parser, Subcommand};
use halite_client::{Client, ClientConfig};

use crate::output::Format;

/// Exit code when some target did not succeed.
const EXIT_TARGETS_FAILED: u8 = 3;

/// halite: run named actions on minions.
#[derive(Parser)]
#[command(name = "halite", version, about, propagate_version = true)]
struct Cli {
    /// The master's config file (the CLI finds the master's address and keys through it).
    #[arg(short, long, global = true, env = "HALITE_CONFIG", default_value = "/etc/halite/master.toml")]
    config: PathBuf,
    /// Output format: table, json, yaml or ndjson (`halite audit export` takes the file it
    /// writes here).
    #[arg(long, global = true, default_value = "table", value_name = "FORMAT", value_parser = output::parse_out)]
    out: output::Out,
    /// Connect as this principal instead of root (with --key).
    #[arg(long, global = true, requires = "key", env = "HALITE_PRINCIPAL")]
    principal: Option<String>,
    /// The principal's secret key file.
    #[arg(long, global = true, env = "HALITE_KEY")]
    key: Option<PathBuf>,
    /// The master's address instead of the config file's; repeat it (or separate with commas)
    /// for a cluster's masters, tried in order. With --master-key, --principal and --key no
    /// config file is read: a remote client.
    #[arg(long = "master", global = true, env = "HALITE_MASTER", value_delimiter = ',', value_name = "HOST:PORT")]
    masters: Vec<String>,
    /// The master's public key: 64 hex digits, or its master.pub file.
    #[arg(long, global = true, env = "HALITE_MASTER_KEY", value_name = "HEX|FILE")]
    master_key: Option<String>,
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Run a function on the targeted minions and wait for every one of them.
    Run(run::RunArgs),
    /// Apply the plans the master keeps to the targeted minions (its top file's, or those named).
    Apply(apply::ApplyArgs),
    /// Manage minion keys and enrollment tokens.
    #[command(subcommand)]
    Key(admin::KeyCommand),
    /// Inspect minions.
    #[command(subcommand)]
    Minions(admin::MinionsCommand),
    /// Inspect and cancel jobs.
    #[command(subcommand)]
    Jobs(admin::JobsCommand),
    /// Stream events from the master's bus as they happen.
    Events(events::EventsArgs),
    /// Fire an event on the master's bus, as engine/<principal>/<tag> (what rollouts abort on).
    Fire(events::FireArgs),
    /// Manage client principals and their ACLs.
    #[command(subcommand)]
    Principal(principal::PrincipalCommand),
    /// The audit trail: list, export, verify.
    #[command(subcommand)]
    Audit(audit::AuditCommand),
    /// Software configs (OpenStack Heat's model): create, show, list, delete.
    #[command(subcommand)]
    Config(deploy::ConfigCommand),
    /// Deployments of configs to servers: create, show, list, delete, wait.
    #[command(subcommand)]
    Deployment(deploy::DeploymentCommand),
    /// Start a master and three minions in a temporary directory, run jobs, show results.
    Demo(DemoArgs),
    /// Print a shell completion script (bash, zsh, fish, elvish or powershell); bash's also
    /// completes minion ids and function names from the master.
    Completions {
        /// The shell.
        shell: clap_complete::Shell,
    },
    /// Minion ids or function names starting with PREFIX, from the master (for the bash
    /// completion script).
    #[command(name = "__complete", hide = true)]
    Complete {
        /// What to list.
        #[arg(value_enum)]
        what: complete::Completed,
        /// Only those starting with this.
        #[arg(default_value = "")]
        prefix: String,
    },
    /// Print this program's man page (roff); with --dir, write it and one page per command
    /// into DIR, as packages install them; with --install, where `man halite` finds them
    /// (a page of its own would only repeat this).
    #[command(hide = true)]
    Man {
        /// Write every page (halite.1, halite-run.1, ...) into this directory.
        #[arg(long, value_name = "DIR", conflicts_with = "install")]
        dir: Option<PathBuf>,
        /// Install every page beside this program (BIN/../share/man/man1: ~/.cargo/share/man
        /// after `cargo install`, which man finds through PATH).
        #[arg(long)]
        install: bool,
    },
}

#[derive(Args)]
struct DemoArgs {
    /// Keep the temporary directory (its path is printed).
    #[arg(long)]
    keep: bool,
}

fn main() -> ExitCode {
    restore_sigpipe();
    let cli = Cli::parse();
    let runtime = match tokio::runtime::Builder::new_current_thread().enable_all().build() {
        Ok(runtime) => runtime,
        Err(error) => {
            eprintln!("halite: {error}");
            return ExitCode::FAILURE;
        }
    };
    match runtime.block_on(dispatch(cli)) {
        Ok(code) => code,
        Err(error) => {
            eprintln!("halite: {}", halite_transport::error_text::one_line(error.chain().map(|e| e.to_string())));
            ExitCode::FAILURE
        }
    }
}

/// Who connects where: a principal with its key (else root, whose key is on the master's
/// host), to the masters given (else the one the config file names), pinning the key given
/// (else the config's master's).
fn client_config(cli: &Cli) -> anyhow::Result<ClientConfig> {
    let remote = !cli.masters.is_empty() && cli.master_key.is_some();
    let mut config = match (&cli.principal, &cli.key) {
        (Some(name), Some(key)) if remote => {
            let master_key = ClientConfig::parse_master_key(cli.master_key.as_deref().unwrap_or_default())?;
            ClientConfig::principal(Vec::new(), master_key, halite_transport::keyfile::read_secret(key)?, name)
        }
        (Some(name), Some(key)) => {
            let (master, master_key, _) = ClientConfig::locate_master(&cli.config)?;
            ClientConfig::principal(vec![master], master_key, halite_transport::keyfile::read_secret(key)?, name)
        }
        _ if remote => anyhow::bail!(
            "--master with --master-key connects from elsewhere: name the principal with --principal and --key \
             (root's key stays on the master's host)"
        ),
        _ => ClientConfig::from_master_config(&cli.config)?,
    };
    if !cli.masters.is_empty() {
        config.masters = cli.masters.clone();
    }
    if let Some(key) = &cli.master_key {
        config.master_key = ClientConfig::parse_master_key(key)?;
    }
    Ok(config)
}

async fn dispatch(mut cli: Cli) -> anyhow::Result<ExitCode> {
    // `halite audit export --out FILE`: the file the export writes; anywhere else `--out`
    // names a format.
    let format = match (&cli.out, &mut cli.command) {
        (output::Out::Format(format), _) => *format,
        (output::Out::File(path), Command::Audit(audit::AuditCommand::Export { file })) => {
            if file.is_some() {
                anyhow::bail!("--out and --file both name the file to write: give one");
            }
            *file = Some(path.clone());
            Format::Table
        }
        (output::Out::File(path), _) => anyhow::bail!(
            "--out {}: expected table, json, yaml, ndjson or txt (only `halite audit export --out FILE` writes a file)",
            path.display()
        ),
    };
    match &cli.command {
        Command::Demo(args) => return demo::run(args.keep).await,
        Command::Completions { shell } => {
            use clap::CommandFactory;
            let mut script = Vec::new();
            clap_complete::generate(*shell, &mut Cli::command(), "halite", &mut script);
            let script = String::from_utf8_lossy(&script);
            match shell {
                clap_complete::Shell::Bash => print!("{}", complete::bash(&script)),
                _ => print!("{script}"),
            }
            return Ok(ExitCode::SUCCESS);
        }
        Command::Man { dir, install: false } => {
            man::run(dir.as_deref())?;
            return Ok(ExitCode::SUCCESS);
        }
        Command::Man { install: true, .. } => {
            let dir = man::install()?;
            println!("man pages written to {}; `man halite` reads them", dir.display());
            return Ok(ExitCode::SUCCESS);
        }
        // An exported file is checked here, without a master.
        Command::Audit(audit::AuditCommand::Verify(args)) if args.file.is_some() => return audit::verify_file(args),
        _ => {}
    }
    let mut config = client_config(&cli)?;
    // `halite events` streams for as long as it runs and goes on across a master's restart; a
    // `run` (or `apply`) waiting for its job carries it to the next master that answers (the job is in the
    // store every master shares) for up to a minute; other commands report a lost master at
    // once, as Salt's CLI does.
    config.reconnect = match &cli.command {
        Command::Events(_) => true,
        Command::Run(args) => !args.detach,
        Command::Apply(args) => !args.detach,
        _ => false,
    };
    if matches!(cli.command, Command::Run(_) | Command::Apply(_)) {
        config.reconnect_for = Some(std::time::Duration::from_secs(60));
    }
    // A completion waits on the shell's user: a master that does not answer soon gives none.
    if matches!(cli.command, Command::Complete { .. }) {
        config.connect_timeout = std::time::Duration::from_secs(2);
        config.request_timeout = std::time::Duration::from_secs(2);
    }
    let client = Client::connect(config).await?;
    match cli.command {
        Command::Run(args) => run::run(&client, args, format).await,
        Command::Apply(args) => apply::apply(&client, args, format).await,
        Command::Key(command) => admin::key(&client, command, format).await,
        Command::Minions(command) => admin::minions(&client, command, format).await,
        Command::Jobs(command) => admin::jobs(&client, command, format).await,
        Command::Events(args) => events::run(&client, args, format).await,
        Command::Fire(args) => events::fire(&client, args, format).await,
        Command::Principal(command) => principal::run(&client, command, format).await,
        Command::Audit(command) => audit::run(&client, command, format).await,
        Command::Config(command) => deploy::config(&client, command, format).await,
        Command::Deployment(command) => deploy::deployment(&client, command, format).await,
        Command::Complete { what, prefix } => {
            complete::print(&client, what, &prefix).await;
            Ok(ExitCode::SUCCESS)
        }
        Command::Demo(_) | Command::Completions { .. } | Command::Man { .. } => unreachable!("handled above"),
    }
}

/// `halite jobs list | head`: when the reader goes away, end quietly like any Unix filter
/// instead of panicking on the failed write (Rust ignores SIGPIPE by default).
fn restore_sigpipe() {
    use nix::sys::signal::{signal, SigHandler, Signal};
    #[allow(unsafe_code)]
    // SAFETY: called first thing in main, before any thread exists; SIG_DFL installs no handler
    // code, so nothing can run in signal context.
    unsafe {
        let _ = signal(Signal::SIGPIPE, SigHandler::SigDfl);
    }
}
