//! One switchboard node as `switchboard serve` and `switchboard dev` run it: an MCP endpoint
//! over a Raft member's replicated stores, or over this process's memory.

use super::Member;
use crate::mailbox::InMemoryMailbox;
use crate::mailbox::NodeId;
use crate::metrics::{self, Metrics};
use crate::raft::{RaftNodeConfig, RaftStoreError};
use crate::server::Server;
use crate::server::ServerBuilder;
use crate::session::InMemorySessionStore;
use crate::transport::http::{Endpoint, HttpConfig};
use axum::Router;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;
use tokio::net::TcpListener;

/// Where a node keeps its mailboxes and sessions.
#[allow(clippy::large_enum_variant, reason = "built once per process")]
pub enum Store {
    /// This process's memory: no clustering, nothing survives a restart.
    Memory { session_ttl: Duration },
    /// A Raft member serving its peer port on `peer_listener`.
    Raft { config: RaftNodeConfig, peer_listener: TcpListener },
}

/// Why a node could not be assembled.
#[derive(Debug, thiserror::Error)]
pub enum NodeError {
    #[error(transparent)]
    Raft(#[from] RaftStoreError),
    #[error("could not listen on {addr}: {source}")]
    Listen {
        addr: std::net::SocketAddr,
        #[source]
        source: std::io::Error,
    },
    #[error(transparent)]
    Io(#[from] std::io::Error),
}

/// A running node: its MCP endpoint and, when clustered, its Raft member.
pub struct Node {
    pub member: Option<Member>,
    server: Server,
    mcp: Router,
    metrics: Arc<Metrics>,
    /// Set by [`Node::drain`]: readiness fails from then on.
    draining: Arc<AtomicBool>,
}

/// What [`Node::drain`] did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Drained {
    /// The voter this node handed Raft leadership to, when it led.
    pub handed_to: Option<NodeId>,
    /// Calls still running when the grace period ended, ended with an error.
    pub cut_short: usize,
}

impl Node {
    /// Build the server `builder` describes over `store` and start it (a Raft member bootstraps
    /// or joins its cluster before this returns).
    pub async fn assemble(builder: ServerBuilder, store: Store, http: HttpConfig, metrics: Arc<Metrics>) -> Result<Node, NodeError> {
        let builder = builder.metrics(metrics.clone());
        match store {
            Store::Memory { session_ttl } => {
                let server = builder.build(Arc::new(InMemoryMailbox::new()), Arc::new(InMemorySessionStore::new(session_ttl)));
                let mcp = Endpoint::new(server.clone(), http).router(None);
                Ok(Node { member: None, server, mcp, metrics, draining: Default::default() })
            }
            Store::Raft { config, peer_listener } => {
                let member = Member::start_with_mcp(config, peer_listener, metrics.clone(), http, |stores| stores.build(builder)).await?;
                let mcp = member.mcp_router().expect("started with an MCP endpoint");
                let server = member.server().expect("started with an MCP endpoint").clone();
                Ok(Node { member: Some(member), server, mcp, metrics, draining: Default::default() })
            }
        }
    }

    /// The MCP endpoint (`/mcp`).
    pub fn mcp_router(&self) -> Router {
        self.mcp.clone()
    }

    /// `/metrics`, `/healthz` and `/readyz` (a Raft member is ready while it hears from a
    /// quorum: see `RaftNode::readiness`; a node over memory always is).
    pub fn metrics_router(&self) -> Router {
        let node = self.member.as_ref().map(|m| m.node.clone());
        let draining = self.draining.clone();
        metrics::router(
            self.metrics.clone(),
            Arc::new(move || {
                let node = node.clone();
                let draining = draining.load(Ordering::Acquire);
                Box::pin(async move {
                    if draining {
                        return Err("draining: this replica is shutting down".to_string());
                    }
                    match node {
                        Some(node) => node.readiness().await.map_err(|e| e.to_string()),
                        None => Ok(()),
                    }
                })
            }),
        )
    }

    /// Leave gracefully before [`stop`](Self::stop) (SIGTERM, a rolling update, a drain):
    ///
    /// 1. turn not-ready, so the Service stops sending new calls here (those that still come
    ///    are served);
    /// 2. as leader, hand leadership to the healthiest voter, so no election is needed;
    /// 3. let the running calls finish within `grace`, then end those still parked with a
    ///    clear error ([`Server::drain`]);
    /// 4. hand leadership over again if this node was elected meanwhile.
    pub async fn drain(&self, grace: Duration) -> Drained {
        self.draining.store(true, Ordering::Release);
        tracing::info!(grace_ms = grace.as_millis() as u64, running = self.server.running_requests(), "draining before stopping");
        let mut handed_to = self.hand_off_leadership().await;
        let cut_short = self.server.drain(grace).await;
        handed_to = self.hand_off_leadership().await.or(handed_to);
        tracing::info!(?handed_to, cut_short, "drained");
        Drained { handed_to, cut_short }
    }

    /// As leader, hand leadership to a healthy voter; the one it went to.
    async fn hand_off_leadership(&self) -> Option<NodeId> {
        let node = &self.member.as_ref()?.node;
        let successor = node.successor()?;
        match node.transfer_leadership(successor).await {
            Ok(()) => Some(successor),
            Err(e) => {
                tracing::warn!(successor, error = %e, "leadership hand-off failed; the others will elect a leader after the election timeout");
                None
            }
        }
    }

    /// Stop the Raft member, if any (its data directory stays).
    pub async fn stop(self) {
        if let Some(member) = self.member {
            member.stop().await;
        }
    }
}
