//! One Raft member: starts openraft over the redb log and the state machine, bootstraps or
//! joins the cluster, proposes writes (forwarding them to the leader), and serves linearizable
//! reads. It is also the replicated [`Mailbox`] and [`SessionStore`].

use super::forwarder::Forwarder;
use super::log_store::LogStore;
use super::network::{ForwardedWrite, NetworkFactory, PeerClient, PeerError, Refusal, WriteReply};
use super::sm_store::{StateMachineStore, Watch};
use super::state_machine::{Command, Millis, Request, Response, WriteId};
use super::types::{Raft, TypeConfig};
use crate::mailbox::{CreateOutcome, DeliverOutcome, Mailbox, MailboxError, MailboxKey, NodeId, WaitOutcome, check_ttl};
use crate::metrics::Metrics;
use crate::protocol::types::LogLevel;
use crate::session::{SessionError, SessionId, SessionRecord, SessionStore};
use async_trait::async_trait;
use openraft::async_runtime::WatchReceiver;
use openraft::errors::{ClientWriteError, RaftError};
use openraft::{BasicNode, ChangeMembers, Config, ReadPolicy, ServerState, SnapshotPolicy};
use serde::Serialize;
use serde_json::{Value, json};
use std::collections::{BTreeMap, BTreeSet, HashSet};
use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// How a node finds its cluster.
#[derive(Debug, Clone, PartialEq)]
pub enum Membership {
    /// A cluster of one (bootstrapped on first start).
    Single,
    /// The initial members, `id → peer address`. The lowest id bootstraps a new cluster once.
    Peers(BTreeMap<NodeId, String>),
    /// Join an existing cluster through any member's peer address.
    Join(String),
}

#[derive(Debug, Clone)]
pub struct RaftNodeConfig {
    pub node_id: NodeId,
    pub data_dir: PathBuf,
    /// The peer address other members reach this node at.
    pub advertise: String,
    pub membership: Membership,
    pub secret: String,
    pub heartbeat: Duration,
    /// Minimum election timeout (the maximum is twice this).
    pub election_timeout: Duration,
    /// Take a snapshot after this many log entries; keep this many before purging. A snapshot
    /// encodes the whole state (every mailbox until its deadline) under the state-machine lock,
    /// so it must be rare next to the write rate.
    pub snapshot_every: u64,
    pub keep_logs: u64,
    /// How often the leader checks whether something fell due and proposes a `Tick`.
    pub tick_interval: Duration,
    pub session_ttl: Duration,
    /// How long a write may retry (leader changes, forwarding) before it fails.
    pub write_timeout: Duration,
    /// Local address for outgoing peer connections (multi-homed hosts).
    pub source_ip: Option<std::net::IpAddr>,
    /// Fingerprint of the id-encryption key; peers with another one are refused.
    pub key_fingerprint: Option<String>,
}

impl RaftNodeConfig {
    pub fn new(node_id: NodeId, data_dir: PathBuf, advertise: String, secret: String) -> Self {
        RaftNodeConfig {
            node_id,
            data_dir,
            advertise,
            membership: Membership::Single,
            secret,
            heartbeat: Duration::from_millis(100),
            election_timeout: Duration::from_millis(1000),
            snapshot_every: 100_000,
            keep_logs: 1_000,
            tick_interval: Duration::from_millis(100),
            session_ttl: Duration::from_secs(3600),
            write_timeout: Duration::from_secs(5),
            source_ip: None,
            key_fingerprint: None,
        }
    }
}

/// Failures of the replicated store.
#[derive(Debug, thiserror::Error)]
pub enum RaftStoreError {
    #[error("invalid Raft configuration: {0}")]
    Config(String),
    #[error("storage: {0}")]
    Storage(#[from] std::io::Error),
    #[error("raft stopped: {0}")]
    Fatal(String),
    #[error("no quorum: {0}")]
    Unavailable(String),
    #[error("membership change refused: {0}")]
    Membership(String),
    #[error(transparent)]
    Peer(#[from] PeerError),
}

impl From<RaftStoreError> for MailboxError {
    fn from(e: RaftStoreError) -> Self {
        MailboxError::Unavailable(e.to_string())
    }
}

impl From<RaftStoreError> for SessionError {
    fn from(e: RaftStoreError) -> Self {
        SessionError::Unavailable(e.to_string())
    }
}

use crate::clock::now_ms;

pub struct RaftNode {
    pub id: NodeId,
    pub raft: Raft,
    pub sm: StateMachineStore,
    pub client: PeerClient,
    forwarder: Forwarder,
    config: RaftNodeConfig,
    serial: AtomicU64,
    metrics: Arc<Metrics>,
    /// Sessions with a touch in flight, so a burst of requests proposes one.
    touching: Mutex<HashSet<SessionId>>,
    tasks: Mutex<Vec<tokio::task::JoinHandle<()>>>,
    /// Mailboxes this node created, with the log index of the create, until their owner's wait
    /// settles: the wait (not the create) catches up with the create's application here.
    created_here: Mutex<std::collections::HashMap<MailboxKey, u64>>,
    /// The MCP server and its streams, once built (they serve relayed resumption and cancels).
    pub mcp: std::sync::OnceLock<super::relay::McpHooks>,
}

/// A replica's view of the cluster, served as JSON by the admin API.
#[derive(Debug, Clone, Serialize, serde::Deserialize, PartialEq)]
pub struct ClusterStatus {
    pub node_id: NodeId,
    pub state: String,
    pub leader: Option<NodeId>,
    pub term: u64,
    pub voters: Vec<NodeId>,
    pub learners: Vec<NodeId>,
    pub members: BTreeMap<NodeId, String>,
    pub last_log_index: Option<u64>,
    pub committed_index: Option<u64>,
    pub last_applied_index: Option<u64>,
    /// Leader only: entries each member is behind the leader's log.
    pub replication_lag: BTreeMap<NodeId, u64>,
    pub pending_mailboxes: usize,
    pub sessions: usize,
}

impl RaftNode {
    /// Start the member. The peer server must already be listening (see [`super::peer_api`]),
    /// since bootstrapping talks to the other members.
    pub async fn start(config: RaftNodeConfig, metrics: Arc<Metrics>) -> Result<Arc<Self>, RaftStoreError> {
        let raft_config = Config {
            cluster_name: "switchboard".into(),
            heartbeat_interval: config.heartbeat.as_millis() as u64,
            election_timeout_min: config.election_timeout.as_millis() as u64,
            election_timeout_max: 2 * config.election_timeout.as_millis() as u64,
            // Followers receive entries while the leader fsyncs its own copy.
            broadcast_submitted_on_append: Some(true),
            install_snapshot_timeout: 10_000,
            snapshot_policy: SnapshotPolicy::LogsSinceLast(config.snapshot_every),
            max_in_snapshot_log_to_keep: config.keep_logs,
            purge_batch_size: config.snapshot_every.clamp(1, 256),
            ..Default::default()
        }
        .validate()
        .map_err(|e| RaftStoreError::Config(e.to_string()))?;
        let log_store = LogStore::open(&config.data_dir)?;
        let sm = StateMachineStore::open(&config.data_dir)?;
        let client = PeerClient::new(config.secret.clone(), config.source_ip, config.key_fingerprint.clone());
        let network = NetworkFactory { client: client.clone(), streams: Default::default() };
        let raft = Raft::new(config.node_id, Arc::new(raft_config), network, log_store, sm.clone())
            .await
            .map_err(|e| RaftStoreError::Fatal(e.to_string()))?;
        let node = Arc::new(RaftNode {
            id: config.node_id,
            raft,
            sm,
            forwarder: Forwarder::start(client.clone(), config.write_timeout),
            client,
            // Random start: a restarted node must not reuse serials still in the dedup window.
            serial: AtomicU64::new(rand::random::<u64>() >> 1),
            metrics,
            touching: Mutex::default(),
            tasks: Mutex::default(),
            created_here: Mutex::default(),
            mcp: std::sync::OnceLock::new(),
            config,
        });
        node.spawn_background();
        Ok(node)
    }

    /// Bootstrap or join, according to the configured membership. Idempotent across restarts.
    pub async fn join_cluster(self: &Arc<Self>) -> Result<(), RaftStoreError> {
        if self.raft.is_initialized().await.map_err(|e| RaftStoreError::Fatal(e.to_string()))? {
            return Ok(());
        }
        let me = (self.id, self.config.advertise.clone());
        match &self.config.membership {
            Membership::Single => self.initialize(BTreeMap::from([me])).await,
            Membership::Peers(peers) => {
                if !peers.contains_key(&self.id) {
                    tracing::info!("not a founding member: waiting to be added as a learner");
                    return Ok(());
                }
                if peers.keys().next() != Some(&self.id) {
                    return Ok(()); // the lowest id bootstraps; the others are contacted by it
                }
                // A replaced first node (empty disk) must not found a second cluster.
                for (id, addr) in peers.iter().filter(|(id, _)| **id != self.id) {
                    if let Ok(status) = self.client.admin::<ClusterStatus>(addr, super::network::STATUS, None).await
                        && !status.voters.is_empty()
                    {
                        tracing::info!(peer = id, "cluster already formed; joining it");
                        return self.join_via(addr).await;
                    }
                }
                self.initialize(peers.clone()).await
            }
            Membership::Join(addr) => self.join_via(addr).await,
        }
    }

    async fn initialize(&self, members: BTreeMap<NodeId, String>) -> Result<(), RaftStoreError> {
        let nodes: BTreeMap<NodeId, BasicNode> = members.into_iter().map(|(id, addr)| (id, BasicNode::new(addr))).collect();
        tracing::info!(members = ?nodes.keys().collect::<Vec<_>>(), "bootstrapping the cluster");
        match self.raft.initialize(nodes).await {
            Ok(()) => Ok(()),
            // Someone initialized it first (or we did before a restart): fine.
            Err(RaftError::APIError(openraft::errors::InitializeError::NotAllowed(_))) => Ok(()),
            Err(e) => Err(RaftStoreError::Membership(e.to_string())),
        }
    }

    /// Ask a member to add this node (as a learner, then a voter once caught up). Retries until
    /// the cluster answers.
    async fn join_via(&self, addr: &str) -> Result<(), RaftStoreError> {
        let body = json!({"id": self.id, "addr": self.config.advertise});
        let mut backoff = Duration::from_millis(100);
        loop {
            match self.client.admin::<Value>(addr, super::network::JOIN, Some(&body)).await {
                Ok(_) => return Ok(()),
                Err(e) => {
                    tracing::warn!(error = %e, "join through {addr} failed; retrying");
                    tokio::time::sleep(backoff).await;
                    backoff = (backoff * 2).min(Duration::from_secs(2));
                }
            }
        }
    }

    fn spawn_background(self: &Arc<Self>) {
        let weak = Arc::downgrade(self);
        let interval = self.config.tick_interval;
        let ticker = tokio::spawn(async move {
            let mut timer = tokio::time::interval(interval);
            timer.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Skip);
            loop {
                timer.tick().await;
                let Some(node) = weak.upgrade() else { return };
                node.publish_metrics();
                // Only the leader stamps time into the log, and only when something fell due.
                if node.leader_id() == Some(node.id)
                    && node.sm.read(|sm| sm.next_expiry()).is_some_and(|due| due <= now_ms())
                    && let Err(e) = node.write_as_leader(None, Command::Tick).await
                {
                    tracing::debug!(error = %e, "tick not committed");
                }
            }
        });
        self.tasks.lock().unwrap().push(ticker);
    }

    fn publish_metrics(&self) {
        let m = self.raft.metrics().borrow_watched().clone();
        self.metrics.raft(
            m.current_term,
            m.current_leader,
            m.local_committed.map(|id| id.index),
            m.last_applied.map(|id| id.index),
            self.sm.read(|sm| sm.pending_mailboxes()),
        );
    }

    /// Keep a task that must end with this node: it is aborted at shutdown.
    pub fn track(&self, task: tokio::task::JoinHandle<()>) {
        let mut tasks = self.tasks.lock().unwrap();
        tasks.retain(|t| !t.is_finished());
        tasks.push(task);
    }

    /// Stop Raft and the background tasks (the peer server is stopped by its owner).
    pub async fn shutdown(&self) {
        for task in self.tasks.lock().unwrap().drain(..) {
            task.abort();
        }
        let _ = self.raft.shutdown().await;
    }

    pub fn leader_id(&self) -> Option<NodeId> {
        self.raft.metrics().borrow_watched().current_leader
    }

    /// The leader and its peer address, as this node knows them.
    fn leader(&self) -> Option<(NodeId, String)> {
        // Borrowed, not cloned: this runs for every write.
        let receiver = self.raft.metrics();
        let metrics = receiver.borrow_watched();
        let id = metrics.current_leader?;
        let addr = metrics.membership_config.membership().get_node(&id)?.addr.clone();
        Some((id, addr))
    }

    fn refusal_from(&self, e: RaftError<TypeConfig, ClientWriteError<TypeConfig>>) -> Refusal {
        match e.forward_to_leader() {
            Some(f) => Refusal::NotLeader { leader: f.leader_id.zip(f.leader_node.as_ref().map(|n| n.addr.clone())) },
            None => Refusal::Unavailable(e.to_string()),
        }
    }

    /// Propose on this node as leader, stamping the leader's clock into the entry.
    pub async fn write_as_leader(&self, write: Option<WriteId>, command: Command) -> WriteReply {
        let request = Request { now: now_ms(), write, command };
        match self.raft.client_write(request).await {
            Ok(reply) => Ok((reply.data, reply.log_id.index)),
            Err(e) => Err(self.refusal_from(e)),
        }
    }

    /// Commit a command through whichever node leads, retrying across leader changes with the
    /// same write id (so a retry of a write that did commit gets its first outcome).
    pub async fn propose(&self, command: Command) -> Result<(Response, u64), RaftStoreError> {
        let write = WriteId { origin: self.id, serial: self.serial.fetch_add(1, Ordering::Relaxed) };
        let deadline = Instant::now() + self.config.write_timeout;
        let mut backoff = Duration::from_millis(5);
        loop {
            let attempt = match self.leader() {
                Some((id, _)) if id == self.id => self.write_as_leader(Some(write), command.clone()).await,
                Some((_, addr)) => {
                    let forwarded = ForwardedWrite { write, command: command.clone() };
                    let remaining = deadline.saturating_duration_since(Instant::now()).max(Duration::from_millis(10));
                    self.forwarder.forward(addr, forwarded, remaining).await.unwrap_or_else(|e| Err(Refusal::Unavailable(e.to_string())))
                }
                None => Err(Refusal::Unavailable("no leader elected".into())),
            };
            match attempt {
                Ok(reply) => return Ok(reply),
                Err(refusal) if Instant::now() + backoff < deadline => {
                    tracing::debug!(%refusal, "write not committed yet; retrying");
                    tokio::time::sleep(backoff).await;
                    backoff = (backoff * 2).min(Duration::from_millis(200));
                }
                Err(refusal) => {
                    return Err(RaftStoreError::Unavailable(format!(
                        "write not committed within {:?}: {refusal}",
                        self.config.write_timeout
                    )));
                }
            }
        }
    }

    /// Wait until this node has applied `index` (read-your-writes after a forwarded write).
    async fn wait_applied(&self, index: u64) -> Result<(), RaftStoreError> {
        if self.sm.applied_at_least(index, self.config.write_timeout).await {
            return Ok(());
        }
        Err(RaftStoreError::Unavailable(format!("entry {index} not applied here within {:?}", self.config.write_timeout)))
    }

    /// The leader's read index: a log position covering every write committed before the call.
    pub async fn leader_read_index(&self) -> Result<u64, Refusal> {
        match self.raft.ensure_linearizable(ReadPolicy::ReadIndex).await {
            Ok(read) => Ok(read.index()),
            Err(e) => Err(match e.forward_to_leader() {
                Some(f) => Refusal::NotLeader { leader: f.leader_id.zip(f.leader_node.as_ref().map(|n| n.addr.clone())) },
                None => Refusal::Unavailable(e.to_string()),
            }),
        }
    }

    /// Linearizable barrier (ReadIndex): afterwards the local state machine reflects every write
    /// committed before the call, whichever node made it.
    pub async fn linearize(&self) -> Result<(), RaftStoreError> {
        let deadline = Instant::now() + self.config.write_timeout;
        loop {
            let attempt = match self.leader() {
                Some((id, _)) if id == self.id => self.leader_read_index().await,
                Some((_, addr)) => {
                    let remaining = deadline.saturating_duration_since(Instant::now()).max(Duration::from_millis(10));
                    self.client.read_index(&addr, remaining).await.unwrap_or_else(|e| Err(Refusal::Unavailable(e.to_string())))
                }
                None => Err(Refusal::Unavailable("no leader elected".into())),
            };
            match attempt {
                Ok(index) => return self.wait_applied(index).await,
                Err(_) if Instant::now() < deadline => tokio::time::sleep(Duration::from_millis(20)).await,
                Err(refusal) => return Err(RaftStoreError::Unavailable(refusal.to_string())),
            }
        }
    }

    pub fn status(&self) -> ClusterStatus {
        let m = self.raft.metrics().borrow_watched().clone();
        let membership = m.membership_config.membership();
        let voters: Vec<NodeId> = membership.voter_ids().collect();
        let learners: Vec<NodeId> = membership.learner_ids().collect();
        let members = membership.nodes().map(|(id, n)| (*id, n.addr.clone())).collect();
        let last = m.last_log_index.unwrap_or(0);
        let replication_lag = m
            .replication
            .as_ref()
            .map(|r| r.iter().map(|(id, matched)| (*id, last.saturating_sub(matched.map(|l| l.index).unwrap_or(0)))).collect())
            .unwrap_or_default();
        let (pending_mailboxes, sessions) = self.sm.read(|sm| (sm.pending_mailboxes(), sm.sessions.len()));
        ClusterStatus {
            node_id: self.id,
            state: format!("{:?}", m.state),
            leader: m.current_leader,
            term: m.current_term,
            voters,
            learners,
            members,
            last_log_index: m.last_log_index,
            committed_index: m.local_committed.map(|id| id.index),
            last_applied_index: m.last_applied.map(|id| id.index),
            replication_lag,
            pending_mailboxes,
            sessions,
        }
    }

    pub fn is_leader(&self) -> bool {
        self.raft.metrics().borrow_watched().state == ServerState::Leader
    }

    /// Add a learner (leader only; followers are told who leads).
    pub async fn add_learner(&self, id: NodeId, addr: String, blocking: bool) -> Result<(), RaftStoreError> {
        self.raft.add_learner(id, BasicNode::new(addr), blocking).await.map(|_| ()).map_err(|e| RaftStoreError::Membership(e.to_string()))
    }

    /// Make a caught-up learner a voter. Refused while it lags more than `max_lag` entries.
    pub async fn promote(&self, id: NodeId, max_lag: u64) -> Result<(), RaftStoreError> {
        let status = self.status();
        if !status.learners.contains(&id) && !status.voters.contains(&id) {
            return Err(RaftStoreError::Membership(format!("node {id} is not a member; add it as a learner first")));
        }
        if status.voters.contains(&id) {
            return Ok(());
        }
        match status.replication_lag.get(&id) {
            Some(lag) if *lag <= max_lag => {}
            Some(lag) => return Err(RaftStoreError::Membership(format!("node {id} is not caught up: {lag} entries behind"))),
            None => return Err(RaftStoreError::Membership(format!("node {id} has no replication progress yet"))),
        }
        self.raft
            .change_membership(ChangeMembers::AddVoterIds(BTreeSet::from([id])), false)
            .await
            .map(|_| ())
            .map_err(|e| RaftStoreError::Membership(e.to_string()))
    }

    /// Remove a member (voter or learner). Never removes the last voter.
    pub async fn remove(&self, id: NodeId) -> Result<(), RaftStoreError> {
        let status = self.status();
        let change = if status.voters.contains(&id) {
            if status.voters.len() == 1 {
                return Err(RaftStoreError::Membership(format!("node {id} is the last voter")));
            }
            ChangeMembers::RemoveVoters(BTreeSet::from([id]))
        } else if status.learners.contains(&id) {
            ChangeMembers::RemoveNodes(BTreeSet::from([id]))
        } else {
            return Ok(());
        };
        self.raft.change_membership(change, false).await.map(|_| ()).map_err(|e| RaftStoreError::Membership(e.to_string()))
    }

    fn ttl_ms(&self) -> Millis {
        self.config.session_ttl.as_millis() as Millis
    }

    /// Push a session's expiry out when half its TTL is used, at most one touch in flight.
    fn maybe_touch(self: &Arc<Self>, id: &SessionId, expires_at: Millis) {
        if expires_at > now_ms() + self.ttl_ms() / 2 || !self.touching.lock().unwrap().insert(id.clone()) {
            return;
        }
        let (node, id) = (self.clone(), id.clone());
        tokio::spawn(async move {
            if let Err(e) = node.propose(Command::SessionTouch { id: id.clone() }).await {
                tracing::debug!(error = %e, "session touch not committed");
            }
            node.touching.lock().unwrap().remove(&id);
        });
    }
}

/// The replicated mailbox.
#[derive(Clone)]
pub struct RaftMailbox(pub Arc<RaftNode>);

/// The replicated session store.
#[derive(Clone)]
pub struct RaftSessions(pub Arc<RaftNode>);

#[async_trait]
impl Mailbox for RaftMailbox {
    async fn create(&self, key: &MailboxKey, owner: NodeId, ttl: Duration) -> Result<CreateOutcome, MailboxError> {
        check_ttl(ttl)?;
        let command = Command::MailboxCreate { key: key.clone(), owner, ttl_ms: ttl.as_millis() as Millis };
        let (response, index) = self.0.propose(command).await?;
        // Committed: a delivery anywhere finds it. This replica may apply it a moment later;
        // `wait` catches up first, so the request can go out to the client meanwhile.
        match response {
            Response::Created(outcome) => {
                self.0.created_here.lock().unwrap().insert(key.clone(), index);
                Ok(outcome)
            }
            other => Err(MailboxError::Unavailable(format!("unexpected reply to create: {other:?}"))),
        }
    }

    async fn deliver(&self, key: &MailboxKey, value: Value) -> Result<DeliverOutcome, MailboxError> {
        let command = Command::MailboxDeliver { key: key.clone(), value: value.to_string() };
        match self.0.propose(command).await?.0 {
            Response::Delivered(outcome) => Ok(outcome),
            other => Err(MailboxError::Unavailable(format!("unexpected reply to deliver: {other:?}"))),
        }
    }

    async fn wait(&self, key: &MailboxKey, timeout: Duration) -> Result<WaitOutcome, MailboxError> {
        let created = self.0.created_here.lock().unwrap().get(key).copied();
        if let Some(index) = created
            && !self.0.sm.applied_at_least(index, timeout).await
        {
            return Ok(WaitOutcome::TimedOut);
        }
        let mut rx = match self.0.sm.watch(key) {
            Watch::Settled(outcome) => {
                self.0.created_here.lock().unwrap().remove(key);
                return Ok(outcome);
            }
            Watch::Parked(rx) => rx,
        };
        let outcome = match tokio::time::timeout(timeout, rx.wait_for(Option::is_some)).await {
            Ok(Ok(outcome)) => outcome.clone().expect("waited for Some"),
            Ok(Err(_)) => WaitOutcome::Deleted,
            Err(_) => WaitOutcome::TimedOut,
        };
        drop(rx);
        self.0.sm.unpark(key);
        if outcome != WaitOutcome::TimedOut {
            self.0.created_here.lock().unwrap().remove(key);
        }
        Ok(outcome)
    }

    async fn delete(&self, key: &MailboxKey) -> Result<(), MailboxError> {
        self.0.created_here.lock().unwrap().remove(key);
        self.0.propose(Command::MailboxDelete { key: key.clone() }).await?;
        Ok(())
    }
}

#[async_trait]
impl SessionStore for RaftSessions {
    async fn create(&self, record: SessionRecord) -> Result<(), SessionError> {
        let command = Command::SessionCreate { record, ttl_ms: self.0.ttl_ms() };
        let (_, index) = self.0.propose(command).await?;
        self.0.wait_applied(index).await?;
        Ok(())
    }

    async fn get(&self, id: &SessionId) -> Result<Option<SessionRecord>, SessionError> {
        let local = |node: &RaftNode| node.sm.read(|sm| sm.session(id).map(|s| (s.record.clone(), s.expires_at)));
        let found = match local(&self.0) {
            Some(found) => Some(found),
            // Unknown here: it may have been created on another node a moment ago.
            None => {
                self.0.linearize().await?;
                local(&self.0)
            }
        };
        Ok(found.map(|(record, expires_at)| {
            self.0.maybe_touch(id, expires_at);
            record
        }))
    }

    async fn set_log_level(&self, id: &SessionId, level: LogLevel) -> Result<bool, SessionError> {
        let (response, _) = self.0.propose(Command::SessionSetLogLevel { id: id.clone(), level }).await?;
        Ok(response == Response::Session(true))
    }

    async fn set_subscription(&self, id: &SessionId, uri: &str, subscribed: bool) -> Result<bool, SessionError> {
        let command = Command::SessionSubscribe { id: id.clone(), uri: uri.to_string(), subscribed };
        let (response, _) = self.0.propose(command).await?;
        Ok(response == Response::Session(true))
    }

    async fn delete(&self, id: &SessionId) -> Result<bool, SessionError> {
        let (response, _) = self.0.propose(Command::SessionDelete { id: id.clone() }).await?;
        Ok(response == Response::Session(true))
    }
}
