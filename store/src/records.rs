//! How the store writes what it keeps, apart from how the protocol spells it: its own names for
//! states and kinds, and its own document shapes for returns and ACLs, converted from and to the
//! wire types. A rename in the protocol changes a conversion here, never the rows already
//! written (which would otherwise read back as corrupt).

use std::collections::BTreeMap;

use halite_protocol::message::{
    JobReturn, KeyState, MinionJobState, Outcome, PrincipalAcl, PrincipalRule, TargetKind, Value,
};
use serde::{Deserialize, Serialize};

use super::StoreError;

/// A two-way table between a wire enum and the names stored for it.
struct Names<T: 'static>(&'static [(T, &'static str)]);

impl<T: Copy + PartialEq + std::fmt::Debug> Names<T> {
    fn name(&self, value: T) -> &'static str {
        self.0.iter().find(|(v, _)| *v == value).map_or("", |(_, name)| name)
    }

    fn parse(&self, name: &str, what: &str) -> Result<T, StoreError> {
        self.0
            .iter()
            .find(|(_, n)| *n == name)
            .map(|(v, _)| *v)
            .ok_or_else(|| StoreError::Corrupt(format!("unknown {what} {name:?}")))
    }
}

const KEY_STATES: Names<KeyState> = Names(&[
    (KeyState::Pending, "pending"),
    (KeyState::Accepted, "accepted"),
    (KeyState::Rejected, "rejected"),
    (KeyState::Denied, "denied"),
]);

/// Stored job states. Queries name `waiting`, `sent` and `running` as the unfinished ones.
const JOB_STATES: Names<MinionJobState> = Names(&[
    (MinionJobState::Waiting, "waiting"),
    (MinionJobState::Sent, "sent"),
    (MinionJobState::Running, "running"),
    (MinionJobState::Returned, "returned"),
    (MinionJobState::Failed, "failed"),
    (MinionJobState::TimedOut, "timed_out"),
    (MinionJobState::Offline, "offline"),
    (MinionJobState::Cancelled, "cancelled"),
    (MinionJobState::Expired, "expired"),
    (MinionJobState::Denied, "denied"),
    (MinionJobState::Queued, "queued"),
    (MinionJobState::Skipped, "skipped"),
    (MinionJobState::Unknown, "unknown"),
]);

const TARGET_KINDS: Names<TargetKind> = Names(&[
    (TargetKind::Glob, "glob"),
    (TargetKind::List, "list"),
    (TargetKind::Regex, "regex"),
    (TargetKind::Grain, "grain"),
    (TargetKind::Compound, "compound"),
    (TargetKind::Nodegroup, "nodegroup"),
]);

const OUTCOMES: Names<Outcome> = Names(&[
    (Outcome::Completed, "completed"),
    (Outcome::TimedOut, "timed_out"),
    (Outcome::Cancelled, "cancelled"),
    (Outcome::Interrupted, "interrupted"),
    (Outcome::Refused, "refused"),
    (Outcome::Denied, "denied"),
]);

/// A count or time as both databases keep it (a signed 64-bit integer; past `i64::MAX` is
/// `i64::MAX`).
pub(crate) fn db_int(value: u64) -> i64 {
    i64::try_from(value).unwrap_or(i64::MAX)
}

pub(crate) fn key_state_name(state: KeyState) -> &'static str {
    KEY_STATES.name(state)
}

pub(crate) fn key_state(name: &str) -> Result<KeyState, StoreError> {
    KEY_STATES.parse(name, "key state")
}

/// A token's public id: the first 6 bytes of its SHA-256, in hex (what lists show and revoke
/// takes; the token itself is never stored).
pub(crate) fn token_id(hash: &[u8; 32]) -> String {
    halite_protocol::hex::encode(&hash[..6])
}

pub(crate) fn job_state_name(state: MinionJobState) -> &'static str {
    JOB_STATES.name(state)
}

pub(crate) fn job_state(name: &str) -> Result<MinionJobState, StoreError> {
    JOB_STATES.parse(name, "job state")
}

pub(crate) fn target_kind_name(kind: TargetKind) -> &'static str {
    TARGET_KINDS.name(kind)
}

pub(crate) fn target_kind(name: &str) -> Result<TargetKind, StoreError> {
    TARGET_KINDS.parse(name, "target kind")
}

/// A return as stored (JSON in `job_minions.ret`).
#[derive(Serialize, Deserialize)]
struct StoredReturn {
    jid: String,
    minion: String,
    success: bool,
    retcode: i32,
    outputs: Value,
    #[serde(default)]
    truncated: bool,
    #[serde(default)]
    duration_ms: u64,
    #[serde(default = "completed")]
    outcome: String,
}

fn completed() -> String {
    "completed".into()
}

pub(crate) fn return_json(ret: &JobReturn) -> String {
    let stored = StoredReturn {
        jid: ret.jid.clone(),
        minion: ret.minion.clone(),
        success: ret.success,
        retcode: ret.retcode,
        outputs: ret.outputs.clone(),
        truncated: ret.truncated,
        duration_ms: ret.duration_ms,
        outcome: OUTCOMES.name(ret.outcome).to_owned(),
    };
    to_json(&stored)
}

pub(crate) fn return_from_json(text: &str) -> Result<JobReturn, StoreError> {
    let stored: StoredReturn = json(text)?;
    Ok(JobReturn {
        jid: stored.jid,
        minion: stored.minion,
        success: stored.success,
        retcode: stored.retcode,
        outputs: stored.outputs,
        truncated: stored.truncated,
        duration_ms: stored.duration_ms,
        outcome: OUTCOMES.parse(&stored.outcome, "outcome")?,
    })
}

/// A principal's ACL as stored (JSON in `principals.acl`).
#[derive(Serialize, Deserialize)]
struct StoredAcl {
    rules: Vec<StoredRule>,
    events: Vec<String>,
    admin: bool,
    /// Absent for principals without a tenant (rows written before tenants keep their shape).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    tenant: Option<String>,
}

#[derive(Serialize, Deserialize)]
struct StoredRule {
    targets: String,
    functions: Vec<String>,
    #[serde(default)]
    args: BTreeMap<String, String>,
}

pub(crate) fn acl_json(acl: &PrincipalAcl) -> String {
    let stored = StoredAcl {
        rules: acl
            .rules
            .iter()
            .map(|r| StoredRule { targets: r.targets.clone(), functions: r.functions.clone(), args: r.args.clone() })
            .collect(),
        events: acl.events.clone(),
        admin: acl.admin,
        tenant: acl.tenant.clone(),
    };
    to_json(&stored)
}

pub(crate) fn acl_from_json(text: &str) -> Result<PrincipalAcl, StoreError> {
    let stored: StoredAcl = json(text)?;
    Ok(PrincipalAcl {
        rules: stored
            .rules
            .into_iter()
            .map(|r| PrincipalRule { targets: r.targets, functions: r.functions, args: r.args })
            .collect(),
        events: stored.events,
        admin: stored.admin,
        tenant: stored.tenant,
    })
}

/// Decodes a JSON column; a value that does not decode is corrupt.
pub(crate) fn json<T: serde::de::DeserializeOwned>(text: &str) -> Result<T, StoreError> {
    serde_json::from_str(text).map_err(|e| StoreError::Corrupt(e.to_string()))
}

/// Encodes a JSON column.
pub(crate) fn to_json<T: Serialize>(value: &T) -> String {
    serde_json::to_string(value).unwrap_or_else(|_| "null".into())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The stored shapes are pinned here: changing them needs a migration, whatever the
    /// protocol does.
    #[test]
    fn stored_documents_keep_their_shape() {
        let ret = JobReturn {
            jid: "1".into(),
            minion: "web1".into(),
            success: false,
            retcode: 124,
            outputs: serde_json::json!({"error": "x"}),
            truncated: true,
            duration_ms: 7,
            outcome: Outcome::TimedOut,
        };
        let text = return_json(&ret);
        assert_eq!(
            text,
            r#"{"jid":"1","minion":"web1","success":false,"retcode":124,"outputs":{"error":"x"},"truncated":true,"duration_ms":7,"outcome":"timed_out"}"#
        );
        assert_eq!(return_from_json(&text).unwrap(), ret);
        let acl = PrincipalAcl {
            rules: vec![PrincipalRule {
                targets: "web*".into(),
                functions: vec!["test.*".into()],
                args: BTreeMap::new(),
            }],
            events: vec!["halite/job/*".into()],
            admin: false,
            tenant: None,
        };
        let text = acl_json(&acl);
        assert_eq!(
            text,
            r#"{"rules":[{"targets":"web*","functions":["test.*"],"args":{}}],"events":["halite/job/*"],"admin":false}"#
        );
        assert_eq!(acl_from_json(&text).unwrap(), acl);
        let tenant = PrincipalAcl { tenant: Some("proja".into()), ..acl };
        let text = acl_json(&tenant);
        assert!(text.ends_with(r#""admin":false,"tenant":"proja"}"#), "{text}");
        assert_eq!(acl_from_json(&text).unwrap(), tenant);
    }

    #[test]
    fn every_wire_value_has_a_stored_name_and_back() {
        for (state, name) in JOB_STATES.0 {
            assert_eq!(job_state(name).unwrap(), *state);
        }
        for (state, name) in KEY_STATES.0 {
            assert_eq!(key_state(name).unwrap(), *state);
        }
        for (kind, name) in TARGET_KINDS.0 {
            assert_eq!(target_kind(name).unwrap(), *kind);
        }
        assert!(matches!(job_state("finished"), Err(StoreError::Corrupt(_))));
    }
}
