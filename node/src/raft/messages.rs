//! What replicas say to each other about writes and reads: a follower's write forwarded to the
//! leader, and why a node refused one.

use super::state_machine::{Command, Response, WriteId};
use serde::{Deserialize, Serialize};

/// A write a follower hands to the leader. The leader stamps the time.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct ForwardedWrite {
    pub write: WriteId,
    pub command: Command,
}

/// Why a node could not take a write or answer a read index.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, thiserror::Error)]
pub enum Refusal {
    #[error("not the leader (leader: {leader:?})")]
    NotLeader { leader: Option<(u64, String)> },
    #[error("{0}")]
    Unavailable(String),
}

pub type WriteReply = Result<(Response, u64), Refusal>;
pub type ReadIndexReply = Result<u64, Refusal>;
