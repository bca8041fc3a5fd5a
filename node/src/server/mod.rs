//! The MCP server proper: what it offers, how it answers each method, and the node-local state
//! of sessions (running requests, the standalone stream). Transports hand it parsed messages
//! and an [`Outbound`] per request; it never touches HTTP.
//!
//! - [`builder`]: settings and [`ServerBuilder`]; [`handle`]: the [`Server`] handle and the
//!   session lifecycle; [`local`]: session state only this node has.
//! - [`requests`]: a request's life and cancellation; [`dispatch`]: each method's answer;
//!   [`answers`]: the client's answers to server-to-client requests; [`notices`]:
//!   notifications fanned out to every replica; [`offerings`]: tools, prompts and resources,
//!   changed at run time.
//! - [`context`]: what a handler gets (`elicit`, `sample`, `progress`, ...); [`definitions`]:
//!   tool, prompt and resource definitions; [`correlation`]: sealed request and event ids.

mod answers;
mod builder;
mod context;
pub mod correlation;
mod definitions;
mod dispatch;
mod handle;
mod local;
mod notices;
mod offerings;
mod requests;

pub use builder::{ServerBuilder, ServerConfig};
pub use context::{ClientRequestError, MAILBOX_GRACE, Outbound, OutboundSink, Outgoing, RequestContext, StreamClosed};
pub use definitions::{
    Completer, HandlerError, HandlerResult, PromptDef, ResourceDef, ResourceMeta, SchemaError, ToolDef, match_template, paginate,
    schema_for,
};
pub use handle::{Server, SessionLookupError};
pub use notices::{ClusterLink, Notice};

use serde_json::{Map, Value};

/// Arguments map helper for prompt handlers.
pub fn arg_str<'a>(args: &'a Map<String, Value>, key: &str) -> &'a str {
    args.get(key).and_then(Value::as_str).unwrap_or("")
}
