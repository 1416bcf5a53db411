//! What the master counts for operators, in Prometheus' text format (`prometheus-client`):
//! sessions, handshakes, jobs and slots, latencies, the store, the bus, refusals and
//! deployments; and whether it is alive and ready. The core updates the figures as it works
//! (atomic counters, no locks on its path); `GET /metrics`, `/healthz` and `/readyz` are served
//! on `[metrics] listen` and on the gateway.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{exponential_buckets, Histogram};
use prometheus_client::registry::Registry;

/// A core that has not finished a step or tick for this long is not ready.
const STALL: Duration = Duration::from_secs(5);

/// One label.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct Role {
    pub role: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct Outcome {
    pub outcome: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct State {
    pub state: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct Operation {
    pub operation: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct Kind {
    pub kind: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct Status {
    pub status: String,
}

type Histograms = Family<Operation, Histogram, fn() -> Histogram>;

fn latency_histogram() -> Histogram {
    // 100 µs to about 6.5 s.
    Histogram::new(exponential_buckets(0.000_1, 2.0, 17))
}

/// The master's figures; cheap to clone (every figure is shared).
#[derive(Clone)]
pub struct Metrics {
    inner: Arc<Inner>,
}

pub struct Inner {
    registry: Registry,
    /// Connected sessions, by role (`minion`, `client`).
    pub sessions: Family<Role, Gauge>,
    /// Finished handshakes, by outcome (`accepted`, `pending`, `refused`).
    pub handshakes: Family<Outcome, Counter>,
    /// Jobs published.
    pub jobs_published: Counter,
    /// Jobs with a slot not yet final.
    pub jobs_live: Gauge,
    /// The store's clock minus this host's, in seconds (several masters on one store).
    pub clock_offset_seconds: Gauge<f64, std::sync::atomic::AtomicU64>,
    /// Slots that reached a final state, by state.
    pub slots_final: Family<State, Counter>,
    /// From a publish request to the job stored and sent.
    pub dispatch_seconds: Histogram,
    /// From a job's publication to a minion's return of it.
    pub round_trip_seconds: Histogram,
    /// Store calls on the core's path, by operation.
    pub store_seconds: Histograms,
    /// Store calls that failed, by operation.
    pub store_errors: Family<Operation, Counter>,
    /// Bus events dropped for subscribers too slow to take them.
    pub bus_dropped: Counter,
    /// Refusals: minion events outside their ACL, publishes outside a principal's or peer's rules.
    pub denials: Family<Kind, Counter>,
    /// Deployments that reached a status, by status.
    pub deployments: Family<Status, Counter>,
    /// When the core last finished a step, in milliseconds since `started`.
    last_step_ms: AtomicU64,
    /// Whether the last write to the store succeeded.
    store_ok: AtomicBool,
    /// Whether the store answers its probe (stores that have one).
    store_reachable: AtomicBool,
    started: Instant,
}

impl Metrics {
    /// Every figure at zero, registered, made at `started` (the process's own monotonic time:
    /// the stall watchdog is about real time, whatever clock drives the core).
    pub fn new(started: Instant) -> Self {
        let mut inner = Inner {
            registry: Registry::with_prefix("halite"),
            sessions: Family::default(),
            handshakes: Family::default(),
            jobs_published: Counter::default(),
            jobs_live: Gauge::default(),
            clock_offset_seconds: Gauge::default(),
            slots_final: Family::default(),
            dispatch_seconds: latency_histogram(),
            round_trip_seconds: latency_histogram(),
            store_seconds: Family::new_with_constructor(latency_histogram),
            store_errors: Family::default(),
            bus_dropped: Counter::default(),
            denials: Family::default(),
            deployments: Family::default(),
            last_step_ms: AtomicU64::new(0),
            store_ok: AtomicBool::new(true),
            store_reachable: AtomicBool::new(true),
            started,
        };
        inner.registry.register("sessions", "Connected sessions, by role", inner.sessions.clone());
        inner.registry.register("handshakes", "Finished handshakes, by outcome", inner.handshakes.clone());
        inner.registry.register("jobs_published", "Jobs published", inner.jobs_published.clone());
        inner.registry.register("jobs_live", "Jobs with a minion not yet in a final state", inner.jobs_live.clone());
        inner.registry.register(
            "clock_offset_seconds",
            "The shared store's clock minus this host's (masters on one database use its time)",
            inner.clock_offset_seconds.clone(),
        );
        inner.registry.register(
            "slots_final",
            "Minion slots that reached a final state, by state",
            inner.slots_final.clone(),
        );
        inner.registry.register(
            "dispatch_seconds",
            "From a publish request to the job stored and sent",
            inner.dispatch_seconds.clone(),
        );
        inner.registry.register(
            "round_trip_seconds",
            "From a job's publication to a minion's return of it",
            inner.round_trip_seconds.clone(),
        );
        inner.registry.register(
            "store_seconds",
            "Store calls on the core's path, by operation",
            inner.store_seconds.clone(),
        );
        inner.registry.register("store_errors", "Store calls that failed, by operation", inner.store_errors.clone());
        inner.registry.register("bus_dropped", "Bus events dropped for slow subscribers", inner.bus_dropped.clone());
        inner.registry.register("denials", "Refused minion events and publishes, by kind", inner.denials.clone());
        inner.registry.register(
            "deployments",
            "Deployments that reached a status, by status",
            inner.deployments.clone(),
        );
        Metrics { inner: Arc::new(inner) }
    }

    pub fn get(&self) -> &Inner {
        &self.inner
    }

    /// The figures in Prometheus' text format.
    pub fn encode(&self) -> String {
        let mut text = String::new();
        // Writing to a String cannot fail.
        let _ = prometheus_client::encoding::text::encode(&mut text, &self.inner.registry);
        text
    }

    /// The figures in Prometheus' classic text format (0.0.4), for readers that do not ask for
    /// OpenMetrics: the same lines, except that a counter's `# HELP` and `# TYPE` name its
    /// samples (`…_total`) and there is no `# EOF`.
    pub fn encode_classic(&self) -> String {
        halite_transport::metrics_text::openmetrics_to_classic(&self.encode())
    }

    /// How long from when these figures were made to `now` (the process's own time).
    fn since_start(&self, now: Instant) -> Duration {
        now.saturating_duration_since(self.inner.started)
    }

    /// The core finished a step or a tick, at `now` (the process's own time).
    pub fn alive(&self, now: Instant) {
        let ms = u64::try_from(self.since_start(now).as_millis()).unwrap_or(u64::MAX);
        self.inner.last_step_ms.store(ms, Ordering::Relaxed);
    }

    /// A store call on the core's path took `took`, and succeeded or not.
    pub fn store_call(&self, operation: &'static str, took: Duration, ok: bool) {
        self.inner.store_seconds.get_or_create(&Operation { operation }).observe(took.as_secs_f64());
        if !ok {
            self.inner.store_errors.get_or_create(&Operation { operation }).inc();
        }
        self.inner.store_ok.store(ok, Ordering::Relaxed);
    }

    /// Whether the store answers its probe, as the loop last saw.
    pub fn store_reachable(&self, reachable: bool) {
        self.inner.store_reachable.store(reachable, Ordering::Relaxed);
    }

    /// Why the master is not ready to take work at `now` (the process's own time), if it is not: its core stalled, its store
    /// failed on the last write, or it does not answer.
    pub fn not_ready(&self, now: Instant) -> Option<String> {
        let since = self
            .since_start(now)
            .saturating_sub(Duration::from_millis(self.inner.last_step_ms.load(Ordering::Relaxed)));
        if since > STALL {
            return Some(format!("the core has not finished a step for {} s", since.as_secs()));
        }
        if !self.inner.store_ok.load(Ordering::Relaxed) {
            return Some("the last write to the store failed".into());
        }
        if !self.inner.store_reachable.load(Ordering::Relaxed) {
            return Some("the store does not answer".into());
        }
        None
    }
}

impl Inner {
    /// A refusal of `kind`.
    pub fn denied(&self, kind: &'static str) {
        self.denials.get_or_create(&Kind { kind }).inc();
    }

    /// Counts a slot's end, and the round trip of one that ended with a return.
    pub fn slot_ended(&self, moved: &crate::core::jobs::SlotMoved) {
        self.slots_final.get_or_create(&State { state: moved.state.as_str() }).inc();
        if moved.returned {
            let ms = moved.at_ms.saturating_sub(moved.created_at_ms);
            self.round_trip_seconds.observe(ms as f64 / 1000.0);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_text_names_every_family_with_its_help_and_labels() {
        let now = Instant::now();
        let metrics = Metrics::new(now);
        let m = metrics.get();
        m.sessions.get_or_create(&Role { role: "minion" }).set(3);
        m.slots_final.get_or_create(&State { state: "returned" }).inc();
        m.dispatch_seconds.observe(0.002);
        metrics.store_call("insert_job", Duration::from_millis(1), false);
        let text = metrics.encode();
        assert!(text.contains("# HELP halite_sessions Connected sessions, by role."), "{text}");
        assert!(text.contains("halite_sessions{role=\"minion\"} 3"), "{text}");
        assert!(text.contains("halite_slots_final_total{state=\"returned\"} 1"), "{text}");
        assert!(text.contains("halite_store_errors_total{operation=\"insert_job\"} 1"), "{text}");
        assert!(text.contains("halite_dispatch_seconds_bucket{le=\"0.0032\"} 1"), "{text}");
        assert!(text.ends_with("# EOF\n"), "{text}");
        let classic = metrics.encode_classic();
        assert!(classic.contains("# TYPE halite_slots_final_total counter\n"), "{classic}");
        assert!(classic.contains("# HELP halite_slots_final_total Minion slots"), "{classic}");
        assert!(classic.contains("# TYPE halite_sessions gauge\n"), "{classic}");
        assert!(!classic.contains("# EOF"), "{classic}");
        assert_eq!(metrics.not_ready(now).as_deref(), Some("the last write to the store failed"));
        metrics.store_call("insert_job", Duration::from_millis(1), true);
        assert_eq!(metrics.not_ready(now), None);
    }
}
