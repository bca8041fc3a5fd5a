//! The peer port: Raft RPCs (MessagePack), forwarded writes and read indexes, and the admin API
//! (JSON). Every request must carry the cluster secret; others are refused (401) and counted.

use super::network::{self as net, ReadIndexReply, Refusal};
use super::node::{RaftNode, RaftStoreError};
use super::types::{Snapshot, SnapshotBlob, TypeConfig, decode, encode};
use crate::metrics::Metrics;
use axum::Router;
use axum::body::Bytes;
use axum::extract::{Request, State};
use axum::http::{StatusCode, header};
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use openraft::errors::RaftError;
use openraft::raft::{AppendEntriesRequest, VoteRequest};
use serde::Deserialize;
use serde_json::json;
use std::future::Future;
use std::sync::Arc;

#[derive(Clone)]
struct PeerState {
    node: Arc<RaftNode>,
    secret: Arc<str>,
    key_fingerprint: Option<Arc<str>>,
    metrics: Arc<Metrics>,
}

/// A learner is promoted only once it is at most this many entries behind.
pub const PROMOTE_MAX_LAG: u64 = 100;

pub fn router(node: Arc<RaftNode>, secret: &str, key_fingerprint: Option<String>, metrics: Arc<Metrics>) -> Router {
    let state = PeerState { node, secret: secret.into(), key_fingerprint: key_fingerprint.map(Into::into), metrics };
    Router::new()
        .route(net::APPEND, post(append))
        .route(net::APPEND_STREAM, post(append_stream))
        .route(net::VOTE, post(vote))
        .route(net::SNAPSHOT, post(snapshot))
        .route(net::WRITE_STREAM, post(write_stream))
        .route(net::READ_INDEX, post(read_index))
        .route(net::STATUS, get(status))
        .route(net::LEARNERS, post(add_learner))
        .route(net::PROMOTE, post(promote))
        .route(net::REMOVE, post(remove))
        .route(net::JOIN, post(join))
        .route(net::RESUME, post(resume))
        .route(net::CANCEL, post(cancel))
        .route(net::NOTIFY, post(notify))
        .layer(middleware::from_fn_with_state(state.clone(), authenticate))
        .layer(axum::extract::DefaultBodyLimit::max(256 * 1024 * 1024))
        .with_state(state)
}

/// Byte-wise comparison that takes the same time wherever the first difference is.
fn constant_time_eq(a: &[u8], b: &[u8]) -> bool {
    a.len() == b.len() && a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

async fn authenticate(State(state): State<PeerState>, request: Request, next: Next) -> Response {
    let presented = request.headers().get(header::AUTHORIZATION).and_then(|v| v.to_str().ok()).and_then(|v| v.strip_prefix("Bearer "));
    let reason = match presented {
        None => "missing_secret",
        Some(secret) if !constant_time_eq(secret.as_bytes(), state.secret.as_bytes()) => "wrong_secret",
        Some(_) => {
            let theirs = request.headers().get(net::KEY_HEADER).and_then(|v| v.to_str().ok());
            match (theirs, state.key_fingerprint.as_deref()) {
                (Some(theirs), Some(ours)) if theirs != ours => {
                    state.metrics.peer_refused("key_mismatch");
                    tracing::error!(path = %request.uri().path(), "refused a peer with another id-encryption key: every replica needs the same --encryption-key-file");
                    return (StatusCode::FORBIDDEN, "peer request refused: the id-encryption key differs between replicas").into_response();
                }
                _ => return next.run(request).await,
            }
        }
    };
    state.metrics.peer_refused(reason);
    tracing::warn!(reason, path = %request.uri().path(), "refused unauthenticated peer request");
    (StatusCode::UNAUTHORIZED, "peer request refused: missing or wrong cluster secret").into_response()
}

fn msgpack(value: &impl serde::Serialize) -> Response {
    ([(header::CONTENT_TYPE, "application/msgpack")], encode(value)).into_response()
}

/// Decode a MessagePack body or answer 400 (nothing is touched).
fn body<'a, T: serde::Deserialize<'a>>(bytes: &'a [u8], what: &str) -> Result<T, Response> {
    decode(bytes).map_err(|e| (StatusCode::BAD_REQUEST, format!("malformed {what}: {e}")).into_response())
}

async fn append(State(s): State<PeerState>, bytes: Bytes) -> Response {
    let rpc: AppendEntriesRequest<TypeConfig> = match body(&bytes, "append-entries request") {
        Ok(rpc) => rpc,
        Err(r) => return r,
    };
    msgpack(&s.node.raft.append_entries(rpc).await)
}

/// Switch to a pipelined replication stream (see [`super::append_stream`]).
async fn append_stream(State(s): State<PeerState>, request: Request) -> Response {
    super::peer_stream::accept(&s.node, &s.metrics, request, super::append_stream::PROTOCOL, super::append_stream::serve)
}

async fn vote(State(s): State<PeerState>, bytes: Bytes) -> Response {
    let rpc: VoteRequest<TypeConfig> = match body(&bytes, "vote request") {
        Ok(rpc) => rpc,
        Err(r) => return r,
    };
    msgpack(&s.node.raft.vote(rpc).await)
}

async fn snapshot(State(s): State<PeerState>, bytes: Bytes) -> Response {
    let SnapshotBlob { vote, meta, data } = match body(&bytes, "snapshot") {
        Ok(parts) => parts,
        Err(r) => return r,
    };
    let Some(vote) = vote else {
        return (StatusCode::BAD_REQUEST, "snapshot without the leader's vote").into_response();
    };
    // Refuse a snapshot that does not decode before handing it to Raft.
    if decode::<super::state_machine::StateMachine>(&data).is_err() {
        return (StatusCode::BAD_REQUEST, "malformed snapshot data").into_response();
    }
    let reply = s
        .node
        .raft
        .install_full_snapshot(vote, Snapshot { meta, snapshot: data.into_owned() })
        .await
        .map_err(RaftError::<TypeConfig>::Fatal);
    msgpack(&reply)
}

/// Switch to a stream of forwarded writes (see [`super::forwarder`]).
async fn write_stream(State(s): State<PeerState>, request: Request) -> Response {
    super::peer_stream::accept(&s.node, &s.metrics, request, super::forwarder::PROTOCOL, super::forwarder::serve)
}

async fn read_index(State(s): State<PeerState>) -> Response {
    let reply: ReadIndexReply = s.node.leader_read_index().await;
    msgpack(&reply)
}

async fn status(State(s): State<PeerState>) -> Response {
    axum::Json(s.node.status()).into_response()
}

#[derive(Deserialize)]
struct Member {
    id: u64,
    #[serde(default)]
    addr: Option<String>,
}

fn admin_error(e: RaftStoreError) -> Response {
    let status = match e {
        RaftStoreError::Membership(_) => StatusCode::CONFLICT,
        _ => StatusCode::SERVICE_UNAVAILABLE,
    };
    (status, axum::Json(json!({"error": e.to_string()}))).into_response()
}

fn parse_member(bytes: &[u8], needs_addr: bool) -> Result<Member, Response> {
    let member: Member = serde_json::from_slice(bytes)
        .map_err(|e| (StatusCode::BAD_REQUEST, axum::Json(json!({"error": format!("malformed request: {e}")}))).into_response())?;
    if needs_addr && member.addr.as_deref().is_none_or(str::is_empty) {
        return Err((StatusCode::BAD_REQUEST, axum::Json(json!({"error": "addr is required"}))).into_response());
    }
    Ok(member)
}

/// Membership changes run on the leader; a follower passes the call on.
async fn on_leader(s: &PeerState, path: &str, bytes: &[u8]) -> Option<Response> {
    if s.node.is_leader() {
        return None;
    }
    let status = s.node.status();
    let Some(addr) = status.leader.and_then(|id| status.members.get(&id).cloned()) else {
        return Some(admin_error(RaftStoreError::Unavailable(Refusal::Unavailable("no leader elected".into()).to_string())));
    };
    let body: serde_json::Value = serde_json::from_slice(bytes).unwrap_or_default();
    Some(match s.node.client.admin::<serde_json::Value>(&addr, path, Some(&body)).await {
        Ok(v) => axum::Json(v).into_response(),
        Err(super::network::PeerError::Status { status, body, .. }) => {
            (StatusCode::from_u16(status).unwrap_or(StatusCode::BAD_GATEWAY), body).into_response()
        }
        Err(e) => admin_error(RaftStoreError::Peer(e)),
    })
}

/// The shape every membership call shares: parse the member, pass the call on to the leader
/// when this node is not it, else run `change` here and answer `{done: id}`.
async fn membership_call<F, Fut>(s: PeerState, bytes: Bytes, path: &'static str, needs_addr: bool, done: &str, change: F) -> Response
where
    F: FnOnce(Arc<RaftNode>, u64, String) -> Fut,
    Fut: Future<Output = Result<(), RaftStoreError>>,
{
    let member = match parse_member(&bytes, needs_addr) {
        Ok(m) => m,
        Err(r) => return r,
    };
    if let Some(r) = on_leader(&s, path, &bytes).await {
        return r;
    }
    match change(s.node.clone(), member.id, member.addr.unwrap_or_default()).await {
        Ok(()) => axum::Json(json!({ done: member.id })).into_response(),
        Err(e) => admin_error(e),
    }
}

async fn add_learner(State(s): State<PeerState>, bytes: Bytes) -> Response {
    membership_call(s, bytes, net::LEARNERS, true, "added", |node, id, addr| async move { node.add_learner(id, addr, false).await }).await
}

async fn promote(State(s): State<PeerState>, bytes: Bytes) -> Response {
    membership_call(s, bytes, net::PROMOTE, false, "promoted", |node, id, _| async move { node.promote(id, PROMOTE_MAX_LAG).await }).await
}

async fn remove(State(s): State<PeerState>, bytes: Bytes) -> Response {
    membership_call(s, bytes, net::REMOVE, false, "removed", |node, id, _| async move { node.remove(id).await }).await
}

/// Add a node as a learner, wait until it has caught up, then make it a voter.
async fn join(State(s): State<PeerState>, bytes: Bytes) -> Response {
    membership_call(s, bytes, net::JOIN, true, "joined", |node, id, addr| async move {
        node.add_learner(id, addr, true).await?;
        node.promote(id, PROMOTE_MAX_LAG).await
    })
    .await
}

/// The rest of a stream this node owns, for a replica that a resuming client reached.
async fn resume(State(s): State<PeerState>, bytes: Bytes) -> Response {
    let request: super::relay::ResumeRequest = match body(&bytes, "resume request") {
        Ok(r) => r,
        Err(r) => return r,
    };
    let Some(mcp) = s.node.mcp.get() else {
        return (StatusCode::SERVICE_UNAVAILABLE, "no MCP server attached yet").into_response();
    };
    let defaults = crate::transport::http::HttpConfig::default();
    match mcp.streams.reader_for(&request.session, request.stream, request.from, defaults.retry, defaults.keep_alive) {
        Some(reader) => ([(header::CONTENT_TYPE, "text/event-stream")], axum::body::Body::from_stream(reader)).into_response(),
        None => (StatusCode::NOT_FOUND, "no such stream for this session").into_response(),
    }
}

/// A client's cancellation that reached another replica.
async fn cancel(State(s): State<PeerState>, bytes: Bytes) -> Response {
    let request: super::relay::CancelRequest = match body(&bytes, "cancel request") {
        Ok(r) => r,
        Err(r) => return r,
    };
    let cancelled = s.node.mcp.get().is_some_and(|mcp| mcp.server.cancel_local(&request.session, &request.request));
    axum::Json(json!({"cancelled": cancelled})).into_response()
}

/// A notification for standalone streams, published on another replica.
async fn notify(State(s): State<PeerState>, bytes: Bytes) -> Response {
    let notice: crate::server::Notice = match body(&bytes, "notice") {
        Ok(n) => n,
        Err(r) => return r,
    };
    if let Some(mcp) = s.node.mcp.get() {
        mcp.server.deliver_notice(notice);
    }
    StatusCode::ACCEPTED.into_response()
}
