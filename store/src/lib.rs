//! Persistent state behind one async trait: keys, enrollment tokens, the minion registry, jobs
//! and per-minion job states with their returns. [`SqliteStore`] is the embedded default;
//! [`PostgresStore`] keeps the same state on a database server that several masters share.
//! Both pass the same conformance suite (`conformance.rs`).
//!
//! What it does: the schema and its migrations (`store/migrations/`), every read and write the
//! master makes, one statement or transaction each; rows signed by the master that wrote them
//! and checked against the masters it trusts (`trust.rs`, `signed_rows.rs`); announcements
//! between masters sealed and heard (`cluster.rs`, `cluster_seal.rs`); copying a SQLite store
//! into PostgreSQL (`migrate.rs`); the audit trail's rows.
//!
//! What it does not do: decide anything. Which calls answer a request, and what follows from
//! their results, is the master's (`halite-master`, `store_calls/`); this crate knows protocol
//! types and its own records, never the master's handlers (`scripts/check-architecture.sh`).
//!
//! Without its default `io` feature it is the record types and [`StoreError`] alone (no trait,
//! no database): what the master's core, which does no I/O, names.

// The record helpers (names, JSON columns) serve the databases: without them they are unused.
#![cfg_attr(not(feature = "io"), allow(unused_imports, dead_code))]

pub mod audit;
#[cfg(feature = "io")]
mod audit_sql;
mod cluster;
#[cfg(feature = "io")]
mod cluster_seal;
#[cfg(feature = "io")]
mod common_sql;
#[cfg(feature = "io")]
mod conformance;
mod deploy;
mod deploy_records;
#[cfg(feature = "io")]
mod deploy_sql;
#[cfg(feature = "io")]
mod migrate;
#[cfg(feature = "io")]
mod postgres;
#[cfg(feature = "io")]
mod postgres_audit;
mod records;
mod select;
#[cfg(feature = "io")]
mod signed_rows;
#[cfg(feature = "io")]
mod signed_rows_tests;
#[cfg(feature = "io")]
mod sqlite;
#[cfg(feature = "io")]
pub use sqlite::is_busy as sqlite_busy;
#[cfg(feature = "io")]
mod sqlite_checkpoint;
#[cfg(feature = "io")]
mod sqlite_hot;
#[cfg(feature = "io")]
mod sqlite_hot_audit;
#[cfg(feature = "io")]
mod test_postgres;
#[cfg(all(feature = "io", any(test, feature = "testing")))]
pub mod testing;
#[cfg(feature = "io")]
pub mod trust;
#[cfg(feature = "io")]
mod wal;

use std::collections::BTreeMap;
use std::future::Future;

use halite_protocol::message::{
    JobDetail, JobReturn, JobSpec, JobSummary, KeyState, MinionJobState, PrincipalAcl, RolloutStatus, SignedJob,
    Target, Value,
};

pub use audit::AuditHead;
#[cfg(feature = "io")]
pub use audit::AuditStore;
pub use cluster::Announcement;
pub use cluster::{event_digest, ClusterChange, Heard};
#[cfg(feature = "io")]
pub use deploy::DeployStore;
pub use deploy::{ApiTokenGrant, ConfigRecord, DeploymentRecord, GroupRecord, MemberStart};
#[cfg(feature = "io")]
pub use migrate::{sqlite_to_postgres, Copied};
#[cfg(feature = "io")]
pub use postgres::PostgresStore;
#[cfg(feature = "io")]
pub use select::{describe_postgres, Backend};
pub use select::{StoreConfig, StoreUrlError};
#[cfg(feature = "io")]
pub use sqlite::SqliteStore;
#[cfg(all(feature = "io", any(test, feature = "testing")))]
pub use testing::job as test_job;

/// Why a store operation failed, by what a caller can do about it.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[non_exhaustive]
pub enum StoreError {
    /// The database cannot be used right now (I/O error, full disk, locked, closed): the
    /// operation may succeed if retried later.
    #[error("database unavailable: {0}")]
    Unavailable(String),
    /// The write clashes with what is stored (a unique key, a reference): retrying the same
    /// write fails again.
    #[error("conflict: {0}")]
    Conflict(String),
    /// Stored data is damaged or cannot be decoded (a bug, a hand-edited or broken file).
    #[error("corrupt database: {0}")]
    Corrupt(String),
    /// The database stopped answering while the call was on its way: it may still have been
    /// carried out (a write may commit once the database answers).
    #[error("database unavailable, outcome unknown: {0}")]
    Indeterminate(String),
}

impl StoreError {
    /// Whether the call may have been carried out although it failed (see
    /// [`StoreError::Indeterminate`]).
    pub fn is_indeterminate(&self) -> bool {
        matches!(self, StoreError::Indeterminate(_))
    }

    /// Whether the same call may succeed later: the database did not answer (or not in time),
    /// rather than refusing what it was given.
    pub fn is_transient(&self) -> bool {
        matches!(self, StoreError::Unavailable(_) | StoreError::Indeterminate(_))
    }

    /// The class, as a word for messages to clients (which do not get the database's text).
    pub fn class(&self) -> &'static str {
        match self {
            StoreError::Unavailable(_) | StoreError::Indeterminate(_) => "store unavailable",
            StoreError::Conflict(_) => "store conflict",
            StoreError::Corrupt(_) => "store corrupt",
        }
    }
}

#[cfg(feature = "io")]
impl From<sqlx::Error> for StoreError {
    fn from(error: sqlx::Error) -> Self {
        use sqlx::error::ErrorKind;
        match &error {
            sqlx::Error::Database(db) => match db.kind() {
                ErrorKind::UniqueViolation | ErrorKind::ForeignKeyViolation | ErrorKind::CheckViolation => {
                    StoreError::Conflict(error.to_string())
                }
                // SQLITE_CORRUPT (11) and SQLITE_NOTADB (26), extended codes included.
                _ if db.code().and_then(|c| c.parse::<i32>().ok()).is_some_and(|c| matches!(c & 0xff, 11 | 26)) => {
                    StoreError::Corrupt(error.to_string())
                }
                _ => StoreError::Unavailable(error.to_string()),
            },
            sqlx::Error::Decode(_) | sqlx::Error::ColumnDecode { .. } | sqlx::Error::ColumnNotFound(_) => {
                StoreError::Corrupt(error.to_string())
            }
            _ => StoreError::Unavailable(error.to_string()),
        }
    }
}

/// A key in the registry.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KeyRecord {
    /// Minion id.
    pub id: String,
    /// ed25519 public key.
    pub public_key: [u8; 32],
    /// State.
    pub state: KeyState,
}

/// An enrollment token as stored (by its hash).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TokenRecord {
    /// The minion id it is bound to.
    pub minion: String,
    /// When it expires, Unix milliseconds.
    pub expires_at_ms: u64,
    /// Whether it was used.
    pub used: bool,
}

/// What presenting an enrollment token did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TokenUse {
    /// The key is accepted; `replaced`: another accepted key of the id was denied (the
    /// token was made with `--replace`).
    Enrolled {
        /// Whether an accepted key was replaced.
        replaced: bool,
    },
    /// The token was valid but the id already has an accepted key, and the token was not made
    /// to replace it: the token is used up, this key recorded as denied.
    Refused,
    /// Unknown, expired, used, or bound to another id: counts as no token.
    Invalid,
}

/// A minion's registry entry.
#[derive(Debug, Clone, PartialEq)]
pub struct MinionRecord {
    /// Minion id.
    pub id: String,
    /// Announced grains.
    pub grains: BTreeMap<String, Value>,
    /// Announced functions.
    pub functions: Vec<String>,
    /// Last seen, Unix milliseconds.
    pub last_seen_ms: u64,
}

/// A job as published: its [`JobSpec`]'s fields as stored (made from the spec by
/// [`JobRecord::new`], read back as one by [`JobRecord::spec`]), and what the master added.
#[derive(Debug, Clone, PartialEq)]
pub struct JobRecord {
    /// Job id.
    pub jid: String,
    /// [`JobSpec::function`].
    pub function: String,
    /// [`JobSpec::target`], as given.
    pub target: Target,
    /// [`JobSpec::args`].
    pub args: Vec<Value>,
    /// [`JobSpec::kwargs`].
    pub kwargs: BTreeMap<String, Value>,
    /// Publisher.
    pub caller: String,
    /// Unix milliseconds.
    pub created_at_ms: u64,
    /// [`JobSpec::timeout_ms`].
    pub timeout_ms: u64,
    /// [`JobSpec::ttl_ms`].
    pub ttl_ms: u64,
    /// The signed job sent to minions.
    pub signed: SignedJob,
    /// [`JobSpec::rollout`] and where it is, when it has one.
    pub rollout: Option<RolloutStatus>,
}

impl JobRecord {
    /// The record of job `jid` run as `spec` for `caller`, created at `created_at_ms` (Unix
    /// ms) and sent to minions as `signed`. Its rollout, if any, starts `running`.
    pub fn new(jid: String, spec: JobSpec, caller: String, created_at_ms: u64, signed: SignedJob) -> Self {
        let JobSpec { target, function, args, kwargs, timeout_ms, ttl_ms, rollout } = spec;
        JobRecord {
            jid,
            function,
            target,
            args,
            kwargs,
            caller,
            created_at_ms,
            timeout_ms,
            ttl_ms,
            signed,
            rollout: rollout.map(RolloutStatus::new),
        }
    }

    /// What was asked: the job's spec (its rollout as asked, wherever it is now).
    pub fn spec(&self) -> JobSpec {
        JobSpec {
            target: self.target.clone(),
            function: self.function.clone(),
            args: self.args.clone(),
            kwargs: self.kwargs.clone(),
            timeout_ms: self.timeout_ms,
            ttl_ms: self.ttl_ms,
            rollout: self.rollout.as_ref().map(|status| status.spec.clone()),
        }
    }
}

/// A client principal.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PrincipalRecord {
    /// Name.
    pub name: String,
    /// ed25519 public key.
    pub public_key: [u8; 32],
    /// What it may do.
    pub acl: PrincipalAcl,
}

/// One minion's new state for a job, as the core batches them.
#[derive(Debug, Clone, PartialEq)]
pub struct StateChange {
    /// Job id.
    pub jid: String,
    /// The minion.
    pub minion: String,
    /// Its new state.
    pub state: MinionJobState,
    /// Its return, when the state came from one.
    pub ret: Option<JobReturn>,
    /// When, Unix milliseconds.
    pub at_ms: u64,
    /// A return that came after the slot had ended: only `ret` is recorded (if none is yet),
    /// marked late; the final state stays as it was.
    pub late: bool,
}

/// A job in a listing.
#[derive(Debug, Clone, PartialEq)]
pub struct JobListing {
    /// What clients are shown.
    pub summary: JobSummary,
    /// Its targeted minions, when asked for.
    pub minions: Vec<String>,
}

/// A job not yet finished, with every targeted minion's state.
pub type UnfinishedJob = (JobRecord, Vec<(String, MinionJobState)>);

/// Persistent state. Every method is one transaction.
#[cfg(feature = "io")]
pub trait Store: DeployStore + AuditStore + Send + Sync + 'static {
    /// Every key.
    fn keys(&self) -> impl Future<Output = Result<Vec<KeyRecord>, StoreError>> + Send;
    /// The keys recorded for one id (at most one not denied).
    fn keys_for(&self, id: &str) -> impl Future<Output = Result<Vec<KeyRecord>, StoreError>> + Send;
    /// Inserts or updates a key's state.
    fn put_key(&self, key: &KeyRecord, now_ms: u64) -> impl Future<Output = Result<(), StoreError>> + Send;
    /// Deletes one key.
    fn delete_key(&self, id: &str, public_key: &[u8; 32]) -> impl Future<Output = Result<(), StoreError>> + Send;
    /// Records an enrollment token by its hash, created by the principal `owner`.
    fn create_token(
        &self,
        hash: &[u8; 32],
        minion: &str,
        expires_at_ms: u64,
        replaces_key: bool,
        owner: &str,
    ) -> impl Future<Output = Result<(), StoreError>> + Send;
    /// Enrolls `public_key` as `minion` with a token, in one transaction: the token burns if
    /// it exists, is bound to `minion`, is unused and unexpired. Then, unless another key of
    /// the id is accepted and the token was not made to replace it, this key is accepted and
    /// any other key for the id is denied; if one is (and it was not), this key is recorded
    /// as denied and the accepted key stays. A token is used once either way.
    fn enroll_with_token(
        &self,
        hash: &[u8; 32],
        minion: &str,
        public_key: &[u8; 32],
        now_ms: u64,
    ) -> impl Future<Output = Result<TokenUse, StoreError>> + Send;
    /// An enrollment token by its hash (to tell a minion why it did not enroll).
    fn token(&self, hash: &[u8; 32]) -> impl Future<Output = Result<Option<TokenRecord>, StoreError>> + Send;
    /// Whether `minion` has an unused, unexpired enrollment token.
    fn token_outstanding(&self, minion: &str, now_ms: u64) -> impl Future<Output = Result<bool, StoreError>> + Send;
    /// How many keys are pending.
    fn pending_key_count(&self) -> impl Future<Output = Result<u64, StoreError>> + Send;
    /// Every minion in the registry.
    fn minions(&self) -> impl Future<Output = Result<Vec<MinionRecord>, StoreError>> + Send;
    /// Inserts or replaces minions' entries, in one transaction.
    fn put_minions(&self, minions: &[MinionRecord]) -> impl Future<Output = Result<(), StoreError>> + Send;
    /// These minions' entries, those that exist (another master wrote them when the minions
    /// connected there), in one query per 500.
    fn minions_named(&self, ids: &[String]) -> impl Future<Output = Result<Vec<MinionRecord>, StoreError>> + Send;
    /// Removes a minion's entry.
    fn delete_minion(&self, id: &str) -> impl Future<Output = Result<(), StoreError>> + Send;
    /// Records a new job and every targeted minion's first state.
    fn insert_job(
        &self,
        job: &JobRecord,
        states: &[(String, MinionJobState)],
    ) -> impl Future<Output = Result<(), StoreError>> + Send;
    /// Applies state changes in one transaction, in order (a later change for the same job and
    /// minion wins; a return, once recorded, is kept). A slot already in a final state keeps it:
    /// of several masters deciding one slot, the first to store its decision wins.
    fn set_states(&self, changes: &[StateChange]) -> impl Future<Output = Result<(), StoreError>> + Send;
    /// Records where a job's rollout is (paused, resumed, stopped and why).
    fn set_rollout(
        &self,
        jid: &str,
        rollout: &halite_protocol::message::RolloutStatus,
    ) -> impl Future<Output = Result<(), StoreError>> + Send;
    /// The newest jobs, newest first, older than the jid `before` when given (a cursor for
    /// paging); with their minions' ids when `with_minions` (to decide who may see them).
    fn jobs(
        &self,
        before: Option<&str>,
        limit: u32,
        with_minions: bool,
    ) -> impl Future<Output = Result<Vec<JobListing>, StoreError>> + Send;
    /// One job in detail.
    fn job(&self, jid: &str) -> impl Future<Output = Result<Option<JobDetail>, StoreError>> + Send;
    /// The returns recorded for these minions of a job, those that have one (what a master
    /// following a job tells its watchers of slots another master ended), in one query per 500.
    fn returns_of(
        &self,
        jid: &str,
        minions: &[String],
    ) -> impl Future<Output = Result<Vec<(String, JobReturn)>, StoreError>> + Send;
    /// One job as a master that did not publish it needs it: the record (with the signed job)
    /// and every minion's state.
    fn live_job(&self, jid: &str) -> impl Future<Output = Result<Option<UnfinishedJob>, StoreError>> + Send;
    /// The jids of jobs with at least one minion not in a final state (a light query: what a
    /// master sharing the store compares with the jobs it holds).
    fn unfinished_jids(&self) -> impl Future<Output = Result<Vec<String>, StoreError>> + Send;
    /// Jobs with at least one minion not in a final state, with every minion's state.
    fn unfinished_jobs(&self) -> impl Future<Output = Result<Vec<UnfinishedJob>, StoreError>> + Send;
    /// Every principal.
    fn principals(&self) -> impl Future<Output = Result<Vec<PrincipalRecord>, StoreError>> + Send;
    /// Inserts or replaces a principal.
    fn put_principal(
        &self,
        principal: &PrincipalRecord,
        now_ms: u64,
    ) -> impl Future<Output = Result<(), StoreError>> + Send;
    /// Enrollment tokens (of `owner` when given, else everyone's), soonest to expire first
    /// (ids, never the tokens).
    fn tokens(
        &self,
        owner: Option<&str>,
    ) -> impl Future<Output = Result<Vec<halite_protocol::message::TokenSummary>, StoreError>> + Send;
    /// Deletes the enrollment token with this id (only if `owner` created it, when given);
    /// whether there was one.
    fn delete_token(&self, id: &str, owner: Option<&str>) -> impl Future<Output = Result<bool, StoreError>> + Send;
    /// Puts this master's keys in use for the rows it writes and the rows and announcements it
    /// trusts (`trust.rs`), registers its key (and certificate) for the other masters, and, the
    /// first time after the upgrade that added signatures, signs the rows written before it.
    /// Until it is called a store signs with a key of its own that nothing else trusts. Returns
    /// how many rows it signed.
    fn set_trust(&self, trust: trust::Trust, now_ms: u64) -> impl Future<Output = Result<u64, StoreError>> + Send;
    /// Removes a principal, and the gateway tokens acting as it (a principal added later under
    /// the same name does not inherit them); what it created passes to root, for the same
    /// reason. Returns whether it existed.
    fn delete_principal(&self, name: &str) -> impl Future<Output = Result<bool, StoreError>> + Send;
    /// Hands everything `from` created (configs, deployments, enrollment and gateway tokens)
    /// to `to`; how many rows moved.
    fn transfer_owner(&self, from: &str, to: &str) -> impl Future<Output = Result<u64, StoreError>> + Send;
    /// The newest jid ever stored, so jids keep increasing across restarts and clock steps.
    fn last_jid(&self) -> impl Future<Output = Result<Option<String>, StoreError>> + Send;
    /// The latest wall time the master recorded as reached (`None` before the first).
    fn wall_mark(&self) -> impl Future<Output = Result<Option<u64>, StoreError>> + Send;
    /// Records that the wall clock reached `ms` (kept only if later than the last mark).
    fn set_wall_mark(&self, ms: u64) -> impl Future<Output = Result<(), StoreError>> + Send;
    /// Checks the database's integrity (a damaged file is refused, not half-used).
    fn check(&self) -> impl Future<Output = Result<(), StoreError>> + Send;
    /// Writes everything out and closes (SQLite: checkpoints the WAL into the main file).
    fn close(&self) -> impl Future<Output = ()> + Send;
    /// Deletes finished jobs created before `before_ms`; returns how many. A job with any
    /// minion not in a final state is kept, whatever its age.
    fn purge_jobs(&self, before_ms: u64) -> impl Future<Output = Result<u64, StoreError>> + Send;
    /// Tells the other masters sharing this store of a change they keep in memory, after it
    /// is stored: queued, sent in order without the caller waiting for it. A store one master
    /// uses alone has nobody to tell.
    fn announce(&self, change: &ClusterChange) -> impl Future<Output = Result<(), StoreError>> + Send {
        let _ = change;
        async { Ok(()) }
    }
    /// This master among those sharing the store (as its announcements name it).
    fn instance(&self) -> &str {
        ""
    }
    /// Keeps an event too large to announce for the other masters; its id.
    fn put_shared_event(
        &self,
        tag: &str,
        data: &Value,
        now_ms: u64,
    ) -> impl Future<Output = Result<i64, StoreError>> + Send {
        let _ = (tag, data, now_ms);
        async { Err(StoreError::Unavailable("events are shared only through a PostgreSQL store".into())) }
    }
    /// An event another master kept with [`Store::put_shared_event`], if it still matches the
    /// digest its announcement carried ([`event_digest`]).
    fn shared_event(
        &self,
        id: i64,
        digest: &str,
    ) -> impl Future<Output = Result<Option<(String, Value)>, StoreError>> + Send {
        let _ = (id, digest);
        async { Ok(None) }
    }
    /// How many times the store has been found not answering since it was opened: a master
    /// sharing it may have missed announcements meanwhile, and rereads it when this changes.
    fn interruptions(&self) -> u64 {
        0
    }
    /// Whether the store answers, as it changes (`None`: a store that does not report it): the
    /// master's loop wakes when it does, to reread what it may have missed.
    fn reachability(&self) -> Option<tokio::sync::watch::Receiver<bool>> {
        None
    }
    /// The store's clock minus this host's, in milliseconds, kept up to date: masters sharing a
    /// store stamp everything with its time, so their own clocks may disagree (`None`: a store
    /// one master uses alone, whose own clock is the time).
    fn clock_offset(&self) -> Option<std::sync::Arc<std::sync::atomic::AtomicI64>> {
        None
    }
    /// The other masters' readiness addresses (`/readyz`) as last read, kept while the store
    /// does not answer (`None` on a store one master uses alone).
    fn peers_ready(&self) -> Option<tokio::sync::watch::Receiver<Vec<String>>> {
        None
    }
    /// The changes other masters announce, with who announced them, as they come, once per
    /// store (`None` on a store one master uses alone).
    fn changes(&self) -> Option<tokio::sync::mpsc::Receiver<Heard>> {
        None
    }
}

#[cfg(test)]
mod job_record_tests {
    use halite_protocol::message::{Amount, JobSpec, Rollout, RolloutState, SignedJob, Target, TargetKind};
    use serde_json::json;

    use super::JobRecord;

    #[test]
    fn a_job_record_holds_its_spec_and_gives_it_back() {
        let spec = JobSpec {
            args: vec![json!(1)],
            kwargs: [("name".to_owned(), json!("nginx"))].into(),
            timeout_ms: 1_000,
            ttl_ms: 2_000,
            rollout: Some(Rollout { batch: Some(Amount::Count(2)), ..Rollout::default() }),
            ..JobSpec::new(Target { kind: TargetKind::Grain, expr: "os:Debian".into() }, "pkg.install")
        };
        let signed = SignedJob { body: vec![1], signature: vec![2; 64], start_by_ms: None };
        let record = JobRecord::new("1".into(), spec.clone(), "ops".into(), 5, signed.clone());
        assert_eq!((record.jid.as_str(), record.caller.as_str(), record.created_at_ms), ("1", "ops", 5));
        assert_eq!((record.function.as_str(), record.timeout_ms, record.ttl_ms), ("pkg.install", 1_000, 2_000));
        assert_eq!(record.signed, signed);
        assert_eq!(record.rollout.as_ref().map(|r| r.state), Some(RolloutState::Running));
        assert_eq!(record.spec(), spec);
    }
}
