//! What a `switchboard` node and the `switchboard-operator` agree on, written once.
//!
//! - [`admin`]: the admin API on the peer port: its paths, the request body of a membership call,
//!   the cluster status a node answers with, and how far behind a learner may be to be promoted;
//! - [`duration`]: the one duration format (`250ms`, `30s`, `5m`, `1h`, or a bare number of
//!   seconds) of the node's flags and the `McpServer` spec;
//! - [`env`](mod@env): the environment twin of every `switchboard serve` flag;
//! - [`origin`]: the allowed hosts and origins of the MCP endpoint (`--allowed-hosts`,
//!   `--allowed-origins`, the spec's `allowedHosts` and `allowedOrigins`).
//!
//! The node serves and parses with these; the operator calls, validates and builds pods with
//! them. A change here is a change of both sides.

pub mod admin;
pub mod duration;
pub mod env;
pub mod origin;
