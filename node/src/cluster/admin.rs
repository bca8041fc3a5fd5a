//! The admin API on the peer port (JSON): the replica's view of the cluster, and membership
//! changes (add a learner, promote it once caught up, remove, join) and leadership hand-offs, run on the leader — a
//! follower passes the call on. The operator and `switchboard cluster` are its clients.

use crate::peer::PeerError;
use crate::peer::routes::{JOIN, LEARNERS, PROMOTE, REMOVE, STATUS, TRANSFER_LEADERSHIP};
use crate::raft::{RaftNode, RaftStoreError};
use axum::Router;
use axum::body::Bytes;
use axum::extract::State;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use serde_json::json;
use std::future::Future;
use std::sync::Arc;

pub use switchboard_contract::admin::PROMOTE_MAX_LAG;
use switchboard_contract::admin::{DIGEST, MemberRequest, StateDigest};

/// The admin routes of `node`.
pub fn router(node: Arc<RaftNode>) -> Router {
    Router::new()
        .route(STATUS, get(status))
        .route(DIGEST, get(digest))
        .route(LEARNERS, post(add_learner))
        .route(PROMOTE, post(promote))
        .route(REMOVE, post(remove))
        .route(TRANSFER_LEADERSHIP, post(transfer_leadership))
        .route(JOIN, post(join))
        .with_state(node)
}

async fn status(State(node): State<Arc<RaftNode>>) -> Response {
    axum::Json(node.status()).into_response()
}

async fn digest(State(node): State<Arc<RaftNode>>) -> Response {
    let (applied_index, digest) = node.sm.digest();
    axum::Json(StateDigest { node_id: node.id, applied_index, digest }).into_response()
}

fn admin_error(e: RaftStoreError) -> Response {
    let status = match e {
        RaftStoreError::Membership(_) => StatusCode::CONFLICT,
        _ => StatusCode::SERVICE_UNAVAILABLE,
    };
    (status, axum::Json(json!({"error": e.to_string()}))).into_response()
}

fn parse_member(bytes: &[u8], needs_addr: bool) -> Result<MemberRequest, Response> {
    let member: MemberRequest = serde_json::from_slice(bytes)
        .map_err(|e| (StatusCode::BAD_REQUEST, axum::Json(json!({"error": format!("malformed request: {e}")}))).into_response())?;
    if needs_addr && member.addr.as_deref().is_none_or(str::is_empty) {
        return Err((StatusCode::BAD_REQUEST, axum::Json(json!({"error": "addr is required"}))).into_response());
    }
    Ok(member)
}

/// Membership changes run on the leader; a follower passes the call on.
async fn on_leader(node: &RaftNode, path: &str, bytes: &[u8]) -> Option<Response> {
    if node.is_leader() {
        return None;
    }
    let status = node.status();
    let Some(addr) = status.leader.and_then(|id| status.members.get(&id).cloned()) else {
        return Some(admin_error(RaftStoreError::Unavailable("no leader elected".into())));
    };
    let body: serde_json::Value = serde_json::from_slice(bytes).unwrap_or_default();
    Some(match node.client.admin::<serde_json::Value>(&addr, path, Some(&body)).await {
        Ok(v) => axum::Json(v).into_response(),
        Err(PeerError::Status { status, body, .. }) => {
            (StatusCode::from_u16(status).unwrap_or(StatusCode::BAD_GATEWAY), body).into_response()
        }
        Err(e) => admin_error(RaftStoreError::Peer(e)),
    })
}

/// The shape every membership call shares: parse the member, pass the call on to the leader
/// when this node is not it, else run `change` here and answer `{done: id}`.
async fn membership_call<F, Fut>(node: Arc<RaftNode>, bytes: Bytes, path: &'static str, needs_addr: bool, done: &str, change: F) -> Response
where
    F: FnOnce(Arc<RaftNode>, u64, String) -> Fut,
    Fut: Future<Output = Result<(), RaftStoreError>>,
{
    let member = match parse_member(&bytes, needs_addr) {
        Ok(m) => m,
        Err(r) => return r,
    };
    if let Some(r) = on_leader(&node, path, &bytes).await {
        return r;
    }
    match change(node, member.id, member.addr.unwrap_or_default()).await {
        Ok(()) => axum::Json(json!({ done: member.id })).into_response(),
        Err(e) => admin_error(e),
    }
}

async fn add_learner(State(node): State<Arc<RaftNode>>, bytes: Bytes) -> Response {
    membership_call(node, bytes, LEARNERS, true, "added", |node, id, addr| async move { node.add_learner(id, addr, false).await }).await
}

async fn promote(State(node): State<Arc<RaftNode>>, bytes: Bytes) -> Response {
    membership_call(node, bytes, PROMOTE, false, "promoted", |node, id, _| async move { node.promote(id, PROMOTE_MAX_LAG).await }).await
}

async fn remove(State(node): State<Arc<RaftNode>>, bytes: Bytes) -> Response {
    membership_call(node, bytes, REMOVE, false, "removed", |node, id, _| async move { node.remove(id).await }).await
}

async fn transfer_leadership(State(node): State<Arc<RaftNode>>, bytes: Bytes) -> Response {
    membership_call(node, bytes, TRANSFER_LEADERSHIP, false, "leads", |node, id, _| async move { node.transfer_leadership(id).await }).await
}

/// Add a node as a learner, wait until it has caught up, then make it a voter.
async fn join(State(node): State<Arc<RaftNode>>, bytes: Bytes) -> Response {
    membership_call(node, bytes, JOIN, true, "joined", |node, id, addr| async move {
        node.add_learner(id, addr, true).await?;
        node.promote(id, PROMOTE_MAX_LAG).await
    })
    .await
}
