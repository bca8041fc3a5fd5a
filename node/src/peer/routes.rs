//! Paths on the peer port. Each group is served by the layer that owns its meaning: Raft RPCs
//! by [`crate::raft`], the admin API and the MCP relay by [`crate::cluster`].

/// Raft RPCs and the streams that carry replication and forwarded writes.
pub const APPEND: &str = "/raft/append";
pub const APPEND_STREAM: &str = "/raft/append-stream";
pub const VOTE: &str = "/raft/vote";
/// A Pre-Vote: would the receiver vote for this candidate (its leader lease over, the log
/// up to date)? Nothing changes on either side.
pub const PRE_VOTE: &str = "/raft/pre-vote";
/// A leader handing over: the named member may start an election at once.
pub const TRANSFER_LEADER: &str = "/raft/transfer-leader";
pub const SNAPSHOT: &str = "/raft/snapshot";
pub const WRITE_STREAM: &str = "/raft/write-stream";
pub const READ_INDEX: &str = "/raft/read-index";
/// This replica's wall clock, for a leader checking the time it stamps (`crate::raft::clock`).
pub const CLOCK: &str = "/raft/clock";
/// Whether this replica has applied a log index (waiting for it up to the election timeout).
pub const APPLIED: &str = "/raft/applied";

/// The admin API (JSON), shared with the operator.
pub use switchboard_contract::admin::{JOIN, LEARNERS, PROMOTE, REMOVE, STATUS, TRANSFER_LEADERSHIP};

/// What the MCP layer asks of the replica that owns a stream or a request.
pub const RESUME: &str = "/mcp/resume";
pub const CANCEL: &str = "/mcp/cancel";
pub const NOTIFY: &str = "/mcp/notify";
/// Whether a 2026-07-28 call still runs on its owner, and its cancellation.
pub const MRTR_CALL: &str = "/mcp/mrtr-call";
/// The outcome of a round of a 2026-07-28 call, from its owner.
pub const MRTR_OUTCOME: &str = "/mcp/mrtr-outcome";
