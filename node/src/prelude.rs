//! What writing and serving a tool needs, in one import: `use switchboard_node::prelude::*;`.

pub use crate::protocol::types::{CallToolResult, ElicitAction, ElicitResult, LogLevel};
pub use crate::server::{
    ClientRequestError, HandlerError, HandlerResult, PromptDef, RequestContext, ResourceDef, Server, ServerBuilder, ServerConfig, ToolDef,
    schema_for,
};
pub use crate::transport::http::{HttpConfig, router, serve};
