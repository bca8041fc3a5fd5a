//! One Raft member's write and read paths: openraft over the segmented log and the state machine,
//! writes proposed here or forwarded to the leader (retried across leader changes), and
//! linearizable reads. Membership is in [`super::membership`], the store adapters in
//! [`super::stores`].

use super::Raft;
use super::batcher::{self, Admission, Batcher, Queued};
use super::clock::{CLOCK_QUERY_TIMEOUT, CLOCK_STRAGGLER_WAIT, LeaderClock, majority_time};
use super::config::RaftNodeConfig;
use super::error::RaftStoreError;
use super::forwarder::{Forwarder, LeaderWrite};
use super::log_store::LogStore;
use super::messages::{ForwardedWrite, ReadIndexReply, Refusal, WriteReply};
use super::network::NetworkFactory;
use super::readiness::{self, NotReady, RaftView};
use super::sm_store::StateMachineStore;
use super::state_machine::{Command, MAX_CLOCK_STEP_MS, Millis, Request, Response, WriteId};
use super::types::TypeConfig;
use crate::clock::now_ms;
use crate::mailbox::NodeId;
use crate::metrics::Metrics;
use crate::peer::PeerClient;
use crate::peer::codec::encoded_len;
use crate::peer::routes::{APPLIED, CLOCK, READ_INDEX};
use crate::tasks::TaskSet;
use futures::StreamExt;
use futures::stream::FuturesUnordered;
use openraft::async_runtime::WatchReceiver;
use openraft::errors::{ClientWriteError, RaftError};
use openraft::{Config, Instant as _, ReadPolicy, ServerState, SnapshotPolicy};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

/// Replication batches a follower may have unanswered: enough to keep it busy while the
/// previous results travel back, few enough that it never holds much more than that.
const IN_FLIGHT_BATCHES: usize = 4;
/// How much longer than a member's own wait its answer to "applied yet?" is awaited.
const APPLIED_REPLY_MARGIN: Duration = Duration::from_millis(200);
/// How often a follower looks whether its leader lease is over.
const DEAD_LEADER_POLL: Duration = Duration::from_millis(20);
/// Up to this much later than the lease a follower asks for votes (two must not ask at once).
const DEAD_LEADER_JITTER_MS: u64 = 60;

pub struct RaftNode {
    pub id: NodeId,
    pub raft: Raft,
    pub sm: StateMachineStore,
    pub client: PeerClient,
    forwarder: Forwarder,
    /// This node's writes while it leads alone, proposed many to an entry.
    batcher: Batcher,
    pub(super) config: RaftNodeConfig,
    serial: AtomicU64,
    /// This run of the process: the tasks an earlier run owned died with it (every task store
    /// on this node shares it, so none fails another's tasks as an earlier run's).
    pub incarnation: u64,
    /// The time this node stamps into entries while it leads.
    clock: LeaderClock,
    pub(super) metrics: Arc<Metrics>,
    /// Tasks that end with the member: the ticker and the peer streams it serves.
    pub tasks: TaskSet,
    /// Since it started, this member once applied everything the leader had committed
    /// (see [`RaftNode::readiness`]).
    caught_up: AtomicBool,
}

impl RaftNode {
    /// Start Raft. Serve the peer port (see [`super::rpc`]) before joining the cluster
    /// ([`RaftNode::join_cluster`]): bootstrapping talks to the other members.
    pub async fn start(config: RaftNodeConfig, metrics: Arc<Metrics>) -> Result<Arc<Self>, RaftStoreError> {
        config.check_limits().map_err(RaftStoreError::Limits)?;
        let raft_config = Config {
            cluster_name: "switchboard".into(),
            heartbeat_interval: config.heartbeat.as_millis() as u64,
            election_timeout_min: config.election_timeout.as_millis() as u64,
            // Also the leader lease followers keep (see `watch_for_a_dead_leader`): the
            // shorter the spread, the sooner a dead leader is replaced.
            election_timeout_max: config.election_lease().as_millis() as u64,
            // A follower's own timer fires before the other followers' leases end; as a
            // Pre-Vote it changes nothing until a quorum would vote.
            enable_pre_vote: Some(true),
            // Followers receive entries while the leader fsyncs its own copy.
            broadcast_submitted_on_append: Some(true),
            install_snapshot_timeout: 10_000,
            snapshot_policy: SnapshotPolicy::LogsSinceLast(config.snapshot_every),
            max_in_snapshot_log_to_keep: config.keep_logs,
            purge_batch_size: config.snapshot_every.clamp(1, 256),
            ..Default::default()
        }
        .validate()?;
        if let Some(fingerprint) = &config.key_fingerprint {
            super::data_key::claim(&config.data_dir, fingerprint, config.previous_key_fingerprint.as_deref())?;
        }
        let log_store = LogStore::open(&config.data_dir)?.batch_budget(config.replication_batch_bytes);
        let sm = StateMachineStore::open(&config.data_dir, log_store.entries())?;
        let client = PeerClient::new(config.secret.clone(), config.source_ip, config.key_fingerprint.clone());
        let network = NetworkFactory {
            client: client.clone(),
            streams: Default::default(),
            in_flight_bytes: IN_FLIGHT_BATCHES * config.replication_batch_bytes,
            snapshot_chunk_bytes: config.snapshot_chunk_bytes,
        };
        let raft = Raft::new(config.node_id, Arc::new(raft_config), network, log_store, sm.clone())
            .await
            .map_err(|e| RaftStoreError::Fatal(Box::new(e)))?;
        let node = Arc::new(RaftNode {
            id: config.node_id,
            raft,
            sm,
            forwarder: Forwarder::start(client.clone(), config.write_timeout, config.replication_batch_bytes),
            batcher: Batcher::new(config.max_entry_bytes),
            client,
            // Random start: a restarted node must not reuse serials still in the dedup window.
            serial: AtomicU64::new(rand::random::<u64>() >> 1),
            incarnation: rand::random(),
            clock: LeaderClock::default(),
            metrics,
            tasks: TaskSet::default(),
            caught_up: AtomicBool::new(false),
            config,
        });
        node.spawn_background();
        node.watch_for_a_dead_leader();
        Ok(node)
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
                node.snapshot_by_writes().await;
                // Only the leader stamps time into the log, and only when something fell due.
                // Bounded like every write: a leader without a quorum must not stall the ticker
                // (and with it the metrics it publishes).
                if node.leader_id() == Some(node.id)
                    && node.sm.read(|sm| sm.next_expiry()).is_some_and(|due| due <= node.clock.now())
                    && let Err(e) = node.write_as_leader(None, Command::Tick).await
                {
                    tracing::debug!(error = %e, "tick not committed");
                }
            }
        });
        self.tasks.track(ticker);
    }

    /// Ask for a snapshot once `snapshot_every` writes were applied since the last one began.
    /// openraft counts entries, and a batch entry holds many writes: by entries alone, the log
    /// held in memory between snapshots grew with the batch size (a lone node's RSS reached
    /// 770 MB in a minute at 64 clients, against 425 MB before batching).
    async fn snapshot_by_writes(&self) {
        if self.sm.writes_since_snapshot() >= self.config.snapshot_every {
            // Refused while a build runs: asked again at the next tick.
            let _ = self.raft.trigger().snapshot().await;
        }
    }

    /// A follower elects as soon as the leader lease is over. openraft's followers refuse
    /// votes while their lease (the maximum election timeout since the leader's last message)
    /// runs, and their own timers fire before it ends, so a dead leader used to be replaced only
    /// by a second timer, 2 to 4 election timeouts after it died. Here a follower that finds the
    /// lease over asks for a Pre-Vote at once; a jitter keeps two followers from splitting the
    /// vote, and the Pre-Vote keeps a leader that is only slow from being disturbed (the others'
    /// leases still run).
    fn watch_for_a_dead_leader(self: &Arc<Self>) {
        let weak = Arc::downgrade(self);
        let lease = self.config.election_lease();
        let task = tokio::spawn(async move {
            let mut quiet_until = Instant::now();
            loop {
                tokio::time::sleep(DEAD_LEADER_POLL).await;
                let Some(node) = weak.upgrade() else { return };
                let following = {
                    let receiver = node.raft.metrics();
                    let m = receiver.borrow_watched();
                    m.state == ServerState::Follower && m.membership_config.membership().voter_ids().any(|v| v == node.id)
                };
                if !following || Instant::now() < quiet_until {
                    continue;
                }
                let renewed = node.raft.with_raft_state(|state| state.vote_last_modified()).await.ok().flatten();
                let jitter = Duration::from_millis(rand::random::<u64>() % DEAD_LEADER_JITTER_MS);
                if renewed.is_some_and(|at| at.elapsed() > lease + jitter) {
                    tracing::info!(
                        silent_ms = renewed.map(|at| at.elapsed().as_millis() as u64),
                        "leader lease over: asking for a Pre-Vote"
                    );
                    let _ = node.raft.trigger().elect(true).await;
                    quiet_until = Instant::now() + lease / 2;
                }
            }
        });
        self.tasks.track(task);
    }

    fn publish_metrics(&self) {
        let m = self.raft.metrics().borrow_watched().clone();
        let sizes = self.sm.read(|sm| sm.sizes());
        self.metrics.raft(
            m.current_term,
            m.current_leader,
            m.local_committed.map(|id| id.index),
            m.last_applied.map(|id| id.index),
            sizes.pending,
        );
        let live_log_entries = match (m.last_log_index, m.purged) {
            (Some(last), Some(purged)) => last.saturating_sub(purged.index),
            (Some(last), None) => last + 1,
            (None, _) => 0,
        };
        self.metrics.raft_storage(
            &[
                ("mailboxes", sizes.mailboxes),
                ("pending", sizes.pending),
                ("tombstones", sizes.tombstones),
                ("sessions", sizes.sessions),
                ("dedup", sizes.dedup),
                ("tasks", sizes.tasks),
            ],
            live_log_entries,
            self.sm.snapshot_bytes(),
        );
    }

    pub fn config(&self) -> &RaftNodeConfig {
        &self.config
    }

    /// Stop Raft and the background tasks (the peer server is stopped by its owner).
    pub async fn shutdown(&self) {
        self.tasks.abort_all();
        let _ = self.raft.shutdown().await;
    }

    pub fn leader_id(&self) -> Option<NodeId> {
        self.raft.metrics().borrow_watched().current_leader
    }

    /// Whether this member should take client traffic, and if not, why: it must have heard
    /// from a quorum within [`RaftNodeConfig::ready_within`] (see [`readiness`]).
    ///
    /// After a start it must also have caught up once: applied everything the leader had
    /// committed when asked. A restarted follower that turned ready earlier would let a rolling
    /// update stop the next pod while this one cannot yet count towards commits.
    pub async fn readiness(&self) -> Result<(), NotReady> {
        readiness::decide(&self.view().await, self.config.ready_within())?;
        self.caught_up_since_start().await
    }

    async fn caught_up_since_start(&self) -> Result<(), NotReady> {
        if self.caught_up.load(Ordering::Acquire) {
            return Ok(());
        }
        let leader_index = match self.leader() {
            Some((id, _)) if id == self.id => None,
            Some((_, addr)) => {
                let reply = self.client.rpc::<_, ReadIndexReply>(&addr, READ_INDEX, &(), self.config.election_timeout).await;
                match reply {
                    Ok(Ok(index)) => Some(index),
                    Ok(Err(refusal)) => return Err(NotReady::CatchingUp(format!("the leader gave no read index: {refusal}"))),
                    Err(e) => return Err(NotReady::CatchingUp(format!("the leader gave no read index: {e}"))),
                }
            }
            None => return Err(NotReady::NoLeader),
        };
        let applied = self.raft.metrics().borrow_watched().last_applied.map_or(0, |id| id.index);
        match leader_index {
            Some(index) if applied < index => Err(NotReady::CatchingUp(format!("applied {applied} of the leader's {index}"))),
            _ => {
                self.caught_up.store(true, Ordering::Release);
                tracing::info!(applied, "caught up with the leader");
                Ok(())
            }
        }
    }

    pub async fn is_ready(&self) -> bool {
        self.readiness().await.is_ok()
    }

    /// What readiness is decided from. A leader's last quorum acknowledgement is in openraft's
    /// metrics; a follower's last contact with the leader is not, so it is read from the Raft
    /// state: the time the current vote was last renewed, which every message from the leader
    /// it accepts (appends and heartbeats) does.
    async fn view(&self) -> RaftView {
        let (stopped, leader, sole_voter, quorum_acked) = {
            let receiver = self.raft.metrics();
            let m = receiver.borrow_watched();
            let mut voters = m.membership_config.membership().voter_ids();
            let sole_voter = voters.next() == Some(self.id) && voters.next().is_none();
            let stopped = m.running_state.is_err() || m.state == ServerState::Shutdown;
            (stopped, m.current_leader, sole_voter, m.last_quorum_acked.map(|t| t.into_inner()))
        };
        let since_leader_contact = match leader {
            Some(leader) if leader != self.id => {
                // Answered by the Raft core between two events; a core too busy to answer
                // within the bound counts as no contact.
                let renewed = self.raft.with_raft_state(|state| state.vote_last_modified());
                tokio::time::timeout(self.config.election_timeout, renewed).await.ok().and_then(Result::ok).flatten().map(|t| t.elapsed())
            }
            _ => None,
        };
        RaftView { id: self.id, stopped, leader, sole_voter, since_quorum_ack: quorum_acked.map(|t| t.elapsed()), since_leader_contact }
    }

    /// The leader and its peer address, as this node knows them.
    pub(super) fn leader(&self) -> Option<(NodeId, String)> {
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

    /// Commit a command through whichever node leads, retrying across leader changes with the
    /// same write id (so a retry of a write that did commit gets its first outcome). Every
    /// attempt, here as leader or forwarded, is bounded by what is left of the write timeout:
    /// a leader that lost its quorum fails the write at the timeout instead of holding it.
    pub async fn propose(self: &Arc<Self>, command: Command) -> Result<(Response, u64), RaftStoreError> {
        let size = encoded_len(&command);
        if size > self.config.max_entry_bytes {
            self.metrics.limit_refused("entry_bytes");
            tracing::debug!(size, limit = self.config.max_entry_bytes, "write refused: entry too large");
            return Err(RaftStoreError::EntryTooLarge { size, limit: self.config.max_entry_bytes });
        }
        let write = WriteId { origin: self.id, serial: self.serial.fetch_add(1, Ordering::Relaxed) };
        let deadline = Instant::now() + self.config.write_timeout;
        let mut backoff = Duration::from_millis(5);
        loop {
            let remaining = deadline.saturating_duration_since(Instant::now()).max(Duration::from_millis(10));
            let attempt = match self.leader() {
                Some((id, _)) if id == self.id => self.write_here(write, &command, size, remaining).await,
                Some((_, addr)) => {
                    let forwarded = ForwardedWrite { write, command: command.clone() };
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
    pub(super) async fn wait_applied(&self, index: u64) -> Result<(), RaftStoreError> {
        if self.sm.applied_at_least(index, self.config.write_timeout).await {
            return Ok(());
        }
        Err(RaftStoreError::Unavailable(format!("entry {index} not applied here within {:?}", self.config.write_timeout)))
    }

    /// Wait until every other member (voters and learners) has applied `index`, each given the
    /// election timeout: how many did not confirm it in time. A member that cannot hear of the
    /// entry (cut off, down) costs that timeout once and is counted, not waited for.
    pub(super) async fn applied_everywhere(&self, index: u64) -> usize {
        let within = self.config.election_timeout;
        let mut asked: FuturesUnordered<_> = self
            .other_members(Members::All)
            .into_iter()
            // A moment longer than the member waits itself, so its `false` arrives in time.
            .map(|addr| async move { self.client.rpc::<_, bool>(&addr, APPLIED, &index, within + APPLIED_REPLY_MARGIN).await })
            .collect();
        let mut unconfirmed = 0;
        while let Some(answer) = asked.next().await {
            if !matches!(answer, Ok(true)) {
                unconfirmed += 1;
            }
        }
        unconfirmed
    }

    /// The peer addresses of the other members of the current membership.
    fn other_members(&self, which: Members) -> Vec<String> {
        let receiver = self.raft.metrics();
        let metrics = receiver.borrow_watched();
        let membership = metrics.membership_config.membership();
        let ids: Vec<NodeId> = match which {
            Members::Voters => membership.voter_ids().collect(),
            Members::All => membership.nodes().map(|(id, _)| *id).collect(),
        };
        ids.into_iter().filter(|id| *id != self.id).filter_map(|id| membership.get_node(&id).map(|n| n.addr.clone())).collect()
    }

    /// The leader's read index: a log position covering every write committed before the call.
    /// A leader without a quorum cannot confirm it leads: refused after the write timeout.
    pub async fn leader_read_index(&self) -> Result<u64, Refusal> {
        let within = self.config.write_timeout;
        match tokio::time::timeout(within, self.raft.ensure_linearizable(ReadPolicy::ReadIndex)).await {
            Ok(Ok(read)) => Ok(read.index()),
            Ok(Err(e)) => Err(match e.forward_to_leader() {
                Some(f) => Refusal::NotLeader { leader: f.leader_id.zip(f.leader_node.as_ref().map(|n| n.addr.clone())) },
                None => Refusal::Unavailable(e.to_string()),
            }),
            Err(_) => Err(Refusal::Unavailable(format!("no quorum confirmed the read index within {within:?}"))),
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
                    let reply = self.client.rpc::<_, ReadIndexReply>(&addr, READ_INDEX, &(), remaining).await;
                    reply.unwrap_or_else(|e| Err(Refusal::Unavailable(e.to_string())))
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
}

impl RaftNode {
    /// Propose this node's write as leader: with the writes that come while an entry is in
    /// flight when this node is the whole membership (see [`super::batcher`]), alone otherwise.
    async fn write_here(self: &Arc<Self>, write: WriteId, command: &Command, size: usize, within: Duration) -> WriteReply {
        if !self.is_whole_membership() {
            return self.write_here_within(Some(write), command.clone(), within).await;
        }
        match self.batcher.admit(write, command.clone(), size) {
            Admission::Propose(command) => {
                let _turn = BatchTurn(self);
                self.write_here_within(Some(write), command, within).await
            }
            Admission::Wait(outcome) => match tokio::time::timeout(within, outcome).await {
                Ok(Ok(reply)) => reply,
                Ok(Err(_)) => Err(Refusal::Unavailable("member stopping: the write's batch was not proposed".into())),
                Err(_) => Err(Refusal::Unavailable(format!("not committed by a quorum within {within:?}"))),
            },
        }
    }

    /// The membership (voters and learners) is this node alone.
    fn is_whole_membership(&self) -> bool {
        let receiver = self.raft.metrics();
        let metrics = receiver.borrow_watched();
        let mut nodes = metrics.membership_config.membership().nodes();
        matches!((nodes.next(), nodes.next()), (Some((id, _)), None) if *id == self.id)
    }

    /// Propose `first` and the batches after it while writes keep waiting, in a task of its
    /// own: a caller that stops waiting (a timeout, a dropped request) does not stop the others'.
    fn propose_batches(self: &Arc<Self>, first: Vec<Queued>) {
        let node = Arc::clone(self);
        let task = tokio::spawn(async move {
            let mut batch = first;
            loop {
                let (write, command, replies) = batcher::into_entry(batch);
                let reply = node.write_here_within(write, command, node.config.write_timeout).await;
                batcher::answer(replies, reply);
                match node.batcher.next_batch() {
                    Some(next) => batch = next,
                    None => return,
                }
            }
        });
        self.tasks.track(task);
    }

    /// Propose on this node as leader, stamping the leader's (agreed) clock into the entry,
    /// and give up waiting after `within`. openraft's `client_write` waits for the commit
    /// however long it takes, and a leader cut off from its followers keeps leading (it never
    /// hears of a newer term), so without the bound a write on it hangs until the partition
    /// heals. The entry may still commit later (if this leader regains its quorum); a retry
    /// with the same write id then gets its first outcome.
    async fn write_here_within(&self, write: Option<WriteId>, command: Command, within: Duration) -> WriteReply {
        let proposal = async {
            let (now, clock_agreed) = self.stamp().await;
            self.raft.client_write(Request { now, clock_agreed, write, command }).await
        };
        match tokio::time::timeout(within, proposal).await {
            Ok(Ok(reply)) => Ok((reply.data, reply.log_id.index)),
            Ok(Err(e)) => Err(self.refusal_from(e)),
            Err(_) => Err(Refusal::Unavailable(format!("not committed by a quorum within {within:?}"))),
        }
    }

    /// The time to stamp into the next entry, and whether it is agreed (no later than the clocks
    /// of a majority of the voters): see [`super::clock`].
    async fn stamp(&self) -> (Millis, bool) {
        if let Some(agreed) = self.clock.agreed_now() {
            return (agreed, true);
        }
        let now = self.clock.now();
        if now.abs_diff(self.sm.read(|sm| sm.now)) <= MAX_CLOCK_STEP_MS {
            return (now, false);
        }
        match self.agree_on_time().await {
            Some(agreed) => (agreed, true),
            // No majority answered: an unagreed stamp (the write will hardly commit either).
            None => (self.clock.now(), false),
        }
    }

    /// Ask every voter for its clock and correct this node's by the latest time a majority of
    /// them has reached; that corrected time now, or `None` without a majority of answers.
    async fn agree_on_time(&self) -> Option<Millis> {
        let _one = self.clock.agreeing.lock().await;
        if let Some(agreed) = self.clock.agreed_now() {
            return Some(agreed);
        }
        let others = self.other_members(Members::Voters);
        let voters = others.len() + 1;
        let own = now_ms();
        let mut readings = vec![own];
        let mut asked: FuturesUnordered<_> =
            others.iter().map(|addr| self.client.rpc::<_, Millis>(addr, CLOCK, &(), CLOCK_QUERY_TIMEOUT)).collect();
        // Every voter's clock makes the best estimate, but once a majority has answered an
        // unreachable voter is waited for only a moment.
        let mut until = tokio::time::Instant::now() + CLOCK_QUERY_TIMEOUT;
        while let Ok(Some(answer)) = tokio::time::timeout_at(until, asked.next()).await {
            if let Ok(reading) = answer {
                readings.push(reading);
                if readings.len() == voters / 2 + 1 {
                    until = until.min(tokio::time::Instant::now() + CLOCK_STRAGGLER_WAIT);
                }
            }
        }
        let Some(agreed) = majority_time(readings, voters) else {
            tracing::debug!(voters, "no majority of voters' clocks answered; stamping unagreed");
            return None;
        };
        let offset = self.clock.agreed(own, agreed);
        if offset.unsigned_abs() > MAX_CLOCK_STEP_MS {
            tracing::warn!(offset_ms = offset, "this node's clock is off the voters' majority time; stamping theirs");
        }
        self.clock.agreed_now()
    }
}

/// The batcher's turn, held by a write proposed at once: when it ends (the write answered, or
/// its caller gone) the writes that came meanwhile go.
struct BatchTurn<'a>(&'a Arc<RaftNode>);

impl Drop for BatchTurn<'_> {
    fn drop(&mut self) {
        if let Some(batch) = self.0.batcher.next_batch() {
            // Outside a runtime (it is shutting down) the batch's waiters are told so.
            if tokio::runtime::Handle::try_current().is_ok() {
                self.0.propose_batches(batch);
            }
        }
    }
}

/// Which members [`RaftNode::other_members`] lists.
#[derive(Clone, Copy)]
enum Members {
    Voters,
    /// Voters and learners.
    All,
}

impl LeaderWrite for RaftNode {
    /// Propose on this node as leader (a forwarded write, or the ticker's), bounded by the
    /// write timeout.
    async fn write_as_leader(&self, write: Option<WriteId>, command: Command) -> WriteReply {
        self.write_here_within(write, command, self.config.write_timeout).await
    }
}
