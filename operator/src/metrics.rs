//! What the operator counts and measures, served on `/metrics` (prefix `switchboard_operator_`):
//!
//! - `reconciles_total{outcome}`, `reconcile_duration_seconds`, `reconcile_errors_total{kind}`;
//! - `membership_steps_total{step}`: `add_learner`, `promote`, `remove`, `refused`;
//! - per McpServer, from its leader's view: `members{namespace,mcpserver,role}`,
//!   `members_unhealthy{namespace,mcpserver}` and `leader{namespace,mcpserver}` (the leader's
//!   node id, -1 when none is known);
//! - `is_leader`: 1 on the operator replica that holds the lease.

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};
use prometheus_client::registry::Registry;
use std::time::Duration;
use switchboard_contract::admin::ClusterStatus;

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct Outcome {
    outcome: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct Kind {
    kind: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct StepLabel {
    step: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct Cluster {
    namespace: String,
    mcpserver: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ClusterRole {
    namespace: String,
    mcpserver: String,
    role: &'static str,
}

pub struct Metrics {
    registry: Registry,
    reconciles: Family<Outcome, Counter>,
    duration: Histogram,
    errors: Family<Kind, Counter>,
    steps: Family<StepLabel, Counter>,
    members: Family<ClusterRole, Gauge>,
    unhealthy: Family<Cluster, Gauge>,
    leader: Family<Cluster, Gauge>,
    is_leader: Gauge,
}

impl Default for Metrics {
    fn default() -> Self {
        Self::new()
    }
}

impl Metrics {
    pub fn new() -> Self {
        let mut registry = Registry::with_prefix("switchboard_operator");
        let reconciles = Family::<Outcome, Counter>::default();
        registry.register("reconciles", "McpServer reconciles by outcome", reconciles.clone());
        let duration = Histogram::new(exponential_buckets(0.005, 2.0, 14));
        registry.register("reconcile_duration_seconds", "Time one reconcile took", duration.clone());
        let errors = Family::<Kind, Counter>::default();
        registry.register("reconcile_errors", "Failed reconciles by error kind", errors.clone());
        let steps = Family::<StepLabel, Counter>::default();
        registry.register("membership_steps", "Raft membership steps taken (or refused) on scale", steps.clone());
        let members = Family::<ClusterRole, Gauge>::default();
        registry.register("members", "Raft members of each McpServer by role, as its leader reports", members.clone());
        let unhealthy = Family::<Cluster, Gauge>::default();
        registry.register("members_unhealthy", "Voters the leader cannot count on (silent or far behind)", unhealthy.clone());
        let leader = Family::<Cluster, Gauge>::default();
        registry.register("leader", "Node id of each McpServer's Raft leader; -1 when none is known", leader.clone());
        let is_leader = Gauge::default();
        registry.register("is_leader", "1 on the operator replica that holds the leader lease", is_leader.clone());
        Self { registry, reconciles, duration, errors, steps, members, unhealthy, leader, is_leader }
    }

    /// A reconcile ended: `outcome` is `ok` or the error's label.
    pub fn reconciled(&self, outcome: &'static str, took: Duration) {
        self.reconciles.get_or_create(&Outcome { outcome }).inc();
        self.duration.observe(took.as_secs_f64());
        if outcome != "ok" {
            self.errors.get_or_create(&Kind { kind: outcome }).inc();
        }
    }

    /// A membership step was taken, or refused.
    pub fn membership_step(&self, step: &'static str) {
        self.steps.get_or_create(&StepLabel { step }).inc();
    }

    /// What the leader of `namespace/name` reports (`None`: no member answered).
    pub fn cluster(&self, namespace: &str, name: &str, status: Option<&ClusterStatus>) {
        let cluster = Cluster { namespace: namespace.into(), mcpserver: name.into() };
        let role = |role| ClusterRole { namespace: namespace.into(), mcpserver: name.into(), role };
        let (voters, learners, unhealthy, leader) = match status {
            Some(s) => {
                let unhealthy = if s.leader == Some(s.node_id) { s.voters.iter().filter(|v| s.health(**v).is_err()).count() } else { 0 };
                (s.voters.len(), s.learners.len(), unhealthy, s.leader.map_or(-1, |l| l as i64))
            }
            None => (0, 0, 0, -1),
        };
        self.members.get_or_create(&role("voter")).set(voters as i64);
        self.members.get_or_create(&role("learner")).set(learners as i64);
        self.unhealthy.get_or_create(&cluster).set(unhealthy as i64);
        self.leader.get_or_create(&cluster).set(leader);
    }

    /// Forget an McpServer that is gone.
    pub fn forget(&self, namespace: &str, name: &str) {
        let cluster = Cluster { namespace: namespace.into(), mcpserver: name.into() };
        for role in ["voter", "learner"] {
            self.members.remove(&ClusterRole { namespace: namespace.into(), mcpserver: name.into(), role });
        }
        self.unhealthy.remove(&cluster);
        self.leader.remove(&cluster);
    }

    pub fn set_is_leader(&self, leading: bool) {
        self.is_leader.set(leading as i64);
    }

    pub fn encode(&self) -> String {
        let mut out = String::new();
        let _ = prometheus_client::encoding::text::encode(&mut out, &self.registry);
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_family_is_exposed_under_the_operator_prefix() {
        let m = Metrics::new();
        m.reconciled("ok", Duration::from_millis(12));
        m.reconciled("admin", Duration::from_millis(40));
        m.membership_step("remove");
        let status = ClusterStatus {
            node_id: 0,
            leader: Some(0),
            voters: vec![0, 1, 2],
            learners: vec![3],
            replication_lag: [(0, 0), (1, 0), (2, 0)].into(),
            last_contact_ms: [(1, 10), (2, 60_000)].into(),
            silent_after_ms: 1_000,
            ..ClusterStatus::default()
        };
        m.cluster("tools", "demo", Some(&status));
        m.set_is_leader(true);
        let text = m.encode();
        for line in [
            "switchboard_operator_reconciles_total{outcome=\"ok\"} 1",
            "switchboard_operator_reconcile_errors_total{kind=\"admin\"} 1",
            "switchboard_operator_reconcile_duration_seconds_count 2",
            "switchboard_operator_membership_steps_total{step=\"remove\"} 1",
            "switchboard_operator_members{namespace=\"tools\",mcpserver=\"demo\",role=\"voter\"} 3",
            "switchboard_operator_members{namespace=\"tools\",mcpserver=\"demo\",role=\"learner\"} 1",
            "switchboard_operator_members_unhealthy{namespace=\"tools\",mcpserver=\"demo\"} 1",
            "switchboard_operator_leader{namespace=\"tools\",mcpserver=\"demo\"} 0",
            "switchboard_operator_is_leader 1",
        ] {
            assert!(text.contains(line), "missing {line} in\n{text}");
        }
        m.cluster("tools", "demo", None);
        assert!(m.encode().contains("switchboard_operator_leader{namespace=\"tools\",mcpserver=\"demo\"} -1"));
        m.forget("tools", "demo");
        assert!(!m.encode().contains("mcpserver=\"demo\""));
    }
}
