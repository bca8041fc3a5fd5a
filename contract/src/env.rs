//! Environment variables the node reads. Every `switchboard serve` flag `--some-flag` has the twin
//! `SWITCHBOARD_SOME_FLAG`; [`SERVE`] lists them all. The operator configures its pods through
//! them and refuses the ones it sets in `spec.env`.

/// `--tools`: the built-in tool set (`default` or `conformance`).
pub const TOOLS: &str = "SWITCHBOARD_TOOLS";
/// `--elicitation-timeout`: how long a tool waits for an elicitation answer.
pub const ELICITATION_TIMEOUT: &str = "SWITCHBOARD_ELICITATION_TIMEOUT";
/// `--sampling-timeout`: how long a tool waits for a sampling answer.
pub const SAMPLING_TIMEOUT: &str = "SWITCHBOARD_SAMPLING_TIMEOUT";
/// `--session-ttl`: how long an idle session stays valid.
pub const SESSION_TTL: &str = "SWITCHBOARD_SESSION_TTL";
/// `--page-size`: items per page in list results.
pub const PAGE_SIZE: &str = "SWITCHBOARD_PAGE_SIZE";
/// `--max-session-record-bytes`: the most a session may make every replica hold (initialize params).
pub const MAX_SESSION_RECORD_BYTES: &str = "SWITCHBOARD_MAX_SESSION_RECORD_BYTES";
/// `--max-subscriptions-per-session`: resources one session may subscribe to.
pub const MAX_SUBSCRIPTIONS_PER_SESSION: &str = "SWITCHBOARD_MAX_SUBSCRIPTIONS_PER_SESSION";
/// `--max-sessions`: live sessions the cluster holds.
pub const MAX_SESSIONS: &str = "SWITCHBOARD_MAX_SESSIONS";
/// `--max-requests-per-session`: requests of one session running at once on a node.
pub const MAX_REQUESTS_PER_SESSION: &str = "SWITCHBOARD_MAX_REQUESTS_PER_SESSION";
/// `--max-requests-per-node`: requests running at once on a node.
pub const MAX_REQUESTS_PER_NODE: &str = "SWITCHBOARD_MAX_REQUESTS_PER_NODE";
/// `--task-ttl`: how long a task (Tasks extension) is kept after it is created.
pub const TASK_TTL: &str = "SWITCHBOARD_TASK_TTL";
/// `--task-poll-interval`: how often clients are told to poll a task.
pub const TASK_POLL_INTERVAL: &str = "SWITCHBOARD_TASK_POLL_INTERVAL";
/// `--max-tasks`: live tasks the cluster holds.
pub const MAX_TASKS: &str = "SWITCHBOARD_MAX_TASKS";
/// `--task-owner-timeout`: how long the node running a task may be silent before it fails.
pub const TASK_OWNER_TIMEOUT: &str = "SWITCHBOARD_TASK_OWNER_TIMEOUT";
/// `--previous-cluster-secret-file`: a cluster secret also accepted during a rotation.
pub const PREVIOUS_CLUSTER_SECRET_FILE: &str = "SWITCHBOARD_PREVIOUS_CLUSTER_SECRET_FILE";
/// `--previous-encryption-key-file`: an id-encryption key also accepted during a rotation.
pub const PREVIOUS_ENCRYPTION_KEY_FILE: &str = "SWITCHBOARD_PREVIOUS_ENCRYPTION_KEY_FILE";
/// `--peer-source-ip`: local address of outgoing peer connections.
pub const PEER_SOURCE_IP: &str = "SWITCHBOARD_PEER_SOURCE_IP";
/// `--drain-timeout`: on SIGTERM, how long running calls get to finish.
pub const DRAIN_TIMEOUT: &str = "SWITCHBOARD_DRAIN_TIMEOUT";
/// `--worker-threads`: the async runtime's worker threads (default: the CPUs the process may use).
pub const WORKER_THREADS: &str = "SWITCHBOARD_WORKER_THREADS";
/// `--log-format`: `text` or `json` on stderr.
pub const LOG_FORMAT: &str = "SWITCHBOARD_LOG_FORMAT";
/// `--node-id`: the Raft node id (default: the hostname's ordinal).
pub const NODE_ID: &str = "SWITCHBOARD_NODE_ID";
/// `--listen`: address of the MCP endpoint.
pub const LISTEN: &str = "SWITCHBOARD_LISTEN";
/// `--metrics-listen`: address of `/metrics`, `/healthz` and `/readyz`.
pub const METRICS_LISTEN: &str = "SWITCHBOARD_METRICS_LISTEN";
/// `--allowed-hosts`: host names accepted in `Host` (`*` accepts any Host, never any Origin).
pub const ALLOWED_HOSTS: &str = "SWITCHBOARD_ALLOWED_HOSTS";
/// `--allowed-origins`: origins accepted in `Origin` (default: http and https on any port of the
/// allowed hosts).
pub const ALLOWED_ORIGINS: &str = "SWITCHBOARD_ALLOWED_ORIGINS";
/// `--header-read-timeout`: how long a client may take to send a request's headers.
pub const HEADER_READ_TIMEOUT: &str = "SWITCHBOARD_HEADER_READ_TIMEOUT";
/// `--idle-connection-timeout`: how long a kept-alive connection may wait for its next request.
pub const IDLE_CONNECTION_TIMEOUT: &str = "SWITCHBOARD_IDLE_CONNECTION_TIMEOUT";
/// `--max-connections`: most open connections per port (MCP, peer, metrics).
pub const MAX_CONNECTIONS: &str = "SWITCHBOARD_MAX_CONNECTIONS";
/// `--max-body-bytes`: largest request body.
pub const MAX_BODY_BYTES: &str = "SWITCHBOARD_MAX_BODY_BYTES";
/// `--no-standalone-stream`: refuse the standalone GET stream.
pub const NO_STANDALONE_STREAM: &str = "SWITCHBOARD_NO_STANDALONE_STREAM";
/// `--store`: `raft` or `memory`.
pub const STORE: &str = "SWITCHBOARD_STORE";
/// `--peer-listen`: address of the peer port (Raft RPCs and the admin API).
pub const PEER_LISTEN: &str = "SWITCHBOARD_PEER_LISTEN";
/// `--advertise-peer`: the peer address other members reach this node at.
pub const ADVERTISE_PEER: &str = "SWITCHBOARD_ADVERTISE_PEER";
/// `--data-dir`: where the Raft log and state live.
pub const DATA_DIR: &str = "SWITCHBOARD_DATA_DIR";
/// `--peers`: the founding members, `0=host:7070,1=host:7070,...`.
pub const PEERS: &str = "SWITCHBOARD_PEERS";
/// `--join`: any member's peer address, to join an existing cluster.
pub const JOIN: &str = "SWITCHBOARD_JOIN";
/// `--cluster-secret-file`: the file holding the secret every peer request carries.
pub const CLUSTER_SECRET_FILE: &str = "SWITCHBOARD_CLUSTER_SECRET_FILE";
/// `--encryption-key-file`: the file holding the id-encryption key.
pub const ENCRYPTION_KEY_FILE: &str = "SWITCHBOARD_ENCRYPTION_KEY_FILE";
/// `--heartbeat-interval`: how often the Raft leader sends heartbeats.
pub const HEARTBEAT_INTERVAL: &str = "SWITCHBOARD_HEARTBEAT_INTERVAL";
/// `--election-timeout`: the minimum Raft election timeout.
pub const ELECTION_TIMEOUT: &str = "SWITCHBOARD_ELECTION_TIMEOUT";
/// `--max-entry-bytes`: the largest replicated entry a write may make.
pub const MAX_ENTRY_BYTES: &str = "SWITCHBOARD_MAX_ENTRY_BYTES";
/// `--replication-batch-bytes`: the byte budget of one replication request.
pub const REPLICATION_BATCH_BYTES: &str = "SWITCHBOARD_REPLICATION_BATCH_BYTES";

/// Not a flag: the log filter (`info`, `switchboard_node=debug`, ...), read by every command.
pub const LOG: &str = "SWITCHBOARD_LOG";

/// The environment twin of every `switchboard serve` flag, and nothing else.
pub const SERVE: &[&str] = &[
    TOOLS,
    ELICITATION_TIMEOUT,
    SAMPLING_TIMEOUT,
    SESSION_TTL,
    PAGE_SIZE,
    MAX_SESSION_RECORD_BYTES,
    MAX_SUBSCRIPTIONS_PER_SESSION,
    MAX_SESSIONS,
    MAX_REQUESTS_PER_SESSION,
    MAX_REQUESTS_PER_NODE,
    TASK_TTL,
    TASK_POLL_INTERVAL,
    MAX_TASKS,
    LOG_FORMAT,
    NODE_ID,
    LISTEN,
    METRICS_LISTEN,
    ALLOWED_HOSTS,
    ALLOWED_ORIGINS,
    HEADER_READ_TIMEOUT,
    IDLE_CONNECTION_TIMEOUT,
    MAX_CONNECTIONS,
    MAX_BODY_BYTES,
    NO_STANDALONE_STREAM,
    STORE,
    PEER_LISTEN,
    ADVERTISE_PEER,
    DATA_DIR,
    PEERS,
    JOIN,
    CLUSTER_SECRET_FILE,
    ENCRYPTION_KEY_FILE,
    PREVIOUS_CLUSTER_SECRET_FILE,
    PREVIOUS_ENCRYPTION_KEY_FILE,
    HEARTBEAT_INTERVAL,
    ELECTION_TIMEOUT,
    MAX_ENTRY_BYTES,
    REPLICATION_BATCH_BYTES,
    TASK_OWNER_TIMEOUT,
    DRAIN_TIMEOUT,
    PEER_SOURCE_IP,
    WORKER_THREADS,
];

#[cfg(test)]
mod tests {
    use std::collections::BTreeSet;

    use super::*;

    #[test]
    fn serve_lists_each_flag_once_with_the_prefix() {
        let unique: BTreeSet<&str> = SERVE.iter().copied().collect();
        assert_eq!(unique.len(), SERVE.len(), "a name is listed twice");
        assert_eq!(SERVE.len(), 42);
        for name in SERVE {
            assert!(name.starts_with("SWITCHBOARD_") && name[12..].chars().all(|c| c.is_ascii_uppercase() || c == '_'), "{name}");
        }
        assert!(!SERVE.contains(&LOG), "SWITCHBOARD_LOG is not a flag");
    }
}
