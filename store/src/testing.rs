//! What the master's simulated tests need of a store beyond its trait (with the `testing`
//! feature): a job record to store. The hooks that take a store's connections away are on
//! the stores themselves ([`crate::SqliteStore::take_away`]).

use std::collections::BTreeMap;

use halite_protocol::message::{JobSpec, SignedJob, Target, TargetKind};
use serde_json::json;

use crate::JobRecord;

/// A job record as a client would have published it (a compound target, one argument), issued
/// at `created_at_ms`.
pub fn job(jid: &str, created_at_ms: u64) -> JobRecord {
    let target = Target { kind: TargetKind::Compound, expr: "web* and G@os:Debian".into() };
    let spec = JobSpec {
        args: vec![json!(1)],
        kwargs: BTreeMap::from([("name".into(), json!("nginx"))]),
        timeout_ms: 1000,
        ..JobSpec::new(target, "test.ping")
    };
    let signed = SignedJob { body: vec![1, 2, 3], signature: vec![9; 64], start_by_ms: None };
    JobRecord::new(jid.into(), spec, "root".into(), created_at_ms, signed)
}
