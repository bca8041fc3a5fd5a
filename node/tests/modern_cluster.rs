//! 2026-07-28 multi-round-trip calls across replicas: the call parks on the node that got it,
//! its retry lands on another, the answers travel through the Raft mailbox and the outcome
//! back. MCP servers on three real Raft members over loopback.

mod common;

use common::mcp_cluster::McpCluster;
use common::modern::{Modern, V, accept, text, was_dropped};
use serde_json::json;
use std::time::Duration;
use switchboard_node::protocol::types::CallToolResult;
use switchboard_node::server::ToolDef;

fn confirm(ok: bool) -> serde_json::Value {
    json!({"go": {"action": "accept", "content": {"ok": ok}}})
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_retry_on_another_node_reaches_the_parked_handler() {
    let mut cluster = McpCluster::start().await;
    let clients: Vec<Modern> = cluster.urls.iter().map(|u| Modern::new(u)).collect();
    let first = clients[0].call(1, "ask_two", json!({})).await;
    assert_eq!((first.node, first.result()["resultType"].clone()), (Some(0), json!("input_required")));
    // Round two on node 1 answers one key: the owner asks the other again, through node 1.
    let second = clients[1].retry(2, "ask_two", json!({}), &first.state(), json!({"name": accept("name", "ada")})).await;
    assert_eq!(second.node, Some(1));
    assert_eq!(second.result()["inputRequests"].as_object().unwrap().keys().collect::<Vec<_>>(), vec!["color"], "{:?}", second.messages);
    // Round three on node 2 completes the call.
    let third = clients[2].retry(3, "ask_two", json!({}), &second.state(), json!({"color": accept("color", "red")})).await;
    assert_eq!(third.node, Some(2));
    assert_eq!(text(&third), "ada/red");
    assert_eq!((cluster.servers[1].metrics().mrtr_retry_count(false), cluster.servers[2].metrics().mrtr_retry_count(false)), (1, 1));
    // The spent state is refused on any node.
    let again = clients[0].retry(4, "ask_two", json!({}), &second.state(), json!({"color": accept("color", "red")})).await;
    assert!(again.last()["error"]["message"].as_str().unwrap().contains("already used"), "{}", again.last());
    cluster.raft.stop_all().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn notifications_after_a_resume_reach_the_retry_on_its_node() {
    let mut cluster = McpCluster::start().await;
    let (owner, other) = (Modern::new(&cluster.urls[0]), Modern::new(&cluster.urls[2]));
    let first = owner.send(json!(1), "tools/call", json!({"name": "ask_then_report"}), json!({})).await;
    let params = json!({"name": "ask_then_report", "requestState": first.state(), "inputResponses": confirm(true)});
    let retried =
        other.send(json!(2), "tools/call", params, json!({"progressToken": 42, "io.modelcontextprotocol/logLevel": "debug"})).await;
    assert_eq!(retried.node, Some(2));
    let methods: Vec<&str> = retried.messages.iter().filter_map(|m| m["method"].as_str()).collect();
    assert_eq!(methods, vec!["notifications/progress", "notifications/message"]);
    assert_eq!(retried.messages[0]["params"]["progressToken"], 42);
    assert_eq!(text(&retried), "token=42");
    cluster.raft.stop_all().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_retry_on_a_lagging_follower_completes() {
    let mut cluster = McpCluster::start().await;
    let leader = cluster.raft.wait_for_leader(Duration::from_secs(10)).await;
    let follower = (0..3).find(|&i| i != leader).unwrap();
    let behind = (0..3).find(|&i| i != leader && i != follower).unwrap();
    // `behind` misses the round's mailboxes while cut off; the retry reaches it right after.
    cluster.raft.partition(behind);
    let first = Modern::new(&cluster.urls[follower]).call(1, "ask_then_report", json!({})).await;
    assert_eq!(first.result()["resultType"], "input_required", "{:?}", first.messages);
    cluster.raft.heal();
    let retried = Modern::new(&cluster.urls[behind]).retry(2, "ask_then_report", json!({}), &first.state(), confirm(true)).await;
    assert_eq!(retried.result()["resultType"], "complete", "{:?}", retried.messages);
    cluster.raft.stop_all().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_link_to_the_owner_broken_while_the_retry_waits_is_asked_again() {
    // Found by the fault campaign (seed 4): the link from the retry's node to the owner broke
    // while the retry waited for the outcome, and the retry was answered "the replica is gone"
    // although the owner lived and finished the call.
    let mut cluster = McpCluster::start().await;
    let leader = cluster.raft.wait_for_leader(Duration::from_secs(10)).await;
    // Both followers: Raft traffic never runs between them, so the cut hits the relay only.
    let owner = (0..3).find(|&i| i != leader).unwrap();
    let other = (0..3).find(|&i| i != leader && i != owner).unwrap();
    let args = json!({"ms": 1500});
    let first = Modern::new(&cluster.urls[owner]).call(1, "ask_then_sleep", args.clone()).await;
    assert_eq!(first.result()["resultType"], "input_required", "{:?}", first.messages);
    let retry = {
        let (url, state) = (cluster.urls[other].clone(), first.state());
        tokio::spawn(async move { Modern::new(&url).retry(2, "ask_then_sleep", args, &state, confirm(true)).await })
    };
    // The answers are delivered and the outcome is being waited for when the link breaks.
    tokio::time::sleep(Duration::from_millis(400)).await;
    cluster.raft.proxies[owner].block_source(common::cluster::source_ip(other));
    tokio::time::sleep(Duration::from_millis(700)).await;
    cluster.raft.heal();
    let retried = retry.await.unwrap();
    assert_eq!(text(&retried), "slept", "{:?}", retried.messages);
    cluster.raft.stop_all().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn closing_a_retry_on_another_node_cancels_the_handler_on_its_owner() {
    let mut cluster = McpCluster::start().await;
    let owner = Modern::new(&cluster.urls[0]);
    let first = owner.call(1, "ask_then_wait", json!({"flag": "cross-node"})).await;
    // The handler never ends by itself: the client gives up on the retry after half a second.
    let other = Modern::new(&cluster.urls[1]);
    let gave_up = other
        .retry_giving_up("ask_then_wait", json!({"flag": "cross-node"}), &first.state(), confirm(true), Duration::from_millis(500))
        .await;
    assert!(gave_up.is_err(), "the retry was answered: {gave_up:?}");
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    while !was_dropped("cross-node") {
        assert!(tokio::time::Instant::now() < deadline, "the handler on node 0 was not cancelled");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    cluster.raft.stop_all().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_owner_gone_between_rounds_is_an_error_not_a_hang() {
    let mut cluster = McpCluster::start().await;
    let leader = cluster.raft.wait_for_leader(Duration::from_secs(10)).await;
    // The owner is a follower, so the other two keep their quorum without an election.
    let owner = (0..3).find(|&i| i != leader).unwrap();
    let other = (0..3).find(|&i| i != leader && i != owner).unwrap();
    let first = Modern::new(&cluster.urls[owner]).call(1, "ask_then_report", json!({})).await;
    assert_eq!(first.result()["resultType"], "input_required");
    cluster.raft.kill(owner).await;
    let started = std::time::Instant::now();
    let retried = Modern::new(&cluster.urls[other]).retry(2, "ask_then_report", json!({}), &first.state(), confirm(true)).await;
    assert_eq!(retried.error_code(), Some(-32603), "{:?}", retried.messages);
    assert!(retried.last()["error"]["message"].as_str().unwrap().contains("gone"), "{}", retried.last());
    assert!(started.elapsed() < Duration::from_secs(20), "took {:?}", started.elapsed());
    cluster.raft.stop_all().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_listen_stream_hears_changes_made_on_another_node() {
    let mut cluster = McpCluster::start().await;
    let listen = json!({"jsonrpc": "2.0", "id": "sub-1", "method": "subscriptions/listen", "params": {
        "notifications": {"toolsListChanged": true},
        "_meta": {"io.modelcontextprotocol/protocolVersion": V, "io.modelcontextprotocol/clientCapabilities": {}}}});
    let mut stream = reqwest::Client::new()
        .post(&cluster.urls[2])
        .header("content-type", "application/json")
        .header("accept", common::ACCEPT_BOTH)
        .header("mcp-protocol-version", V)
        .header("mcp-method", "subscriptions/listen")
        .body(listen.to_string())
        .send()
        .await
        .unwrap();
    assert_eq!(stream.headers()["content-type"], "text/event-stream");
    let mut seen = String::new();
    let mut read_until = async |needle: &str| {
        let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
        while !seen.contains(needle) {
            let chunk = tokio::time::timeout_at(deadline, stream.chunk()).await.expect("in time").unwrap().expect("stream open");
            seen.push_str(&String::from_utf8_lossy(&chunk));
        }
        seen.clone()
    };
    let ack = read_until("notifications/subscriptions/acknowledged").await;
    assert!(ack.contains(r#""io.modelcontextprotocol/subscriptionId":"sub-1""#), "{ack}");
    // A prompt change is not asked for; a tool change on node 0 is.
    cluster.servers[0]
        .upsert_tool(ToolDef::new("late_tool", json!({"type": "object"}), |_, _| async { Ok(CallToolResult::text("x")) }).unwrap());
    let seen = read_until("notifications/tools/list_changed").await;
    assert!(!seen.contains("prompts/list_changed"));
    let frame = seen.lines().find(|l| l.contains("tools/list_changed")).unwrap();
    let message: serde_json::Value = serde_json::from_str(frame.trim_start_matches("data: ")).unwrap();
    assert_eq!(message["params"]["_meta"]["io.modelcontextprotocol/subscriptionId"], "sub-1");
    // The client closes the stream: the node forgets the listener.
    assert_eq!(cluster.servers[2].listeners(), 1);
    drop(stream);
    let deadline = tokio::time::Instant::now() + Duration::from_secs(5);
    while cluster.servers[2].listeners() > 0 {
        assert!(tokio::time::Instant::now() < deadline, "the closed listen stream is still registered");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    cluster.raft.stop_all().await;
}
