//! What a minion counts for operators, opt-in (`[metrics] listen` in minion.toml): whether it
//! is in session with a master, sessions started, jobs running and finished by outcome,
//! returns not yet acknowledged, events sent. Served by `metrics_http.rs` in Prometheus' text
//! format (`prometheus-client`).

use std::sync::Arc;

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::registry::Registry;

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct OutcomeLabel {
    outcome: &'static str,
}

/// The minion's figures; cheap to clone (every figure is shared).
#[derive(Clone)]
pub struct MinionMetrics {
    inner: Arc<Figures>,
}

struct Figures {
    registry: Registry,
    connected: Gauge,
    sessions: Counter,
    running: Gauge,
    finished: Family<OutcomeLabel, Counter>,
    unacknowledged: Gauge,
    events: Counter,
}

impl Default for MinionMetrics {
    fn default() -> Self {
        let mut registry = Registry::with_prefix("halite_minion");
        let figures = Figures {
            connected: Gauge::default(),
            sessions: Counter::default(),
            running: Gauge::default(),
            finished: Family::default(),
            unacknowledged: Gauge::default(),
            events: Counter::default(),
            registry: Registry::default(),
        };
        registry.register("connected", "1 while in session with a master, else 0", figures.connected.clone());
        registry.register("sessions", "Sessions established with a master", figures.sessions.clone());
        registry.register("jobs_running", "Jobs running now", figures.running.clone());
        registry.register("jobs_finished", "Jobs finished, by outcome", figures.finished.clone());
        registry.register(
            "returns_unacknowledged",
            "Returns kept in the outbox until the master acknowledges them",
            figures.unacknowledged.clone(),
        );
        registry.register("events_sent", "Events sent to the master (event.send)", figures.events.clone());
        MinionMetrics { inner: Arc::new(Figures { registry, ..figures }) }
    }
}

impl MinionMetrics {
    /// The figures in the classic text format (what `promtool check metrics` reads).
    pub fn encode(&self) -> String {
        let mut text = String::new();
        // Writing to a String cannot fail.
        let _ = prometheus_client::encoding::text::encode(&mut text, &self.inner.registry);
        halite_transport::metrics_text::openmetrics_to_classic(&text)
    }

    pub(crate) fn session(&self, up: bool) {
        self.inner.connected.set(i64::from(up));
        if up {
            self.inner.sessions.inc();
        }
    }

    pub(crate) fn running(&self, jobs: usize) {
        self.inner.running.set(i64::try_from(jobs).unwrap_or(i64::MAX));
    }

    pub(crate) fn finished(&self, outcome: halite_protocol::message::Outcome) {
        use halite_protocol::message::Outcome::*;
        let outcome = match outcome {
            Completed => "completed",
            TimedOut => "timed_out",
            Cancelled => "cancelled",
            Interrupted => "interrupted",
            Refused => "refused",
            Denied => "denied",
        };
        self.inner.finished.get_or_create(&OutcomeLabel { outcome }).inc();
    }

    pub(crate) fn unacknowledged(&self, returns: usize) {
        self.inner.unacknowledged.set(i64::try_from(returns).unwrap_or(i64::MAX));
    }

    pub(crate) fn return_kept(&self) {
        self.inner.unacknowledged.inc();
    }

    pub(crate) fn return_acknowledged(&self) {
        self.inner.unacknowledged.dec();
    }

    pub(crate) fn event_sent(&self) {
        self.inner.events.inc();
    }
}
