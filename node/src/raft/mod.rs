//! The Raft layer: replicas form a group (openraft) that replicates mailbox and session
//! commands, so an answer delivered on any replica wakes the handler parked on the replica that
//! owns the call. It knows the peer layer below it and the store traits it implements; nothing
//! of MCP.
//!
//! - [`state_machine`]: the replicated state and its rules, pure; [`clock`]: the time a leader
//!   stamps into the log, checked against the voters' clocks.
//! - [`log_store`] and [`sm_store`]: openraft storage (segmented write-ahead log, snapshot files); [`data_key`]:
//!   the encryption key a data directory belongs to.
//! - [`network`]: openraft's network over the peer port; [`append_stream`]: pipelined
//!   replication given a Raft handle; [`snapshot_stream`]: snapshots sent in pieces;
//!   [`forwarder`]: followers' writes to the leader, served given only the leader's write.
//! - [`node`]: one member's write and read paths, and whether it is ready ([`readiness`]:
//!   the rule, pure; `batcher`: a lone member's writes queued into batch entries, pure); [`membership`]: bootstrapping, joining and membership changes; [`rpc`]:
//!   the Raft routes of the peer port.
//! - [`stores`]: the replicated `Mailbox`, `SessionStore` and `TaskStore`; [`task_owners`]: the
//!   leader fails the tasks of a member gone silent; `thread_priority`: how the log writer and
//!   snapshot builds ask for a core.

pub mod append_stream;
mod batcher;
pub mod clock;
pub mod config;
pub mod data_key;
pub mod error;
pub mod forwarder;
pub mod log_store;
pub mod membership;
pub mod messages;
pub mod network;
pub mod node;
pub mod readiness;
pub mod rpc;
pub mod sm_store;
pub mod snapshot_stream;
pub mod state_machine;
pub mod stores;
pub mod task_owners;
mod thread_priority;
pub mod types;

pub use config::{Membership, RaftNodeConfig};
pub use error::RaftStoreError;
pub use membership::ClusterStatus;
pub use node::RaftNode;
pub use stores::{RaftMailbox, RaftSessions, RaftTasks};

/// The Raft handle over this crate's types and state machine.
pub type Raft = openraft::Raft<types::TypeConfig, sm_store::StateMachineStore>;
