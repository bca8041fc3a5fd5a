//! Transports: how messages reach the [`crate::server::Server`] and its answers leave.

pub mod connections;
pub mod http;
mod modern;
mod responses;
pub mod sse;
pub mod stdio;
