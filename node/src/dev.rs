//! `switchboard dev`: a local three-node durable cluster in one process, behind a round-robin
//! front door with no affinity, so a person can watch requests hop between replicas (every
//! response names the node that served it in `x-switchboard-node`).

use crate::cluster::{Node, NodeError, Store};
use crate::metrics::Metrics;
use crate::raft::{Membership, RaftNodeConfig};
use crate::server::ServerBuilder;
use crate::server::correlation::IdSealer;
use crate::transport::http::{self, HttpConfig};
use axum::body::Body;
use axum::extract::{Request, State};
use axum::http::{HeaderName, StatusCode};
use axum::response::{IntoResponse, Response};
use futures::TryStreamExt;
use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;
use tokio::net::TcpListener;

/// Headers that describe one hop, not the message (RFC 9110 §7.6.1).
const HOP_BY_HOP: [&str; 7] = ["connection", "keep-alive", "proxy-connection", "te", "trailer", "transfer-encoding", "upgrade"];

/// A round-robin HTTP reverse proxy: each request goes to the next backend, bodies stream
/// through (SSE included).
#[derive(Clone)]
pub struct FrontDoor {
    backends: Arc<Vec<SocketAddr>>,
    next: Arc<AtomicUsize>,
    http: reqwest::Client,
}

impl FrontDoor {
    pub fn new(backends: Vec<SocketAddr>) -> Self {
        let http = reqwest::Client::builder().tcp_nodelay(true).build().expect("HTTP client builds");
        FrontDoor { backends: Arc::new(backends), next: Arc::default(), http }
    }

    pub fn router(self) -> axum::Router {
        axum::Router::new().fallback(forward).with_state(self)
    }
}

async fn forward(State(door): State<FrontDoor>, request: Request) -> Response {
    let backend = door.backends[door.next.fetch_add(1, Ordering::Relaxed) % door.backends.len()];
    let (parts, body) = request.into_parts();
    let path = parts.uri.path_and_query().map(|p| p.as_str()).unwrap_or("/");
    let mut upstream = door.http.request(parts.method, format!("http://{backend}{path}"));
    for (name, value) in parts.headers.iter().filter(|(n, _)| !HOP_BY_HOP.contains(&n.as_str())) {
        upstream = upstream.header(name, value);
    }
    let upstream = upstream.body(reqwest::Body::wrap_stream(body.into_data_stream()));
    match upstream.send().await {
        Ok(reply) => {
            let mut response = Response::builder().status(reply.status());
            for (name, value) in reply.headers().iter().filter(|(n, _)| !HOP_BY_HOP.contains(&n.as_str())) {
                response = response.header(name, value);
            }
            response
                .body(Body::from_stream(reply.bytes_stream().map_err(std::io::Error::other)))
                .unwrap_or_else(|e| (StatusCode::BAD_GATEWAY, e.to_string()).into_response())
        }
        Err(e) => (StatusCode::BAD_GATEWAY, [(HeaderName::from_static("x-switchboard-front-door"), "upstream failed")], e.to_string())
            .into_response(),
    }
}

/// One replica of the dev cluster.
struct DevNode {
    node: Node,
    peer: SocketAddr,
    mcp: SocketAddr,
    metrics: SocketAddr,
}

/// The server node `id` runs, sealing ids with the cluster's shared key.
pub type ServerFor = Arc<dyn Fn(u64, Arc<IdSealer>) -> ServerBuilder + Send + Sync>;

/// Settings of `switchboard dev`.
pub struct DevOptions {
    pub listen: SocketAddr,
    pub nodes: usize,
    /// Where the nodes keep their Raft data (a temporary directory when `None`).
    pub data_dir: Option<PathBuf>,
    pub server: ServerFor,
}

/// Run the dev cluster until `shutdown` resolves.
pub async fn run(options: DevOptions, shutdown: impl Future<Output = ()> + Send + 'static) -> Result<(), NodeError> {
    let temp = tempfile::tempdir()?;
    let data_dir = options.data_dir.clone().unwrap_or_else(|| temp.path().to_path_buf());
    let secret = format!("{:032x}", rand::random::<u128>());
    let sealer = Arc::new(IdSealer::random());
    let mut peer_listeners = Vec::new();
    for _ in 0..options.nodes {
        peer_listeners.push(TcpListener::bind("127.0.0.1:0").await?);
    }
    let peers: BTreeMap<u64, String> =
        peer_listeners.iter().enumerate().map(|(i, l)| (i as u64, l.local_addr().expect("bound").to_string())).collect();
    let starts = peer_listeners.into_iter().enumerate().map(|(i, peer_listener)| {
        let id = i as u64;
        let mut config = RaftNodeConfig::new(id, data_dir.join(format!("node-{i}")), peers[&id].clone(), secret.clone());
        config.membership = Membership::Peers(peers.clone());
        config.key_fingerprint = Some(sealer.key_fingerprint());
        let peer = peer_listener.local_addr();
        let builder = (options.server)(id, sealer.clone());
        async move {
            let node =
                Node::assemble(builder, Store::Raft { config, peer_listener }, HttpConfig::default(), Arc::new(Metrics::new())).await?;
            Ok::<_, NodeError>((node, peer?))
        }
    });
    let mut nodes = Vec::new();
    let mut tasks = Vec::new();
    for started in futures::future::join_all(starts).await {
        let (node, peer) = started?;
        let mcp = TcpListener::bind("127.0.0.1:0").await?;
        let metrics_listener = TcpListener::bind("127.0.0.1:0").await?;
        let (mcp_addr, metrics_addr) = (mcp.local_addr()?, metrics_listener.local_addr()?);
        tasks.push(tokio::spawn(http::serve(mcp, node.mcp_router(), std::future::pending())));
        tasks.push(tokio::spawn(http::serve(metrics_listener, node.metrics_router(), std::future::pending())));
        nodes.push(DevNode { node, peer, mcp: mcp_addr, metrics: metrics_addr });
    }
    let door = TcpListener::bind(options.listen).await.map_err(|source| NodeError::Listen { addr: options.listen, source })?;
    let door_addr = door.local_addr()?;
    println!("Switchboard dev cluster: {} nodes behind a round-robin front door (no affinity)", nodes.len());
    for (i, node) in nodes.iter().enumerate() {
        println!("  node {i}: mcp http://{}/mcp  metrics http://{}/metrics  peer {}", node.mcp, node.metrics, node.peer);
    }
    println!("MCP URL: http://{door_addr}/mcp");
    println!("Each response names its node in the x-switchboard-node header. Ctrl-C stops the cluster.");
    let front = FrontDoor::new(nodes.iter().map(|n| n.mcp).collect());
    http::serve(door, front.router(), shutdown).await?;
    for task in tasks {
        task.abort();
    }
    for dev in nodes {
        dev.node.stop().await;
    }
    tokio::time::sleep(Duration::from_millis(50)).await;
    println!("dev cluster stopped");
    Ok(())
}
