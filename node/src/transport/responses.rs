//! The shapes every HTTP answer of the MCP endpoint takes, whatever the protocol era.

use crate::protocol::jsonrpc::{ErrorObject, Message};
use axum::http::{HeaderMap, HeaderName, StatusCode, header};
use axum::response::{IntoResponse, Response};

pub const PROTOCOL_VERSION_HEADER: &str = "mcp-protocol-version";

/// An HTTP error with a JSON-RPC error body (id null), as the spec suggests.
pub(super) fn http_error(status: StatusCode, message: impl Into<String>) -> Response {
    let body = Message::error(None, ErrorObject::new(-32000, message)).to_json();
    (status, [(header::CONTENT_TYPE, "application/json")], body).into_response()
}

pub(super) fn json_body(status: StatusCode, message: &Message) -> Response {
    (status, [(header::CONTENT_TYPE, "application/json")], message.to_json()).into_response()
}

/// A header's value as text; a value that is not visible ASCII reads as `""` (it matches
/// nothing a client could mean).
pub(super) fn header_text<'a>(headers: &'a HeaderMap, name: &str) -> Option<&'a str> {
    headers.get(name).map(|v| v.to_str().unwrap_or(""))
}

pub(super) fn sse_body(body: axum::body::Body) -> Response {
    let headers = [
        (header::CONTENT_TYPE, "text/event-stream"),
        (header::CACHE_CONTROL, "no-cache"),
        // Ask proxies (nginx) not to buffer the stream.
        (HeaderName::from_static("x-accel-buffering"), "no"),
    ];
    (headers, body).into_response()
}
