//! `halite principal`: client principals (admins, engines) and their ACLs.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::process::ExitCode;

use clap::Subcommand;
use halite_client::Client;
use halite_protocol::identity::IdentityKey;
use halite_protocol::message::{PrincipalAcl, PrincipalRule, RequestBody, ResponseBody};
use halite_transport::keyfile;
use serde_json::json;

use crate::output::{self, Format};

#[derive(Subcommand)]
pub(crate) enum PrincipalCommand {
    /// Register a principal (or replace its key and ACL) with one publish rule.
    Add {
        /// Name it claims when connecting.
        name: String,
        /// Its public key file (halite-ed25519-public-v1).
        #[arg(long, conflicts_with = "generate", required_unless_present = "generate")]
        key: Option<PathBuf>,
        /// Generate its key pair into this directory (<name>.key, <name>.pub) instead.
        #[arg(long)]
        generate: Option<PathBuf>,
        /// Compound target expression every job's minions must fall within.
        #[arg(long)]
        target: Option<String>,
        /// Function globs it may run (repeatable).
        #[arg(long = "function")]
        functions: Vec<String>,
        /// Argument constraint name=regex (anchored; repeatable).
        #[arg(long = "arg")]
        args: Vec<String>,
        /// Event tag globs it may subscribe to (repeatable).
        #[arg(long = "event")]
        events: Vec<String>,
        /// It may manage keys, tokens and principals.
        #[arg(long)]
        admin: bool,
    },
    /// List principals with their ACLs.
    List,
    /// Remove a principal; its live sessions are cut.
    Remove {
        /// Name.
        name: String,
    },
    /// Create a bearer token for the HTTP gateway acting as this principal (`root` or a
    /// registered one). Printed once; the master keeps only its hash.
    Token {
        /// Name.
        name: String,
    },
}

pub(crate) async fn run(client: &mut Client, command: PrincipalCommand, format: Format) -> anyhow::Result<ExitCode> {
    match command {
        PrincipalCommand::Token { name } => {
            let token = client.create_api_token(&name).await?;
            match format {
                Format::Table => println!("{token}"),
                _ => output::print_document(format, &json!({ "principal": name, "token": token })),
            }
            Ok(ExitCode::SUCCESS)
        }
        PrincipalCommand::Add { name, key, generate, target, functions, args, events, admin } => {
            let public = match (key, generate) {
                (Some(path), _) => keyfile::read_public(&path)?,
                (None, Some(dir)) => {
                    std::fs::create_dir_all(&dir)?;
                    let secret = IdentityKey::generate_os();
                    keyfile::write_secret(&dir.join(format!("{name}.key")), &secret)?;
                    keyfile::write_public(&dir.join(format!("{name}.pub")), &secret.public())?;
                    secret.public()
                }
                (None, None) => anyhow::bail!("give --key or --generate"),
            };
            let mut constraints = BTreeMap::new();
            for arg in args {
                let (k, v) = arg.split_once('=').ok_or_else(|| anyhow::anyhow!("--arg {arg:?} must be name=regex"))?;
                constraints.insert(k.to_owned(), v.to_owned());
            }
            let rules = match target {
                Some(targets) if !functions.is_empty() => vec![PrincipalRule { targets, functions, args: constraints }],
                None if functions.is_empty() => Vec::new(),
                _ => anyhow::bail!("--target and --function go together"),
            };
            let acl = PrincipalAcl { rules, events, admin };
            client
                .request(RequestBody::PrincipalAdd { name: name.clone(), public_key: public.as_bytes().to_vec(), acl })
                .await?;
            match format {
                Format::Table => println!("registered {name} ({})", public.fingerprint()),
                _ => {
                    output::print_document(format, &json!({ "registered": name, "fingerprint": public.fingerprint() }))
                }
            }
            Ok(ExitCode::SUCCESS)
        }
        PrincipalCommand::List => {
            let ResponseBody::Principals(list) = client.request(RequestBody::PrincipalList).await? else {
                anyhow::bail!("unexpected answer")
            };
            if format != Format::Table {
                output::print_document(format, &serde_json::to_value(&list)?);
                return Ok(ExitCode::SUCCESS);
            }
            let rows: Vec<Vec<String>> = list
                .iter()
                .map(|p| {
                    let rules: Vec<String> =
                        p.acl.rules.iter().map(|r| format!("{} on {}", r.functions.join(","), r.targets)).collect();
                    vec![p.name.clone(), rules.join("; "), p.acl.events.join(","), p.acl.admin.to_string()]
                })
                .collect();
            output::print_table(&["NAME", "MAY RUN", "EVENTS", "ADMIN"], &rows);
            Ok(ExitCode::SUCCESS)
        }
        PrincipalCommand::Remove { name } => {
            client.request(RequestBody::PrincipalRemove { name: name.clone() }).await?;
            println!("removed {name}");
            Ok(ExitCode::SUCCESS)
        }
    }
}
