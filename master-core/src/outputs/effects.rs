//! What an owner decided and only the loop carries out: store calls, events on the bus,
//! announcements to the other masters, and the moves of another concern's state. An owner
//! returns them as values; the loop applies them in the order given (`Master::apply`, in
//! `server/effects.rs`), so an owner never reaches past its own state.

use halite_protocol::message::{
    ErrorKind, ErrorMessage, JobReturn, Message, MinionJobState, PublishRequest, SoftwareDeployment, Value,
};
use halite_protocol::noise::Session;
use halite_transport::{Lane, PeerId};

use crate::authz::publish::Publisher;
use crate::calls::deploy::Member;
use crate::file_reads::FileRead;
use crate::outputs::asks::Ask;
use crate::relay_requests::RelayRequest;
use crate::request_error::{Reply, RequestError};
use crate::store::ClusterChange;

/// One thing to do, decided by an owner.
pub enum Effect {
    /// A store call to make; its answer goes on as the ask says.
    Ask(Ask),
    /// An event for the bus here.
    Emit { tag: String, data: Value },
    /// An event for the bus here and, after the step's writes, on every master sharing the
    /// store (one no other master derives itself).
    EmitShared { tag: String, data: Value },
    /// A change to tell the other masters, after the step's writes.
    Tell(ClusterChange),
    /// A rollout's target to start: sent if its minion is connected here, waiting for the
    /// job's TTL if not, `offline` without one.
    StartTarget { jid: String, minion: String },
    /// A stopped rollout's queued targets end `skipped`.
    SkipQueued { jid: String },
    /// A job whose rollout's stop is stored is cancelled.
    Cancel { jid: String },
    /// A client's request answered.
    Reply { peer: PeerId, request_id: u64, answer: Box<Reply> },
    /// A message for a connection (a full queue drops it, said in the log).
    Send { peer: PeerId, message: Box<Message> },
    /// A slot's move, made where every slot moves (`SlotMoves`).
    Slot(SlotOp),
    /// Everything unfinished for a minion that said hello goes to it again, in jid order (its
    /// backlog included).
    DeliverAll { minion: String, peer: PeerId },
    /// A file read for a minion, to start (its answer comes back as an input).
    ReadFile(Box<FileRead>),
    /// A connection ended, closed with `why`.
    Forget { peer: PeerId, why: String },
    /// A connection closed that holds no session (a handshake's end).
    Disconnect { peer: PeerId, why: String },
    /// Handshake bytes for a connection, unsealed.
    SendParts { peer: PeerId, parts: Vec<Vec<u8>> },
    /// A connection authenticated: read on `lane` from now on.
    MarkAuthenticated { peer: PeerId, lane: Lane },
    /// A minion's session opened on `peer`, replacing any it had here.
    MinionOnline { peer: PeerId, id: String, session: Box<Session> },
    /// A minion whose key is no longer accepted: its session ends.
    CutMinion { id: String },
    /// Connections parked while their minion's key was pending close if it is now accepted.
    ReleaseParked,
    /// A job another master published, or this one lost track of, to load.
    AdoptJob { jid: String },
    /// A job another master cancelled, stopped for the minions served here.
    CancelHere { jid: String },
    /// Slots another master decided and stored, to follow.
    RemoteSlots { jid: String, states: Vec<(String, MinionJobState)> },
    /// A rollout another master changed, to reread.
    RolloutChangedElsewhere { jid: String },
    /// A live job sent to a connected minion, its slot marked sent.
    Deliver { jid: String, minion: String, peer: PeerId },
    /// A live job cancelled (its rollout stopped first, if it has one).
    CancelLive { jid: String },
    /// A group member's deployment pushed (or not), told to the group under way.
    MemberPushed { member: Member, pushed: Box<Result<SoftwareDeployment, RequestError>> },
    /// A deployment's last signal, to relay to its engine.
    StartRelay(Box<RelayRequest>),
    /// A minion's peer publish, to decide as any publish.
    Publish { peer: PeerId, caller: String, publisher: Publisher, request: Box<PublishRequest> },
}

/// A move of one slot (see `core/slot_moves.rs`).
pub enum SlotOp {
    /// To `state`, with its return (`SlotMoves::set`).
    Set { jid: String, minion: String, state: MinionJobState, ret: Option<JobReturn> },
    /// A move another master decided and stored, made here and told to its listeners
    /// (`SlotMoves::elsewhere`).
    Moved { jid: String, minion: String, state: MinionJobState, ret: Option<JobReturn> },
}

/// What a handler decided for the loop to carry out, in the order decided: every desk collects
/// its effects here.
#[derive(Default)]
pub struct Effects(Vec<Effect>);

impl Effects {
    pub fn push(&mut self, effect: Effect) {
        self.0.push(effect);
    }

    pub fn ask(&mut self, ask: Ask) {
        self.push(Effect::Ask(ask));
    }

    /// A client's request answered.
    pub fn reply(&mut self, peer: PeerId, request_id: u64, answer: Reply) {
        self.push(Effect::Reply { peer, request_id, answer: Box::new(answer) });
    }

    pub fn send(&mut self, peer: PeerId, message: Message) {
        self.push(Effect::Send { peer, message: Box::new(message) });
    }

    /// An error for a connection; `request` names what it answers, if anything.
    pub fn send_error(&mut self, peer: PeerId, kind: ErrorKind, message: String, request: Option<String>) {
        self.send(peer, Message::Error(ErrorMessage { kind, message, request }));
    }

    pub fn emit(&mut self, tag: String, data: Value) {
        self.push(Effect::Emit { tag, data });
    }

    pub fn emit_shared(&mut self, tag: String, data: Value) {
        self.push(Effect::EmitShared { tag, data });
    }

    pub fn tell(&mut self, change: ClusterChange) {
        self.push(Effect::Tell(change));
    }

    /// A connection ended, closed with `why`.
    pub fn forget(&mut self, peer: PeerId, why: &str) {
        self.push(Effect::Forget { peer, why: why.to_owned() });
    }

    pub fn slot(&mut self, op: SlotOp) {
        self.push(Effect::Slot(op));
    }
}

impl Extend<Effect> for Effects {
    fn extend<T: IntoIterator<Item = Effect>>(&mut self, effects: T) {
        self.0.extend(effects);
    }
}

impl IntoIterator for Effects {
    type Item = Effect;
    type IntoIter = std::vec::IntoIter<Effect>;

    fn into_iter(self) -> Self::IntoIter {
        self.0.into_iter()
    }
}
