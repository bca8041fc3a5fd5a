//! Switchboard node: a clustered MCP server runtime.
//!
//! Tool authors start from [`prelude`]: build a [`ServerBuilder`] with [`ToolDef`]s whose
//! handlers get a [`RequestContext`] (`ctx.elicit`, `ctx.sample`, `ctx.progress`, ...), then
//! serve it with [`transport::http`] or [`transport::stdio`], or as a cluster member with
//! [`cluster::Node`]. See `examples/` for a complete one.
//!
//! Layers, bottom up (no file uses a layer above it; `scripts/check-layers.py` checks):
//! - [`protocol`]: JSON-RPC framing and MCP types (pure).
//! - [`mailbox`] and [`session`]: the stores server-to-client requests and sessions go
//!   through; [`metrics`].
//! - `peer`: the peer port's client, routes, authentication and stream framing.
//! - `raft`: the replicated mailbox and session store (openraft over a write-ahead log); beside it,
//!   [`server`]: the MCP server (offerings, dispatch, handler context).
//! - [`transport`]: Streamable HTTP and stdio; [`tools`]: the stock binary's tool sets.
//! - [`cluster`]: a node assembled from the layers below.
//! - The `switchboard` command ([`run_cli`]).
//!
//! `peer` and `raft` are runtime internals: crate-private, opened to this crate's own
//! integration tests and benches by the `testing` feature, so changing them never breaks a tool
//! author's build.

pub mod allocator;
pub mod cluster;
pub mod mailbox;
pub mod mcp_tasks;
pub mod metrics;
pub mod prelude;
pub mod protocol;
pub mod server;
pub mod session;
pub mod tools;
pub mod transport;

mod cli;
mod clock;
mod dev;
mod id128;
mod tasks;

#[cfg(feature = "testing")]
pub mod peer;
#[cfg(not(feature = "testing"))]
mod peer;
#[cfg(feature = "testing")]
pub mod raft;
#[cfg(not(feature = "testing"))]
mod raft;

pub use cli::main as run_cli;
pub use server::{RequestContext, Server, ServerBuilder, ServerConfig, ToolDef};
