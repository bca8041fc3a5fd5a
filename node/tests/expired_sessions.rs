//! Sessions that end while a node holds state for them (a standalone GET stream, running
//! requests): expired by TTL or deleted through another replica, their local state and streams
//! are reclaimed by the periodic sweep, on every replica.

mod common;

use common::cluster::{McpServerFor, TestCluster};
use common::{RawClient, read_events};
use serde_json::json;
use std::sync::Arc;
use std::time::Duration;
use switchboard_node::cluster::ClusterStores;
use switchboard_node::raft::RaftNodeConfig;
use switchboard_node::server::ServerConfig;
use switchboard_node::server::correlation::IdSealer;
use switchboard_node::transport::http;
use tokio::time::Instant;

const TTL: Duration = Duration::from_millis(1500);

fn short_ttl(config: &mut RaftNodeConfig) {
    config.session_ttl = TTL;
}

/// The session gauge of `server`, from its metrics text.
fn sessions_local(server: &switchboard_node::Server) -> i64 {
    let text = server.metrics().encode();
    let line = text.lines().find(|l| l.starts_with("switchboard_sessions_local ")).expect("the gauge is exported");
    line.rsplit(' ').next().unwrap().parse().unwrap()
}

/// Three members with MCP endpoints, sweeping every 100 ms, sessions living [`TTL`].
async fn start() -> (TestCluster, Vec<String>, Vec<switchboard_node::Server>) {
    let sealer = Arc::new(IdSealer::random());
    let build: McpServerFor = Arc::new(move |i, stores: ClusterStores| {
        let config = ServerConfig { node_id: i as u64, local_sweep_interval: Duration::from_millis(100), ..Default::default() };
        stores.build(common::builder(config).id_sealer(sealer.clone()))
    });
    let raft = TestCluster::start_tweaked_with_mcp(3, short_ttl, build).await;
    let mut urls = Vec::new();
    for member in raft.members.iter().map(|m| m.as_ref().unwrap()) {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        urls.push(format!("http://{}/mcp", listener.local_addr().unwrap()));
        tokio::spawn(http::serve(listener, member.mcp_router().unwrap(), std::future::pending()));
    }
    let servers: Vec<_> = raft.members.iter().map(|m| m.as_ref().unwrap().server().unwrap().clone()).collect();

    (raft, urls, servers)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn streams_of_sessions_that_expired_are_closed_and_their_state_reclaimed() {
    let (mut raft, urls, servers) = start().await;

    // Sessions made on node 0, each with its standalone stream on node 1 or 2: state there for a
    // session created elsewhere.
    let mut streams = Vec::new();
    for i in 0..6 {
        let mut client = RawClient::new(&urls[0]);
        client.initialize().await;
        let on = RawClient { http: client.http.clone(), url: urls[1 + i % 2].clone(), session: client.session.clone() };
        let mut stream = on.get().send().await.unwrap();
        assert_eq!(stream.status(), 200);
        read_events(&mut stream, 1, &mut String::new()).await;
        streams.push((on, stream));
    }
    assert_eq!(sessions_local(&servers[1]) + sessions_local(&servers[2]), 6);

    // Nobody uses them: they expire by TTL, and every stream ends (the client sees it close).
    let deadline = Instant::now() + TTL + Duration::from_secs(10);
    for (i, (_, stream)) in streams.iter_mut().enumerate() {
        loop {
            let chunk = tokio::time::timeout_at(deadline, stream.chunk()).await.unwrap_or_else(|_| panic!("stream {i} still open"));
            if chunk.unwrap().is_none() {
                break;
            }
        }
    }
    while servers.iter().map(sessions_local).sum::<i64>() > 0 {
        assert!(Instant::now() < deadline, "local session entries left: {:?}", servers.iter().map(sessions_local).collect::<Vec<_>>());
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    // The sessions are gone, not merely detached.
    for (client, _) in &streams {
        let res = client.post(json!({"jsonrpc": "2.0", "id": 1, "method": "ping"}).to_string()).send().await.unwrap();
        assert_eq!(res.status(), 404);
    }
    raft.stop_all().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stream_on_another_replica_ends_when_its_session_is_deleted() {
    let (mut raft, urls, servers) = start().await;
    let mut client = RawClient::new(&urls[0]);
    client.initialize().await;
    let on = |i: usize| RawClient { http: client.http.clone(), url: urls[i].clone(), session: client.session.clone() };
    let mut stream = on(1).get().send().await.unwrap();
    read_events(&mut stream, 1, &mut String::new()).await;
    let res = client.http.delete(&urls[0]).header("mcp-session-id", client.session.clone().unwrap()).send().await.unwrap();
    assert!(res.status().is_success());
    // Well before the TTL: the delete, not expiry, ends it.
    let ended = tokio::time::timeout(TTL / 2, async { while stream.chunk().await.unwrap().is_some() {} }).await;
    assert!(ended.is_ok(), "node 1's stream outlived the session's deletion on node 0");
    assert_eq!(sessions_local(&servers[1]), 0);
    raft.stop_all().await;
}
