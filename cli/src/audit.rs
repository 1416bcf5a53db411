//! `halite audit`: the audit trail as the principal may read it (`list`), written out as JSON
//! lines with its hashes and signatures (`export --out FILE`), and checked (`verify`: by the master on its
//! store, or here, offline, on an exported file with the master's or the cluster's key).

use std::io::{BufRead, Write};
use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::Context;
use clap::{Args, Subcommand};
use halite_client::Client;
use halite_protocol::audit::{AuditRecord, ExportHeader, Verifier, EXPORT_FORMAT};
use halite_protocol::identity::PublicIdentity;
use halite_protocol::message::AuditFilter;
use halite_protocol::noise::MasterCertificate;
use serde_json::json;

use crate::output::{self, Format};

/// Records asked for at once.
const PAGE: u32 = 1000;

#[derive(Subcommand)]
pub(crate) enum AuditCommand {
    /// Lists records, oldest first (a tenant's principal sees its tenant's, another principal
    /// its own, root and administrators all).
    List(ListArgs),
    /// Writes the whole trail as JSON lines, with its hashes and signatures (root and
    /// administrators).
    /// `halite audit export --out FILE` (or `--file FILE`).
    Export {
        /// The file to write (the same as `--out FILE`).
        #[arg(long, value_name = "FILE")]
        file: Option<PathBuf>,
    },
    /// Checks the trail: on the master's store, or offline on an exported file. Exits 0 when
    /// every chain is whole, 1 naming the first record removed, changed or moved.
    Verify(VerifyArgs),
}

#[derive(Args)]
pub(crate) struct ListArgs {
    /// Only the records of this principal (`root`, a name, `minion:<id>`, `master`).
    #[arg(long, value_name = "PRINCIPAL")]
    by: Option<String>,
    /// Only this tenant's records.
    #[arg(long)]
    tenant: Option<String>,
    /// Only records about this minion.
    #[arg(long)]
    minion: Option<String>,
    /// Only this action (publish, key_accept, job_end, deployment_end:COMPLETE, …).
    #[arg(long)]
    action: Option<String>,
    /// Only this decision (granted, refused, failed, unanswered, or a final state).
    #[arg(long)]
    decision: Option<String>,
    /// Only records at or after this time (Unix milliseconds).
    #[arg(long, value_name = "MS")]
    since: Option<u64>,
    /// Only records before this time (Unix milliseconds).
    #[arg(long, value_name = "MS")]
    until: Option<u64>,
    /// Also the records of reads of the trail itself (audit_list), left out otherwise.
    #[arg(long)]
    reads: bool,
    /// At most this many records.
    #[arg(long, default_value_t = 100)]
    limit: u32,
}

#[derive(Args)]
pub(crate) struct VerifyArgs {
    /// An exported file to check offline (without it, the master checks its store).
    #[arg(long, value_name = "FILE")]
    pub(crate) file: Option<PathBuf>,
    /// A master's public key (master.pub, or 64 hex digits) whose records to believe; repeatable.
    #[arg(long = "signer", value_name = "KEY")]
    pub(crate) keys: Vec<String>,
    /// The cluster's public key (cluster.pub, or 64 hex digits): records of every master it
    /// certified (by the certificates the export carries) are believed.
    #[arg(long, value_name = "KEY")]
    pub(crate) cluster_key: Option<String>,
}

pub(crate) async fn run(client: &Client, command: AuditCommand, format: Format) -> anyhow::Result<ExitCode> {
    match command {
        AuditCommand::List(args) => list(client, args, format).await,
        AuditCommand::Export { file: Some(file) } => export(client, &file).await,
        AuditCommand::Export { file: None } => anyhow::bail!("name the file to write: halite audit export --out FILE"),
        AuditCommand::Verify(_) => {
            let verified = client.audit_verify().await?;
            match &verified.broken {
                None => {
                    match format {
                        Format::Table => println!(
                            "audit trail whole: {} records in {} chains",
                            verified.records,
                            verified.heads.len()
                        ),
                        _ => output::print_document(
                            format,
                            &json!({ "whole": true, "records": verified.records, "heads": verified.heads }),
                        ),
                    }
                    Ok(ExitCode::SUCCESS)
                }
                Some(broken) => {
                    match format {
                        Format::Table => eprintln!("halite: the audit trail is broken: {broken}"),
                        _ => output::print_document(format, &json!({ "whole": false, "broken": broken })),
                    }
                    Ok(ExitCode::FAILURE)
                }
            }
        }
    }
}

async fn list(client: &Client, args: ListArgs, format: Format) -> anyhow::Result<ExitCode> {
    let filter = AuditFilter {
        principal: args.by,
        tenant: args.tenant,
        minion: args.minion,
        action: args.action,
        decision: args.decision,
        since_ms: args.since,
        until_ms: args.until,
        reads: args.reads,
    };
    let (mut records, mut after) = (Vec::new(), None);
    while records.len() < args.limit as usize {
        let want = (args.limit as usize - records.len()).min(PAGE as usize) as u32;
        let page = client.audit(filter.clone(), after, want).await?;
        let Some(last) = page.last() else { break };
        after = Some(last.id);
        let short = page.len() < want as usize;
        records.extend(page);
        if short {
            break;
        }
    }
    let entries: Vec<serde_json::Value> = records
        .iter()
        .map(|r| {
            let entry = serde_json::from_str::<serde_json::Value>(&r.body).unwrap_or_default();
            json!({ "chain": r.chain, "seq": r.seq, "record": entry })
        })
        .collect();
    output::print_list(format, &entries, &["TIME", "PRINCIPAL", "ACTION", "DECISION", "MINIONS", "REASON"], |e| {
        let field = |name: &str| e["record"][name].as_str().unwrap_or_default().to_owned();
        let minions = e["record"]["minions"].as_array().map(|m| m.len()).unwrap_or(0);
        let minions = match minions {
            0 => String::new(),
            1 => e["record"]["minions"][0].as_str().unwrap_or_default().to_owned(),
            n => format!("{n} minions"),
        };
        let at = e["record"]["at_ms"].as_u64().map(crate::admin::format_time).unwrap_or_default();
        vec![at, field("principal"), field("action"), field("decision"), minions, field("reason")]
    })?;
    Ok(ExitCode::SUCCESS)
}

async fn export(client: &Client, out: &PathBuf) -> anyhow::Result<ExitCode> {
    let header = client.audit_header().await?;
    let file = std::fs::File::create(out).with_context(|| format!("{}", out.display()))?;
    let mut writer = std::io::BufWriter::new(file);
    serde_json::to_writer(&mut writer, &header)?;
    writeln!(writer)?;
    let (mut after, mut written) = (None, 0u64);
    loop {
        let page = client.audit(AuditFilter { reads: true, ..AuditFilter::default() }, after, PAGE).await?;
        let Some(last) = page.last() else { break };
        after = Some(last.id);
        for record in &page {
            serde_json::to_writer(&mut writer, record)?;
            writeln!(writer)?;
            written += 1;
        }
        // A short page is the end: reading is itself recorded, so the trail grows as it is read.
        if page.len() < PAGE as usize {
            break;
        }
    }
    writer.flush()?;
    writer.get_ref().sync_all()?;
    println!("{written} records written to {}", out.display());
    Ok(ExitCode::SUCCESS)
}

/// `halite audit verify --file FILE`: the check, offline, with the keys given.
pub(crate) fn verify_file(args: &VerifyArgs) -> anyhow::Result<ExitCode> {
    let path = args.file.as_ref().context("--file")?;
    let keys: Vec<PublicIdentity> = args.keys.iter().map(|k| read_key(k)).collect::<anyhow::Result<_>>()?;
    let cluster = args.cluster_key.as_deref().map(read_key).transpose()?;
    if keys.is_empty() && cluster.is_none() {
        anyhow::bail!("give the key to believe: --signer master.pub (repeatable) or --cluster-key cluster.pub");
    }
    let file = std::fs::File::open(path).with_context(|| format!("{}", path.display()))?;
    let mut lines = std::io::BufReader::new(file).lines();
    let first = lines.next().transpose()?.with_context(|| format!("{}: empty", path.display()))?;
    let header: ExportHeader =
        serde_json::from_str(&first).with_context(|| format!("{} line 1: not an audit export", path.display()))?;
    if header.format != EXPORT_FORMAT {
        anyhow::bail!("{} line 1: format {:?}, not {EXPORT_FORMAT}", path.display(), header.format);
    }
    // A master's records are believed if its key was given, or the cluster key certified it
    // for the chain (its id) it signs.
    let certified: Vec<(PublicIdentity, String)> = match &cluster {
        None => Vec::new(),
        Some(cluster) => header
            .masters
            .iter()
            .filter_map(|m| {
                let key = read_key(&m.key).ok()?;
                let bytes = halite_protocol::hex::decode(m.certificate.as_deref()?)?;
                let certificate = MasterCertificate::from_bytes(&bytes).ok()?;
                (certificate.cluster == *cluster && certificate.verify(&key, &m.id).is_ok())
                    .then(|| (key, m.id.clone()))
            })
            .collect(),
    };
    let trusted = |key: &PublicIdentity, chain: &str| {
        keys.contains(key) || certified.iter().any(|(k, id)| k == key && id == chain)
    };
    let outcome = (|| {
        let mut verifier = Verifier::new(&trusted, &header.checkpoints)?;
        for (n, line) in lines.enumerate() {
            let line =
                line.map_err(|e| halite_protocol::audit::Broken { chain: String::new(), seq: 0, what: e.to_string() })?;
            let record: AuditRecord = serde_json::from_str(&line).map_err(|e| halite_protocol::audit::Broken {
                chain: String::new(),
                seq: 0,
                what: format!("line {}: not a record: {e}", n + 2),
            })?;
            verifier.check(&record)?;
        }
        verifier.finish(&header.heads)
    })();
    match outcome {
        Ok(verified) => {
            println!("audit trail whole: {} records in {} chains", verified.records, verified.heads.len());
            Ok(ExitCode::SUCCESS)
        }
        Err(broken) => {
            eprintln!("halite: the audit trail is broken: {broken}");
            Ok(ExitCode::FAILURE)
        }
    }
}

/// A public key from a file (`master.pub`, `cluster.pub`) or as 64 hex digits.
fn read_key(text: &str) -> anyhow::Result<PublicIdentity> {
    let path = std::path::Path::new(text);
    if path.exists() {
        return halite_transport::keyfile::read_public(path).with_context(|| text.to_owned());
    }
    let hex = text.trim();
    let bytes =
        halite_protocol::hex::decode(hex).with_context(|| format!("{text}: not a key file nor 64 hex digits"))?;
    PublicIdentity::from_bytes(&bytes).map_err(|e| anyhow::anyhow!("{text}: {e}"))
}
