//! Prometheus metrics of one node, served on the metrics port.

use crate::protocol::types::RequestKind;
use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};
use prometheus_client::registry::Registry;
use std::sync::{Arc, Mutex};
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
struct Protocol {
    protocol: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct Port {
    port: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct PortLimit {
    port: &'static str,
    limit: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct Reason {
    reason: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct Limit {
    limit: &'static str,
}

pub struct Metrics {
    registry: Mutex<Registry>,
    outcomes: Family<KindOutcome, Counter>,
    wait_seconds: Family<Kind, Histogram>,
    orphans: Family<Reason, Counter>,
    sessions: Gauge,
    peer_refused: Family<Reason, Counter>,
    http_refused: Family<Reason, Counter>,
    connections_open: Family<Port, Gauge>,
    connections_dropped: Family<PortLimit, Counter>,
    peer_streams_accepted: Family<Protocol, Counter>,
    raft_term: Gauge,
    raft_leader: Gauge,
    raft_committed: Gauge,
    raft_applied: Gauge,
    mailboxes_pending: Gauge,
    replicated_records: Family<Part, Gauge>,
    raft_log_live_entries: Gauge,
    raft_snapshot_bytes: Gauge,
    answers_delivered: Counter,
    limit_refusals: Family<Limit, Counter>,
    snapshot_chunks_received: Counter,
    mrtr_parked: Gauge,
    mrtr_rounds: Family<Outcome, Counter>,
    mrtr_rejected: Family<Reason, Counter>,
    mrtr_retries: Family<Owner, Counter>,
    tasks: Family<Status, Gauge>,
    tasks_created: Counter,
    tasks_ended: Family<Outcome, Counter>,
    tasks_owner_lost: Counter,
    task_input_wait: Histogram,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct Status {
    status: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct Owner {
    owner: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct Part {
    part: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct Outcome {
    outcome: &'static str,
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
        let wait_seconds = Family::<Kind, Histogram>::new_with_constructor(|| Histogram::new(exponential_buckets(0.001, 4.0, 10)));
        let orphans = Family::<Reason, Counter>::default();
        let sessions = Gauge::default();
        registry.register("client_request_outcomes", "Server-to-client requests by kind and outcome", outcomes.clone());
        registry.register("client_request_wait_seconds", "Time handlers spent parked on a mailbox", wait_seconds.clone());
        registry.register("orphan_responses", "Client responses dropped, by reason", orphans.clone());
        registry.register("sessions_local", "Sessions with state on this node", sessions.clone());
        let peer_refused = Family::<Reason, Counter>::default();
        registry.register("peer_requests_refused", "Peer requests refused, by reason", peer_refused.clone());
        let http_refused = Family::<Reason, Counter>::default();
        registry.register(
            "http_requests_refused",
            "MCP requests refused before reaching the server, by reason (host: Host not allowed, origin: Origin not allowed)",
            http_refused.clone(),
        );
        let connections_open = Family::<Port, Gauge>::default();
        registry.register("connections_open", "Open connections, by port (mcp, peer, metrics)", connections_open.clone());
        let connections_dropped = Family::<PortLimit, Counter>::default();
        registry.register(
            "connections_dropped",
            "Connections a limit closed, by port and limit (max_connections: refused at accept; header_read_timeout; idle_timeout)",
            connections_dropped.clone(),
        );
        let peer_streams_accepted = Family::<Protocol, Counter>::default();
        registry.register(
            "peer_streams_accepted",
            "Long-lived peer connections (replication, forwarded writes) accepted, by protocol; steady when healthy",
            peer_streams_accepted.clone(),
        );
        let [raft_term, raft_leader, raft_committed, raft_applied, mailboxes_pending] = std::array::from_fn(|_| Gauge::default());
        registry.register("raft_term", "Current Raft term", raft_term.clone());
        registry.register("raft_leader", "Id of the Raft leader as this node sees it (-1: none)", raft_leader.clone());
        registry.register("raft_committed_index", "Last committed log index", raft_committed.clone());
        registry.register("raft_applied_index", "Last applied log index", raft_applied.clone());
        registry.register("mailboxes_pending", "Mailboxes waiting for an answer", mailboxes_pending.clone());
        let replicated_records = Family::<Part, Gauge>::default();
        registry.register(
            "replicated_records",
            "Records in this replica's copy of the replicated state, by part (mailboxes, of them pending and tombstones; sessions; dedup: remembered write outcomes; tasks)",
            replicated_records.clone(),
        );
        let [raft_log_live_entries, raft_snapshot_bytes] = std::array::from_fn(|_| Gauge::default());
        registry.register(
            "raft_log_live_entries",
            "Log entries held in memory (those the last snapshot does not cover, and the few kept past it)",
            raft_log_live_entries.clone(),
        );
        registry.register("raft_snapshot_bytes", "Size of the current snapshot, encoded", raft_snapshot_bytes.clone());
        let answers_delivered = Counter::default();
        registry.register("answers_delivered", "Client answers this node received and delivered to a mailbox", answers_delivered.clone());
        let limit_refusals = Family::<Limit, Counter>::default();
        registry.register("limit_refusals", "Requests refused because they pass a configured limit, by limit", limit_refusals.clone());
        let snapshot_chunks_received = Counter::default();
        registry.register(
            "raft_snapshot_chunks_received",
            "Pieces of snapshots received from the leader",
            snapshot_chunks_received.clone(),
        );
        let mrtr_parked = Gauge::default();
        registry.register(
            "mrtr_parked_calls",
            "2026-07-28 calls parked on this node waiting for the client's retry (input_required answered)",
            mrtr_parked.clone(),
        );
        let mrtr_rounds = Family::<Outcome, Counter>::default();
        registry.register(
            "mrtr_rounds",
            "Rounds of 2026-07-28 multi-round-trip calls run here, by how they ended (input_required, complete, error, abandoned: no retry came in time)",
            mrtr_rounds.clone(),
        );
        let mrtr_rejected = Family::<Reason, Counter>::default();
        registry.register(
            "mrtr_state_rejected",
            "Retries refused, by reason (tampered, expired, wrong_call, consumed, malformed, owner_lost)",
            mrtr_rejected.clone(),
        );
        let mrtr_retries = Family::<Owner, Counter>::default();
        registry.register(
            "mrtr_retries",
            "2026-07-28 retries this node delivered to their call, by where the call runs (here, elsewhere: relayed through the mailbox)",
            mrtr_retries.clone(),
        );
        let tasks = Family::<Status, Gauge>::default();
        registry.register("tasks", "Tasks of the Tasks extension in the replicated state, by status", tasks.clone());
        let tasks_created = Counter::default();
        registry.register("tasks_created", "Tool calls this node turned into tasks (it runs their handlers)", tasks_created.clone());
        let tasks_ended = Family::<Outcome, Counter>::default();
        registry.register("tasks_ended", "Tasks this node ran that ended, by outcome (completed, failed, cancelled)", tasks_ended.clone());
        let tasks_owner_lost = Counter::default();
        registry.register(
            "tasks_failed_owner_lost",
            "Tasks failed because their owner went silent (committed by this node as leader)",
            tasks_owner_lost.clone(),
        );
        let task_input_wait = Histogram::new(exponential_buckets(0.01, 4.0, 10));
        registry.register("task_input_wait_seconds", "Time tasks run here waited for the client's input", task_input_wait.clone());
        Metrics {
            tasks,
            tasks_created,
            tasks_ended,
            tasks_owner_lost,
            task_input_wait,
            mrtr_retries,
            mrtr_parked,
            mrtr_rounds,
            mrtr_rejected,
            registry: Mutex::new(registry),
            outcomes,
            wait_seconds,
            orphans,
            sessions,
            peer_refused,
            http_refused,
            connections_open,
            connections_dropped,
            peer_streams_accepted,
            raft_term,
            raft_leader,
            raft_committed,
            raft_applied,
            mailboxes_pending,
            replicated_records,
            raft_log_live_entries,
            raft_snapshot_bytes,
            answers_delivered,
            limit_refusals,
            snapshot_chunks_received,
        }
    }

    /// A 2026-07-28 call parked (`+1`) or resumed or given up (`-1`).
    pub fn mrtr_parked(&self, delta: i64) {
        self.mrtr_parked.inc_by(delta);
    }

    pub fn mrtr_parked_count(&self) -> i64 {
        self.mrtr_parked.get()
    }

    /// A round of a multi-round-trip call ended: `input_required`, `complete`, `error`, `abandoned`.
    pub fn mrtr_round(&self, outcome: &'static str) {
        self.mrtr_rounds.get_or_create(&Outcome { outcome }).inc();
    }

    pub fn mrtr_round_count(&self, outcome: &'static str) -> u64 {
        self.mrtr_rounds.get_or_create(&Outcome { outcome }).get()
    }

    /// The tasks in the replicated state, by status.
    pub fn set_tasks(&self, counts: &std::collections::BTreeMap<crate::mcp_tasks::TaskStatus, usize>) {
        use crate::mcp_tasks::TaskStatus::*;
        for status in [Working, InputRequired, Completed, Failed, Cancelled] {
            self.tasks.get_or_create(&Status { status: status.label() }).set(counts.get(&status).copied().unwrap_or(0) as i64);
        }
    }

    pub fn task_created(&self) {
        self.tasks_created.inc();
    }

    pub fn task_ended(&self, outcome: &'static str) {
        self.tasks_ended.get_or_create(&Outcome { outcome }).inc();
    }

    pub fn task_ended_count(&self, outcome: &'static str) -> u64 {
        self.tasks_ended.get_or_create(&Outcome { outcome }).get()
    }

    pub fn tasks_owner_lost(&self, failed: usize) {
        self.tasks_owner_lost.inc_by(failed as u64);
    }

    pub fn tasks_owner_lost_count(&self) -> u64 {
        self.tasks_owner_lost.get()
    }

    pub fn observe_task_input_wait(&self, waited: Duration) {
        self.task_input_wait.observe(waited.as_secs_f64());
    }

    /// A retry delivered to its call, which runs on this node or another.
    pub fn mrtr_retry(&self, here: bool) {
        self.mrtr_retries.get_or_create(&Owner { owner: if here { "here" } else { "elsewhere" } }).inc();
    }

    pub fn mrtr_retry_count(&self, here: bool) -> u64 {
        self.mrtr_retries.get_or_create(&Owner { owner: if here { "here" } else { "elsewhere" } }).get()
    }

    /// A retry refused before it reached the call.
    pub fn mrtr_rejected(&self, reason: &'static str) {
        self.mrtr_rejected.get_or_create(&Reason { reason }).inc();
    }

    pub fn mrtr_rejected_count(&self, reason: &'static str) -> u64 {
        self.mrtr_rejected.get_or_create(&Reason { reason }).get()
    }

    pub fn snapshot_chunk_received(&self) {
        self.snapshot_chunks_received.inc();
    }

    pub fn snapshot_chunks_received_count(&self) -> u64 {
        self.snapshot_chunks_received.get()
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

    pub fn answer_delivered(&self) {
        self.answers_delivered.inc();
    }

    /// A request refused by a configured limit (`sessions`, `session_record_bytes`,
    /// `subscriptions_per_session`, `requests_per_session`, `requests_per_node`, `entry_bytes`).
    pub fn limit_refused(&self, limit: &'static str) {
        self.limit_refusals.get_or_create(&Limit { limit }).inc();
    }

    pub fn limit_refused_count(&self, limit: &'static str) -> u64 {
        self.limit_refusals.get_or_create(&Limit { limit }).get()
    }

    pub fn peer_refused(&self, reason: &'static str) {
        self.peer_refused.get_or_create(&Reason { reason }).inc();
    }

    pub fn peer_refused_count(&self, reason: &'static str) -> u64 {
        self.peer_refused.get_or_create(&Reason { reason }).get()
    }

    pub fn http_refused(&self, reason: &'static str) {
        self.http_refused.get_or_create(&Reason { reason }).inc();
    }

    pub fn http_refused_count(&self, reason: &'static str) -> u64 {
        self.http_refused.get_or_create(&Reason { reason }).get()
    }

    pub fn connection_opened(&self, port: &'static str) {
        self.connections_open.get_or_create(&Port { port }).inc();
    }

    pub fn connection_closed(&self, port: &'static str) {
        self.connections_open.get_or_create(&Port { port }).dec();
    }

    pub fn connections_open(&self, port: &'static str) -> i64 {
        self.connections_open.get_or_create(&Port { port }).get()
    }

    pub fn connection_dropped(&self, port: &'static str, limit: &'static str) {
        self.connections_dropped.get_or_create(&PortLimit { port, limit }).inc();
    }

    pub fn connections_dropped_count(&self, port: &'static str, limit: &'static str) -> u64 {
        self.connections_dropped.get_or_create(&PortLimit { port, limit }).get()
    }

    pub fn peer_stream_accepted(&self, protocol: &'static str) {
        self.peer_streams_accepted.get_or_create(&Protocol { protocol }).inc();
    }

    pub fn peer_streams_accepted_count(&self, protocol: &'static str) -> u64 {
        self.peer_streams_accepted.get_or_create(&Protocol { protocol }).get()
    }

    /// Publish a Raft member's view.
    pub fn raft(&self, term: u64, leader: Option<u64>, committed: Option<u64>, applied: Option<u64>, pending: usize) {
        self.raft_term.set(term as i64);
        self.raft_leader.set(leader.map(|l| l as i64).unwrap_or(-1));
        self.raft_committed.set(committed.map(|c| c as i64).unwrap_or(-1));
        self.raft_applied.set(applied.map(|a| a as i64).unwrap_or(-1));
        self.mailboxes_pending.set(pending as i64);
    }

    /// Publish what a Raft member's storage holds: record counts by part of the state, the
    /// log entries in memory, the current snapshot's size.
    pub fn raft_storage(&self, records: &[(&'static str, usize)], live_log_entries: u64, snapshot_bytes: usize) {
        for (part, count) in records {
            self.replicated_records.get_or_create(&Part { part }).set(*count as i64);
        }
        self.raft_log_live_entries.set(live_log_entries as i64);
        self.raft_snapshot_bytes.set(snapshot_bytes as i64);
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

/// Whether the node takes traffic now, and if not, why (the text `/readyz` answers with).
pub type Readiness = Arc<dyn Fn() -> futures::future::BoxFuture<'static, Result<(), String>> + Send + Sync>;

/// `/metrics`, `/healthz`, and `/readyz`, which answers 503 with the reason while `ready` says
/// no (a Raft member is ready while it hears from a quorum).
pub fn router(metrics: Arc<Metrics>, ready: Readiness) -> axum::Router {
    use axum::http::StatusCode;
    use axum::routing::get;
    axum::Router::new()
        .route(
            "/metrics",
            get(move || {
                let m = metrics.clone();
                async move { m.encode() }
            }),
        )
        .route("/healthz", get(|| async { "ok" }))
        .route(
            "/readyz",
            get(move || {
                let ready = ready();
                async move {
                    match ready.await {
                        Ok(()) => (StatusCode::OK, "ready".to_string()),
                        Err(reason) => (StatusCode::SERVICE_UNAVAILABLE, format!("not ready: {reason}")),
                    }
                }
            }),
        )
}
