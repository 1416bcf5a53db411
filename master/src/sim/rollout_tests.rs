//! Rollouts in simulated time: windows, waits, error budgets, canaries, abort events, pause and
//! resume, offline targets, cancel and a restart in the middle.

#![cfg(test)]

use std::time::Duration;

use halite_protocol::message::{
    Amount, Cancel, Event, JobReturn, Message, MinionJobState, RequestBody, ResponseBody, Rollout, RolloutState,
    RolloutStatus,
};

use super::{ret, Sim, SimPeer};
use crate::acl::EventRule;
use crate::store::Store;

fn rt() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread().enable_all().build().expect("runtime")
}

/// Minions `web0`…`web{n-1}`, connected.
async fn fleet(sim: &mut Sim, n: usize) -> Vec<SimPeer> {
    let mut minions = Vec::new();
    for i in 0..n {
        minions.push(sim.minion(&format!("web{i}")).await);
    }
    for minion in &mut minions {
        minion.recv(sim);
    }
    minions
}

/// Which of `minions` were sent the job since the last look.
fn sent_to(sim: &Sim, minions: &mut [SimPeer]) -> Vec<usize> {
    minions.iter_mut().enumerate().filter_map(|(i, m)| (!m.jobs(sim).is_empty()).then_some(i)).collect()
}

fn failure(jid: &str) -> JobReturn {
    JobReturn { success: false, retcode: 1, ..ret(jid) }
}

async fn states(sim: &Sim, jid: &str) -> Vec<MinionJobState> {
    let detail = sim.store().job(jid).await.expect("store").expect("job stored");
    detail.minions.into_iter().map(|m| m.state).collect()
}

async fn rollout_of(sim: &mut Sim, client: &mut SimPeer, jid: &str) -> RolloutStatus {
    match sim.request(client, RequestBody::JobShow { jid: jid.into() }).await {
        Ok(ResponseBody::Job(detail)) => detail.summary.rollout.expect("a rollout"),
        other => panic!("job_show: {other:?}"),
    }
}

/// A master that lets the `web*` minions send `alarm/*` events.
async fn alarmed() -> Sim {
    let rule = EventRule {
        minions: vec!["web*".into()],
        allow: vec!["alarm/*".into()],
        rate_per_sec: 100.0,
        burst: 100.0,
        max_bytes: 1024,
    };
    Sim::with_config(|c| c.events = vec![rule]).await
}

/// Three connected minions, root, and a rollout to them one at a time whose first target was
/// sent.
pub(super) async fn one_at_a_time() -> (Sim, Vec<SimPeer>, SimPeer, String) {
    let mut sim = Sim::new().await;
    let mut web = fleet(&mut sim, 3).await;
    let mut root = sim.root().await;
    let jid = sim.publish_rollout(&mut root, "web*", 0, batch(1)).await.expect("published");
    assert_eq!(sent_to(&sim, &mut web), [0]);
    (sim, web, root, jid)
}

fn batch(n: u32) -> Rollout {
    Rollout { batch: Some(Amount::Count(n)), ..Rollout::default() }
}

#[test]
fn a_sliding_window_starts_the_next_target_as_each_one_finishes() {
    rt().block_on(async {
        let mut sim = Sim::new().await;
        let mut web = fleet(&mut sim, 5).await;
        let mut root = sim.root().await;
        let jid = sim.publish_rollout(&mut root, "web*", 0, batch(2)).await.expect("published");
        assert_eq!(sent_to(&sim, &mut web), [0, 1]);
        web[1].send(&mut sim, &Message::JobReturn(ret(&jid))).await;
        assert_eq!(sent_to(&sim, &mut web), [2], "one finished, one more starts");
        web[0].send(&mut sim, &Message::JobReturn(ret(&jid))).await;
        web[2].send(&mut sim, &Message::JobReturn(ret(&jid))).await;
        assert_eq!(sent_to(&sim, &mut web), [3, 4]);
        for i in [3, 4] {
            web[i].send(&mut sim, &Message::JobReturn(ret(&jid))).await;
        }
        assert_eq!(states(&sim, &jid).await, [MinionJobState::Returned; 5]);
        assert!(root.recv(&sim).iter().any(|m| matches!(m, Message::JobDone(d) if d.jid == jid)));
    });
}

#[test]
fn a_percentage_window_is_rounded_up() {
    rt().block_on(async {
        let mut sim = Sim::new().await;
        let mut web = fleet(&mut sim, 7).await;
        let mut root = sim.root().await;
        let rollout = Rollout { batch: Some(Amount::Percent(30)), ..Rollout::default() };
        sim.publish_rollout(&mut root, "web*", 0, rollout).await.expect("published");
        // 30% of 7 is 2.1: three at once.
        assert_eq!(sent_to(&sim, &mut web), [0, 1, 2]);
    });
}

#[test]
fn batch_wait_delays_the_next_target_after_one_finishes() {
    rt().block_on(async {
        let mut sim = Sim::new().await;
        let mut web = fleet(&mut sim, 2).await;
        let mut root = sim.root().await;
        let rollout = Rollout { batch_wait_ms: 5_000, ..batch(1) };
        let jid = sim.publish_rollout(&mut root, "web*", 0, rollout).await.expect("published");
        assert_eq!(sent_to(&sim, &mut web), [0], "the first batch does not wait");
        web[0].send(&mut sim, &Message::JobReturn(ret(&jid))).await;
        sim.advance(Duration::from_millis(4_900)).await;
        assert!(sent_to(&sim, &mut web).is_empty(), "still waiting");
        sim.advance(Duration::from_millis(200)).await;
        assert_eq!(sent_to(&sim, &mut web), [1]);
    });
}

#[test]
fn past_the_error_budget_nothing_more_starts_and_the_rest_are_skipped() {
    rt().block_on(async {
        let mut sim = Sim::new().await;
        let mut web = fleet(&mut sim, 5).await;
        let mut root = sim.root().await;
        let rollout = Rollout { max_errors: Some(Amount::Count(1)), ..batch(1) };
        let jid = sim.publish_rollout(&mut root, "web*", 0, rollout).await.expect("published");
        assert_eq!(sent_to(&sim, &mut web), [0]);
        web[0].send(&mut sim, &Message::JobReturn(failure(&jid))).await;
        assert_eq!(sent_to(&sim, &mut web), [1], "one failure is within the budget");
        web[1].send(&mut sim, &Message::JobReturn(failure(&jid))).await;
        assert!(sent_to(&sim, &mut web).is_empty(), "the second failure exceeds it");
        use MinionJobState::*;
        assert_eq!(states(&sim, &jid).await, [Failed, Failed, Skipped, Skipped, Skipped]);
        assert!(root.recv(&sim).iter().any(|m| matches!(m, Message::JobDone(d) if d.jid == jid)));
        let status = rollout_of(&mut sim, &mut root, &jid).await;
        assert_eq!(status.state, RolloutState::Stopped);
        assert_eq!(status.reason.as_deref(), Some("2 of 5 targets failed, more than max_errors 1 allows (1)"));
    });
}

#[test]
fn running_targets_finish_when_the_budget_runs_out() {
    rt().block_on(async {
        let mut sim = Sim::new().await;
        let mut web = fleet(&mut sim, 4).await;
        let mut root = sim.root().await;
        let rollout = Rollout { max_errors: Some(Amount::Count(0)), ..batch(2) };
        let jid = sim.publish_rollout(&mut root, "web*", 0, rollout).await.expect("published");
        assert_eq!(sent_to(&sim, &mut web), [0, 1]);
        web[0].send(&mut sim, &Message::JobReturn(failure(&jid))).await;
        assert!(web[1].recv(&sim).iter().all(|m| !matches!(m, Message::Cancel(_))), "web1 is not stopped");
        web[1].send(&mut sim, &Message::JobReturn(ret(&jid))).await;
        use MinionJobState::*;
        assert_eq!(states(&sim, &jid).await, [Failed, Returned, Skipped, Skipped]);
    });
}

#[test]
fn canaries_run_alone_and_a_failed_canary_stops_the_rest() {
    rt().block_on(async {
        let mut sim = Sim::new().await;
        let mut web = fleet(&mut sim, 4).await;
        let mut root = sim.root().await;
        let rollout = Rollout { canary: 2, ..Rollout::default() };
        let jid = sim.publish_rollout(&mut root, "web*", 0, rollout.clone()).await.expect("published");
        assert_eq!(sent_to(&sim, &mut web), [0, 1]);
        web[0].send(&mut sim, &Message::JobReturn(ret(&jid))).await;
        assert!(sent_to(&sim, &mut web).is_empty());
        web[1].send(&mut sim, &Message::JobReturn(ret(&jid))).await;
        assert_eq!(sent_to(&sim, &mut web), [2, 3], "both canaries returned: the rest at once");

        let jid = sim.publish_rollout(&mut root, "web*", 0, rollout).await.expect("published");
        assert_eq!(sent_to(&sim, &mut web), [0, 1]);
        web[0].send(&mut sim, &Message::JobReturn(failure(&jid))).await;
        web[1].send(&mut sim, &Message::JobReturn(ret(&jid))).await;
        assert!(sent_to(&sim, &mut web).is_empty());
        let status = rollout_of(&mut sim, &mut root, &jid).await;
        assert_eq!(status.reason.as_deref(), Some("canary web0 ended failed"));
        use MinionJobState::*;
        assert_eq!(states(&sim, &jid).await, [Failed, Returned, Skipped, Skipped]);
    });
}

#[test]
fn a_matching_event_aborts_the_rollout_and_its_own_events_do_not() {
    rt().block_on(async {
        let mut sim = alarmed().await;
        let mut web = fleet(&mut sim, 3).await;
        let mut root = sim.root().await;
        // `halite/job/*` matches the job's own return events: they do not abort it.
        let rollout = Rollout { abort_on: vec!["minion/*/alarm/*".into(), "halite/job/*".into()], ..batch(1) };
        let jid = sim.publish_rollout(&mut root, "web*", 0, rollout).await.expect("published");
        assert_eq!(sent_to(&sim, &mut web), [0]);
        web[0].send(&mut sim, &Message::JobReturn(ret(&jid))).await;
        assert_eq!(sent_to(&sim, &mut web), [1]);
        let alarm = Event { tag: "alarm/cpu".into(), data: serde_json::json!({ "load": 40 }), id: None };
        web[2].send(&mut sim, &Message::Event(alarm)).await;
        web[1].send(&mut sim, &Message::JobReturn(ret(&jid))).await;
        assert!(sent_to(&sim, &mut web).is_empty());
        use MinionJobState::*;
        assert_eq!(states(&sim, &jid).await, [Returned, Returned, Skipped]);
        let status = rollout_of(&mut sim, &mut root, &jid).await;
        assert_eq!(
            status.reason.as_deref(),
            Some("an event matching abort_on minion/*/alarm/*: minion/web2/alarm/cpu")
        );
    });
}

#[test]
fn a_paused_rollout_starts_nothing_until_resumed() {
    rt().block_on(async {
        let (mut sim, mut web, mut root, jid) = one_at_a_time().await;
        let paused = sim.request(&mut root, RequestBody::JobPause { jid: jid.clone() }).await;
        assert!(matches!(paused, Ok(ResponseBody::Job(d)) if d.summary.rollout.as_ref().unwrap().state == RolloutState::Paused));
        web[0].send(&mut sim, &Message::JobReturn(ret(&jid))).await;
        sim.advance(Duration::from_secs(2)).await;
        assert!(sent_to(&sim, &mut web).is_empty(), "paused");
        sim.request(&mut root, RequestBody::JobResume { jid: jid.clone() }).await.expect("resumed");
        assert_eq!(sent_to(&sim, &mut web), [1]);
        // A job without a rollout has nothing to pause.
        let plain = sim.publish(&mut root, "web0", "test.ping", 60_000, 0).await.expect("published");
        let refused = sim.request(&mut root, RequestBody::JobPause { jid: plain }).await.unwrap_err();
        assert!(refused.contains("has no rollout"), "{refused}");
    });
}

#[test]
fn an_offline_target_with_a_ttl_waits_without_holding_a_place_in_the_window() {
    rt().block_on(async {
        let (mut sim, mut web1, mut root) = web0_away_web1_here().await;
        let jid = sim.publish_rollout(&mut root, "web*", 60_000, batch(1)).await.expect("published");
        assert_eq!(web1.jobs(&sim).len(), 1, "web0 waits offline; web1 runs meanwhile");
        use MinionJobState::*;
        assert_eq!(states(&sim, &jid).await, [Waiting, Sent]);
        // Back online, it gets the job.
        let mut web0 = sim.minion("web0").await;
        assert_eq!(web0.jobs(&sim).len(), 1);
    });
}

#[test]
fn cancel_stops_dispatching_and_cancels_the_running_targets() {
    rt().block_on(async {
        let (mut sim, mut web, mut root, jid) = one_at_a_time().await;
        root.send(&mut sim, &Message::Cancel(Cancel { jid: jid.clone() })).await;
        assert!(web[0].recv(&sim).iter().any(|m| matches!(m, Message::Cancel(c) if c.jid == jid)));
        use MinionJobState::*;
        assert_eq!(states(&sim, &jid).await, [Sent, Cancelled, Cancelled]);
        assert_eq!(rollout_of(&mut sim, &mut root, &jid).await.state, RolloutState::Stopped);
    });
}

#[test]
fn a_restarted_master_resumes_the_rollout_where_it_was_and_sends_nothing_twice() {
    rt().block_on(async {
        let (mut sim, mut web, _root, jid) = one_at_a_time().await;
        web[0].send(&mut sim, &Message::JobReturn(ret(&jid))).await;
        assert_eq!(sent_to(&sim, &mut web), [1]);

        let (store, clock) = (sim.store().clone(), sim.clock.clone());
        drop(web);
        drop(sim);
        let mut sim = Sim::with_store(store, clock, |c| c.timeout_grace_secs = 1).await;
        let mut web = Vec::new();
        for i in 0..3 {
            web.push(sim.minion(&format!("web{i}")).await);
        }
        sim.advance(Duration::from_millis(200)).await;
        // web1 gets its job again (the minion runs a jid at most once); web2 still waits its turn.
        let again: Vec<usize> = sent_to(&sim, &mut web);
        assert_eq!(again, [1]);
        web[1].send(&mut sim, &Message::JobReturn(ret(&jid))).await;
        assert_eq!(sent_to(&sim, &mut web), [2]);
        web[2].send(&mut sim, &Message::JobReturn(ret(&jid))).await;
        assert_eq!(states(&sim, &jid).await, [MinionJobState::Returned; 3]);
    });
}

/// Two events abort one rollout in the same step: it stops once, for the first, and says so
/// once; each stop is stored before it is announced.
#[test]
fn two_aborting_events_in_one_step_stop_the_rollout_once_for_the_first() {
    rt().block_on(async {
        let mut sim = alarmed().await;
        let mut web = fleet(&mut sim, 3).await;
        let mut root = sim.root().await;
        let subscribe = halite_protocol::message::Subscribe { patterns: vec!["halite/job/*".into()], after: None };
        root.send(&mut sim, &Message::Subscribe(subscribe)).await;
        let rollout = Rollout { abort_on: vec!["minion/*/alarm/*".into()], ..batch(1) };
        let jid = sim.publish_rollout(&mut root, "web*", 0, rollout).await.expect("published");
        assert_eq!(sent_to(&sim, &mut web), [0]);
        root.recv(&sim);
        let alarm = |tag: &str| Message::Event(Event { tag: tag.into(), data: serde_json::json!({}), id: None });
        // Handled in one step: the input that wakes it (web2's), then what waited (web1's).
        web[1].queue(&sim, &alarm("alarm/cpu"));
        web[2].send(&mut sim, &alarm("alarm/disk")).await;
        let stopped = format!("halite/job/{jid}/rollout/stopped");
        let tags = root.event_tags(&sim);
        assert_eq!(tags.iter().filter(|tag| **tag == stopped).count(), 1, "{tags:?}");
        let status = rollout_of(&mut sim, &mut root, &jid).await;
        assert_eq!(
            status.reason.as_deref(),
            Some("an event matching abort_on minion/*/alarm/*: minion/web2/alarm/disk")
        );
        use MinionJobState::*;
        assert_eq!(states(&sim, &jid).await, [Sent, Skipped, Skipped]);
    });
}

/// A cancel whose rollout's stop cannot be stored cancels nothing (the client may cancel
/// again); once the store answers, the cancel goes through.
#[test]
fn a_cancel_whose_rollout_stop_cannot_be_stored_cancels_nothing_until_it_can() {
    rt().block_on(async {
        let (mut sim, mut web, mut root, jid) = one_at_a_time().await;
        let away = sim.store().take_away().await.expect("open");
        root.send(&mut sim, &Message::Cancel(Cancel { jid: jid.clone() })).await;
        assert!(web[0].recv(&sim).is_empty(), "nothing cancelled");
        let run = sim.master.core.jobs().get(&jid).and_then(|job| job.rollout.as_ref()).expect("live rollout");
        assert_eq!(run.status.state, RolloutState::Running);
        sim.store().give_back(away).await;
        root.send(&mut sim, &Message::Cancel(Cancel { jid: jid.clone() })).await;
        assert!(web[0].recv(&sim).iter().any(|m| matches!(m, Message::Cancel(c) if c.jid == jid)));
        use MinionJobState::*;
        assert_eq!(states(&sim, &jid).await, [Sent, Cancelled, Cancelled]);
        assert_eq!(rollout_of(&mut sim, &mut root, &jid).await.state, RolloutState::Stopped);
    });
}

/// A target that ends at once when started (offline, no TTL) is told before the start that
/// sent it is announced: a subscriber hears `ret/web0`, then `rollout/started` for it, then
/// the next start.
#[test]
fn a_target_that_ends_at_once_is_told_before_its_start_is_announced() {
    rt().block_on(async {
        let (mut sim, mut web1, mut root) = web0_away_web1_here().await;
        let mut watcher = sim.root().await;
        super::relay_trust_tests::subscribe(&mut sim, &mut watcher, "halite/job/*").await;
        let rollout = Rollout { max_errors: Some(Amount::Count(1)), ..batch(1) };
        let jid = sim.publish_rollout(&mut root, "web*", 0, rollout).await.expect("published");
        assert_eq!(web1.jobs(&sim).len(), 1, "web0 ended offline; web1 started");
        let tags: Vec<String> = super::relay_trust_tests::events(&mut watcher, &sim)
            .into_iter()
            .map(|event| event.tag.replace(&jid, "J"))
            .collect();
        assert_eq!(
            tags,
            [
                "halite/job/J/new",
                "halite/job/J/ret/web0",
                "halite/job/J/rollout/started",
                "halite/job/J/rollout/started"
            ]
        );
    });
}

/// `web0` known but offline, `web1` connected, and root.
async fn web0_away_web1_here() -> (Sim, SimPeer, SimPeer) {
    let mut sim = Sim::new().await;
    let away = sim.minion("web0").await;
    away.disconnect(&mut sim).await;
    let mut web1 = sim.minion("web1").await;
    web1.recv(&sim);
    let root = sim.root().await;
    (sim, web1, root)
}
