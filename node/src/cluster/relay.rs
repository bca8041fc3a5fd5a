//! What the MCP layer asks of the other replicas, over the peer port: the rest of an SSE stream
//! another node owns (for `Last-Event-ID` resumption), cancellation of a request another node
//! runs, notifications for standalone streams, and whether a 2026-07-28 call still runs on
//! its owner. [`PeerLink`] is the asking side, [`router`]
//! the answering one.
//!
//! Streams are relayed, not replicated: a stream's events exist only on the node whose handler
//! produced them, so resumption fetches them from there. Replicating every event through Raft
//! would put each progress notification on the write path of the whole cluster.

use crate::peer::codec::encode;
use crate::peer::routes::{CANCEL, MRTR_CALL, MRTR_OUTCOME, NOTIFY, RESUME};
use crate::protocol::jsonrpc::RequestId;
use crate::raft::RaftNode;
use crate::raft::rpc::{body, msgpack};
use crate::server::{ClusterLink, Notice, OUTCOME_WINDOW};
use crate::session::SessionId;
use crate::transport::http::Endpoint;
use crate::transport::sse::{RelayError, RelayedStream, StreamRelay};
use axum::Router;
use axum::body::Bytes;
use axum::extract::State;
use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::post;
use futures::TryStreamExt;
use futures::future::BoxFuture;
use serde::{Deserialize, Serialize};
use serde_json::json;
use std::sync::{Arc, Weak};

#[derive(Debug, Serialize, Deserialize)]
pub struct ResumeRequest {
    pub session: SessionId,
    pub stream: u64,
    pub from: u64,
}

#[derive(Debug, Serialize, Deserialize)]
pub struct CancelRequest {
    pub session: SessionId,
    pub request: RequestId,
}

/// Asks the owner of a 2026-07-28 call whether it still runs there (and to cancel it).
#[derive(Debug, Serialize, Deserialize)]
pub struct CallStateRequest {
    pub call: u128,
    pub cancel: bool,
}

/// Asks the owner of a 2026-07-28 call for the outcome of one of its rounds.
#[derive(Debug, Serialize, Deserialize)]
pub struct RoundOutcomeRequest {
    pub call: u128,
    pub round: u32,
}

/// How long a replica waits for the owner of a call to say whether it still runs it.
const CALL_STATE_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(2);

/// The other replicas, as seen from this one.
pub struct PeerLink {
    node: Weak<RaftNode>,
}

impl PeerLink {
    pub fn new(node: &Arc<RaftNode>) -> Arc<Self> {
        Arc::new(PeerLink { node: Arc::downgrade(node) })
    }
}

#[async_trait::async_trait]
impl StreamRelay for PeerLink {
    async fn resume(&self, owner: u64, session: &SessionId, stream: u64, from: u64) -> Result<RelayedStream, RelayError> {
        let node = self.node.upgrade().ok_or_else(|| RelayError::Unreachable(owner, "this node is shutting down".into()))?;
        let addr = node.status().members.get(&owner).cloned().ok_or(RelayError::NotFound)?;
        let body = ResumeRequest { session: session.clone(), stream, from };
        let response = node.client.stream(&addr, RESUME, &body).await.map_err(|e| RelayError::Unreachable(owner, e.to_string()))?;
        match response.status().as_u16() {
            200 => Ok(Box::pin(response.bytes_stream().map_err(std::io::Error::other))),
            404 => Err(RelayError::NotFound),
            status => Err(RelayError::Unreachable(owner, format!("HTTP {status}"))),
        }
    }
}

impl PeerLink {
    /// Fire-and-forget `body` to every other member.
    fn broadcast(&self, path: &'static str, body: Vec<u8>) {
        let Some(node) = self.node.upgrade() else { return };
        let me = node.id;
        for (id, addr) in node.status().members.into_iter().filter(|(id, _)| *id != me) {
            let (client, body) = (node.client.clone(), body.clone());
            tokio::spawn(async move {
                if let Err(e) = client.post_bytes(&addr, path, body).await {
                    tracing::debug!(peer = id, path, error = %e, "not relayed");
                }
            });
        }
    }
}

impl ClusterLink for PeerLink {
    fn cancel_elsewhere(&self, session: &SessionId, request: &RequestId) {
        let body = CancelRequest { session: session.clone(), request: request.clone() };
        self.broadcast(CANCEL, encode(&body));
    }

    fn notify_elsewhere(&self, notice: &Notice) {
        self.broadcast(NOTIFY, encode(notice));
    }

    fn call_state(&self, owner: u64, call: u128, cancel: bool) -> BoxFuture<'static, Result<bool, String>> {
        let node = self.node.upgrade();
        Box::pin(async move {
            let node = node.ok_or("this node is shutting down")?;
            let addr = node.status().members.get(&owner).cloned().ok_or_else(|| format!("node {owner} is not a member"))?;
            let request = CallStateRequest { call, cancel };
            node.client.rpc::<_, bool>(&addr, MRTR_CALL, &request, CALL_STATE_TIMEOUT).await.map_err(|e| e.to_string())
        })
    }

    fn round_outcome(&self, owner: u64, call: u128, round: u32) -> BoxFuture<'static, Result<Option<String>, String>> {
        let node = self.node.upgrade();
        Box::pin(async move {
            let node = node.ok_or("this node is shutting down")?;
            let addr = node.status().members.get(&owner).cloned().ok_or_else(|| format!("node {owner} is not a member"))?;
            let request = RoundOutcomeRequest { call, round };
            // The owner holds the request until the round ends: a little longer than it waits.
            let within = OUTCOME_WINDOW + std::time::Duration::from_secs(5);
            node.client.rpc::<_, Option<String>>(&addr, MRTR_OUTCOME, &request, within).await.map_err(|e| e.to_string())
        })
    }
}

/// The relay routes, answered by this node's MCP endpoint.
pub fn router(endpoint: Arc<Endpoint>) -> Router {
    Router::new()
        .route(RESUME, post(resume))
        .route(CANCEL, post(cancel))
        .route(NOTIFY, post(notify))
        .route(MRTR_CALL, post(call_state))
        .route(MRTR_OUTCOME, post(round_outcome))
        .with_state(endpoint)
}

/// The rest of a stream this node owns, for a replica that a resuming client reached.
async fn resume(State(endpoint): State<Arc<Endpoint>>, bytes: Bytes) -> Response {
    let request: ResumeRequest = match body(&bytes, "resume request") {
        Ok(r) => r,
        Err(r) => return r,
    };
    match endpoint.resume(&request.session, request.stream, request.from) {
        Some(reader) => ([(header::CONTENT_TYPE, "text/event-stream")], axum::body::Body::from_stream(reader)).into_response(),
        None => (StatusCode::NOT_FOUND, "no such stream for this session").into_response(),
    }
}

/// A client's cancellation that reached another replica.
async fn cancel(State(endpoint): State<Arc<Endpoint>>, bytes: Bytes) -> Response {
    let request: CancelRequest = match body(&bytes, "cancel request") {
        Ok(r) => r,
        Err(r) => return r,
    };
    let cancelled = endpoint.server().cancel_local(&request.session, &request.request);
    axum::Json(json!({"cancelled": cancelled})).into_response()
}

/// Whether a 2026-07-28 call runs here, for the replica serving its retry (and its
/// cancellation, when that retry's client left).
async fn call_state(State(endpoint): State<Arc<Endpoint>>, bytes: Bytes) -> Response {
    let request: CallStateRequest = match body(&bytes, "call state request") {
        Ok(r) => r,
        Err(r) => return r,
    };
    msgpack(&endpoint.server().modern_call(request.call, request.cancel))
}

/// The outcome of a round of a 2026-07-28 call this node runs, for the replica serving the
/// retry that answered it: held until the round ends.
async fn round_outcome(State(endpoint): State<Arc<Endpoint>>, bytes: Bytes) -> Response {
    let request: RoundOutcomeRequest = match body(&bytes, "round outcome request") {
        Ok(r) => r,
        Err(r) => return r,
    };
    msgpack(&endpoint.server().round_outcome(request.call, request.round, OUTCOME_WINDOW).await)
}

/// A notification for standalone streams, published on another replica.
async fn notify(State(endpoint): State<Arc<Endpoint>>, bytes: Bytes) -> Response {
    let notice: Notice = match body(&bytes, "notice") {
        Ok(n) => n,
        Err(r) => return r,
    };
    endpoint.server().deliver_notice(notice);
    StatusCode::ACCEPTED.into_response()
}
