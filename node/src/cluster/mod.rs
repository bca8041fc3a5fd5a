//! The top layer: a node assembled from the layers below. A [`Member`] is a Raft member whose
//! one peer port carries the Raft routes, the admin API and the MCP relay, all merged before
//! it serves; a [`Node`] is what `switchboard serve` and `switchboard dev` run: an MCP endpoint
//! over either a member's replicated stores or this process's memory.

pub mod admin;
mod member;
mod node;
pub mod relay;

/// A member's configuration and failures (defined by the Raft layer, which stays internal).
pub use crate::raft::{ClusterStatus, Membership, RaftNodeConfig, RaftStoreError};
pub use member::{ClusterStores, Member};
pub use node::{Node, NodeError, Store};
