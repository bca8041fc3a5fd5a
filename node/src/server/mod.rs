//! The MCP server proper: what it offers, how it answers each method, and the node-local state
//! of sessions (running requests, the standalone stream). Transports hand it parsed messages
//! and an [`Outbound`] per request; it never touches HTTP.
//!
//! Files, bottom up (no file uses one above it; `scripts/check-layers.py` checks):
//! - `outbound`: where a request's messages go; `config`; `schema`: JSON Schema helpers;
//!   `link`: what the server asks of
//!   other replicas; `correlation`: sealed request and event ids; `rendezvous`: the mailbox,
//!   key and timeouts server-to-client requests go through; `local`: session state only this
//!   node has.
//! - `context`: what a handler gets (`elicit`, `sample`, `progress`, ...); `definitions`:
//!   tool, prompt and resource definitions; `offerings`: what the server offers.
//! - `handle`: the [`Server`] handle and the session lifecycle; `builder`: [`ServerBuilder`].
//! - The request paths, each an `impl Server`: `requests` (a request's life and cancellation),
//!   `dispatch` (each method's answer), `answers` (the client's answers to server-to-client
//!   requests), `notices` (notifications fanned out to every replica), `tool_changes` (tools
//!   changed at run time).

mod answers;
mod builder;
mod config;
mod context;
pub mod correlation;
mod definitions;
mod dispatch;
mod envelope;
mod handle;
mod link;
mod listeners;
mod local;
mod modern;
mod mrtr;
mod notices;
mod offerings;
mod outbound;
mod rendezvous;
mod requests;
mod round;
mod schema;
mod task_calls;
mod tool_changes;

pub use answers::AnswerOutcome;
pub use builder::ServerBuilder;
pub use config::ServerConfig;
pub use context::{ClientRequestError, MAILBOX_GRACE, RequestContext};
pub use definitions::{
    Completer, HandlerError, HandlerResult, PromptDef, ResourceDef, ResourceMeta, TaskSupport, ToolDef, match_template, paginate,
};
pub use handle::{InitializeError, Server, SessionEndHook, SessionLookupError};
pub use link::{ClusterLink, Notice};
pub use listeners::{ListenFilter, Listener};
pub use mrtr::OUTCOME_WINDOW;
pub use notices::ListenHandle;
pub use outbound::{Outbound, OutboundSink, Outgoing, StreamClosed};
pub use schema::{SchemaError, schema_for};

use serde_json::{Map, Value};

/// Arguments map helper for prompt handlers.
pub fn arg_str<'a>(args: &'a Map<String, Value>, key: &str) -> &'a str {
    args.get(key).and_then(Value::as_str).unwrap_or("")
}
