//! Message types. Field names are the wire names; `docs/protocol.md` §6 mirrors this file.

use std::borrow::Cow;
use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use super::admin::{JobDone, JobUpdate, JobUpdates, Request, Response};
use super::job::SignedJob;

/// A dynamic value (function arguments, return data, grains, event data).
pub type Value = serde_json::Value;

/// The outer wrapper of every message.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Envelope {
    /// Message layer version ([`super::MESSAGE_VERSION`]).
    pub v: u16,
    /// The message.
    pub msg: Message,
}

/// Every message of the protocol, externally tagged: `{"job": {...}}`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Message {
    /// Minion → master, first message of a session: who it is and what it can do.
    Hello(Hello),
    /// Client → master, first message of a client session.
    ClientHello(ClientHello),
    /// Master → minion or client, answer to a hello.
    Welcome(Welcome),
    /// Master → minion: run a function.
    Job(SignedJob),
    /// Minion → master: the job was received and accepted for execution (or refused).
    JobAck(JobAck),
    /// Minion → master: intermediate output of a running job.
    JobProgress(JobProgress),
    /// Minion → master: the job's final result; master → client when streaming returns.
    JobReturn(JobReturn),
    /// Master → minion: the return for `jid` is stored; the minion may drop it from its outbox.
    ReturnAck(ReturnAck),
    /// Master → minion: send again every return not yet acknowledged (the master turned some
    /// away while it could not store them). The session stays.
    ResendReturns(ResendReturns),
    /// Master → minion: stop a running job. Client → master: cancel a job.
    Cancel(Cancel),
    /// Minion → master: an event (the master namespaces the tag); master → client: a bus event.
    Event(Event),
    /// Client (or ACL'd minion) → master: run a function on a target.
    Publish(PublishRequest),
    /// Master → client: the job was created and these minions are expected to answer.
    Published(Published),
    /// Client → master: stream bus events whose tags match these globs.
    Subscribe(Subscribe),
    /// Either direction: a request failed.
    Error(ErrorMessage),
    /// Client → master: an administrative request.
    Request(Request),
    /// Master → client: the answer to a request.
    Response(Response),
    /// Master → client: a job changed state on one minion.
    JobUpdate(JobUpdate),
    /// Master → client: every minion of a job reached a final state.
    JobDone(JobDone),
    /// Master → client: several job state changes at once.
    JobUpdates(JobUpdates),
    /// Minion → master: part of a file the master serves (`halite://` sources).
    FileGet(FileGet),
    /// Master → minion: that part, with the whole file's size and digest.
    FileChunk(FileChunk),
}

/// A module (group of functions) a minion offers, with its version.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ModuleInfo {
    /// Module name, e.g. `pkg`.
    pub name: String,
    /// Module version.
    pub version: String,
}

/// What a minion announces when its session starts.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Hello {
    /// The minion's id (validated by the master against the key registry).
    pub id: String,
    /// The minion's software version.
    pub version: String,
    /// Grains: facts about the host (os, kernel, cpu count, ...).
    pub grains: BTreeMap<String, Value>,
    /// Modules available.
    pub modules: Vec<ModuleInfo>,
    /// Fully qualified functions its local policy allows, e.g. `test.ping`.
    pub functions: Vec<String>,
    /// Every function it has, its policy aside (what the master checks a job's function
    /// against before sending it: a name no target has is refused there). Empty from a
    /// minion that does not say.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub installed: Vec<String>,
}

/// What a client announces when its session starts.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ClientHello {
    /// Principal name the client acts as.
    pub principal: String,
    /// The client's software version.
    pub version: String,
}

/// The master's answer to a hello.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Welcome {
    /// The master's id.
    pub master_id: String,
    /// The master's software version.
    pub version: String,
    /// The master's wall clock, Unix milliseconds, when it sent this (0 from older masters).
    /// A minion judges the freshness of signed jobs by it, carried forward on its own
    /// monotonic clock, so a wrong guest clock neither expires fresh jobs nor revives old ones.
    #[serde(default)]
    pub now_ms: u64,
    /// Master keys the cluster key revoked (each 192 hex digits: the key and the cluster key's
    /// signature): a minion checks them against the key it pins and refuses those masters.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub revoked: Vec<String>,
    /// Answers no hello: the master tells a connected minion of revocations it has just read
    /// (SIGHUP). Only `revoked` is meant; `now_ms` dates nothing and is not taken.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub revocations_only: bool,
}

/// Acknowledgement of a job by a minion.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct JobAck {
    /// Job id.
    pub jid: String,
    /// Whether the minion will run it. A refused job is followed by no return.
    pub accepted: bool,
    /// Why it was refused (empty when accepted).
    #[serde(default)]
    pub reason: String,
}

/// Intermediate output of a running job.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct JobProgress {
    /// Job id.
    pub jid: String,
    /// Sequence number, from 0, so the master can order and de-duplicate.
    pub seq: u64,
    /// Progress data.
    pub data: Value,
}

/// The final result of a job on one minion.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct JobReturn {
    /// Job id.
    pub jid: String,
    /// The minion that ran it. Set by the master when relaying to clients; a minion's own
    /// value is ignored in favour of its authenticated id.
    #[serde(default)]
    pub minion: String,
    /// Whether the function succeeded.
    pub success: bool,
    /// Process-style return code (0 on success).
    pub retcode: i32,
    /// The function's return data.
    pub outputs: Value,
    /// Some output was cut to respect size caps.
    #[serde(default)]
    pub truncated: bool,
    /// Wall time the function took, in milliseconds.
    #[serde(default)]
    pub duration_ms: u64,
    /// How the function ended.
    #[serde(default)]
    pub outcome: Outcome,
}

/// How a job ended on the minion.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub enum Outcome {
    /// The function ran to completion (successfully or not: see `success`).
    #[default]
    Completed,
    /// The minion killed it at its timeout.
    TimedOut,
    /// The minion killed it on a cancel.
    Cancelled,
    /// The minion restarted while it ran; at-most-once execution forbids running it again.
    Interrupted,
    /// The minion refused it (unknown function, bad arguments).
    Refused,
    /// The minion's local policy does not allow this function for this caller.
    Denied,
}

/// The master stored a return.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ReturnAck {
    /// Job id.
    pub jid: String,
}

/// The master asks for the returns it has not acknowledged: it could not store some it was
/// sent, and can now. Fields may be added; a minion reads none.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ResendReturns {}

/// Cancel a job.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Cancel {
    /// Job id.
    pub jid: String,
}

/// An event with a slash-separated tag.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Event {
    /// Tag, e.g. `halite/job/20261121063522123456/ret/web1`.
    pub tag: String,
    /// Event body.
    pub data: Value,
    /// Set by the master on the events it sends clients: an id to resume after
    /// (`subscribe.after`, SSE `Last-Event-ID`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub id: Option<String>,
}

/// How a target expression is interpreted.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub enum TargetKind {
    /// Shell-style glob on minion ids (the default).
    Glob,
    /// Comma-separated list of ids.
    List,
    /// Anchored regular expression on ids.
    Regex,
    /// `key:glob` on a grain.
    Grain,
    /// `and`/`or`/`not` of the above with prefixes (`G@`, `L@`, `E@`).
    Compound,
    /// A nodegroup defined in the master config.
    Nodegroup,
}

/// A target: which minions a job is for.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct Target {
    /// How to read `expr`.
    pub kind: TargetKind,
    /// The expression.
    pub expr: String,
}

impl Target {
    /// The one-term compound target `{engine}{expr}` (`P@os:deb.*`, `S@10.0.0.0/8`), as Salt's
    /// `grain_pcre` and `ipcidr` targets are sent; `None` when `expr` holds whitespace, which
    /// would split it into several words of an expression.
    pub fn one_term(engine: &str, expr: &str) -> Option<Target> {
        (!expr.chars().any(char::is_whitespace))
            .then(|| Target { kind: TargetKind::Compound, expr: format!("{engine}{expr}") })
    }
}

/// A number of a job's targets: a count, or a percentage of them.
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Amount {
    /// This many targets.
    Count(u32),
    /// This percentage (1–100) of the targets.
    Percent(u8),
}

impl Amount {
    /// How many of `total` targets, rounded up and at least one: a window size.
    pub fn at_least_one_of(self, total: usize) -> usize {
        match self {
            Amount::Count(n) => (n as usize).max(1),
            Amount::Percent(p) => (total * usize::from(p.min(100))).div_ceil(100).max(1),
        }
    }

    /// How many of `total` targets, rounded down (may be zero): an error budget.
    pub fn of(self, total: usize) -> usize {
        match self {
            Amount::Count(n) => n as usize,
            Amount::Percent(p) => total * usize::from(p.min(100)) / 100,
        }
    }

    /// Parses `10` or `10%` (what the CLI and the gateway accept).
    pub fn parse(text: &str) -> Result<Self, AmountError> {
        let text = text.trim();
        match text.strip_suffix('%') {
            Some(p) => match p.trim().parse::<u8>() {
                Ok(p @ 1..=100) => Ok(Amount::Percent(p)),
                _ => Err(AmountError::Percentage(text.to_owned())),
            },
            None => text.parse::<u32>().map(Amount::Count).map_err(|_| AmountError::Count(text.to_owned())),
        }
    }
}

/// Why a text is not an [`Amount`]; each carries the text (trimmed).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum AmountError {
    /// Ends in `%` but is not a whole percentage from 1 to 100.
    #[error("{0:?} is not a percentage from 1% to 100%")]
    Percentage(String),
    /// Neither a count nor a percentage.
    #[error("{0:?} is not a count or a percentage (10 or 10%)")]
    Count(String),
}

impl std::fmt::Display for Amount {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Amount::Count(n) => write!(f, "{n}"),
            Amount::Percent(p) => write!(f, "{p}%"),
        }
    }
}

/// How a job reaches its targets over time; without one, every target gets it at once.
/// Targets are taken in id order.
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Rollout {
    /// At most this many targets run the job at once (a sliding window: when one finishes the
    /// next starts). Targets waiting offline for their TTL do not count as running.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub batch: Option<Amount>,
    /// After a target finishes, wait this long before starting the next, milliseconds.
    #[serde(default)]
    pub batch_wait_ms: u64,
    /// Once more than this many targets have failed (failed, timed out, denied, expired,
    /// offline), nothing more is dispatched and the rest end `skipped`. `Count(0)` stops at
    /// the first failure.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_errors: Option<Amount>,
    /// The first this-many targets run alone; the rest start only if every one of them
    /// returned successfully.
    #[serde(default)]
    pub canary: u32,
    /// Event tag globs: an event matching one on the master's bus stops dispatching.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub abort_on: Vec<String>,
}

/// Where a rollout is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub enum RolloutState {
    /// Dispatching as its window allows.
    Running,
    /// Paused by a client: running targets finish, no new one starts until resumed.
    Paused,
    /// Stopped for good (error budget, canary, an abort event, a cancel): the targets not yet
    /// started ended `skipped` (or `cancelled`).
    Stopped,
}

/// A rollout and where it is, as stored with its job and shown by `job_show`.
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RolloutStatus {
    /// What was asked.
    pub spec: Rollout,
    /// Where it is.
    pub state: RolloutState,
    /// Why it is paused or stopped.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
}

impl RolloutStatus {
    /// A new rollout of `spec`: running.
    pub fn new(spec: Rollout) -> Self {
        RolloutStatus { spec, state: RolloutState::Running, reason: None }
    }
}

/// What a caller chooses about a job: which minions, what they run and with what, how long
/// they may take, how the job reaches them. The one description of a job that the protocol's
/// [`PublishRequest`], the master's store, the SDKs and the HTTP gateway share; the master
/// signs a [`Job`](super::Job) from it for the minions.
#[derive(Debug, Clone, PartialEq)]
pub struct JobSpec {
    /// Which minions.
    pub target: Target,
    /// Fully qualified function, e.g. `service.restart`.
    pub function: String,
    /// Positional arguments.
    pub args: Vec<Value>,
    /// Keyword arguments, sorted by name.
    pub kwargs: BTreeMap<String, Value>,
    /// How long each minion may run the job, milliseconds: the minion kills the job's process
    /// group after it.
    pub timeout_ms: u64,
    /// How long the job waits for offline minions before they are marked expired,
    /// milliseconds (0: they are reported offline at once).
    pub ttl_ms: u64,
    /// How the job reaches its targets over time (batches, error budget, canaries, abort
    /// events); `None`: every target at once.
    pub rollout: Option<Rollout>,
}

impl JobSpec {
    /// A job running `function` on `target` with no arguments, the default timeout
    /// ([`DEFAULT_JOB_TIMEOUT_MS`](super::DEFAULT_JOB_TIMEOUT_MS)), no TTL and no rollout.
    pub fn new(target: Target, function: impl Into<String>) -> Self {
        JobSpec {
            target,
            function: function.into(),
            args: Vec::new(),
            kwargs: BTreeMap::new(),
            timeout_ms: super::DEFAULT_JOB_TIMEOUT_MS,
            ttl_ms: 0,
            rollout: None,
        }
    }
}

/// A request to run a job. On the wire the job's fields sit beside the request's, in one map
/// (`request_id`, the [`JobSpec`]'s fields, `on_behalf_of`).
#[derive(Debug, Clone, PartialEq)]
pub struct PublishRequest {
    /// Client-chosen id echoed in the answer.
    pub request_id: u64,
    /// The job.
    pub spec: JobSpec,
    /// Set by a minion's `peer.publish`: the caller of the job that is publishing. The master
    /// then requires the caller's own rules to allow the new job too, so nobody reaches
    /// through a minion what they may not call themselves. Who asks, not what runs: not part
    /// of the job.
    pub on_behalf_of: Option<String>,
}

impl PublishRequest {
    /// A request to run `spec`, for no other caller.
    pub fn new(request_id: u64, spec: JobSpec) -> Self {
        PublishRequest { request_id, spec, on_behalf_of: None }
    }
}

/// How a [`PublishRequest`] is spelled on the wire: the job's fields flat beside the request's.
/// Borrowed when encoding, owned when decoding; each field means what its namesake of
/// [`JobSpec`] or [`PublishRequest`] does. (Not `#[serde(flatten)]`, which would decode through
/// a buffer of untyped values and refuse the array form MessagePack structs may also take.)
#[derive(Serialize, Deserialize)]
#[serde(rename = "PublishRequest")]
struct PublishRequestWire<'a> {
    request_id: u64,
    target: Cow<'a, Target>,
    function: Cow<'a, str>,
    #[serde(default)]
    args: Cow<'a, [Value]>,
    #[serde(default)]
    kwargs: Cow<'a, BTreeMap<String, Value>>,
    timeout_ms: u64,
    ttl_ms: u64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    rollout: Option<Cow<'a, Rollout>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    on_behalf_of: Option<Cow<'a, str>>,
}

impl Serialize for PublishRequest {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        let PublishRequest { request_id, spec, on_behalf_of } = self;
        let JobSpec { target, function, args, kwargs, timeout_ms, ttl_ms, rollout } = spec;
        PublishRequestWire {
            request_id: *request_id,
            target: Cow::Borrowed(target),
            function: Cow::Borrowed(function),
            args: Cow::Borrowed(args),
            kwargs: Cow::Borrowed(kwargs),
            timeout_ms: *timeout_ms,
            ttl_ms: *ttl_ms,
            rollout: rollout.as_ref().map(Cow::Borrowed),
            on_behalf_of: on_behalf_of.as_deref().map(Cow::Borrowed),
        }
        .serialize(serializer)
    }
}

impl<'de> Deserialize<'de> for PublishRequest {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let PublishRequestWire {
            request_id,
            target,
            function,
            args,
            kwargs,
            timeout_ms,
            ttl_ms,
            rollout,
            on_behalf_of,
        } = PublishRequestWire::deserialize(deserializer)?;
        Ok(PublishRequest {
            request_id,
            spec: JobSpec {
                target: target.into_owned(),
                function: function.into_owned(),
                args: args.into_owned(),
                kwargs: kwargs.into_owned(),
                timeout_ms,
                ttl_ms,
                rollout: rollout.map(Cow::into_owned),
            },
            on_behalf_of: on_behalf_of.map(Cow::into_owned),
        })
    }
}

/// The answer to a publish request.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Published {
    /// The request this answers.
    pub request_id: u64,
    /// The new job's id.
    pub jid: String,
    /// Every minion expected to reach a final state for this job.
    pub minions: Vec<String>,
    /// Ids the target named that no minion (the caller may target) has: each is also in the
    /// job, final at once as `unknown`, and told as an update like any other.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub unknown: Vec<String>,
}

/// A minion asks for the bytes of a file under the master's file root from `offset` on.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct FileGet {
    /// Echoed in the answer (or in the error refusing it).
    pub request_id: u64,
    /// Relative to the file root, `/`-separated, no `..` (the `halite://` URL's path).
    pub path: String,
    /// Where to start reading.
    pub offset: u64,
}

/// One part of a served file. Every part carries the whole file's size and SHA-256 as the
/// master read them: a file that changes while being copied shows a different digest.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct FileChunk {
    /// The request answered.
    pub request_id: u64,
    /// The whole file's size, bytes.
    pub size: u64,
    /// The whole file's SHA-256, lowercase hex.
    pub sha256: String,
    /// Where this part starts.
    pub offset: u64,
    /// The bytes (at most [`FILE_CHUNK_BYTES`]); empty at the end of the file.
    #[serde(with = "serde_bytes")]
    pub data: Vec<u8>,
}

/// Most bytes a [`FileChunk`] carries: far below the message cap, so a part never needs more
/// than one message and a transfer interleaves with other traffic.
pub const FILE_CHUNK_BYTES: usize = 1024 * 1024;

/// The `request` an `error` refusing a subscription names (a subscription has no request id of
/// its own).
pub const SUBSCRIBE_REQUEST: &str = "subscribe";

/// Subscribe to bus events.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Subscribe {
    /// Tag globs; an event matching any is delivered.
    pub patterns: Vec<String>,
    /// Resume after this event id: the master first sends the events it still holds that came
    /// after it (and `halite/bus/gap` if it no longer holds them all).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub after: Option<String>,
}

/// Kinds of error that cross the wire. Unknown kinds from newer peers decode as `Other`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ErrorKind {
    /// The request could not be decoded or is invalid.
    BadRequest,
    /// The caller is not allowed to do this.
    Forbidden,
    /// The named job, minion or function does not exist.
    NotFound,
    /// The function is not in the minion's registry or not allowed by its policy.
    UnknownFunction,
    /// A job's signature did not verify.
    BadSignature,
    /// A size, rate or count limit was hit.
    LimitExceeded,
    /// The operation timed out.
    Timeout,
    /// The peer's protocol version is not supported.
    UnsupportedVersion,
    /// The peer failed internally.
    Internal,
    /// The request conflicts with the current state (a token for an id whose key is accepted,
    /// without asking to replace it).
    Conflict,
    /// An error kind this node does not know.
    #[serde(other)]
    Other,
}

/// A failed request.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ErrorMessage {
    /// What went wrong, for programs.
    pub kind: ErrorKind,
    /// What went wrong, for humans.
    pub message: String,
    /// The request it answers (a publish request id or a jid), if any.
    #[serde(default)]
    pub request: Option<String>,
}
