//! How a member is configured: its identity, how it finds its cluster, and Raft's timing.

use crate::mailbox::NodeId;
use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::Duration;

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
    /// A cluster secret also accepted from peers (a rotation in progress); never sent.
    pub previous_secret: Option<String>,
    pub heartbeat: Duration,
    /// Minimum election timeout (the maximum is twice this).
    pub election_timeout: Duration,
    /// Take a snapshot after this many log entries; keep this many before purging. A snapshot
    /// is built off the write path (the log replayed onto the last one, in a low-priority
    /// thread), but it encodes and writes the whole state (every mailbox until its deadline),
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
    /// Fingerprint of a previous id-encryption key also accepted (from peers, and on data in
    /// the data directory): a rotation in progress.
    pub previous_key_fingerprint: Option<String>,
    /// The largest log entry a write may make (its encoded command), in bytes. A larger write
    /// is refused before it is proposed ([`super::RaftStoreError::EntryTooLarge`]): every
    /// entry must fit in one replication frame, and each one is held by every replica.
    pub max_entry_bytes: usize,
    /// Byte budget of one AppendEntries request. openraft bounds a batch only by its number of
    /// entries; a batch ends before it would pass this (it always carries at least one entry),
    /// so a follower far behind catches up in frames well under the peer frame limit.
    pub replication_batch_bytes: usize,
    /// A snapshot travels to a follower in pieces of at most this many bytes.
    pub snapshot_chunk_bytes: usize,
    /// How long a member that owns live tasks may stay silent (no acknowledgement to the
    /// leader) before its tasks fail.
    pub task_owner_timeout: Duration,
}

/// Bounds of the byte limits above: an entry or a batch must fit in one peer frame
/// ([`crate::peer::stream::MAX_FRAME`]) with room to spare.
pub const MIN_LIMIT_BYTES: usize = 64 * 1024;
pub const MAX_LIMIT_BYTES: usize = 64 * 1024 * 1024;

impl RaftNodeConfig {
    /// How recently a member must have heard from a quorum to be ready for traffic: a few
    /// election timeouts, so a missed heartbeat or a slow fsync does not flap readiness, while
    /// a member cut off from the quorum turns unready about when the others elect a new leader.
    pub fn ready_within(&self) -> Duration {
        3 * self.election_timeout
    }

    /// The maximum election timeout, which openraft also makes the leader lease: a follower
    /// votes for nobody else while it heard from its leader less than this long ago.
    pub fn election_lease(&self) -> Duration {
        (self.election_timeout * 5 / 4).max(self.election_timeout + Duration::from_millis(1))
    }

    pub fn new(node_id: NodeId, data_dir: PathBuf, advertise: String, secret: String) -> Self {
        RaftNodeConfig {
            node_id,
            data_dir,
            advertise,
            membership: Membership::Single,
            secret,
            previous_secret: None,
            heartbeat: Duration::from_millis(100),
            election_timeout: Duration::from_millis(1000),
            snapshot_every: 100_000,
            keep_logs: 1_000,
            tick_interval: Duration::from_millis(100),
            session_ttl: Duration::from_secs(3600),
            write_timeout: Duration::from_secs(5),
            source_ip: None,
            key_fingerprint: None,
            previous_key_fingerprint: None,
            max_entry_bytes: 4 * 1024 * 1024,
            replication_batch_bytes: 8 * 1024 * 1024,
            snapshot_chunk_bytes: 4 * 1024 * 1024,
            task_owner_timeout: Duration::from_secs(10),
        }
    }

    /// Refuse byte limits that would let an entry, a batch or a snapshot piece outgrow a frame.
    pub fn check_limits(&self) -> Result<(), String> {
        for (name, value, min) in [
            ("max_entry_bytes", self.max_entry_bytes, MIN_LIMIT_BYTES),
            ("replication_batch_bytes", self.replication_batch_bytes, MIN_LIMIT_BYTES),
            ("snapshot_chunk_bytes", self.snapshot_chunk_bytes, 1),
        ] {
            if !(min..=MAX_LIMIT_BYTES).contains(&value) {
                return Err(format!("{name} must be between {min} and {MAX_LIMIT_BYTES} bytes, got {value}"));
            }
        }
        Ok(())
    }
}
