//! The Raft layer: replicas of one node form a group (openraft) that replicates mailbox and
//! session commands, so an answer delivered on any replica wakes the handler parked on the
//! replica that owns the call.
//!
//! - [`state_machine`]: the replicated state and its rules, pure.
//! - [`log_store`] and [`sm_store`]: openraft storage (redb log, snapshot files).
//! - [`network`] and [`peer_api`]: the peer port, client and server side.
//! - [`node`]: one member, and the `Mailbox`/`SessionStore` implementations over it.

mod forwarder;
pub mod log_store;
pub mod network;
pub mod node;
pub mod peer_api;
pub mod sm_store;
pub mod state_machine;
pub mod types;

pub use node::{ClusterStatus, Membership, RaftNode, RaftMailbox, RaftNodeConfig, RaftSessions, RaftStoreError};

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
        let secret = config.secret.clone();
        let node = RaftNode::start(config, metrics.clone()).await?;
        let router = peer_api::router(node.clone(), &secret, metrics);
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
