//! Switchboard node: a clustered MCP server runtime.
//!
//! Layers, bottom up:
//! - [`protocol`]: JSON-RPC framing and MCP types (pure).
//! - [`mailbox`] and [`session`]: the stores server-to-client requests and sessions go through.
//! - [`raft`]: the replicated mailbox and session store (openraft, redb, the peer port).
//! - [`server`]: the MCP server (registry, dispatch, handler context).
//! - [`transport`]: Streamable HTTP and stdio.
//! - [`cli`]: the `switchboard` command.

pub mod cli;
pub mod clock;
pub mod cluster;
pub mod dev;
pub mod mailbox;
pub mod metrics;
pub mod peer;
pub mod protocol;
pub mod raft;
pub mod server;
pub mod session;
pub mod tasks;
pub mod tools;
pub mod transport;

pub use server::{RequestContext, Server, ServerBuilder, ServerConfig, ToolDef};
