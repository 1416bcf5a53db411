//! What a master knows of the other masters sharing its store: which of them it has heard from
//! lately, and which minions are connected to which. Pure state, fed by announcements and the
//! clock; a master not heard from for [`GONE_AFTER`] is taken as gone, with its minions.
//!
//! Silence is judged only while this master can hear: through a gap (its listening connection
//! lost, the store not answering, a reread due) another master's silence may be its own
//! deafness, so the last placement of each minion stands (for at most [`KEPT_THROUGH_GAP`]), and
//! after the gap until each master that served minions answers the roll call the reread sends
//! (for at most [`GONE_AFTER`]). Minions it cannot place meanwhile are not called offline: their
//! slots wait until the placement settles ([`ClusterView::placement_settles_at`]).

use std::collections::{HashMap, HashSet};
use std::time::{Duration, Instant};

use halite_protocol::message::{MinionJobState, Value};

use crate::core::sessions::Sessions;
use crate::store::{ClusterChange, StateChange};

/// How often a master says it is alive.
pub const ALIVE_EVERY: Duration = Duration::from_secs(2);

/// How often a master looks in the store for live jobs it does not hold (one whose publisher
/// died between storing and announcing it, an announcement lost).
pub const SWEEP_EVERY: Duration = Duration::from_secs(5);

/// Silence after which a master is taken as gone (three missed heartbeats).
pub const GONE_AFTER: Duration = Duration::from_secs(6);

/// How long, in a gap in what this master hears, a minion's last known master is still taken
/// as serving it.
pub const KEPT_THROUGH_GAP: Duration = Duration::from_secs(60);

/// The other masters and the minions connected to them, whether this master may have missed
/// what they changed, and what it has to tell them.
#[derive(Debug, Default)]
pub struct ClusterView {
    /// Whether other masters may exist at all (the store carries announcements).
    shared: bool,
    /// When each master was last heard from.
    heard: HashMap<String, Instant>,
    /// Which master each minion connected elsewhere is on.
    elsewhere: HashMap<String, String>,
    /// Since when the connection carrying the other masters' changes is lost (the store said
    /// so, [`ClusterView::listener_lost`]), if it is not back yet: what they announce meanwhile
    /// is missed.
    deaf_since: Option<Instant>,
    /// When the last reread called the roll, and the masters serving minions then that have
    /// not answered since (their last placements stand until they do, or [`GONE_AFTER`]).
    roll_call: Option<(Instant, HashSet<String>)>,
    /// When this master last said it is alive.
    last_alive: Option<Instant>,
    /// When this master last looked for live jobs it does not hold.
    last_sweep: Option<Instant>,
    /// Whether this master may have missed changes (its listener was cut, the store did not
    /// answer, an announcement could not be applied): it rereads the store until it succeeds.
    needs_resync: bool,
    /// Whether a read an announcement or a reread asked for failed since the last look
    /// ([`ClusterView::take_read_failed`]): a reread that asked for it did not succeed.
    read_failed: bool,
    /// The store's count of interruptions last seen (see `Store::interruptions`).
    interruptions_seen: u64,
    /// Rereads tried since the last that succeeded.
    resync_attempts: u64,
    /// The wall time (ms) from which this master may have missed jobs, while a reread is due:
    /// a little before the gap was noticed (see [`GAP_LEAD`]).
    gap_began_ms: Option<u64>,
    /// The wall time (ms) this master began following the store: jobs older than that were
    /// never its subscribers' to hear of.
    joined_ms: u64,
    /// What to tell the other masters, in order: sent by the loop once the step's writes are
    /// done (`Master::flush`), so each is already stored when it arrives.
    told: Vec<ClusterChange>,
    /// Minions that left this master, told together after the step's writes.
    left_here: Vec<String>,
    /// Events published here, for the other masters' subscribers.
    shared_events: Vec<(String, Value)>,
}

/// How long before a gap is noticed it may have begun: a silent listener is found within a
/// few seconds, a hung statement within its 60 s timeout. Jobs published since are looked for
/// when the store is reread.
pub const GAP_LEAD: Duration = Duration::from_secs(90);

/// The most jobs published during a gap that a reread tells this master's subscribers of (the
/// newest; older ones are in `halite jobs`).
pub const GAP_JOBS_MAX: usize = 5_000;

impl ClusterView {
    /// A store other masters may share, followed from `joined_ms` (wall time).
    pub fn shared(joined_ms: u64) -> Self {
        ClusterView { shared: true, joined_ms, ..ClusterView::default() }
    }

    /// Whether other masters may exist at all.
    pub fn is_shared(&self) -> bool {
        self.shared
    }

    /// Queues a change for the other masters (nothing without any).
    pub fn tell(&mut self, change: ClusterChange) {
        if self.shared {
            self.told.push(change);
        }
    }

    /// Announces the slots this master just stored, job by job.
    pub fn tell_slots(&mut self, changes: &[StateChange]) {
        let mut by_job: Vec<(String, Vec<(String, MinionJobState)>)> = Vec::new();
        for change in changes.iter().filter(|c| !c.late) {
            match by_job.iter_mut().find(|(jid, _)| *jid == change.jid) {
                Some((_, states)) => states.push((change.minion.clone(), change.state)),
                None => by_job.push((change.jid.clone(), vec![(change.minion.clone(), change.state)])),
            }
        }
        for (jid, states) in by_job {
            self.tell(ClusterChange::Slots { jid, states });
        }
    }

    /// The changes to tell, in order.
    pub fn take_told(&mut self) -> Vec<ClusterChange> {
        std::mem::take(&mut self.told)
    }

    /// `minion` left this master: told to the others (nothing without any).
    pub fn left_here(&mut self, minion: String) {
        if self.shared {
            self.left_here.push(minion);
        }
    }

    /// The minions that left this master since the last call.
    pub fn take_left_here(&mut self) -> Vec<String> {
        std::mem::take(&mut self.left_here)
    }

    /// An event published here, for the other masters' subscribers (nothing without any).
    pub fn share_event(&mut self, tag: &str, data: &Value) {
        if self.shared {
            self.shared_events.push((tag.to_owned(), data.clone()));
        }
    }

    /// The events to share, in order.
    pub fn take_shared_events(&mut self) -> Vec<(String, Value)> {
        std::mem::take(&mut self.shared_events)
    }

    /// This master may have missed changes: it rereads the store until that succeeds.
    pub fn lost_track(&mut self) {
        self.needs_resync = true;
    }

    /// A read another master's change, or a reread, asked for failed: changes may have been
    /// missed.
    pub fn read_failed(&mut self) {
        self.read_failed = true;
        self.needs_resync = true;
    }

    /// Whether a read failed since the last call. A reread whose reads failed is not done: the
    /// gap it covers stays open for the next.
    pub fn take_read_failed(&mut self) -> bool {
        std::mem::take(&mut self.read_failed)
    }

    /// Whether a reread of the store is due.
    pub fn needs_resync(&self) -> bool {
        self.needs_resync
    }

    /// Whether the store was interrupted (its count is `interruptions`) since this master last
    /// looked: it may have missed changes meanwhile.
    pub fn missed_interruptions(&self, interruptions: u64) -> bool {
        self.shared && interruptions != self.interruptions_seen
    }

    /// Looks at the store's count of interruptions: one not seen before makes a reread due.
    pub fn note_interruptions(&mut self, interruptions: u64) {
        if interruptions != self.interruptions_seen {
            self.interruptions_seen = interruptions;
            self.needs_resync = true;
        }
    }

    /// A reread begins, noticed at `noticed_ms` (wall time): whether it is the first of its
    /// gap, and the wall time from which jobs may have been missed (a little before the gap
    /// was first noticed, never before this master joined).
    pub fn resync_begins(&mut self, noticed_ms: u64) -> (bool, u64) {
        let first = self.resync_attempts == 0;
        self.resync_attempts += 1;
        let lead = GAP_LEAD.as_millis() as u64;
        let began = *self.gap_began_ms.get_or_insert(noticed_ms.saturating_sub(lead).max(self.joined_ms));
        (first, began)
    }

    /// The reread succeeded at `now`, its roll call sent: this master follows the store again,
    /// and waits for the masters that served minions to say which.
    pub fn resynced(&mut self, now: Instant) {
        self.needs_resync = false;
        self.resync_attempts = 0;
        self.gap_began_ms = None;
        let serving: HashSet<String> = self.elsewhere.values().cloned().collect();
        self.roll_call = Some((now, serving));
    }

    /// The store lost the connection carrying the other masters' changes: until it is back
    /// ([`ClusterView::listening_again`]), their silence is not theirs.
    pub fn listener_lost(&mut self, now: Instant) {
        if self.shared {
            self.deaf_since.get_or_insert(now);
        }
    }

    /// The connection carrying the other masters' changes is back (a reread follows).
    pub fn listening_again(&mut self) {
        self.deaf_since = None;
    }

    /// `master` said which minions it serves (its answer to a roll call, or any `Here`).
    pub fn answered(&mut self, master: &str) {
        if let Some((_, waiting)) = &mut self.roll_call {
            waiting.remove(master);
        }
    }

    /// Whether this master may be missing what the others say: its listener is lost (taken
    /// so for at most [`KEPT_THROUGH_GAP`]: past it, silence counts again), or a reread is due.
    fn in_gap(&self, now: Instant) -> bool {
        self.deaf_since.is_some_and(|at| now < at + KEPT_THROUGH_GAP) || self.needs_resync
    }

    /// When this master can place every minion again (say which master serves it, or that none
    /// does), if it cannot now: during a gap, [`GONE_AFTER`] from now at the earliest; after
    /// one, once every master that served minions answered the roll call, or [`GONE_AFTER`]
    /// after it. `None`: it can.
    pub fn placement_settles_at(&self, now: Instant) -> Option<Instant> {
        if !self.shared {
            return None;
        }
        if self.in_gap(now) {
            return Some(now + GONE_AFTER);
        }
        let (at, waiting) = self.open_roll_call(now)?;
        (!waiting.is_empty()).then_some(at + GONE_AFTER)
    }

    /// The last roll call and the masters yet to answer it, while they are waited for.
    fn open_roll_call(&self, now: Instant) -> Option<(Instant, &HashSet<String>)> {
        let (at, waiting) = self.roll_call.as_ref()?;
        (now < *at + GONE_AFTER).then_some((*at, waiting))
    }

    /// Anything from `master` shows it is alive.
    pub fn heard_from(&mut self, master: &str, now: Instant) {
        self.heard.insert(master.to_owned(), now);
    }

    /// `minion` is connected to `master`.
    pub fn arrived(&mut self, minion: &str, master: &str) {
        self.elsewhere.insert(minion.to_owned(), master.to_owned());
    }

    /// `minion` left `master` (a later arrival elsewhere is kept).
    pub fn left(&mut self, minion: &str, master: &str) {
        if self.elsewhere.get(minion).is_some_and(|m| m == master) {
            self.elsewhere.remove(minion);
        }
    }

    /// Whether `minion`, not online here (`sessions`), is served by another live master.
    pub fn serves_elsewhere(&self, minion: &str, sessions: &Sessions, now: Instant) -> bool {
        !sessions.is_online(minion) && self.master_of(minion, now).is_some()
    }

    /// The live master `minion` is connected to, if another one. A master silent for
    /// [`GONE_AFTER`] is gone, unless its silence may be this master's own deafness (see the
    /// module's documentation).
    pub fn master_of(&self, minion: &str, now: Instant) -> Option<&str> {
        let master = self.elsewhere.get(minion)?;
        let silent = now.saturating_duration_since(*self.heard.get(master)?);
        let awaited = self.open_roll_call(now).is_some_and(|(_, waiting)| waiting.contains(master));
        let live = silent < GONE_AFTER || (self.in_gap(now) && silent < KEPT_THROUGH_GAP) || awaited;
        live.then_some(master.as_str())
    }

    /// Whether it is time to look for live jobs this master does not hold (and notes that it
    /// does). The first look waits a full period: at start every live job is loaded anyway.
    pub fn sweep_due(&mut self, now: Instant) -> bool {
        if !self.shared {
            return false;
        }
        let last = *self.last_sweep.get_or_insert(now);
        let due = now.saturating_duration_since(last) >= SWEEP_EVERY;
        if due {
            self.last_sweep = Some(now);
        }
        due
    }

    /// When this master next has something to do for the others (say it is alive, look for
    /// jobs it does not hold); `None` when no other master can exist.
    pub fn next_due(&self, now: Instant) -> Option<Instant> {
        if !self.shared {
            return None;
        }
        let alive = self.last_alive.map_or(now, |at| at + ALIVE_EVERY);
        // Before the first look there is no sweep to plan (see `sweep_due`), and one overdue
        // waits for the store to be reread: the wakes that say alive or retry the reread look.
        let sweep = self.last_sweep.map(|at| at + SWEEP_EVERY).filter(|at| *at > now);
        Some(sweep.map_or(alive, |sweep| alive.min(sweep)))
    }

    /// Whether it is time to say this master is alive (and notes that it does).
    pub fn alive_due(&mut self, now: Instant) -> bool {
        let due = self.shared && self.last_alive.is_none_or(|t| now.saturating_duration_since(t) >= ALIVE_EVERY);
        if due {
            self.last_alive = Some(now);
        }
        due
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_minion_is_elsewhere_while_its_master_is_heard_from() {
        let start = Instant::now();
        let mut view = ClusterView::shared(0);
        view.heard_from("b", start);
        view.arrived("web1", "b");
        assert_eq!(view.master_of("web1", start + Duration::from_secs(5)), Some("b"));
        assert_eq!(view.master_of("web1", start + GONE_AFTER), None, "b went silent: gone");
        view.heard_from("b", start + GONE_AFTER);
        assert_eq!(view.master_of("web1", start + GONE_AFTER), Some("b"));
        // It moved to c before b's departure notice arrived: the move stands.
        view.heard_from("c", start + GONE_AFTER);
        view.arrived("web1", "c");
        view.left("web1", "b");
        assert_eq!(view.master_of("web1", start + GONE_AFTER), Some("c"));
        view.left("web1", "c");
        assert_eq!(view.master_of("web1", start + GONE_AFTER), None);
    }

    #[test]
    fn silence_heard_through_a_gap_is_not_taken_as_gone_and_the_roll_call_settles_placements() {
        let start = Instant::now();
        let mut view = ClusterView::shared(0);
        view.heard_from("b", start);
        view.arrived("web1", "b");
        view.listener_lost(start + Duration::from_secs(1));
        let later = start + Duration::from_secs(20);
        assert_eq!(view.master_of("web1", later), Some("b"), "deaf: b's silence may be ours");
        assert_eq!(view.placement_settles_at(later), Some(later + GONE_AFTER));
        assert_eq!(view.master_of("web1", start + KEPT_THROUGH_GAP + Duration::from_secs(2)), None, "bounded");
        // Back, and reread: b's placement stands until it answers, at most GONE_AFTER.
        view.listening_again();
        view.resynced(later);
        assert_eq!(view.master_of("web1", later + Duration::from_secs(1)), Some("b"));
        assert_eq!(view.placement_settles_at(later), Some(later + GONE_AFTER));
        assert_eq!(view.master_of("web1", later + GONE_AFTER), None, "never answered: gone");
        view.heard_from("b", later + Duration::from_secs(1));
        view.answered("b");
        assert_eq!(view.placement_settles_at(later + Duration::from_secs(1)), None, "answered: settled");
        assert_eq!(view.master_of("web1", later + Duration::from_secs(2)), Some("b"));
    }

    #[test]
    fn heartbeats_are_due_every_few_seconds_only_when_shared() {
        let start = Instant::now();
        let mut alone = ClusterView::default();
        assert!(!alone.alive_due(start));
        let mut view = ClusterView::shared(0);
        assert!(view.alive_due(start));
        assert!(!view.alive_due(start + Duration::from_secs(1)));
        assert!(view.alive_due(start + ALIVE_EVERY));
    }

    #[test]
    fn a_gap_is_dated_from_its_first_notice_and_never_before_joining() {
        let mut view = ClusterView::shared(1_000_000);
        view.note_interruptions(0);
        assert!(!view.needs_resync());
        assert!(view.missed_interruptions(1));
        view.note_interruptions(1);
        assert!(view.needs_resync());
        let lead = GAP_LEAD.as_millis() as u64;
        assert_eq!(view.resync_begins(1_000_000 + lead + 5), (true, 1_000_005));
        assert_eq!(view.resync_begins(9_999_999), (false, 1_000_005), "a retry keeps the gap's start");
        view.resynced(Instant::now());
        assert!(!view.needs_resync());
        assert_eq!(view.resync_begins(1_000_010), (true, 1_000_000), "not before this master joined");
    }

    #[test]
    fn a_failed_read_makes_a_reread_due_and_is_told_once() {
        let mut view = ClusterView::shared(0);
        assert!(!view.take_read_failed());
        view.read_failed();
        assert!(view.needs_resync());
        assert!(view.take_read_failed());
        assert!(!view.take_read_failed(), "told once");
    }

    #[test]
    fn nothing_is_told_when_no_other_master_can_exist() {
        let mut alone = ClusterView::default();
        alone.tell(ClusterChange::Alive);
        alone.left_here("web1".into());
        alone.share_event("t", &Value::Null);
        assert!(alone.take_told().is_empty() && alone.take_left_here().is_empty());
        assert!(alone.take_shared_events().is_empty());
        let mut view = ClusterView::shared(0);
        view.tell(ClusterChange::Alive);
        view.left_here("web1".into());
        assert_eq!(view.take_told(), [ClusterChange::Alive]);
        assert_eq!(view.take_left_here(), ["web1"]);
    }

    /// Stored slots are told job by job, late returns left out, and only with other masters.
    #[test]
    fn stored_slots_are_told_job_by_job_without_late_returns() {
        use halite_protocol::message::MinionJobState::*;
        let change = |jid: &str, minion: &str, state, late| StateChange {
            jid: jid.into(),
            minion: minion.into(),
            state,
            ret: None,
            at_ms: 0,
            late,
        };
        let changes = [
            change("1", "a", Returned, false),
            change("2", "a", Failed, false),
            change("1", "b", Sent, false),
            change("1", "c", Returned, true),
        ];
        let mut alone = ClusterView::default();
        alone.tell_slots(&changes);
        assert!(alone.take_told().is_empty(), "nobody to tell");
        let mut view = ClusterView::shared(0);
        view.tell_slots(&changes);
        let told = view.take_told();
        let slots: Vec<(String, Vec<(String, MinionJobState)>)> = told
            .into_iter()
            .filter_map(|c| match c {
                ClusterChange::Slots { jid, states } => Some((jid, states)),
                _ => None,
            })
            .collect();
        assert_eq!(
            slots,
            [
                ("1".to_owned(), vec![("a".to_owned(), Returned), ("b".to_owned(), Sent)]),
                ("2".to_owned(), vec![("a".to_owned(), Failed)]),
            ]
        );
    }
}
