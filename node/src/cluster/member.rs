//! Assembling one Raft member: start Raft, build the MCP server over the replicated stores
//! (when there is one), merge every peer route behind authentication, serve, then bootstrap or
//! join. Nothing is attached later.

use super::{admin, relay};
use crate::mailbox::Mailbox;
use crate::mcp_tasks::TaskStore;
use crate::metrics::Metrics;
use crate::peer;
use crate::raft::{RaftMailbox, RaftNode, RaftNodeConfig, RaftSessions, RaftStoreError, RaftTasks};
use crate::server::ServerBuilder;
use crate::server::{ClusterLink, Server};
use crate::session::SessionStore;
use crate::transport::http::{Endpoint, HttpConfig, serve_limited};
use relay::PeerLink;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;
use tokio::net::TcpListener;
use tokio::sync::oneshot;
use tokio::task::JoinHandle;

/// What a member's MCP server is built over: the replicated stores, and the link through
/// which it reaches the other replicas.
pub struct ClusterStores {
    pub mailbox: Arc<dyn Mailbox>,
    pub sessions: Arc<dyn SessionStore>,
    pub tasks: Arc<dyn TaskStore>,
    pub link: Arc<dyn ClusterLink>,
}

impl ClusterStores {
    /// The server `builder` makes, over these stores and reaching the other replicas.
    pub fn build(self, builder: ServerBuilder) -> Server {
        builder.cluster(self.link).task_store(self.tasks).build(self.mailbox, self.sessions)
    }
}

/// A running member: its Raft node, its peer server and, when it has one, its MCP endpoint.
pub struct Member {
    pub node: Arc<RaftNode>,
    pub peer_addr: SocketAddr,
    mailbox: RaftMailbox,
    sessions: RaftSessions,
    endpoint: Option<Arc<Endpoint>>,
    peer_server: JoinHandle<()>,
    stop_serving: oneshot::Sender<()>,
}

impl Member {
    /// A member without an MCP endpoint: the replicated store alone (tests and benches of the
    /// mailbox and the Raft layer).
    pub async fn start(config: RaftNodeConfig, listener: TcpListener, metrics: Arc<Metrics>) -> Result<Self, RaftStoreError> {
        Self::assemble(config, listener, metrics, None::<(HttpConfig, fn(ClusterStores) -> Server)>).await
    }

    /// A member serving MCP: `build` makes the server over the replicated stores; the peer
    /// port relays resumption, cancellation and notifications to it.
    pub async fn start_with_mcp(
        config: RaftNodeConfig,
        listener: TcpListener,
        metrics: Arc<Metrics>,
        http: HttpConfig,
        build: impl FnOnce(ClusterStores) -> Server,
    ) -> Result<Self, RaftStoreError> {
        Self::assemble(config, listener, metrics, Some((http, build))).await
    }

    async fn assemble<B: FnOnce(ClusterStores) -> Server>(
        config: RaftNodeConfig,
        listener: TcpListener,
        metrics: Arc<Metrics>,
        mcp: Option<(HttpConfig, B)>,
    ) -> Result<Self, RaftStoreError> {
        let peer_addr = listener.local_addr()?;
        let secrets: Vec<String> = std::iter::once(config.secret.clone()).chain(config.previous_secret.clone()).collect();
        let fingerprints: Vec<String> = config.key_fingerprint.iter().chain(&config.previous_key_fingerprint).cloned().collect();
        // The peer port answers before authentication: it is bounded like the MCP port.
        let limits = mcp.as_ref().map(|(http, _)| http.connections.clone()).unwrap_or_default();
        let node = RaftNode::start(config, metrics.clone()).await?;
        let (mailbox, sessions) = (RaftMailbox::new(node.clone()), RaftSessions::new(node.clone()));
        let tasks = RaftTasks::new(node.clone());
        tasks.fail_earlier_runs();
        node.watch_task_owners(node.config().task_owner_timeout);
        let mut routes = crate::raft::rpc::router(node.clone()).merge(admin::router(node.clone()));
        let endpoint = mcp.map(|(http, build)| {
            let stores = ClusterStores {
                mailbox: Arc::new(mailbox.clone()),
                sessions: Arc::new(sessions.clone()),
                tasks: Arc::new(tasks.clone()),
                link: PeerLink::new(&node),
            };
            Endpoint::new(build(stores), http)
        });
        if let Some(endpoint) = &endpoint {
            routes = routes.merge(relay::router(endpoint.clone()));
        }
        let router = peer::authenticated(routes, peer::Credentials::new(secrets, fingerprints, metrics.clone()));
        let (stop_serving, stopped) = oneshot::channel::<()>();
        let peer_server = tokio::spawn(async move {
            let shutdown = async move {
                let _ = stopped.await;
            };
            if let Err(e) = serve_limited(listener, router, shutdown, "peer", limits, metrics).await {
                tracing::error!(error = %e, "peer server stopped");
            }
        });
        node.join_cluster().await?;
        Ok(Member { node, peer_addr, mailbox, sessions, endpoint, peer_server, stop_serving })
    }

    /// The MCP endpoint's router (`None` for a member started without one). Streams another
    /// replica owns resume through the peer port.
    pub fn mcp_router(&self) -> Option<axum::Router> {
        let endpoint = self.endpoint.as_ref()?;
        Some(endpoint.router(Some(PeerLink::new(&self.node))))
    }

    /// The MCP server of this member, when it has one.
    pub fn server(&self) -> Option<&Server> {
        self.endpoint.as_deref().map(Endpoint::server)
    }

    pub fn mailbox(&self) -> RaftMailbox {
        self.mailbox.clone()
    }

    pub fn sessions(&self) -> RaftSessions {
        self.sessions.clone()
    }

    /// Ready for traffic: this member hears from a quorum (see `RaftNode::readiness`).
    pub async fn is_ready(&self) -> bool {
        self.node.is_ready().await
    }

    /// Stop serving and stop Raft (the data directory stays, for a restart).
    pub async fn stop(self) {
        // Graceful: idle keep-alive connections close too, so peers reconnect to a restarted node.
        let _ = self.stop_serving.send(());
        self.node.shutdown().await;
        let mut server = self.peer_server;
        if tokio::time::timeout(Duration::from_secs(2), &mut server).await.is_err() {
            server.abort();
        }
    }
}
