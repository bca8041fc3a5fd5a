//! Prometheus metrics of one node, served on the metrics port.

use crate::server::RequestKind;
use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};
use prometheus_client::registry::Registry;
use std::sync::Mutex;
use std::time::Duration;

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct KindOutcome {
    kind: &'static str,
    outcome: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct Kind {
    kind: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct Reason {
    reason: &'static str,
}

pub struct Metrics {
    registry: Mutex<Registry>,
    outcomes: Family<KindOutcome, Counter>,
    wait_seconds: Family<Kind, Histogram>,
    orphans: Family<Reason, Counter>,
    sessions: Gauge,
}

impl Default for Metrics {
    fn default() -> Self {
        Self::new()
    }
}

impl Metrics {
    pub fn new() -> Self {
        let mut registry = Registry::with_prefix("switchboard");
        let outcomes = Family::<KindOutcome, Counter>::default();
        let wait_seconds =
            Family::<Kind, Histogram>::new_with_constructor(|| Histogram::new(exponential_buckets(0.001, 4.0, 10)));
        let orphans = Family::<Reason, Counter>::default();
        let sessions = Gauge::default();
        registry.register("client_request_outcomes", "Server-to-client requests by kind and outcome", outcomes.clone());
        registry.register("client_request_wait_seconds", "Time handlers spent parked on a mailbox", wait_seconds.clone());
        registry.register("orphan_responses", "Client responses dropped, by reason", orphans.clone());
        registry.register("sessions_local", "Sessions with state on this node", sessions.clone());
        Metrics { registry: Mutex::new(registry), outcomes, wait_seconds, orphans, sessions }
    }

    pub fn outcome(&self, kind: RequestKind, outcome: &'static str) {
        self.outcomes.get_or_create(&KindOutcome { kind: kind.label(), outcome }).inc();
    }

    pub fn observe_wait(&self, kind: RequestKind, waited: Duration) {
        self.wait_seconds.get_or_create(&Kind { kind: kind.label() }).observe(waited.as_secs_f64());
    }

    pub fn orphan(&self, reason: &'static str) {
        self.orphans.get_or_create(&Reason { reason }).inc();
    }

    pub fn orphan_count(&self, reason: &'static str) -> u64 {
        self.orphans.get_or_create(&Reason { reason }).get()
    }

    pub fn set_local_sessions(&self, n: usize) {
        self.sessions.set(n as i64);
    }

    /// Register further metrics (the Raft layer adds its own).
    pub fn with_registry<T>(&self, f: impl FnOnce(&mut Registry) -> T) -> T {
        f(&mut self.registry.lock().unwrap())
    }

    /// The Prometheus text exposition.
    pub fn encode(&self) -> String {
        let mut out = String::new();
        prometheus_client::encoding::text::encode(&mut out, &self.registry.lock().unwrap()).expect("writing to a String");
        out
    }
}
