//! The `switchboard` command line. Every flag has a `SWITCHBOARD_*` environment twin.

use crate::cluster::{Node, NodeError, Store};
use crate::mailbox::InMemoryMailbox;
use crate::mcp_tasks::TaskSettings;
use crate::metrics::Metrics;
use crate::peer::{PeerClient, PeerError, routes};
use crate::raft::{ClusterStatus, Membership, RaftNodeConfig};
use crate::server::correlation::IdSealer;
use crate::server::{ServerBuilder, ServerConfig};
use crate::session::InMemorySessionStore;
use crate::tools::ToolSet;
use crate::transport::{http, stdio};
use clap::{Args, Parser, Subcommand};
use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;
use std::time::Duration;
use switchboard_contract::duration::parse_duration;
use switchboard_contract::env;
use switchboard_contract::origin::{AllowedOrigin, parse_allowed_host, parse_allowed_origin};

#[derive(Parser, Debug)]
#[command(name = "switchboard", version, about = "Clustered MCP server runtime")]
pub struct Cli {
    #[command(subcommand)]
    pub command: Command,
}

#[derive(Subcommand, Debug)]
#[allow(clippy::large_enum_variant, reason = "parsed once per process")]
pub enum Command {
    /// Run one node over Streamable HTTP.
    Serve(ServeArgs),
    /// Run the same server over stdin/stdout (one process, in-memory stores).
    Stdio(CommonArgs),
    /// Talk to a running cluster through a member's peer port (admin API).
    Cluster(ClusterArgs),
    /// A local three-node durable cluster behind a round-robin front door; prints the MCP URL.
    Dev(DevArgs),
}

#[derive(Args, Debug, Clone)]
pub struct DevArgs {
    #[command(flatten)]
    pub common: CommonArgs,
    /// Address of the front door.
    #[arg(long, env = env::LISTEN, default_value = "127.0.0.1:8080")]
    pub listen: SocketAddr,
    /// Number of replicas.
    #[arg(long, env = "SWITCHBOARD_DEV_NODES", default_value_t = 3, value_parser = clap::value_parser!(u64).range(1..=9))]
    pub nodes: u64,
    /// Keep the nodes' Raft data here instead of in a temporary directory.
    #[arg(long, env = env::DATA_DIR)]
    pub data_dir: Option<PathBuf>,
}

#[derive(Args, Debug, Clone)]
pub struct ClusterArgs {
    /// Any member's peer address (host:port).
    #[arg(long, env = "SWITCHBOARD_PEER", global = true, default_value = "127.0.0.1:7070")]
    pub peer: String,
    /// File holding the cluster secret the peer port requires.
    #[arg(long, env = env::CLUSTER_SECRET_FILE, global = true)]
    pub cluster_secret_file: Option<PathBuf>,
    /// How to print the answer: a table for people, or JSON for programs.
    #[arg(short, long, env = "SWITCHBOARD_OUTPUT", global = true, value_enum, default_value = "table")]
    pub output: Output,
    #[command(subcommand)]
    pub action: ClusterAction,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Output {
    Table,
    Json,
}

#[derive(Subcommand, Debug, Clone)]
pub enum ClusterAction {
    /// Print the member's view of the cluster as JSON.
    Status,
    /// Add a node as a learner (it replicates but does not vote).
    AddLearner {
        #[arg(long, env = "SWITCHBOARD_MEMBER_ID")]
        id: u64,
        /// The new node's peer address.
        #[arg(long, env = "SWITCHBOARD_MEMBER_ADDR")]
        addr: String,
    },
    /// Make a caught-up learner a voter.
    Promote {
        #[arg(long, env = "SWITCHBOARD_MEMBER_ID")]
        id: u64,
    },
    /// Remove a member from the Raft group.
    Remove {
        #[arg(long, env = "SWITCHBOARD_MEMBER_ID")]
        id: u64,
    },
}

/// Where mailboxes and sessions live.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum StoreKind {
    /// Replicated through Raft (durable in --data-dir); a one-node cluster without --peers/--join.
    Raft,
    /// This process's memory only (no clustering, nothing survives a restart).
    Memory,
}

/// Settings shared by every way of running a server.
#[derive(Args, Debug, Clone)]
pub struct CommonArgs {
    /// Built-in tool set to register.
    #[arg(long, env = env::TOOLS, value_enum, default_value = "default")]
    pub tools: ToolSet,
    /// How long a tool waits for the user to answer an elicitation.
    #[arg(long, env = env::ELICITATION_TIMEOUT, value_parser = parse_duration, default_value = "5m")]
    pub elicitation_timeout: Duration,
    /// How long a tool waits for the client's LLM to answer a sampling request.
    #[arg(long, env = env::SAMPLING_TIMEOUT, value_parser = parse_duration, default_value = "10m")]
    pub sampling_timeout: Duration,
    /// How long an idle session stays valid.
    #[arg(long, env = env::SESSION_TTL, value_parser = parse_duration, default_value = "1h")]
    pub session_ttl: Duration,
    /// Items per page in list results.
    #[arg(long, env = env::PAGE_SIZE, default_value_t = 100, value_parser = clap::value_parser!(u32).range(1..=10_000))]
    pub page_size: u32,
    /// The most a session may make every replica hold, in bytes: `initialize` params larger
    /// than this are refused (-32602).
    #[arg(long, env = env::MAX_SESSION_RECORD_BYTES, default_value_t = 64 * 1024, value_parser = clap::value_parser!(u64).range(1024..))]
    pub max_session_record_bytes: u64,
    /// Resources one session may subscribe to.
    #[arg(long, env = env::MAX_SUBSCRIPTIONS_PER_SESSION, default_value_t = 100)]
    pub max_subscriptions_per_session: usize,
    /// Live sessions the cluster holds; `initialize` beyond it gets 503 with Retry-After.
    #[arg(long, env = env::MAX_SESSIONS, default_value_t = 100_000, value_parser = clap::value_parser!(u64).range(1..))]
    pub max_sessions: u64,
    /// Requests of one session running at once on a node, parked ones included.
    #[arg(long, env = env::MAX_REQUESTS_PER_SESSION, default_value_t = 64, value_parser = clap::value_parser!(u64).range(1..))]
    pub max_requests_per_session: u64,
    /// Requests running at once on a node, parked ones included, every session together.
    #[arg(long, env = env::MAX_REQUESTS_PER_NODE, default_value_t = 10_000, value_parser = clap::value_parser!(u64).range(1..))]
    pub max_requests_per_node: u64,
    /// How long a task (Tasks extension) is kept after it is created, finished or not.
    #[arg(long, env = env::TASK_TTL, value_parser = parse_duration, default_value = "1h")]
    pub task_ttl: Duration,
    /// How often clients are told to poll a task (`pollIntervalMs`).
    #[arg(long, env = env::TASK_POLL_INTERVAL, value_parser = parse_duration, default_value = "500ms")]
    pub task_poll_interval: Duration,
    /// Live tasks the cluster holds; a call beyond it that would become a task is refused.
    #[arg(long, env = env::MAX_TASKS, default_value_t = 10_000, value_parser = clap::value_parser!(u64).range(1..))]
    pub max_tasks: u64,
    /// Log format on stderr.
    #[arg(long, env = env::LOG_FORMAT, value_enum, default_value = "text")]
    pub log_format: LogFormat,
    /// Log filter (`info`, `switchboard_node=debug,openraft=info`, ...). Without it, `RUST_LOG`;
    /// without that, this project's events at info and its dependencies' at warn.
    #[arg(long, env = env::LOG)]
    pub log: Option<String>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum LogFormat {
    Text,
    Json,
}

#[derive(Args, Debug, Clone)]
pub struct ServeArgs {
    #[command(flatten)]
    pub common: CommonArgs,
    /// This node's id; defaults to the ordinal at the end of the hostname (`name-2` is 2).
    #[arg(long, env = env::NODE_ID)]
    pub node_id: Option<u64>,
    /// Address of the MCP endpoint.
    #[arg(long, env = env::LISTEN, default_value = "0.0.0.0:8080")]
    pub listen: SocketAddr,
    /// Address of `/metrics`, `/healthz` and `/readyz`.
    #[arg(long, env = env::METRICS_LISTEN, default_value = "0.0.0.0:9090")]
    pub metrics_listen: SocketAddr,
    /// Host names accepted in the Host header (DNS-rebinding protection); `*` accepts any Host
    /// but never opens the Origin check.
    #[arg(long, env = env::ALLOWED_HOSTS, value_delimiter = ',', default_value = "localhost,127.0.0.1,[::1]", value_parser = parse_allowed_host)]
    pub allowed_hosts: Vec<String>,
    /// Origins browser clients may send (`https://app.example.com`, `http://localhost:5173`); a
    /// request without Origin passes. Default: http and https on any port of each allowed host
    /// (none for `*`).
    #[arg(long, env = env::ALLOWED_ORIGINS, value_delimiter = ',', value_parser = parse_allowed_origin)]
    pub allowed_origins: Vec<AllowedOrigin>,
    /// How long a client may take to send a request's headers, counted from connecting or from
    /// the first byte of a later request on a kept-alive connection; slower connections are closed.
    #[arg(long, env = env::HEADER_READ_TIMEOUT, value_parser = parse_duration, default_value = "10s")]
    pub header_read_timeout: Duration,
    /// How long a kept-alive connection may wait for its next request once the last response is
    /// written (never cuts a response still going out, such as an SSE stream).
    #[arg(long, env = env::IDLE_CONNECTION_TIMEOUT, value_parser = parse_duration, default_value = "120s")]
    pub idle_connection_timeout: Duration,
    /// Most open connections on each port (MCP, peer, metrics); one beyond it is closed at once.
    #[arg(long, env = env::MAX_CONNECTIONS, default_value_t = 10_000, value_parser = clap::value_parser!(u32).range(1..=1_000_000))]
    pub max_connections: u32,
    /// Largest accepted request body, in bytes.
    #[arg(long, env = env::MAX_BODY_BYTES, default_value_t = 4 * 1024 * 1024)]
    pub max_body_bytes: usize,
    /// Refuse GET (405) instead of opening a standalone server-to-client stream.
    #[arg(long, env = env::NO_STANDALONE_STREAM)]
    pub no_standalone_stream: bool,
    /// Where mailboxes and sessions live.
    #[arg(long, env = env::STORE, value_enum, default_value = "raft")]
    pub store: StoreKind,
    /// Address of the peer port (Raft RPCs, the admin API and the MCP relay).
    #[arg(long, env = env::PEER_LISTEN, default_value = "0.0.0.0:7070")]
    pub peer_listen: SocketAddr,
    /// The peer address other members reach this node at (default: hostname and peer port).
    #[arg(long, env = env::ADVERTISE_PEER)]
    pub advertise_peer: Option<String>,
    /// Local address outgoing peer connections are made from (a multi-homed host; a test
    /// harness that tells replicas apart by source address).
    #[arg(long, env = env::PEER_SOURCE_IP)]
    pub peer_source_ip: Option<std::net::IpAddr>,
    /// Directory of the Raft log, vote and snapshots.
    #[arg(long, env = env::DATA_DIR, default_value = "switchboard-data")]
    pub data_dir: PathBuf,
    /// Initial members of a new cluster: `0=host:7070,1=host:7070,...` (the lowest id bootstraps it).
    #[arg(long, env = env::PEERS, value_parser = parse_peers, conflicts_with = "join")]
    pub peers: Option<BTreeMap<u64, String>>,
    /// Join an existing cluster through any member's peer address.
    #[arg(long, env = env::JOIN)]
    pub join: Option<String>,
    /// File holding the shared secret every peer request must carry (required with --peers/--join).
    #[arg(long, env = env::CLUSTER_SECRET_FILE)]
    pub cluster_secret_file: Option<PathBuf>,
    /// File holding the 256-bit key (64 hex digits) request and event ids are sealed with; every
    /// replica must share it (required with --peers/--join).
    #[arg(long, env = env::ENCRYPTION_KEY_FILE)]
    pub encryption_key_file: Option<PathBuf>,
    /// A cluster secret also accepted from peers while a rotation is under way (never sent).
    /// A missing or empty file means none, so a Secret without the key can be mounted as is.
    #[arg(long, env = env::PREVIOUS_CLUSTER_SECRET_FILE)]
    pub previous_cluster_secret_file: Option<PathBuf>,
    /// An id-encryption key whose ids, request states and data are also accepted while a
    /// rotation is under way (nothing is sealed with it). Missing or empty: none.
    #[arg(long, env = env::PREVIOUS_ENCRYPTION_KEY_FILE)]
    pub previous_encryption_key_file: Option<PathBuf>,
    /// Raft heartbeat interval.
    #[arg(long, env = env::HEARTBEAT_INTERVAL, value_parser = parse_duration, default_value = "100ms")]
    pub heartbeat_interval: Duration,
    /// Minimum Raft election timeout (the maximum, 1.25 times this, is also how long a follower
    /// keeps its leader lease); must exceed the heartbeat.
    #[arg(long, env = env::ELECTION_TIMEOUT, value_parser = parse_duration, default_value = "1s")]
    pub election_timeout: Duration,
    /// Largest replicated entry a write may make, in bytes (a session record, a client's
    /// answer); larger ones are refused before they are proposed.
    #[arg(long, env = env::MAX_ENTRY_BYTES, default_value_t = 4 * 1024 * 1024, value_parser = limit_bytes)]
    pub max_entry_bytes: usize,
    /// Bytes of log entries one replication request carries at most (past its first entry).
    #[arg(long, env = env::REPLICATION_BATCH_BYTES, default_value_t = 8 * 1024 * 1024, value_parser = limit_bytes)]
    pub replication_batch_bytes: usize,
    /// How long a member running tasks may go without acknowledging the leader before its
    /// tasks fail (their work is gone with it).
    #[arg(long, env = env::TASK_OWNER_TIMEOUT, value_parser = parse_duration, default_value = "10s")]
    pub task_owner_timeout: Duration,

    /// On SIGTERM, how long running calls (parked elicitations included) get to finish before
    /// they are ended with an error. Meanwhile the node reports not-ready and, as leader,
    /// hands leadership over. Keep it below the pod's termination grace period.
    #[arg(long, env = env::DRAIN_TIMEOUT, value_parser = parse_duration, default_value = "20s")]
    pub drain_timeout: Duration,

    /// Worker threads of the async runtime. By default one per CPU the process may use (a
    /// cgroup's CPU quota, as a pod's limit sets, included). Replicas sharing a host without
    /// quotas should each get a share: three replicas with two workers each on two cores spent
    /// a fifth of their CPU switching threads (the elicitation bench's cluster uses one each).
    #[arg(long, env = env::WORKER_THREADS, value_parser = clap::value_parser!(u16).range(1..=1024))]
    pub worker_threads: Option<u16>,
}

/// A byte limit of the Raft layer: within the bounds that keep every frame under the cap.
fn limit_bytes(text: &str) -> Result<usize, String> {
    use crate::raft::config::{MAX_LIMIT_BYTES, MIN_LIMIT_BYTES};
    let bytes: usize = text.parse().map_err(|_| format!("invalid byte count {text:?}"))?;
    if !(MIN_LIMIT_BYTES..=MAX_LIMIT_BYTES).contains(&bytes) {
        return Err(format!("{bytes} is not between {MIN_LIMIT_BYTES} and {MAX_LIMIT_BYTES} bytes"));
    }
    Ok(bytes)
}

/// Parse `0=host:7070,1=host:7070`.
pub fn parse_peers(text: &str) -> Result<BTreeMap<u64, String>, String> {
    let mut peers = BTreeMap::new();
    for part in text.split(',').map(str::trim).filter(|p| !p.is_empty()) {
        let (id, addr) = part.split_once('=').ok_or_else(|| format!("invalid peer {part:?}: expected ID=HOST:PORT"))?;
        let id: u64 = id.trim().parse().map_err(|_| format!("invalid peer id {id:?} in {part:?}"))?;
        let addr = addr.trim();
        if addr.rsplit_once(':').is_none_or(|(host, port)| host.is_empty() || port.parse::<u16>().is_err()) {
            return Err(format!("invalid peer address {addr:?}: expected HOST:PORT"));
        }
        if peers.insert(id, addr.to_string()).is_some() {
            return Err(format!("peer id {id} given twice"));
        }
    }
    if peers.is_empty() {
        return Err("no peers given".into());
    }
    Ok(peers)
}

/// Errors that stop the command.
#[derive(Debug, thiserror::Error)]
pub enum CliError {
    #[error("no --node-id given and the hostname {0:?} does not end in an ordinal (needed to join a cluster)")]
    NodeId(String),
    #[error("{0}")]
    Config(String),
    #[error("could not read {path}: {source}")]
    ReadFile { path: PathBuf, source: std::io::Error },
    #[error(transparent)]
    Node(#[from] NodeError),
    #[error(transparent)]
    Peer(#[from] PeerError),
    #[error(transparent)]
    Io(#[from] std::io::Error),
}

/// The ordinal at the end of a StatefulSet pod's hostname.
pub fn ordinal_from_hostname(hostname: &str) -> Option<u64> {
    hostname.rsplit_once('-').and_then(|(_, n)| n.parse().ok())
}

/// This project's events at info, dependencies' (openraft dumps whole Raft states at info) at warn.
const DEFAULT_LOG_FILTER: &str = "warn,switchboard_node=info,switchboard=info";

/// The log filter: `--log` (or its env twin), else `RUST_LOG`, else [`DEFAULT_LOG_FILTER`].
fn log_filter(flag: Option<&str>, rust_log: Option<&str>) -> String {
    flag.or(rust_log).filter(|f| !f.trim().is_empty()).unwrap_or(DEFAULT_LOG_FILTER).to_string()
}

fn init_tracing(format: LogFormat, log: Option<&str>) {
    let rust_log = std::env::var("RUST_LOG").ok();
    let filter = tracing_subscriber::EnvFilter::try_new(log_filter(log, rust_log.as_deref())).unwrap_or_else(|e| {
        eprintln!("switchboard: invalid log filter ({e}); using {DEFAULT_LOG_FILTER}");
        DEFAULT_LOG_FILTER.into()
    });
    let builder = tracing_subscriber::fmt().with_env_filter(filter).with_writer(std::io::stderr);
    let _ = match format {
        LogFormat::Text => builder.try_init(),
        LogFormat::Json => builder.json().try_init(),
    };
}

/// The server `switchboard` runs: the chosen tool set, the flags' timeouts and page size.
fn server_builder(common: &CommonArgs, node_id: u64, sealer: Arc<IdSealer>) -> ServerBuilder {
    let config = ServerConfig {
        node_id,
        elicitation_timeout: common.elicitation_timeout,
        sampling_timeout: common.sampling_timeout,
        page_size: common.page_size as usize,
        max_session_record_bytes: common.max_session_record_bytes as usize,
        max_subscriptions_per_session: common.max_subscriptions_per_session,
        max_sessions: common.max_sessions as usize,
        max_requests_per_session: common.max_requests_per_session as usize,
        max_requests_per_node: common.max_requests_per_node as usize,
        tasks: TaskSettings { ttl: common.task_ttl, poll_interval: common.task_poll_interval, max_tasks: common.max_tasks as usize },
        ..Default::default()
    };
    common.tools.register(ServerBuilder::new("switchboard", env!("CARGO_PKG_VERSION")).config(config).id_sealer(sealer))
}

/// A secret from a file (trimmed); refuses an empty one.
/// The contents of a `--previous-*-file`: `None` when the file is missing or blank (a rotation
/// is not under way), an error when it cannot be read.
fn read_optional(path: &PathBuf) -> Result<Option<String>, CliError> {
    match std::fs::read_to_string(path) {
        Ok(text) => Ok(Some(text.trim().to_string()).filter(|t| !t.is_empty())),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
        Err(source) => Err(CliError::ReadFile { path: path.clone(), source }),
    }
}

pub fn read_secret(path: &PathBuf) -> Result<String, CliError> {
    let text = std::fs::read_to_string(path).map_err(|source| CliError::ReadFile { path: path.clone(), source })?;
    let secret = text.trim().to_string();
    if secret.is_empty() {
        return Err(CliError::Config(format!("{} is empty", path.display())));
    }
    Ok(secret)
}

fn hostname() -> String {
    std::env::var("HOSTNAME").ok().or_else(|| std::fs::read_to_string("/etc/hostname").ok()).unwrap_or_default().trim().to_string()
}

/// The Raft member configuration `serve` flags describe.
fn raft_config(args: &ServeArgs, node_id: u64) -> Result<RaftNodeConfig, CliError> {
    let membership = match (&args.peers, &args.join) {
        (Some(peers), _) => {
            // A node beyond the founding members (a StatefulSet scaled up) starts empty and waits
            // to be added as a learner through the admin API.
            if !peers.contains_key(&node_id) && args.advertise_peer.is_none() {
                return Err(CliError::Config(format!(
                    "--peers does not list this node's id {node_id}: give --advertise-peer so the cluster can add it"
                )));
            }
            Membership::Peers(peers.clone())
        }
        (None, Some(join)) => Membership::Join(join.clone()),
        (None, None) => Membership::Single,
    };
    let secret = match (&args.cluster_secret_file, &membership) {
        (Some(path), _) => read_secret(path)?,
        (None, Membership::Single) => format!("{:032x}", rand::random::<u128>()),
        (None, _) => return Err(CliError::Config("--cluster-secret-file is required with --peers or --join".into())),
    };
    let previous_secret = match &args.previous_cluster_secret_file {
        Some(path) => read_optional(path)?,
        None => None,
    };
    let advertise = match &args.advertise_peer {
        Some(a) => a.clone(),
        None => match &membership {
            Membership::Peers(peers) => peers.get(&node_id).cloned().expect("checked above"),
            _ => format!(
                "{}:{}",
                if args.peer_listen.ip().is_unspecified() { hostname() } else { args.peer_listen.ip().to_string() },
                args.peer_listen.port()
            ),
        },
    };
    if args.election_timeout <= args.heartbeat_interval {
        return Err(CliError::Config("--election-timeout must be longer than --heartbeat-interval".into()));
    }
    let mut config = RaftNodeConfig::new(node_id, args.data_dir.clone(), advertise, secret);
    config.membership = membership;
    config.previous_secret = previous_secret;
    config.source_ip = args.peer_source_ip;
    config.heartbeat = args.heartbeat_interval;
    config.election_timeout = args.election_timeout;
    config.session_ttl = args.common.session_ttl;
    config.max_entry_bytes = args.max_entry_bytes;
    config.replication_batch_bytes = args.replication_batch_bytes;
    config.task_owner_timeout = args.task_owner_timeout;
    Ok(config)
}

async fn shutdown_signal() {
    let ctrl_c = tokio::signal::ctrl_c();
    #[cfg(unix)]
    {
        let mut term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()).expect("signal handler");
        tokio::select! { _ = ctrl_c => {}, _ = term.recv() => {} }
    }
    #[cfg(not(unix))]
    let _ = ctrl_c.await;
}

async fn bind(addr: SocketAddr) -> Result<tokio::net::TcpListener, CliError> {
    tokio::net::TcpListener::bind(addr).await.map_err(|source| CliError::Node(NodeError::Listen { addr, source }))
}

async fn serve(args: ServeArgs) -> Result<(), CliError> {
    let clustered = args.peers.is_some() || args.join.is_some();
    let node_id = match args.node_id {
        Some(id) => id,
        None => {
            let host = hostname();
            match ordinal_from_hostname(&host) {
                Some(id) => id,
                None if clustered => return Err(CliError::NodeId(host)),
                // A lone node needs no particular id.
                None => 0,
            }
        }
    };
    let sealer = match &args.encryption_key_file {
        Some(path) => {
            let text = std::fs::read_to_string(path).map_err(|source| CliError::ReadFile { path: path.clone(), source })?;
            IdSealer::from_text(&text).map_err(|e| CliError::Config(format!("{}: {e}", path.display())))?
        }
        None if clustered => {
            return Err(CliError::Config(
                "--encryption-key-file is required with --peers or --join (every replica must share the key)".into(),
            ));
        }
        // A lone node: ids only ever come back to this process.
        None => IdSealer::random(),
    };
    let previous_key = match &args.previous_encryption_key_file {
        Some(path) => read_optional(path)?
            .map(|text| IdSealer::from_text(&text).map_err(|e| CliError::Config(format!("{}: {e}", path.display()))))
            .transpose()?,
        None => None,
    };
    let sealer = match previous_key {
        Some(previous) => {
            tracing::info!(current = %sealer.key_fingerprint(), previous = %previous.key_fingerprint(), "id-encryption key rotation: accepting the previous key too");
            sealer.with_previous(previous)
        }
        None => sealer,
    };
    let store = match args.store {
        StoreKind::Memory => Store::Memory { session_ttl: args.common.session_ttl },
        StoreKind::Raft => {
            let mut config = raft_config(&args, node_id)?;
            config.key_fingerprint = Some(sealer.key_fingerprint());
            config.previous_key_fingerprint = sealer.previous_key_fingerprint();
            let peer_listener = bind(args.peer_listen).await?;
            tracing::info!(node_id, peer = %peer_listener.local_addr()?, advertise = %config.advertise, data_dir = %config.data_dir.display(), "starting Raft member");
            Store::Raft { config, peer_listener }
        }
    };
    let config = http::HttpConfig {
        max_body_bytes: args.max_body_bytes,
        allowed_hosts: args.allowed_hosts.clone(),
        allowed_origins: args.allowed_origins.clone(),
        connections: http::ConnectionLimits {
            header_read_timeout: args.header_read_timeout,
            idle_timeout: args.idle_connection_timeout,
            max_connections: args.max_connections as usize,
        },
        standalone_stream: !args.no_standalone_stream,
        ..Default::default()
    };
    let limits = config.connections.clone();
    let metrics = Arc::new(Metrics::new());
    let builder = server_builder(&args.common, node_id, Arc::new(sealer));
    let node = Node::assemble(builder, store, config, metrics.clone()).await?;
    let mcp = bind(args.listen).await?;
    let metrics_listener = bind(args.metrics_listen).await?;
    tracing::info!(node_id, listen = %mcp.local_addr()?, metrics = %metrics_listener.local_addr()?, "switchboard node serving MCP at /mcp");
    // The ports close only after the drain: /readyz says "draining" meanwhile, and calls that
    // still arrive before the Service notices are served.
    let (stop, stopped) = tokio::sync::watch::channel(false);
    let on_stop = |mut stopped: tokio::sync::watch::Receiver<bool>| async move {
        let _ = stopped.wait_for(|s| *s).await;
    };
    let metrics_task = tokio::spawn(http::serve_limited(
        metrics_listener,
        node.metrics_router(),
        on_stop(stopped.clone()),
        "metrics",
        limits.clone(),
        metrics.clone(),
    ));
    let mut mcp_task = tokio::spawn(http::serve_limited(mcp, node.mcp_router(), on_stop(stopped), "mcp", limits, metrics));
    tokio::select! {
        () = shutdown_signal() => {}
        served = &mut mcp_task => served.map_err(|e| CliError::Config(format!("MCP server task: {e}")))??,
    }
    let drained = node.drain(args.drain_timeout).await;
    tracing::info!(handed_to = ?drained.handed_to, cut_short = drained.cut_short, "stopping");
    let _ = stop.send(true);
    // Nothing is parked any more; an idle stream still open must not hold the exit.
    if tokio::time::timeout(CLOSE_CONNECTIONS_WITHIN, &mut mcp_task).await.is_err() {
        mcp_task.abort();
    }
    metrics_task.abort();
    node.stop().await;
    Ok(())
}

/// After a drain, how long open connections (idle streams) get to close before the process exits.
const CLOSE_CONNECTIONS_WITHIN: Duration = Duration::from_secs(3);

/// The cluster as one member sees it, for people: one line per member.
fn status_table(status: &ClusterStatus) -> String {
    let leader = status.leader.map_or("none".to_string(), |l| l.to_string());
    let mut out = format!(
        "node {} sees: leader {leader}, term {}, committed {}, applied {}\n",
        status.node_id,
        status.term,
        status.committed_index.map_or("-".into(), |i| i.to_string()),
        status.last_applied_index.map_or("-".into(), |i| i.to_string()),
    );
    let width = status.members.values().map(String::len).max().unwrap_or(7).max(7);
    out.push_str(&format!("{:<4} {:<8} {:<width$} {:<6} {:<6} {}\n", "ID", "ROLE", "ADDRESS", "LEADER", "LAG", "LAST CONTACT"));
    for (id, addr) in &status.members {
        let role = if status.voters.contains(id) { "voter" } else { "learner" };
        let is_leader = if status.leader == Some(*id) { "*" } else { "" };
        // Only the leader tracks replication; another member's view has no lag figures.
        let lag = status.replication_lag.get(id).map_or("-".to_string(), |l| l.to_string());
        let contact = match status.last_contact_ms.get(id) {
            _ if status.leader == Some(*id) => "-".to_string(),
            Some(ms) => format!("{ms}ms ago"),
            None if status.leader == Some(status.node_id) => "never".to_string(),
            None => "-".to_string(),
        };
        out.push_str(&format!("{id:<4} {role:<8} {addr:<width$} {is_leader:<6} {lag:<6} {contact}\n"));
    }
    out
}

async fn cluster(args: ClusterArgs) -> Result<(), CliError> {
    let secret = match &args.cluster_secret_file {
        Some(path) => read_secret(path)?,
        None => return Err(CliError::Config("--cluster-secret-file is required to talk to the peer port".into())),
    };
    let client = PeerClient::new(secret, None, None);
    let reply: serde_json::Value = match args.action {
        ClusterAction::Status => {
            let status = client.admin::<ClusterStatus>(&args.peer, routes::STATUS, None).await?;
            if args.output == Output::Table {
                print!("{}", status_table(&status));
                return Ok(());
            }
            serde_json::to_value(status).expect("status serializes")
        }
        ClusterAction::AddLearner { id, addr } => {
            client.admin(&args.peer, routes::LEARNERS, Some(&serde_json::json!({"id": id, "addr": addr}))).await?
        }
        ClusterAction::Promote { id } => client.admin(&args.peer, routes::PROMOTE, Some(&serde_json::json!({"id": id}))).await?,
        ClusterAction::Remove { id } => client.admin(&args.peer, routes::REMOVE, Some(&serde_json::json!({"id": id}))).await?,
    };
    println!("{}", serde_json::to_string_pretty(&reply).expect("JSON prints"));
    Ok(())
}

async fn run(cli: Cli) -> Result<(), CliError> {
    match cli.command {
        Command::Serve(args) => {
            init_tracing(args.common.log_format, args.common.log.as_deref());
            serve(args).await
        }
        Command::Cluster(args) => cluster(args).await,
        Command::Dev(args) => {
            init_tracing(args.common.log_format, args.common.log.as_deref());
            let common = args.common.clone();
            let server = Arc::new(move |id, sealer| server_builder(&common, id, sealer));
            let options = crate::dev::DevOptions { listen: args.listen, nodes: args.nodes as usize, data_dir: args.data_dir, server };
            Ok(crate::dev::run(options, shutdown_signal()).await?)
        }
        Command::Stdio(common) => {
            init_tracing(common.log_format, common.log.as_deref());
            let builder = server_builder(&common, 0, Arc::new(IdSealer::random())).metrics(Arc::new(Metrics::new()));
            let server = builder.build(Arc::new(InMemoryMailbox::new()), Arc::new(InMemorySessionStore::new(common.session_ttl)));
            let stdin = tokio::io::BufReader::new(tokio::io::stdin());
            Ok(stdio::run(server, stdin, tokio::io::stdout()).await?)
        }
    }
}

pub fn main() -> ExitCode {
    let cli = Cli::parse();
    let mut runtime = tokio::runtime::Builder::new_multi_thread();
    if let Command::Serve(ServeArgs { worker_threads: Some(threads), .. }) = &cli.command {
        runtime.worker_threads(usize::from(*threads));
    }
    let runtime = runtime.enable_all().build().expect("tokio runtime");
    match runtime.block_on(run(cli)) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("switchboard: {e}");
            ExitCode::FAILURE
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ordinals() {
        assert_eq!(ordinal_from_hostname("demo-2"), Some(2));
        assert_eq!(ordinal_from_hostname("my-server-10"), Some(10));
        assert_eq!(ordinal_from_hostname("laptop"), None);
    }

    #[test]
    fn peers() {
        let peers = parse_peers("0=a:7070, 1=b.svc:7070,2=[::1]:7070").unwrap();
        assert_eq!(peers[&1], "b.svc:7070");
        assert_eq!(peers.len(), 3);
        for bad in ["", "0", "x=a:1", "0=a", "0=a:port", "0=:7070", "0=a:1,0=b:1"] {
            assert!(parse_peers(bad).is_err(), "{bad:?} should be refused");
        }
    }

    /// The operator configures pods through `switchboard_contract::env`: every name there is a
    /// `switchboard serve` flag's twin, and every flag has its twin there.
    #[test]
    fn serve_env_twins_are_exactly_the_contract_names() {
        use clap::CommandFactory;
        let command = Cli::command();
        let serve = command.find_subcommand("serve").expect("serve exists");
        let mut ours: Vec<String> = serve
            .get_arguments()
            .filter(|a| !a.is_positional() && a.get_id() != "help")
            .map(|a| a.get_env().map(|e| e.to_string_lossy().into_owned()).unwrap_or_else(|| format!("--{} has no env twin", a.get_id())))
            .collect();
        // `--log` (SWITCHBOARD_LOG) is on every command, not only `serve`.
        let mut contract: Vec<String> = env::SERVE.iter().chain([&env::LOG]).map(|s| s.to_string()).collect();
        ours.sort();
        contract.sort();
        assert_eq!(ours, contract);
    }

    /// DESIGN: every flag of every command has a `SWITCHBOARD_*` twin.
    #[test]
    fn every_flag_has_an_env_twin() {
        use clap::CommandFactory;
        fn walk(command: &clap::Command, path: String, missing: &mut Vec<String>) {
            for arg in command.get_arguments().filter(|a| !a.is_positional() && !["help", "version"].contains(&a.get_id().as_str())) {
                match arg.get_env() {
                    Some(env) if env.to_string_lossy().starts_with("SWITCHBOARD_") => {}
                    _ => missing.push(format!("{path} --{}", arg.get_id())),
                }
            }
            for sub in command.get_subcommands() {
                walk(sub, format!("{path} {}", sub.get_name()), missing);
            }
        }
        let mut missing = Vec::new();
        walk(&Cli::command(), "switchboard".into(), &mut missing);
        assert!(missing.is_empty(), "flags without an env twin: {missing:?}");
    }

    #[test]
    fn log_filter_prefers_the_flag_then_rust_log_then_quiet_dependencies() {
        assert_eq!(log_filter(Some("debug"), Some("trace")), "debug");
        assert_eq!(log_filter(None, Some("openraft=info")), "openraft=info");
        assert_eq!(log_filter(None, None), DEFAULT_LOG_FILTER);
        assert_eq!(log_filter(Some(" "), None), DEFAULT_LOG_FILTER);
        let filter = tracing_subscriber::EnvFilter::try_new(DEFAULT_LOG_FILTER).unwrap().to_string();
        assert!(filter.contains("switchboard_node=info") && filter.ends_with(",warn"), "{filter}");
    }

    #[test]
    fn status_table_lists_members_roles_leader_and_lag() {
        let status = ClusterStatus {
            node_id: 0,
            state: "Leader".into(),
            leader: Some(0),
            term: 3,
            voters: vec![0, 1],
            learners: vec![2],
            members: [(0, "a:7070".to_string()), (1, "b:7070".to_string()), (2, "c:7070".to_string())].into(),
            committed_index: Some(42),
            last_applied_index: Some(41),
            replication_lag: [(1, 0), (2, 17)].into(),
            last_contact_ms: [(1, 40)].into(),
            ..Default::default()
        };
        let table = status_table(&status);
        let lines: Vec<&str> = table.lines().collect();
        assert_eq!(lines[0], "node 0 sees: leader 0, term 3, committed 42, applied 41");
        assert_eq!(lines.len(), 5, "{table}");
        let row = |i: usize| lines[i].split_whitespace().collect::<Vec<_>>();
        assert_eq!(row(1), ["ID", "ROLE", "ADDRESS", "LEADER", "LAG", "LAST", "CONTACT"]);
        assert_eq!(row(2), ["0", "voter", "a:7070", "*", "-", "-"]);
        assert_eq!(row(3), ["1", "voter", "b:7070", "0", "40ms", "ago"]);
        assert_eq!(row(4), ["2", "learner", "c:7070", "17", "never"]);
    }

    #[test]
    fn cli_is_well_formed() {
        use clap::CommandFactory;
        Cli::command().debug_assert();
    }
}
