//! What the MCP layer asks of the other replicas, over the peer port: the rest of an SSE stream
//! another node owns (for `Last-Event-ID` resumption), and cancellation of a request another
//! node runs.
//!
//! Streams are relayed, not replicated: a stream's events exist only on the node whose handler
//! produced them, so resumption fetches them from there. Replicating every event through Raft
//! would put each progress notification on the write path of the whole cluster.

use super::network::{CANCEL, NOTIFY, RESUME};
use super::node::RaftNode;
use crate::protocol::jsonrpc::RequestId;
use crate::server::{ClusterLink, Notice, Server};
use crate::session::SessionId;
use crate::transport::sse::{RelayError, RelayedStream, StreamRegistry, StreamRelay};
use futures::TryStreamExt;
use serde::{Deserialize, Serialize};
use std::sync::{Arc, Weak};

/// The MCP side of a member, attached once the server exists (the peer port starts first).
pub struct McpHooks {
    pub server: Server,
    pub streams: Arc<StreamRegistry>,
}

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
        self.broadcast(CANCEL, crate::raft::types::encode(&body));
    }

    fn notify_elsewhere(&self, notice: &Notice) {
        self.broadcast(NOTIFY, crate::raft::types::encode(notice));
    }
}
