//! `halite key`, `halite minions`, `halite jobs`.

use std::io::IsTerminal;
use std::path::PathBuf;
use std::process::ExitCode;

use clap::Subcommand;
use halite_client::Client;
use halite_protocol::enrollment;
use halite_protocol::identity::IdentityKey;
use halite_protocol::message::{JobDetail, KeyState, RequestBody, ResponseBody};
use halite_transport::keyfile;
use serde_json::json;

use crate::duration;

use crate::output::{self, paint, Format};
use crate::run::{result_value, state_colour};

#[derive(Subcommand)]
pub(crate) enum KeyCommand {
    /// List keys (all, or those whose id matches a glob).
    List {
        /// Id glob.
        #[arg(default_value = "*")]
        pattern: String,
        /// Only keys in this state (as Salt's `salt-key -l`); repeat for several.
        #[arg(long, value_enum)]
        state: Vec<KeyStateArg>,
    },
    /// Accept pending (or rejected) keys.
    Accept(Selection),
    /// Reject pending or accepted keys; live minions are disconnected at once.
    Reject(Selection),
    /// Delete keys in any state; live minions are disconnected at once. On a terminal, the keys
    /// are listed and you are asked first, as Salt's `salt-key -d` asks.
    Delete(Selection),
    /// Show fingerprints (the master's first, then the keys matching a glob).
    Fingerprint {
        /// Id glob.
        #[arg(default_value = "*")]
        pattern: String,
    },
    /// Generate a key pair for a minion and register it as accepted (preseeding).
    Gen {
        /// Minion id.
        #[arg(long)]
        id: String,
        /// Directory to write `<id>.key` (install as the minion's state_dir/minion.key) and `<id>.pub`.
        #[arg(long)]
        dir: PathBuf,
    },
    /// Enrollment tokens.
    #[command(subcommand)]
    Token(TokenCommand),
}

/// A key state, as `--state` names it.
#[derive(Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub(crate) enum KeyStateArg {
    Accepted,
    Pending,
    Rejected,
    Denied,
}

impl KeyStateArg {
    fn holds(self, state: KeyState) -> bool {
        matches!(
            (self, state),
            (KeyStateArg::Accepted, KeyState::Accepted)
                | (KeyStateArg::Pending, KeyState::Pending)
                | (KeyStateArg::Rejected, KeyState::Rejected)
                | (KeyStateArg::Denied, KeyState::Denied)
        )
    }
}

#[derive(clap::Args)]
pub(crate) struct Selection {
    /// Id glob.
    #[arg(required_unless_present = "all")]
    pattern: Option<String>,
    /// Every key in a state the command applies to.
    #[arg(long, conflicts_with = "pattern")]
    all: bool,
    /// Do not ask (Salt's `salt-key -y`): `key delete` asks on a terminal otherwise; `accept`
    /// and `reject` never ask.
    #[arg(short = 'y', long)]
    yes: bool,
}

impl Selection {
    fn pattern(self) -> String {
        self.pattern.unwrap_or_else(|| "*".into())
    }
}

#[derive(Subcommand)]
pub(crate) enum TokenCommand {
    /// Create a one-time enrollment token bound to a minion id.
    Create {
        /// The minion id the token enrolls.
        #[arg(long)]
        minion: String,
        /// How long the token is valid.
        #[arg(long, default_value = "1h", value_parser = duration::parse)]
        ttl: std::time::Duration,
        /// Print a cloud-init user_data document that writes the minion's enrollment file.
        #[arg(long)]
        user_data: bool,
        /// The master address minions should use (default: the address the master listens on);
        /// repeat it for a cluster's masters.
        #[arg(long)]
        master_address: Vec<String>,
        /// Let the token replace the minion's accepted key (a reinstalled server); without it,
        /// a token for an id whose key is accepted is refused.
        #[arg(long)]
        replace: bool,
    },
    /// List enrollment tokens: id, minion, expiry, whether used (never the tokens themselves).
    List,
    /// Revoke an enrollment token by its id (from `halite key token list`).
    Revoke {
        /// Token id.
        id: String,
    },
}

#[derive(Subcommand)]
pub(crate) enum MinionsCommand {
    /// List minions with an accepted key, their presence and a grains summary.
    List {
        /// Id glob.
        #[arg(default_value = "*")]
        pattern: String,
    },
}

#[derive(Subcommand)]
pub(crate) enum JobsCommand {
    /// The most recent jobs: when each started, who published it, how its minions stand;
    /// filtered by function, target, caller, state and time.
    List(crate::job_list::JobListArgs),
    /// One job with every targeted minion's state and return.
    Show {
        /// Job id.
        jid: String,
    },
    /// Cancel a running job (a rollout starts no more targets).
    Cancel {
        /// Job id.
        jid: String,
    },
    /// Pause a job's rollout: running targets finish, no new one starts.
    Pause {
        /// Job id.
        jid: String,
    },
    /// Resume a paused rollout.
    Resume {
        /// Job id.
        jid: String,
    },
}

async fn keys_changed(client: &Client, body: RequestBody, verb: &str, format: Format) -> anyhow::Result<ExitCode> {
    let pattern = match &body {
        RequestBody::KeyAccept { pattern }
        | RequestBody::KeyReject { pattern }
        | RequestBody::KeyDelete { pattern } => pattern.clone(),
        _ => String::new(),
    };
    let ResponseBody::Changed(ids) = client.request(body).await? else { anyhow::bail!("unexpected answer") };
    // Nothing changed: fine when the keys are already so, an error a script should see when
    // no key matches at all (a typo).
    let matched_none = ids.is_empty() && {
        let ResponseBody::Keys(keys) = client.request(RequestBody::KeyList { pattern: pattern.clone() }).await? else {
            anyhow::bail!("unexpected answer")
        };
        keys.is_empty()
    };
    match format {
        Format::Table if matched_none => eprintln!("halite: no key matches {pattern:?}; nothing {verb}"),
        Format::Table if ids.is_empty() => println!("nothing to do: the keys matching {pattern:?} are already {verb}"),
        Format::Table => ids.iter().for_each(|id| println!("{verb} {id}")),
        _ => output::print_document(format, &json!({ verb: ids })),
    }
    Ok(if matched_none { ExitCode::FAILURE } else { ExitCode::SUCCESS })
}

/// The keys matching `pattern`, those in one of `states` (every state when none is given).
async fn list_keys(
    client: &Client,
    pattern: String,
    states: &[KeyStateArg],
    format: Format,
) -> anyhow::Result<ExitCode> {
    let ResponseBody::Keys(mut keys) = client.request(RequestBody::KeyList { pattern }).await? else {
        anyhow::bail!("unexpected answer")
    };
    if !states.is_empty() {
        keys.retain(|k| states.iter().any(|s| s.holds(k.state)));
    }
    if format != Format::Table {
        output::print_document(format, &serde_json::to_value(&keys)?);
        return Ok(ExitCode::SUCCESS);
    }
    let colour = |state: KeyState| match state {
        KeyState::Accepted => "32",
        KeyState::Pending => "33",
        KeyState::Rejected | KeyState::Denied => "31",
    };
    let rows: Vec<Vec<String>> = keys
        .iter()
        .map(|k| vec![k.id.clone(), paint(k.state.as_str(), colour(k.state)), k.fingerprint.clone()])
        .collect();
    output::print_table(&["ID", "STATE", "FINGERPRINT"], &rows);
    Ok(ExitCode::SUCCESS)
}

/// Asks on the terminal; yes only for an answer starting with y.
fn confirmed(question: &str) -> anyhow::Result<bool> {
    use std::io::Write;
    eprint!("{question}");
    std::io::stderr().flush()?;
    let mut answer = String::new();
    std::io::stdin().read_line(&mut answer)?;
    Ok(answer.trim_start().to_ascii_lowercase().starts_with('y'))
}

pub(crate) async fn key(client: &Client, command: KeyCommand, format: Format) -> anyhow::Result<ExitCode> {
    if matches!(command, KeyCommand::Fingerprint { .. }) && format == Format::Table {
        println!("master: {}\n", client.master_key().fingerprint());
    }
    match command {
        KeyCommand::List { pattern, state } => list_keys(client, pattern, &state, format).await,
        KeyCommand::Fingerprint { pattern } => list_keys(client, pattern, &[], format).await,
        KeyCommand::Accept(s) => {
            keys_changed(client, RequestBody::KeyAccept { pattern: s.pattern() }, "accepted", format).await
        }
        KeyCommand::Reject(s) => {
            keys_changed(client, RequestBody::KeyReject { pattern: s.pattern() }, "rejected", format).await
        }
        KeyCommand::Delete(selection) => {
            let yes = selection.yes;
            let pattern = selection.pattern();
            if !yes && std::io::stdin().is_terminal() && std::io::stderr().is_terminal() {
                let ResponseBody::Keys(keys) =
                    client.request(RequestBody::KeyList { pattern: pattern.clone() }).await?
                else {
                    anyhow::bail!("unexpected answer")
                };
                if !keys.is_empty() {
                    eprintln!("The following keys are going to be deleted:");
                    for key in &keys {
                        eprintln!("  {} ({})", key.id, key.state.as_str());
                    }
                    if !confirmed("Proceed? [y/N] ")? {
                        eprintln!("nothing deleted");
                        return Ok(ExitCode::from(1));
                    }
                }
            }
            keys_changed(client, RequestBody::KeyDelete { pattern }, "deleted", format).await
        }
        KeyCommand::Gen { id, dir: out } => {
            halite_protocol::id::validate(&id)?;
            std::fs::create_dir_all(&out)?;
            let key = IdentityKey::generate_os();
            let secret = out.join(format!("{id}.key"));
            keyfile::write_secret(&secret, &key)?;
            keyfile::write_public(&out.join(format!("{id}.pub")), &key.public())?;
            let body = RequestBody::KeyPreseed { id: id.clone(), public_key: key.public().as_bytes().to_vec() };
            client.request(body).await?;
            match format {
                Format::Table => {
                    println!("accepted {id} ({})", key.public().fingerprint());
                    println!("install {} as the minion's <state_dir>/minion.key (mode 0600)", secret.display());
                }
                _ => output::print_document(
                    format,
                    &json!({ "id": id, "key_file": secret, "fingerprint": key.public().fingerprint() }),
                ),
            }
            Ok(ExitCode::SUCCESS)
        }
        KeyCommand::Token(TokenCommand::List) => {
            let ResponseBody::Tokens(tokens) = client.request(RequestBody::TokenList).await? else {
                anyhow::bail!("unexpected answer")
            };
            output::print_list(format, &tokens, &["ID", "MINION", "EXPIRES", "STATE"], |t| {
                let used = if t.used { "used" } else { "unused" };
                vec![t.id.clone(), t.minion.clone(), format_time(t.expires_at_ms), used.to_owned()]
            })?;
            Ok(ExitCode::SUCCESS)
        }
        KeyCommand::Token(TokenCommand::Revoke { id }) => {
            client.request(RequestBody::TokenRevoke { id: id.clone() }).await?;
            match format {
                Format::Table => println!("revoked {id}"),
                _ => output::print_document(format, &json!({ "revoked": id })),
            }
            Ok(ExitCode::SUCCESS)
        }
        KeyCommand::Token(TokenCommand::Create { minion, ttl, user_data, master_address, replace }) => {
            let given = !master_address.is_empty();
            let enrollment = client.create_enrollment(&minion, ttl, &master_address, replace).await?;
            if user_data && !given && enrollment.masters.iter().any(|m| enrollment::only_this_host(m)) {
                eprintln!(
                    "warning: this user_data points guests at {}, which only this host can reach; \
                     pass --master-address with the address guests use",
                    enrollment.masters[0]
                );
            }
            let master = match enrollment.masters.as_slice() {
                [one] => json!(one),
                many => json!(many),
            };
            if user_data {
                print!("{}", enrollment.user_data);
            } else if format == Format::Table {
                println!("{}", enrollment.token);
            } else {
                output::print_document(
                    format,
                    &json!({ "token": enrollment.token, "minion": enrollment.minion,
                             "expires_at_ms": enrollment.expires_at_ms, "master": master,
                             "master_key": enrollment.master_key }),
                );
            }
            Ok(ExitCode::SUCCESS)
        }
    }
}

pub(crate) async fn minions(client: &Client, command: MinionsCommand, format: Format) -> anyhow::Result<ExitCode> {
    let MinionsCommand::List { pattern } = command;
    let minions = client.minions(&pattern).await?;
    if format != Format::Table {
        output::print_document(format, &serde_json::to_value(&minions)?);
        return Ok(ExitCode::SUCCESS);
    }
    let grain = |m: &halite_protocol::message::MinionInfo, key: &str| {
        m.grains.get(key).map(output::compact).unwrap_or_default()
    };
    let rows: Vec<Vec<String>> = minions
        .iter()
        .map(|m| {
            vec![
                m.id.clone(),
                presence(m),
                format_time(m.last_seen_ms),
                format!("{} {}", grain(m, "os"), grain(m, "osrelease")).trim().to_owned(),
                grain(m, "kernelrelease"),
                grain(m, "num_cpus"),
                m.grains.get("ipv4").and_then(|v| v.as_array()).map_or(String::new(), |ips| {
                    ips.iter()
                        .filter_map(|ip| ip.as_str())
                        .filter(|ip| *ip != "127.0.0.1")
                        .collect::<Vec<_>>()
                        .join(",")
                }),
            ]
        })
        .collect();
    output::print_table(&["ID", "PRESENCE", "LAST SEEN (UTC)", "OS", "KERNEL", "CPUS", "IPV4"], &rows);
    Ok(ExitCode::SUCCESS)
}

/// Where a minion's session is: here, on another master of the cluster, or nowhere.
fn presence(minion: &halite_protocol::message::MinionInfo) -> String {
    if minion.connected {
        paint("connected", "32")
    } else if minion.connected_elsewhere {
        paint("elsewhere", "32")
    } else {
        paint("offline", "33")
    }
}

pub(crate) async fn jobs(client: &Client, command: JobsCommand, format: Format) -> anyhow::Result<ExitCode> {
    match command {
        JobsCommand::List(args) => crate::job_list::list(client, args, format).await,
        JobsCommand::Show { jid } => {
            let ResponseBody::Job(detail) = client.request(RequestBody::JobShow { jid }).await? else {
                anyhow::bail!("unexpected answer")
            };
            show_job(&detail, format);
            Ok(ExitCode::SUCCESS)
        }
        JobsCommand::Pause { jid } => {
            show_job(&client.pause(&jid).await?, format);
            Ok(ExitCode::SUCCESS)
        }
        JobsCommand::Resume { jid } => {
            show_job(&client.resume(&jid).await?, format);
            Ok(ExitCode::SUCCESS)
        }
        JobsCommand::Cancel { jid } => {
            client.cancel(&jid).await?;
            // The master answers with an error for jobs that are not running, or streams the
            // job's updates until every minion is final.
            let mut finals = Vec::new();
            while let halite_client::JobEvent::Update(update) = client.next_job_event(&jid).await? {
                if update.state.is_final() {
                    finals.push((update.minion, update.state));
                }
            }
            match format {
                Format::Table => {
                    for (minion, state) in &finals {
                        println!("{minion}  {}", paint(state.as_str(), state_colour(*state)));
                    }
                }
                _ => {
                    let doc: serde_json::Map<String, serde_json::Value> =
                        finals.iter().map(|(m, s)| (m.clone(), json!(s.as_str()))).collect();
                    output::print_document(format, &json!({ "jid": jid, "minions": doc }));
                }
            }
            Ok(ExitCode::SUCCESS)
        }
    }
}

fn show_job(detail: &JobDetail, format: Format) {
    let minions: serde_json::Map<String, serde_json::Value> = detail
        .minions
        .iter()
        .map(|m| {
            let mut value = result_value(m.state, m.ret.as_ref());
            if m.late {
                // The return came after the slot had ended: shown, and said to be late.
                value["late"] = json!(true);
            }
            if let Some(away) = &m.away {
                value["detail"] = json!(away);
            }
            (m.minion.clone(), value)
        })
        .collect();
    if format != Format::Table {
        let doc = json!({
            "jid": detail.summary.jid,
            "function": detail.summary.function,
            "target": detail.summary.target,
            "caller": detail.summary.caller,
            "created_at_ms": detail.summary.created_at_ms,
            "args": detail.args,
            "kwargs": detail.kwargs,
            "rollout": detail.summary.rollout,
            "minions": minions,
        });
        output::print_document(format, &doc);
        return;
    }
    // The job as it was asked for, then each minion as `run` shows it.
    let mut call = vec![detail.summary.function.clone()];
    call.extend(detail.args.iter().map(cli_value));
    call.extend(detail.kwargs.iter().map(|(k, v)| format!("{k}={}", cli_value(v))));
    println!("jid:      {}", detail.summary.jid);
    println!("call:     {}", call.join(" "));
    println!("target:   {} {}", target_flag(detail.summary.target.kind), detail.summary.target.expr);
    println!("caller:   {}", detail.summary.caller);
    println!("created:  {}", format_time(detail.summary.created_at_ms));
    if let Some(rollout) = &detail.summary.rollout {
        println!("rollout:  {}", describe_rollout(rollout));
    }
    println!();
    // Identical results once; a return that came late stands alone, with a word on it.
    let (late, timely): (Vec<_>, Vec<_>) = detail.minions.iter().partition(|m| m.late);
    let (away, timely): (Vec<_>, Vec<_>) = timely.into_iter().partition(|m| m.away.is_some());
    crate::grouped::print_grouped(timely.iter().map(|m| crate::grouped::Final {
        minion: &m.minion,
        state: m.state,
        ret: m.ret.as_ref(),
    }));
    // Minions that left in the middle: offline, and what becomes of their part.
    let width = away.iter().map(|m| m.minion.len()).max().unwrap_or(0);
    for m in away {
        println!(
            "{}  {}",
            paint(&format!("{:<width$}", m.minion), "1"),
            paint(m.away.as_deref().unwrap_or_default(), "33")
        );
    }
    let width = late.iter().map(|m| m.minion.len()).max().unwrap_or(0);
    for m in late {
        crate::run::print_final(&m.minion, width, m.state, m.ret.as_ref());
        println!("{:width$}  (this return came after the minion's slot had ended)", "");
    }
    let states = detail.minions.iter().map(|m| (m.minion.as_str(), m.state.as_str()));
    crate::grouped::print_summary(&detail.summary.jid, states);
}

/// A rollout in one line: where it is, why, and what was asked.
fn describe_rollout(rollout: &halite_protocol::message::RolloutStatus) -> String {
    use halite_protocol::message::RolloutState;
    let spec = &rollout.spec;
    let mut asked = Vec::new();
    if let Some(batch) = spec.batch {
        asked.push(format!("batch {batch}"));
    }
    if spec.batch_wait_ms > 0 {
        asked.push(format!("wait {} ms", spec.batch_wait_ms));
    }
    if let Some(max) = spec.max_errors {
        asked.push(format!("max errors {max}"));
    }
    if spec.canary > 0 {
        asked.push(format!("{} canaries", spec.canary));
    }
    if !spec.abort_on.is_empty() {
        asked.push(format!("abort on {}", spec.abort_on.join(", ")));
    }
    let state = match rollout.state {
        RolloutState::Running => "running",
        RolloutState::Paused => "paused",
        RolloutState::Stopped => "stopped",
    };
    let why = rollout.reason.as_deref().map(|r| format!(": {r}")).unwrap_or_default();
    format!("{state}{why} ({})", asked.join(", "))
}

/// An argument as it would be typed to `halite run` (and read back the same): a string as it
/// is unless it would read as JSON or as `key=value`, everything else as JSON; shell-quoted.
fn cli_value(value: &serde_json::Value) -> String {
    match value {
        serde_json::Value::String(s)
            if !s.is_empty() && !s.contains('=') && serde_json::from_str::<serde_json::Value>(s).is_err() =>
        {
            shell_quote(s)
        }
        other => shell_quote(&other.to_string()),
    }
}

fn shell_quote(text: &str) -> String {
    if text.chars().all(|c| c.is_ascii_alphanumeric() || "_-./:@,".contains(c)) {
        text.to_owned()
    } else {
        format!("'{}'", text.replace('\'', "'\\''"))
    }
}

/// The `run` flag of a target kind (glob needs none).
fn target_flag(kind: halite_protocol::message::TargetKind) -> &'static str {
    use halite_protocol::message::TargetKind;
    match kind {
        TargetKind::Glob => "(glob)",
        TargetKind::List => "-L",
        TargetKind::Regex => "-E",
        TargetKind::Grain => "-G",
        TargetKind::Compound => "-C",
        TargetKind::Nodegroup => "-N",
    }
}

/// Unix milliseconds as `YYYY-MM-DD hh:mm:ss` UTC ("never" for 0).
pub(crate) fn format_time(ms: u64) -> String {
    if ms == 0 {
        return "never".into();
    }
    let jid = halite_protocol::time::compact_utc(ms * 1000);
    format!("{}-{}-{} {}:{}:{}", &jid[0..4], &jid[4..6], &jid[6..8], &jid[8..10], &jid[10..12], &jid[12..14])
}
