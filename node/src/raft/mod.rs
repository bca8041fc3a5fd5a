//! The Raft layer: replicas of one node form a group (openraft) that replicates mailbox and
//! session commands, so an answer delivered on any replica wakes the handler parked on the
//! replica that owns the call.
//!
//! - [`state_machine`]: the replicated state and its rules, pure.
//! - [`log_store`] and [`sm_store`]: openraft storage (redb log, snapshot files).
//! - [`network`] and [`peer_api`]: the peer port, client and server side; [`peer_stream`]:
//!   long-lived framed connections on it, for [`append_stream`] (pipelined replication) and
//!   `forwarder` (followers' writes to the leader).
//! - [`node`]: one member, and the `Mailbox`/`SessionStore` implementations over it.

pub mod append_stream;
pub mod forwarder;
pub mod log_store;
pub mod network;
pub mod node;
pub mod peer_api;
pub mod peer_stream;
pub mod relay;
pub mod sm_store;
pub mod state_machine;
pub mod types;

pub use node::{ClusterStatus, Membership, RaftMailbox, RaftNode, RaftNodeConfig, RaftSessions, RaftStoreError};

use crate::metrics::Metrics;
use std::sync::Arc;

/// A running member: its Raft node and its peer server.
pub struct Member {
    pub node: Arc<RaftNode>,
    pub peer_addr: std::net::SocketAddr,
    server: tokio::task::JoinHandle<()>,
    stop_serving: tokio::sync::oneshot::Sender<()>,
}

impl Member {
    /// Serve the peer port on `listener`, start Raft, then bootstrap or join.
    pub async fn start(config: RaftNodeConfig, listener: tokio::net::TcpListener, metrics: Arc<Metrics>) -> Result<Self, RaftStoreError> {
        let peer_addr = listener.local_addr()?;
        let (secret, key_fingerprint) = (config.secret.clone(), config.key_fingerprint.clone());
        let node = RaftNode::start(config, metrics.clone()).await?;
        let router = peer_api::router(node.clone(), &secret, key_fingerprint, metrics);
        let (stop_serving, stopped) = tokio::sync::oneshot::channel::<()>();
        let server = tokio::spawn(async move {
            let shutdown = async move {
                let _ = stopped.await;
            };
            if let Err(e) = crate::transport::http::serve(listener, router, shutdown).await {
                tracing::error!(error = %e, "peer server stopped");
            }
        });
        node.join_cluster().await?;
        Ok(Member { node, peer_addr, server, stop_serving })
    }

    /// How this member reaches the others for the MCP layer (relayed streams, cancellation).
    pub fn link(&self) -> Arc<relay::PeerLink> {
        relay::PeerLink::new(&self.node)
    }

    /// The MCP endpoint of this member. Attaches `server` so other replicas can relay its
    /// streams and cancellations to it.
    pub fn mcp_router(&self, server: crate::server::Server, config: crate::transport::http::HttpConfig) -> axum::Router {
        use crate::transport::http;
        let streams = http::registry_for(&server, &config);
        let _ = self.node.mcp.set(relay::McpHooks { server: server.clone(), streams: streams.clone() });
        http::clustered_router(server, config, streams, Some(self.link()))
    }

    pub fn mailbox(&self) -> RaftMailbox {
        RaftMailbox(self.node.clone())
    }

    pub fn sessions(&self) -> RaftSessions {
        RaftSessions(self.node.clone())
    }

    /// Stop serving and stop Raft (the data directory stays, for a restart).
    pub async fn stop(self) {
        // Graceful: idle keep-alive connections close too, so peers reconnect to a restarted node.
        let _ = self.stop_serving.send(());
        self.node.shutdown().await;
        let mut server = self.server;
        if tokio::time::timeout(std::time::Duration::from_secs(2), &mut server).await.is_err() {
            server.abort();
        }
    }
}
