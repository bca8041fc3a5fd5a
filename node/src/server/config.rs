//! Settings that shape the server's behaviour.

use crate::mcp_tasks::TaskSettings;
use std::time::Duration;

/// Settings that shape behaviour rather than content.
#[derive(Debug, Clone)]
pub struct ServerConfig {
    pub node_id: u64,
    pub elicitation_timeout: Duration,
    pub sampling_timeout: Duration,
    /// Items per page of `*/list` results.
    pub page_size: usize,
    /// How often idle node-local session entries are dropped.
    pub local_sweep_interval: Duration,
    /// The most a session may make every replica hold: `initialize` params larger than this
    /// (as JSON) are refused with -32602.
    /// Also the most the URIs a session subscribes to may take together.
    pub max_session_record_bytes: usize,
    /// Resources one session may subscribe to.
    pub max_subscriptions_per_session: usize,
    /// Live sessions, cluster-wide; `initialize` beyond it is refused (HTTP 503).
    pub max_sessions: usize,
    /// Requests of one session running at once on this node, parked ones included.
    pub max_requests_per_session: usize,
    /// Requests running at once on this node, parked ones included, every session together.
    pub max_requests_per_node: usize,
    /// Time to live, poll interval and cluster-wide limit of tasks (Tasks extension).
    pub tasks: TaskSettings,
}

impl Default for ServerConfig {
    fn default() -> Self {
        ServerConfig {
            node_id: 0,
            elicitation_timeout: Duration::from_secs(300),
            sampling_timeout: Duration::from_secs(600),
            page_size: 100,
            local_sweep_interval: Duration::from_secs(30),
            max_session_record_bytes: 64 * 1024,
            max_subscriptions_per_session: 100,
            max_sessions: 100_000,
            max_requests_per_session: 64,
            max_requests_per_node: 10_000,
            tasks: TaskSettings::default(),
        }
    }
}
