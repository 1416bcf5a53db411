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
        /// Its public key: 64 hex digits, or its public key file (halite-ed25519-public-v1).
        /// (`--key` is this command's own secret key, as for every command.)
        #[arg(long, value_name = "HEX|FILE", conflicts_with = "generate", required_unless_present = "generate")]
        public_key: Option<String>,
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
        #[arg(long, conflicts_with = "tenant")]
        admin: bool,
        /// Confine it to a tenant: only minions whose ids start with `<TENANT>-`, and the jobs,
        /// events and deployments about them (one principal per Heat project).
        #[arg(long, value_name = "TENANT")]
        tenant: Option<String>,
    },
    /// List principals with their ACLs.
    List,
    /// Remove a principal; its live sessions are cut.
    Remove {
        /// Name.
        name: String,
    },
    /// Hand everything FROM created (software configs, deployments, enrollment and gateway
    /// tokens) to TO (`root` or a registered principal). After an upgrade, what existed before
    /// owners belongs to root: `halite principal transfer root heat` gives it to Heat's principal.
    Transfer {
        /// The current owner.
        from: String,
        /// The new owner.
        to: String,
    },
    /// Create a bearer token for the HTTP gateway acting as this principal (`root` or a
    /// registered one). Printed once; the master keeps only its hash.
    Token {
        /// Name.
        name: String,
        /// How long it is valid (30d, 12h, ...; `0s`: forever). Default: the master's
        /// `[gateway] token_ttl_days`.
        #[arg(long, value_parser = crate::duration::parse)]
        ttl: Option<std::time::Duration>,
    },
    /// List gateway tokens: id, principal, created, expires (never the tokens themselves).
    Tokens,
    /// Revoke a gateway token by its id (from `halite principal tokens`).
    RevokeToken {
        /// Token id.
        id: String,
    },
}

pub(crate) async fn run(client: &Client, command: PrincipalCommand, format: Format) -> anyhow::Result<ExitCode> {
    match command {
        PrincipalCommand::Token { name, ttl } => {
            let ttl_ms = ttl.map(|t| u64::try_from(t.as_millis()).unwrap_or(u64::MAX));
            let body = RequestBody::ApiTokenCreate { principal: name.clone(), ttl_ms };
            let ResponseBody::ApiToken(token) = client.request(body).await? else { anyhow::bail!("unexpected answer") };
            match format {
                Format::Table => println!("{token}"),
                _ => output::print_document(format, &json!({ "principal": name, "token": token })),
            }
            Ok(ExitCode::SUCCESS)
        }
        PrincipalCommand::Tokens => {
            let ResponseBody::ApiTokens(tokens) = client.request(RequestBody::ApiTokenList).await? else {
                anyhow::bail!("unexpected answer")
            };
            output::print_list(format, &tokens, &["ID", "PRINCIPAL", "CREATED", "EXPIRES"], |t| {
                let expires = t.expires_at_ms.map_or_else(|| "never".to_owned(), crate::admin::format_time);
                vec![t.id.clone(), t.principal.clone(), crate::admin::format_time(t.created_at_ms), expires]
            })?;
            Ok(ExitCode::SUCCESS)
        }
        PrincipalCommand::RevokeToken { id } => {
            client.request(RequestBody::ApiTokenRevoke { id: id.clone() }).await?;
            match format {
                Format::Table => println!("revoked {id}"),
                _ => output::print_document(format, &json!({ "revoked": id })),
            }
            Ok(ExitCode::SUCCESS)
        }
        PrincipalCommand::Add { name, public_key, generate, target, functions, args, events, admin, tenant } => {
            let public = match (public_key, generate) {
                (Some(key), _) => halite_client::ClientConfig::parse_public_key("--public-key", &key)?,
                (None, Some(dir)) => {
                    std::fs::create_dir_all(&dir)?;
                    let secret = IdentityKey::generate_os();
                    keyfile::write_secret(&dir.join(format!("{name}.key")), &secret)?;
                    keyfile::write_public(&dir.join(format!("{name}.pub")), &secret.public())?;
                    secret.public()
                }
                (None, None) => anyhow::bail!("give --public-key or --generate"),
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
            let acl = PrincipalAcl { rules, events, admin, tenant };
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
        PrincipalCommand::Transfer { from, to } => {
            let body = RequestBody::OwnerTransfer { from: from.clone(), to: to.clone() };
            let ResponseBody::Changed(moved) = client.request(body).await? else { anyhow::bail!("unexpected answer") };
            let moved = moved.first().map_or("0", String::as_str);
            match format {
                Format::Table => println!("{moved} objects of {from} now belong to {to}"),
                _ => output::print_document(format, &serde_json::json!({ "from": from, "to": to, "moved": moved })),
            }
            Ok(ExitCode::SUCCESS)
        }
        PrincipalCommand::Remove { name } => {
            client.request(RequestBody::PrincipalRemove { name: name.clone() }).await?;
            println!("removed {name}");
            Ok(ExitCode::SUCCESS)
        }
    }
}
