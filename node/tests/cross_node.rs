//! A session's traffic spread over replicas: MCP servers on three Raft members, each request
//! sent to a chosen node over real HTTP.

mod common;

use common::cluster::source_ip;
use common::mcp_cluster::McpCluster;
use common::{RawClient, countdown_broken_after, data, park_confirm, progress_values, read_events};
use serde_json::json;
use std::time::Duration;
use switchboard_node::session::SessionId;

/// The same session, talking to node `i`.
fn on(client: &RawClient, cluster: &McpCluster, i: usize) -> RawClient {
    RawClient { http: client.http.clone(), url: cluster.urls[i].clone(), session: client.session.clone() }
}

/// The leader once elected, then the other two members.
async fn leader_and_followers(cluster: &McpCluster) -> (usize, usize, usize) {
    let leader = cluster.raft.wait_for_leader(Duration::from_secs(10)).await;
    let [a, b] = match leader {
        0 => [1, 2],
        1 => [0, 2],
        _ => [0, 1],
    };
    (leader, a, b)
}

/// The status of ending the session through node `i`.
async fn delete_on(client: &RawClient, cluster: &McpCluster, i: usize) -> u16 {
    let res = client.http.delete(&cluster.urls[i]).header("mcp-session-id", client.session.clone().unwrap()).send().await.unwrap();
    res.status().as_u16()
}

/// The status of a ping in the session, sent to node `i`.
async fn ping_on(client: &RawClient, cluster: &McpCluster, i: usize) -> u16 {
    on(client, cluster, i).post(r#"{"jsonrpc":"2.0","id":1,"method":"ping"}"#).send().await.unwrap().status().as_u16()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_session_made_on_one_node_works_on_every_node_at_once() {
    let mut cluster = McpCluster::start().await;
    let mut client = RawClient::new(&cluster.urls[0]);
    client.initialize().await;
    for i in 0..3 {
        let pong = on(&client, &cluster, i).call(i as i64, "ping", json!({})).await;
        assert_eq!(pong["result"], json!({}), "node {i}");
    }
    // Log level set on node 1 is the session's level on node 2.
    on(&client, &cluster, 1).call(10, "logging/setLevel", json!({"level": "error"})).await;
    // A level change reaches other replicas within the replication lag (sessions themselves are
    // read-your-writes everywhere; a level set a millisecond ago may not be): wait for it here.
    cluster.raft.node(2).linearize().await.unwrap();
    let messages = on(&client, &cluster, 2).request(11, "tools/call", json!({"name": "test_tool_with_logging", "arguments": {}})).await;
    assert!(messages.iter().all(|m| m["method"] != "notifications/message"), "info logs filtered: {messages:?}");
    // DELETE on node 2 ends it everywhere: once it has answered, every node answers 404.
    assert_eq!(delete_on(&client, &cluster, 2).await, 204);
    for i in 0..3 {
        assert_eq!(ping_on(&client, &cluster, i).await, 404, "node {i}");
    }
    cluster.raft.stop_all().await;
}

/// A session deleted through one node is unknown on every node the moment the DELETE has
/// answered, without waiting for replication: a client behind a load balancer sends its next
/// request wherever it lands (the conformance suite's `server-session-terminated-returns-404`).
/// Each round deletes through a different node, so the deleting node is the leader in some and
/// a follower (whose delete is forwarded) in others.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_deleted_session_is_unknown_on_every_node_as_soon_as_the_delete_answers() {
    let mut cluster = McpCluster::start().await;
    for round in 0..120 {
        let mut client = RawClient::new(&cluster.urls[round % 3]);
        client.initialize().await;
        let deleting = (round + 1) % 3;
        assert_eq!(delete_on(&client, &cluster, deleting).await, 204, "round {round}");
        for i in [(round + 2) % 3, deleting, round % 3] {
            assert_eq!(ping_on(&client, &cluster, i).await, 404, "round {round}: node {i} still knew the session its DELETE ended");
        }
    }
    cluster.raft.stop_all().await;
}

/// A DELETE does not wait on a member that cannot hear of it: with one follower cut off, the
/// delete commits on the other two and answers, and both of them know the session is gone.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_delete_answers_while_a_follower_is_cut_off() {
    let mut cluster = McpCluster::start().await;
    let leader = cluster.raft.wait_for_leader(Duration::from_secs(10)).await;
    let (other, cut) = ((leader + 1) % 3, (leader + 2) % 3);
    let mut client = RawClient::new(&cluster.urls[other]);
    client.initialize().await;
    cluster.raft.partition(cut);
    assert_eq!(delete_on(&client, &cluster, other).await, 204);
    for i in [leader, other] {
        assert_eq!(ping_on(&client, &cluster, i).await, 404, "node {i}");
    }
    cluster.raft.stop_all().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_answer_to_another_node_wakes_the_tool_on_its_owner() {
    let mut cluster = McpCluster::start().await;
    let mut client = RawClient::new(&cluster.urls[0]);
    client.initialize().await;
    let (mut res, mut buffer, request) = park_confirm(&client, 1, "ship").await;
    assert_eq!(res.headers()["x-switchboard-node"], "0");
    let answer = json!({"jsonrpc": "2.0", "id": request["id"], "result": {"action": "accept", "content": {"confirm": true}}});
    let res2 = on(&client, &cluster, 2).post(answer.to_string()).send().await.unwrap();
    assert_eq!(res2.status(), 202);
    assert_eq!(res2.headers()["x-switchboard-node"], "2");
    let rest = data(&read_events(&mut res, usize::MAX, &mut buffer).await);
    assert_eq!(rest.last().unwrap()["result"]["structuredContent"]["answer"], "confirmed");
    assert!(cluster.servers[2].metrics().encode().contains("switchboard_answers_delivered_total 1"));
    cluster.raft.stop_all().await;
}

/// Invariant 4: an answer that reaches a replica cut off from the quorum is not acknowledged
/// (503 with Retry-After, nothing stored), and the same answer sent again after the partition
/// heals is delivered.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_answer_that_cannot_be_committed_gets_a_retryable_503_and_its_retry_delivers() {
    let mut cluster = McpCluster::start().await;
    let (_, owner, cut) = leader_and_followers(&cluster).await;
    let mut client = RawClient::new(&cluster.urls[owner]);
    client.initialize().await;
    let (mut res, mut buffer, request) = park_confirm(&client, 1, "ship").await;
    let answer = json!({"jsonrpc": "2.0", "id": request["id"], "result": {"action": "accept", "content": {"confirm": true}}});
    // The replica the answer reaches can no longer commit anything.
    cluster.raft.partition(cut);
    let refused = on(&client, &cluster, cut).post(answer.to_string()).send().await.unwrap();
    assert_eq!(refused.status(), 503, "an uncommitted answer is not acknowledged");
    assert_eq!(refused.headers()["retry-after"], "1");
    let body: serde_json::Value = refused.json().await.unwrap();
    assert!(body["error"]["message"].as_str().unwrap().contains("send it again"), "{body}");
    assert!(cluster.servers[cut].metrics().encode().contains(r#"reason="unavailable""#));
    cluster.raft.heal();
    // The client's retry, to the same replica, is delivered and wakes the tool on its owner.
    let deadline = tokio::time::Instant::now() + Duration::from_secs(15);
    loop {
        let retry = on(&client, &cluster, cut).post(answer.to_string()).send().await.unwrap();
        if retry.status() == 202 {
            break;
        }
        assert_eq!(retry.status(), 503, "only a retryable refusal while the replica catches up");
        assert!(tokio::time::Instant::now() < deadline, "the retry was never delivered");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let rest = data(&read_events(&mut res, usize::MAX, &mut buffer).await);
    assert_eq!(rest.last().unwrap()["result"]["structuredContent"]["answer"], "confirmed");
    cluster.raft.stop_all().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stream_broken_on_one_node_resumes_through_another() {
    let mut cluster = McpCluster::start().await;
    let mut client = RawClient::new(&cluster.urls[0]);
    client.initialize().await;
    let before = countdown_broken_after(&client, 3).await;
    let last = before.last().unwrap().id.clone().unwrap();

    let mut resumed = on(&client, &cluster, 1).get().header("last-event-id", &last).send().await.unwrap();
    assert_eq!(resumed.status(), 200);
    assert_eq!(resumed.headers()["x-switchboard-node"], "1", "served by the node the client reached");
    let after = read_events(&mut resumed, usize::MAX, &mut String::new()).await;
    let mut all = data(&before);
    all.extend(data(&after));
    assert_eq!(progress_values(&all), vec![1.0, 2.0, 3.0, 4.0, 5.0, 6.0], "no loss, no duplicates across nodes");
    assert_eq!(all.last().unwrap()["id"], 1);
    cluster.raft.stop_all().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cancellation_sent_to_another_node_stops_the_request() {
    let mut cluster = McpCluster::start().await;
    let mut client = RawClient::new(&cluster.urls[0]);
    client.initialize().await;
    let call = json!({"jsonrpc": "2.0", "id": 5, "method": "tools/call",
        "params": {"name": "wait_for_cancel", "arguments": {}, "_meta": {"progressToken": 5}}});
    let mut res = client.post(call.to_string()).send().await.unwrap();
    let mut buffer = String::new();
    read_events(&mut res, 2, &mut buffer).await;
    let cancel = json!({"jsonrpc": "2.0", "method": "notifications/cancelled", "params": {"requestId": 5}});
    assert_eq!(on(&client, &cluster, 1).post(cancel.to_string()).send().await.unwrap().status(), 202);
    let rest = read_events(&mut res, usize::MAX, &mut buffer).await;
    assert!(data(&rest).iter().all(|m| m.get("result").is_none()), "the stream ended without a response: {rest:?}");
    cluster.raft.stop_all().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn notifications_reach_the_standalone_stream_on_whichever_node_holds_it() {
    let mut cluster = McpCluster::start().await;
    let mut client = RawClient::new(&cluster.urls[0]);
    client.initialize().await;
    // Subscribe through node 1, hold the GET stream on node 2, publish on node 0.
    on(&client, &cluster, 1).call(1, "resources/subscribe", json!({"uri": "test://watched-resource"})).await;
    let mut stream = on(&client, &cluster, 2).get().send().await.unwrap();
    assert_eq!(stream.headers()["x-switchboard-node"], "2");
    let mut buffer = String::new();
    read_events(&mut stream, 1, &mut buffer).await; // priming
    cluster.raft.node(0).linearize().await.unwrap();
    cluster.servers[0].notify_resource_updated("test://watched-resource");
    cluster.servers[0].notify_resource_updated("test://other");
    cluster.servers[0].remove_tool("echo");
    // Two independent notices: each arrives once, in either order; the unsubscribed URI never.
    let mut messages = data(&read_events(&mut stream, 2, &mut buffer).await);
    messages.sort_by_key(|m| m["method"].as_str().unwrap().to_string());
    assert_eq!(
        messages[0],
        json!({"jsonrpc": "2.0", "method": "notifications/resources/updated", "params": {"uri": "test://watched-resource"}})
    );
    assert_eq!(messages[1]["method"], "notifications/tools/list_changed");
    cluster.raft.stop_all().await;
}

/// A subscription is acknowledged only once every reachable member has applied it: the
/// replica holding the session's stream checks updates against its own state, so one published
/// after the acknowledgement must find the subscription there. Here that replica hears nothing
/// from the leader while the subscription commits, until the partition heals.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_subscription_is_acknowledged_once_the_replica_holding_the_stream_has_it() {
    // The holder waits for the entry up to the election timeout before it says it has not
    // applied it. 300 ms (the test clusters' own) left a loaded CI host 200 ms after the heal
    // for the leader to reach the holder again, and once that was not enough.
    let mut cluster = McpCluster::start_with(|c| c.election_timeout = Duration::from_secs(2)).await;
    let (leader, subscriber, holder) = leader_and_followers(&cluster).await;
    let mut client = RawClient::new(&cluster.urls[holder]);
    client.initialize().await;
    let mut stream = on(&client, &cluster, holder).get().send().await.unwrap();
    let mut buffer = String::new();
    read_events(&mut stream, 1, &mut buffer).await; // priming

    cluster.raft.proxies[holder].block_source(source_ip(leader));
    let via = on(&client, &cluster, subscriber);
    let subscribe = tokio::spawn(async move { via.call(1, "resources/subscribe", json!({"uri": "test://watched-resource"})).await });
    // The partition heals well within the holder's wait.
    tokio::time::sleep(Duration::from_millis(100)).await;
    cluster.raft.heal();
    assert_eq!(subscribe.await.unwrap()["result"], json!({}));
    let session = SessionId(client.session.clone().unwrap().into());
    let subscribed_on_holder =
        cluster.raft.node(holder).sm.read(|sm| sm.session(&session).unwrap().record.subscriptions.contains("test://watched-resource"));
    assert!(subscribed_on_holder, "acknowledged before the replica holding the stream applied it");

    cluster.servers[subscriber].notify_resource_updated("test://watched-resource");
    let messages = data(&read_events(&mut stream, 1, &mut buffer).await);
    assert_eq!(
        messages,
        [json!({"jsonrpc": "2.0", "method": "notifications/resources/updated", "params": {"uri": "test://watched-resource"}})]
    );
    cluster.raft.stop_all().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn what_is_too_large_to_replicate_is_refused_to_the_client_and_changes_nothing() {
    const LIMIT: usize = 64 * 1024;
    let mut cluster = McpCluster::start_with(|c| c.max_entry_bytes = 64 * 1024).await;
    let pending_mailboxes = |cluster: &McpCluster| cluster.raft.node(0).sm.read(|sm| sm.pending_mailboxes());

    // A session record over the limit: invalid params, no session.
    let mut client = RawClient::new(&cluster.urls[0]);
    let init = json!({"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": {"protocolVersion": "2025-11-25",
        "capabilities": {"elicitation": {}, "experimental": {"pad": "x".repeat(LIMIT)}}, "clientInfo": {"name": "big", "version": "1"}}});
    let res = client.post(init.to_string()).send().await.unwrap();
    assert!(res.headers().get("mcp-session-id").is_none(), "no session was made");
    let body: serde_json::Value = res.json().await.unwrap();
    assert_eq!(body["error"]["code"], -32602, "{body}");
    // Refused by whichever limit meets it first: the session record's own cap on initialize
    // params is checked before anything is proposed.
    let refused =
        |m: &switchboard_node::metrics::Metrics| m.limit_refused_count("entry_bytes") + m.limit_refused_count("session_record_bytes");
    assert_eq!(refused(&cluster.raft.metrics[0]) + refused(cluster.servers[0].metrics()), 1, "{body}");

    // An answer over the limit: 413 from the node it reached, nothing delivered; the handler
    // still waits, and a smaller answer to the same request is delivered.
    client.initialize().await;
    let (mut res, mut buffer, request) = park_confirm(&client, 1, "ship").await;
    // The mailbox's create may still be committing when the request reaches the client.
    let deadline = tokio::time::Instant::now() + Duration::from_secs(5);
    while pending_mailboxes(&cluster) == 0 {
        assert!(tokio::time::Instant::now() < deadline, "the parked call's mailbox was never created");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let pending = pending_mailboxes(&cluster);
    let big = json!({"jsonrpc": "2.0", "id": request["id"], "result": {"action": "accept",
        "content": {"confirm": true}, "_meta": {"pad": "x".repeat(LIMIT)}}});
    let refused = on(&client, &cluster, 2).post(big.to_string()).send().await.unwrap();
    assert_eq!(refused.status(), 413);
    assert!(refused.text().await.unwrap().contains("answer too large to deliver"));
    assert_eq!(cluster.raft.metrics[2].limit_refused_count("entry_bytes"), 1);
    cluster.raft.node(0).linearize().await.unwrap();
    assert_eq!(pending_mailboxes(&cluster), pending, "the mailbox still waits");
    let answer = json!({"jsonrpc": "2.0", "id": request["id"], "result": {"action": "accept", "content": {"confirm": true}}});
    assert_eq!(on(&client, &cluster, 2).post(answer.to_string()).send().await.unwrap().status(), 202);
    let rest = data(&read_events(&mut res, usize::MAX, &mut buffer).await);
    assert_eq!(rest.last().unwrap()["result"]["structuredContent"]["answer"], "confirmed");
    cluster.raft.stop_all().await;
}
