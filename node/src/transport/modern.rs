//! The 2026-07-28 side of the Streamable HTTP endpoint: a POST carries one stateless request,
//! checked against its headers before it runs; the response is JSON, or an SSE stream when the
//! handler sends notifications first. No session, no event ids, no resumption: closing the
//! response is how the client cancels.

use super::responses::{PROTOCOL_VERSION_HEADER, header_text, http_error, json_body, sse_body};
use crate::protocol::era::{self, ModernHeaders};
use crate::protocol::jsonrpc::{ErrorObject, HEADER_MISMATCH, MISSING_REQUIRED_CLIENT_CAPABILITY, Message, RequestId};
use crate::server::{ListenFilter, Listener, Outbound, Outgoing, Server};
use axum::body::{Body, Bytes};
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use serde_json::Value;
use std::convert::Infallible;
use std::time::Duration;
use tokio::sync::mpsc;
use tokio_util::sync::{CancellationToken, DropGuard};

pub const METHOD_HEADER: &str = "mcp-method";
pub const NAME_HEADER: &str = "mcp-name";
/// Prefix of the headers that mirror annotated tool arguments (`Mcp-Param-{Name}`, SEP-2243).
pub const PARAM_HEADER_PREFIX: &str = "mcp-param-";

/// Answer a POST whose era is modern.
pub(super) async fn post(server: &Server, keep_alive: Duration, headers: &HeaderMap, message: Message) -> Response {
    let (id, method, params) = match message {
        // 2026-07-28 defines no notification from the client over HTTP (closing a stream is the
        // cancellation): acknowledged and ignored.
        Message::Notification { .. } => return StatusCode::ACCEPTED.into_response(),
        Message::Request { id, method, params } => (id, method, params),
        Message::Response { .. } | Message::Error { .. } => {
            return http_error(StatusCode::BAD_REQUEST, "a 2026-07-28 client sends requests only: the server asks nothing of it");
        }
    };
    let names = ModernHeaders {
        protocol_version: header_text(headers, PROTOCOL_VERSION_HEADER),
        method: header_text(headers, METHOD_HEADER),
        name: header_text(headers, NAME_HEADER),
        params: headers
            .iter()
            .filter_map(|(name, value)| Some((name.as_str().strip_prefix(PARAM_HEADER_PREFIX)?, value.to_str().unwrap_or(""))))
            .collect(),
    };
    let meta = match era::validate(&names, &method, params.as_ref()) {
        Ok(meta) => meta,
        Err(rejection) => {
            tracing::debug!(%method, code = rejection.error.code, message = %rejection.error.message, "modern request refused");
            let status = StatusCode::from_u16(rejection.status).unwrap_or(StatusCode::BAD_REQUEST);
            return json_body(status, &Message::error(Some(id), rejection.error));
        }
    };
    if method == "subscriptions/listen" {
        return listen(server, keep_alive, id, params.as_ref());
    }
    let (tx, mut rx) = mpsc::unbounded_channel();
    let cancel = CancellationToken::new();
    // Dropped with this future (the client went away before the answer) or with the SSE body:
    // either way the request is cancelled.
    let guard = cancel.clone().drop_guard();
    server.spawn_modern(meta, id, method, params, Outbound::new(tx), cancel);
    let Some(first) = rx.recv().await else {
        return http_error(StatusCode::INTERNAL_SERVER_ERROR, "the request ended without an answer");
    };
    if let Outgoing::Message(message) = &first
        && message.is_response()
    {
        guard.disarm();
        return json_body(status_of(message), message);
    }
    sse_body(Body::from_stream(frames(first, rx, Some(guard), Box::new(()), keep_alive)))
}

/// The HTTP status of a final message: a capability the client lacks, or a header that
/// disagrees with the arguments, is the request's fault (400); every other answer, errors
/// included, is 200.
fn status_of(message: &Message) -> StatusCode {
    match message {
        Message::Error { error: ErrorObject { code: MISSING_REQUIRED_CLIENT_CAPABILITY | HEADER_MISMATCH, .. }, .. } => {
            StatusCode::BAD_REQUEST
        }
        _ => StatusCode::OK,
    }
}

/// SSE frames (`data:` only) of what the request sends, ending after its response; a comment
/// line every `keep_alive` of silence keeps proxies from closing the stream. The guard cancels
/// the request if the stream is dropped before its response went out; `held` lives as long as
/// the stream.
fn frames(
    first: Outgoing,
    rx: mpsc::UnboundedReceiver<Outgoing>,
    guard: Option<DropGuard>,
    held: Box<dyn Send>,
    keep_alive: Duration,
) -> impl futures::Stream<Item = Result<Bytes, Infallible>> {
    futures::stream::unfold((Some(first), rx, guard, false), move |(pending, mut rx, guard, done)| {
        let _held = &held;
        async move {
            if done {
                return None;
            }
            let next = match pending {
                Some(outgoing) => Some(outgoing),
                None => match tokio::time::timeout(keep_alive, rx.recv()).await {
                    Ok(next) => next,
                    Err(_) => return Some((Ok(Bytes::from_static(b": keep-alive\n\n")), (None, rx, guard, false))),
                },
            };
            match next {
                None => None,
                Some(Outgoing::Disconnect) => Some((Ok(Bytes::new()), (None, rx, guard, false))),
                Some(Outgoing::Message(message)) => {
                    let last = message.is_response();
                    let guard = if last {
                        guard.map(DropGuard::disarm);
                        None
                    } else {
                        guard
                    };
                    Some((Ok(Bytes::from(format!("data: {}\n\n", message.to_json()))), (None, rx, guard, last)))
                }
            }
        }
    })
}

/// `subscriptions/listen`: a long-lived SSE stream of the notifications the client asked for,
/// acknowledged first, every one tagged with the listen request's id.
fn listen(server: &Server, keep_alive: Duration, id: RequestId, params: Option<&Value>) -> Response {
    let filter = match ListenFilter::from_params(params) {
        Ok(filter) => filter,
        Err(why) => return json_body(StatusCode::BAD_REQUEST, &Message::error(Some(id), ErrorObject::invalid_params(why))),
    };
    let (tx, mut rx) = mpsc::unbounded_channel();
    let subscription = serde_json::to_value(&id).expect("ids serialize");
    let registered = server.listen(Listener { subscription, filter, out: Outbound::new(tx) });
    let Ok(first) = rx.try_recv() else {
        return http_error(StatusCode::INTERNAL_SERVER_ERROR, "the listen stream could not be opened");
    };
    sse_body(Body::from_stream(frames(first, rx, None, Box::new(registered), keep_alive)))
}
