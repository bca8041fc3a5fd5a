//! The wire protocol: JSON-RPC 2.0 framing and MCP message types. No I/O.

pub mod era;
pub mod json_text;
pub mod jsonrpc;
pub mod types;
