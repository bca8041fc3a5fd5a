//! What a client can make the cluster hold is bounded: session records, subscriptions, sessions.
//! MCP servers on Raft members over real HTTP; what the replicas hold is read from their state
//! machines and from the admin API on the peer port.

mod common;

use common::cluster::{McpServerFor, SECRET, TestCluster};
use common::{RawClient, data, park_confirm, read_events};
use serde_json::{Value, json};
use std::net::SocketAddr;
use std::sync::Arc;
use switchboard_node::cluster::ClusterStores;
use switchboard_node::peer::{PeerClient, routes};
use switchboard_node::protocol::jsonrpc::{INVALID_PARAMS, LIMIT_REACHED};
use switchboard_node::protocol::types::{CapabilityFlags, MAX_CLIENT_INFO_FIELD_BYTES};
use switchboard_node::raft::ClusterStatus;
use switchboard_node::raft::state_machine::{MailboxState, snapshot};
use switchboard_node::server::ServerConfig;
use switchboard_node::server::correlation::IdSealer;
use switchboard_node::session::SessionId;
use switchboard_node::transport::http::{self, HttpConfig};

struct McpCluster {
    raft: TestCluster,
    urls: Vec<String>,
}

/// `n` members serving MCP with `config`, each on its own loopback port.
async fn start(n: usize, config: ServerConfig) -> McpCluster {
    let sealer = Arc::new(IdSealer::random());
    let build: McpServerFor = Arc::new(move |i, stores: ClusterStores| {
        stores.build(common::builder(ServerConfig { node_id: i as u64, ..config.clone() }).id_sealer(sealer.clone()))
    });
    let raft = TestCluster::start_with_mcp(n, build).await;
    let mut urls = Vec::new();
    for member in raft.members.iter().map(|m| m.as_ref().unwrap()) {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr: SocketAddr = listener.local_addr().unwrap();
        tokio::spawn(http::serve(listener, member.mcp_router().unwrap(), std::future::pending()));
        urls.push(format!("http://{addr}/mcp"));
    }
    McpCluster { raft, urls }
}

impl McpCluster {
    /// Member `i`'s cluster status, asked over its peer port (the admin API).
    async fn status(&self, i: usize) -> ClusterStatus {
        let peer = self.raft.members[i].as_ref().unwrap().peer_addr.to_string();
        PeerClient::new(SECRET.into(), None, None).admin::<ClusterStatus>(&peer, routes::STATUS, None).await.unwrap()
    }

    /// The MCP server of member `i`.
    fn server(&self, i: usize) -> &switchboard_node::Server {
        self.raft.members[i].as_ref().unwrap().server().unwrap()
    }

    /// The encoded size of member `i`'s replicated state (what a snapshot of it holds).
    fn state_bytes(&self, i: usize) -> usize {
        self.raft.node(i).sm.read(|sm| snapshot::encode(sm).len())
    }
}

fn initialize_body(capabilities: Value, client_info: Value) -> String {
    json!({"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": {
        "protocolVersion": "2025-11-25", "capabilities": capabilities, "clientInfo": client_info}})
    .to_string()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_initialize_over_the_record_limit_is_refused_and_stores_nothing() {
    let mut cluster = start(3, ServerConfig::default()).await;
    let mut first = RawClient::new(&cluster.urls[0]);
    first.initialize().await;
    let before = cluster.status(0).await;
    assert_eq!(before.sessions, 1);
    // ~4 MB of params (under the 4 MiB body limit): refused as params, not as a body.
    let huge = initialize_body(json!({"experimental": {"blob": "x".repeat(3_900_000)}}), json!({"name": "big", "version": "1"}));
    let res = RawClient::new(&cluster.urls[1]).post(huge).send().await.unwrap();
    assert_eq!(res.status(), 200);
    assert!(res.headers().get("mcp-session-id").is_none(), "no session was made");
    let body: Value = res.json().await.unwrap();
    assert_eq!(body["id"], 0);
    assert_eq!(body["error"]["code"], INVALID_PARAMS);
    assert!(body["error"]["message"].as_str().unwrap().contains("--max-session-record-bytes"), "{body}");
    assert_eq!(body["error"]["data"], json!({"limit": "session_record_bytes", "max": 65536}));
    for i in 0..3 {
        cluster.raft.node(i).linearize().await.unwrap();
        let status = cluster.status(i).await;
        assert_eq!(status.sessions, 1, "node {i} holds no new session");
        assert_eq!(status.last_log_index, before.last_log_index, "node {i}: nothing was written");
    }
    assert_eq!(cluster.server(1).metrics().limit_refused_count("session_record_bytes"), 1);
    // Just over the limit is refused too; under it is a session.
    let over = initialize_body(json!({"experimental": {"blob": "x".repeat(64 * 1024)}}), json!({"name": "c", "version": "1"}));
    let res = RawClient::new(&cluster.urls[2]).post(over).send().await.unwrap();
    assert_eq!(res.json::<Value>().await.unwrap()["error"]["code"], INVALID_PARAMS);
    let under = initialize_body(json!({"experimental": {"blob": "x".repeat(60 * 1024)}}), json!({"name": "c", "version": "1"}));
    let res = RawClient::new(&cluster.urls[2]).post(under).send().await.unwrap();
    assert!(res.headers().get("mcp-session-id").is_some());
    assert_eq!(cluster.status(2).await.sessions, 2);
    cluster.raft.stop_all().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_session_record_keeps_the_capability_flags_not_the_declaration() {
    // A limit above the declaration below, so that what is stored is what is measured.
    let mut cluster = start(3, ServerConfig { max_session_record_bytes: 2 << 20, ..Default::default() }).await;
    let before: Vec<usize> = (0..3).map(|i| cluster.state_bytes(i)).collect();
    let client = RawClient::new(&cluster.urls[1]);
    // A 1 MB capabilities object and a 10 KB client name: accepted, and kept as flags.
    let capabilities = json!({"elicitation": {}, "roots": {"listChanged": true}, "experimental": {"blob": "x".repeat(1_000_000)}});
    let client_info = json!({"name": "n".repeat(10_000), "version": "1", "title": "é".repeat(1_000), "description": "d".repeat(10_000)});
    let res = client.post(initialize_body(capabilities, client_info)).send().await.unwrap();
    assert_eq!(res.status(), 200);
    let id = SessionId(res.headers()["mcp-session-id"].to_str().unwrap().into());
    assert!(res.json::<Value>().await.unwrap()["result"].is_object());
    for (i, before) in before.into_iter().enumerate() {
        cluster.raft.node(i).linearize().await.unwrap();
        let record = cluster.raft.node(i).sm.read(|sm| sm.session(&id).map(|s| s.record.clone())).expect("replicated");
        assert_eq!(
            record.capabilities,
            CapabilityFlags { elicitation_form: true, roots: true, roots_list_changed: true, ..Default::default() }
        );
        assert_eq!(record.client_info.name.len(), MAX_CLIENT_INFO_FIELD_BYTES);
        assert!(record.client_info.title.as_ref().unwrap().len() <= MAX_CLIENT_INFO_FIELD_BYTES);
        let grown = cluster.state_bytes(i) - before;
        assert!(grown < 2_000, "node {i}: one session grew the replicated state by {grown} bytes");
    }
    assert_eq!(cluster.status(0).await.sessions, 1);
    cluster.raft.stop_all().await;
}

/// The same session, talking to node `i`.
fn on(client: &RawClient, cluster: &McpCluster, i: usize) -> RawClient {
    RawClient { http: client.http.clone(), url: cluster.urls[i].clone(), session: client.session.clone() }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn subscriptions_need_an_offered_uri_and_stop_at_the_limit() {
    let mut cluster = start(3, ServerConfig::default()).await;
    let mut client = RawClient::new(&cluster.urls[0]);
    client.initialize().await;
    let id = SessionId(client.session.clone().unwrap().into());
    let subscriptions =
        |cluster: &McpCluster, i: usize| cluster.raft.node(i).sm.read(|sm| sm.session(&id).unwrap().record.subscriptions.len());
    // A URI no resource or template offers: refused, nothing stored.
    let reply = client.call(1, "resources/subscribe", json!({"uri": "test://no-such-resource"})).await;
    assert_eq!(reply["error"]["code"], INVALID_PARAMS, "{reply}");
    assert_eq!(subscriptions(&cluster, 0), 0);
    // 100 subscriptions, spread over the replicas, to a resource and the template's URIs.
    let reply = client.call(2, "resources/subscribe", json!({"uri": "test://watched-resource"})).await;
    assert_eq!(reply["result"], json!({}), "{reply}");
    for n in 1..100 {
        let uri = format!("test://template/{n}/data");
        let reply = on(&client, &cluster, n % 3).call(10 + n as i64, "resources/subscribe", json!({"uri": uri})).await;
        assert_eq!(reply["result"], json!({}), "subscription {n}: {reply}");
    }
    // The 101st is refused wherever it is sent; re-subscribing to a held URI is not a new one.
    for i in 0..3 {
        let reply = on(&client, &cluster, i).call(200, "resources/subscribe", json!({"uri": "test://template/101/data"})).await;
        assert_eq!(reply["error"]["code"], LIMIT_REACHED, "node {i}: {reply}");
        assert_eq!(reply["error"]["data"], json!({"limit": "subscriptions_per_session", "max": 100}));
        assert!(reply["error"]["message"].as_str().unwrap().contains("--max-subscriptions-per-session"));
        cluster.raft.node(i).linearize().await.unwrap();
        assert_eq!(subscriptions(&cluster, i), 100, "node {i}");
    }
    let reply = client.call(201, "resources/subscribe", json!({"uri": "test://template/7/data"})).await;
    assert_eq!(reply["result"], json!({}), "{reply}");
    assert_eq!(cluster.server(0).metrics().limit_refused_count("subscriptions_per_session"), 1);
    // Unsubscribing makes room.
    client.call(202, "resources/unsubscribe", json!({"uri": "test://template/7/data"})).await;
    let reply = client.call(203, "resources/subscribe", json!({"uri": "test://template/101/data"})).await;
    assert_eq!(reply["result"], json!({}), "{reply}");
    cluster.raft.stop_all().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn subscribed_uris_together_stay_within_the_record_limit() {
    let mut cluster = start(1, ServerConfig { max_session_record_bytes: 4096, ..Default::default() }).await;
    let mut client = RawClient::new(&cluster.urls[0]);
    client.initialize().await;
    // A template's variable can take any length, so a client can make long URIs that match.
    let uri = |n: usize, len: usize| format!("test://template/{n}{}/data", "x".repeat(len));
    let reply = client.call(1, "resources/subscribe", json!({"uri": uri(1, 5000)})).await;
    assert_eq!(reply["error"]["code"], INVALID_PARAMS, "longer than the whole budget: {reply}");
    for n in 0..3 {
        let reply = client.call(2 + n as i64, "resources/subscribe", json!({"uri": uri(n, 1200)})).await;
        assert_eq!(reply["result"], json!({}), "{reply}");
    }
    let reply = client.call(9, "resources/subscribe", json!({"uri": uri(9, 1200)})).await;
    assert_eq!(reply["error"]["code"], INVALID_PARAMS, "{reply}");
    assert_eq!(reply["error"]["data"], json!({"limit": "session_record_bytes", "max": 4096}));
    assert_eq!(cluster.server(0).metrics().limit_refused_count("session_record_bytes"), 2);
    cluster.raft.stop_all().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn initialize_beyond_the_session_limit_gets_503_with_retry_after() {
    let mut cluster = start(3, ServerConfig { max_sessions: 2, ..Default::default() }).await;
    let mut first = RawClient::new(&cluster.urls[0]);
    first.initialize().await;
    RawClient::new(&cluster.urls[1]).initialize().await;
    cluster.raft.node(2).linearize().await.unwrap();
    let before = cluster.status(2).await;
    // The third, on the replica that made neither: the count is the cluster's.
    let res = RawClient::new(&cluster.urls[2]).post(initialize_body(json!({}), json!({"name": "c", "version": "1"}))).send().await.unwrap();
    assert_eq!(res.status(), 503);
    assert_eq!(res.headers()["retry-after"], "60");
    assert!(res.headers().get("mcp-session-id").is_none());
    let body: Value = res.json().await.unwrap();
    assert_eq!(body["id"], 0);
    assert_eq!(body["error"]["code"], LIMIT_REACHED);
    assert_eq!(body["error"]["data"], json!({"limit": "sessions", "max": 2}));
    assert!(body["error"]["message"].as_str().unwrap().contains("--max-sessions"), "{body}");
    for i in 0..3 {
        assert_eq!(cluster.status(i).await.sessions, 2, "node {i}");
    }
    assert_eq!(cluster.status(2).await.last_log_index, before.last_log_index, "refused without a log entry");
    assert_eq!(cluster.server(2).metrics().limit_refused_count("sessions"), 1);
    // A session that ends makes room.
    let res = first.http.delete(&cluster.urls[0]).header("mcp-session-id", first.session.clone().unwrap()).send().await.unwrap();
    assert!(res.status().is_success());
    cluster.raft.node(2).linearize().await.unwrap();
    RawClient::new(&cluster.urls[2]).initialize().await;
    cluster.raft.stop_all().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_initializes_through_every_replica_never_overshoot_the_limit() {
    let mut cluster = start(3, ServerConfig { max_sessions: 5, ..Default::default() }).await;
    let attempts = (0..24).map(|n| {
        let client = RawClient::new(&cluster.urls[n % 3]);
        async move { client.post(initialize_body(json!({}), json!({"name": "c", "version": "1"}))).send().await.unwrap().status() }
    });
    let statuses = futures::future::join_all(attempts).await;
    assert_eq!(statuses.iter().filter(|s| s.as_u16() == 200).count(), 5, "{statuses:?}");
    assert!(statuses.iter().all(|s| [200, 503].contains(&s.as_u16())), "{statuses:?}");
    for i in 0..3 {
        cluster.raft.node(i).linearize().await.unwrap();
        assert_eq!(cluster.status(i).await.sessions, 5, "node {i}");
    }
    cluster.raft.stop_all().await;
}

/// Call `confirm` and read its stream until the `elicitation/create` it parks on.
async fn park(client: &RawClient, id: i64) -> (reqwest::Response, String, Value) {
    park_confirm(client, id, "x").await
}

#[tokio::test]
async fn running_and_parked_requests_stop_at_the_session_and_node_limits() {
    let config = ServerConfig { max_requests_per_session: 2, max_requests_per_node: 3, ..Default::default() };
    let srv = common::start(config, HttpConfig::default()).await;
    let (mut a, mut b) = (RawClient::new(&srv.url), RawClient::new(&srv.url));
    a.initialize().await;
    b.initialize().await;
    let (mut first, mut buffer, request) = park(&a, 1).await;
    let _second = park(&a, 2).await;
    // Refused at once: the tool does not run (it would park on an elicitation).
    let call = a.request(3, "tools/call", json!({"name": "confirm", "arguments": {"action": "y"}}));
    let messages = tokio::time::timeout(std::time::Duration::from_secs(10), call).await.expect("answered at once");
    assert_eq!(messages.len(), 1, "only the error: {messages:?}");
    let refused = &messages[0];
    assert_eq!(refused["id"], 3);
    assert_eq!(refused["error"]["code"], LIMIT_REACHED, "{refused}");
    assert_eq!(refused["error"]["data"], json!({"limit": "requests_per_session", "max": 2}));
    assert!(refused["error"]["message"].as_str().unwrap().contains("--max-requests-per-session"));
    // Another session still runs, up to the node's limit.
    let _third = park(&b, 1).await;
    let refused = b.call(2, "ping", json!({})).await;
    assert_eq!(refused["error"]["data"], json!({"limit": "requests_per_node", "max": 3}), "{refused}");
    let metrics = srv.server.metrics();
    assert_eq!((metrics.limit_refused_count("requests_per_session"), metrics.limit_refused_count("requests_per_node")), (1, 1));
    // A parked call that finishes gives its place back.
    let answer = json!({"jsonrpc": "2.0", "id": request["id"], "result": {"action": "accept", "content": {"confirm": true}}});
    assert_eq!(a.post(answer.to_string()).send().await.unwrap().status(), 202);
    let rest = data(&read_events(&mut first, usize::MAX, &mut buffer).await);
    assert_eq!(rest.last().unwrap()["result"]["structuredContent"]["answer"], "confirmed");
    assert_eq!(a.call(4, "ping", json!({})).await["result"], json!({}));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_delivered_answer_leaves_every_replica_once_its_owner_took_it() {
    let mut cluster = start(3, ServerConfig::default()).await;
    let mut client = RawClient::new(&cluster.urls[0]);
    client.initialize().await;
    let (mut res, mut buffer, request) = park(&client, 1).await;
    assert_eq!(res.headers()["x-switchboard-node"], "0");
    let empty: Vec<usize> = (0..3).map(|i| cluster.state_bytes(i)).collect();
    // A 200 KB answer, delivered through node 2 to the handler parked on node 0.
    let answer = json!({"jsonrpc": "2.0", "id": request["id"],
        "result": {"action": "accept", "content": {"confirm": true}, "_meta": {"pad": "p".repeat(200_000)}}});
    assert_eq!(on(&client, &cluster, 2).post(answer.to_string()).send().await.unwrap().status(), 202);
    let rest = data(&read_events(&mut res, usize::MAX, &mut buffer).await);
    assert_eq!(rest.last().unwrap()["result"]["structuredContent"]["answer"], "confirmed");
    // The owner took it: no replica keeps the value, each keeps the tombstone.
    let deadline = tokio::time::Instant::now() + std::time::Duration::from_secs(10);
    for (i, empty) in empty.into_iter().enumerate() {
        let states = || cluster.raft.node(i).sm.read(|sm| sm.states().cloned().collect::<Vec<_>>());
        while states().iter().any(|s| matches!(s, MailboxState::Delivered(_))) {
            assert!(tokio::time::Instant::now() < deadline, "node {i} still holds the delivered value");
            tokio::time::sleep(std::time::Duration::from_millis(10)).await;
        }
        assert_eq!(states(), vec![MailboxState::Taken], "node {i}");
        let held = cluster.state_bytes(i).saturating_sub(empty);
        assert!(held < 2_000, "node {i} holds {held} more bytes than before the answer");
    }
    // A late copy of the answer is still refused as a duplicate (invariant 2).
    assert_eq!(on(&client, &cluster, 1).post(answer.to_string()).send().await.unwrap().status(), 202);
    assert_eq!(cluster.server(1).metrics().orphan_count("duplicate"), 1);
    cluster.raft.stop_all().await;
}
