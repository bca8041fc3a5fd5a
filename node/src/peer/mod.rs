//! The peer port's bottom layer, knowing nothing of Raft or MCP: the client every replica
//! talks to the others with, the routes, authentication of incoming requests, and the framing
//! of long-lived streams. The layers above ([`crate::raft`], [`crate::cluster`]) give these
//! routes their meaning.

mod auth;
mod client;
pub mod codec;
pub mod routes;
pub mod stream;

pub use auth::{Credentials, authenticated};
pub use client::{MIN_RPC_TIMEOUT, PeerClient, PeerError};
