//! One switchboard node as `switchboard serve` and `switchboard dev` run it: an MCP endpoint
//! over a Raft member's replicated stores, or over this process's memory.

use super::Member;
use crate::mailbox::InMemoryMailbox;
use crate::metrics::{self, Metrics};
use crate::raft::{RaftNodeConfig, RaftStoreError};
use crate::server::ServerBuilder;
use crate::session::InMemorySessionStore;
use crate::transport::http::{Endpoint, HttpConfig};
use axum::Router;
use std::sync::Arc;
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
    mcp: Router,
    metrics: Arc<Metrics>,
}

impl Node {
    /// Build the server `builder` describes over `store` and start it (a Raft member bootstraps
    /// or joins its cluster before this returns).
    pub async fn assemble(builder: ServerBuilder, store: Store, http: HttpConfig, metrics: Arc<Metrics>) -> Result<Node, NodeError> {
        let builder = builder.metrics(metrics.clone());
        match store {
            Store::Memory { session_ttl } => {
                let server = builder.build(Arc::new(InMemoryMailbox::new()), Arc::new(InMemorySessionStore::new(session_ttl)));
                Ok(Node { member: None, mcp: Endpoint::new(server, http).router(None), metrics })
            }
            Store::Raft { config, peer_listener } => {
                let member = Member::start_with_mcp(config, peer_listener, metrics.clone(), http, |stores| stores.build(builder)).await?;
                let mcp = member.mcp_router().expect("started with an MCP endpoint");
                Ok(Node { member: Some(member), mcp, metrics })
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
        metrics::router(
            self.metrics.clone(),
            Arc::new(move || {
                let node = node.clone();
                Box::pin(async move {
                    match node {
                        Some(node) => node.readiness().await.map_err(|e| e.to_string()),
                        None => Ok(()),
                    }
                })
            }),
        )
    }

    /// Stop the Raft member, if any (its data directory stays).
    pub async fn stop(self) {
        if let Some(member) = self.member {
            member.stop().await;
        }
    }
}
