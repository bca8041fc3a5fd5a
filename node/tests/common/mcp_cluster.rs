//! MCP servers on the members of an in-process Raft cluster, over real HTTP.

use super::cluster::{McpServerFor, TestCluster};
use std::net::SocketAddr;
use std::sync::Arc;
use switchboard_node::cluster::ClusterStores;
use switchboard_node::server::ServerConfig;
use switchboard_node::server::correlation::IdSealer;
use switchboard_node::transport::http;

/// An MCP server on every member of an in-process Raft cluster, each on its own port.
pub struct McpCluster {
    pub raft: TestCluster,
    pub urls: Vec<String>,
    pub servers: Vec<switchboard_node::Server>,
}

impl McpCluster {
    pub async fn start() -> McpCluster {
        Self::start_with(|_| {}).await
    }

    pub async fn start_with(tweak: fn(&mut switchboard_node::raft::RaftNodeConfig)) -> McpCluster {
        let sealer = Arc::new(IdSealer::random());
        let build: McpServerFor = Arc::new(move |i, stores: ClusterStores| {
            stores.build(super::builder(ServerConfig { node_id: i as u64, ..Default::default() }).id_sealer(sealer.clone()))
        });
        let raft = TestCluster::start_tweaked_with_mcp(3, tweak, build).await;
        let (mut urls, mut servers) = (Vec::new(), Vec::new());
        for member in raft.members.iter().map(|m| m.as_ref().unwrap()) {
            let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
            let addr: SocketAddr = listener.local_addr().unwrap();
            tokio::spawn(http::serve(listener, member.mcp_router().unwrap(), std::future::pending()));
            urls.push(format!("http://{addr}/mcp"));
            servers.push(member.server().unwrap().clone());
        }
        McpCluster { raft, urls, servers }
    }
}
