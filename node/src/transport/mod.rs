//! Transports: how messages reach the [`crate::server::Server`] and its answers leave.

pub mod connections;
pub mod http;
pub mod sse;
pub mod stdio;
