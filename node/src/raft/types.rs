//! openraft type configuration and the binary codec used on disk and on the wire.

use super::state_machine::{Request, Response};
use serde::Serialize;
use serde::de::DeserializeOwned;
use std::fmt;

impl fmt::Display for Request {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:?}@{}", self.command, self.now)
    }
}

openraft::declare_raft_types!(
    /// Switchboard's Raft types: mailbox/session commands, peer addresses as nodes.
    pub TypeConfig:
        D = Request,
        R = Response,
        NodeId = u64,
        Node = openraft::BasicNode,
);

pub type Raft = openraft::Raft<TypeConfig, super::sm_store::StateMachineStore>;
pub type LogId = openraft::alias::LogIdOf<TypeConfig>;
pub type Entry = openraft::alias::EntryOf<TypeConfig>;
pub type Vote = openraft::alias::VoteOf<TypeConfig>;
pub type SnapshotMeta = openraft::alias::SnapshotMetaOf<TypeConfig>;
pub type StoredMembership = openraft::alias::StoredMembershipOf<TypeConfig>;
pub type Snapshot = openraft::alias::SnapshotOf<TypeConfig, Vec<u8>>;

/// MessagePack with field names: compact, self-describing (so `serde_json::Value` and optional
/// fields survive), and stable across field reordering.
pub fn encode<T: Serialize>(value: &T) -> Vec<u8> {
    rmp_serde::to_vec_named(value).expect("in-memory values always encode")
}

pub fn decode<T: DeserializeOwned>(bytes: &[u8]) -> Result<T, rmp_serde::decode::Error> {
    rmp_serde::from_slice(bytes)
}

pub fn io_error(e: impl std::error::Error + Send + Sync + 'static) -> std::io::Error {
    std::io::Error::other(e)
}
