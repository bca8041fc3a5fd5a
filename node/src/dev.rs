//! `switchboard dev`: a local three-node durable cluster in one process, behind a round-robin
//! front door with no affinity, so a person can watch requests hop between replicas (every
//! response names the node that served it in `x-switchboard-node`).

use crate::metrics::Metrics;
use crate::raft::{Member, Membership, RaftNodeConfig};
use crate::server::Server;
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
    member: Member,
    mcp: SocketAddr,
    metrics: SocketAddr,
}

/// Builds node `id`'s MCP server over the member's replicated stores.
pub type BuildServer = Arc<dyn Fn(u64, Arc<Metrics>, Arc<IdSealer>, &Member) -> Server + Send + Sync>;

/// Settings of `switchboard dev`.
pub struct DevOptions {
    pub listen: SocketAddr,
    pub nodes: usize,
    /// Where the nodes keep their Raft data (a temporary directory when `None`).
    pub data_dir: Option<PathBuf>,
    pub build: BuildServer,
}

/// Run the dev cluster until `shutdown` resolves.
pub async fn run(options: DevOptions, shutdown: impl Future<Output = ()> + Send + 'static) -> Result<(), crate::cli::CliError> {
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
    let starts = peer_listeners.into_iter().enumerate().map(|(i, listener)| {
        let mut config = RaftNodeConfig::new(i as u64, data_dir.join(format!("node-{i}")), peers[&(i as u64)].clone(), secret.clone());
        config.membership = Membership::Peers(peers.clone());
        config.key_fingerprint = Some(sealer.key_fingerprint());
        let metrics = Arc::new(Metrics::new());
        async move { Member::start(config, listener, metrics.clone()).await.map(|m| (m, metrics)) }
    });
    let mut nodes = Vec::new();
    let mut tasks = Vec::new();
    for (i, started) in futures::future::join_all(starts).await.into_iter().enumerate() {
        let (member, metrics) = started?;
        let server = (options.build)(i as u64, metrics.clone(), sealer.clone(), &member);
        let mcp = TcpListener::bind("127.0.0.1:0").await?;
        let metrics_listener = TcpListener::bind("127.0.0.1:0").await?;
        let (mcp_addr, metrics_addr) = (mcp.local_addr()?, metrics_listener.local_addr()?);
        tasks.push(tokio::spawn(http::serve(mcp, member.mcp_router(server, HttpConfig::default()), std::future::pending())));
        let ready_node = member.node.clone();
        let ready = Arc::new(move || ready_node.leader_id().is_some());
        tasks.push(tokio::spawn(http::serve(metrics_listener, crate::cli::metrics_router(metrics, ready), std::future::pending())));
        nodes.push(DevNode { member, mcp: mcp_addr, metrics: metrics_addr });
    }
    let door = TcpListener::bind(options.listen).await.map_err(|source| crate::cli::CliError::Listen { addr: options.listen, source })?;
    let door_addr = door.local_addr()?;
    println!("Switchboard dev cluster: {} nodes behind a round-robin front door (no affinity)", nodes.len());
    for (i, node) in nodes.iter().enumerate() {
        println!("  node {i}: mcp http://{}/mcp  metrics http://{}/metrics  peer {}", node.mcp, node.metrics, node.member.peer_addr);
    }
    println!("MCP URL: http://{door_addr}/mcp");
    println!("Each response names its node in the x-switchboard-node header. Ctrl-C stops the cluster.");
    let front = FrontDoor::new(nodes.iter().map(|n| n.mcp).collect());
    http::serve(door, front.router(), shutdown).await?;
    for task in tasks {
        task.abort();
    }
    for node in nodes {
        node.member.stop().await;
    }
    tokio::time::sleep(Duration::from_millis(50)).await;
    println!("dev cluster stopped");
    Ok(())
}
