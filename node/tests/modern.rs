//! MCP 2026-07-28 on the same endpoint as 2025-11-25: era detection, `server/discover`, the
//! result envelope, and multi-round-trip requests (MRTR) on one node, over real HTTP.

mod common;

use common::modern::{Modern, V, accept, text, was_dropped};
use common::{RawClient, start, start_default};
use serde_json::Value;
use serde_json::json;
use std::sync::Arc;
use std::time::Duration;
use switchboard_node::mailbox::{
    Addressee, CreateOutcome, DeliverOutcome, InMemoryMailbox, Mailbox, MailboxError, MailboxKey, NodeId, SessionTag, WaitOutcome,
};
use switchboard_node::server::ServerConfig;
use switchboard_node::session::InMemorySessionStore;
use switchboard_node::transport::http::HttpConfig;

#[tokio::test]
async fn discover_lists_versions_capabilities_and_server_info() {
    let srv = start_default().await;
    let client = Modern::new(&srv.url);
    let answer = client.send(json!("d-1"), "server/discover", json!({}), json!({})).await;
    assert_eq!(answer.status, 200);
    let result = answer.result();
    assert_eq!(answer.last()["id"], "d-1");
    assert_eq!(result["resultType"], "complete");
    assert_eq!(result["supportedVersions"], json!(["2026-07-28", "2025-11-25", "2025-06-18", "2025-03-26"]));
    assert_eq!(result["capabilities"]["tools"]["listChanged"], true);
    assert_eq!(result["_meta"]["io.modelcontextprotocol/serverInfo"]["name"], "switchboard-test");
    assert_eq!((result["ttlMs"].clone(), result["cacheScope"].clone()), (json!(0), json!("public")));
}

#[tokio::test]
async fn both_eras_share_the_endpoint() {
    let srv = start_default().await;
    // A legacy session works as before, at the same time.
    let mut legacy = RawClient::new(&srv.url);
    legacy.initialize().await;
    assert!(legacy.call(1, "tools/list", json!({})).await["result"]["tools"].as_array().is_some_and(|t| !t.is_empty()));
    let modern = Modern::new(&srv.url);
    let listed = modern.send(json!(2), "tools/list", json!({}), json!({})).await;
    assert_eq!(listed.status, 200);
    let tools = listed.result()["tools"].as_array().unwrap();
    assert!(tools.iter().any(|t| t["name"] == "test_simple_text"));
    assert_eq!(listed.result()["resultType"], "complete");
    assert!(listed.result()["ttlMs"].is_u64());
    // Removed methods: 404 with -32601 and the request's own id.
    for method in ["initialize", "ping", "logging/setLevel", "resources/subscribe", "resources/unsubscribe", "unknown/method"] {
        let answer = modern.send(json!(method), method, json!({}), json!({})).await;
        assert_eq!((answer.status, answer.error_code()), (404, Some(-32601)), "{method}");
        assert_eq!(answer.last()["id"], method);
    }
    // A session header on a modern request is ignored (not looked up, not echoed).
    let res = reqwest::Client::new()
        .post(&srv.url)
        .header("content-type", "application/json")
        .header("accept", common::ACCEPT_BOTH)
        .header("mcp-protocol-version", V)
        .header("mcp-method", "tools/list")
        .header("mcp-session-id", "no-such-session")
        .body(
            json!({"jsonrpc": "2.0", "id": 3, "method": "tools/list", "params": {"_meta": {
            "io.modelcontextprotocol/protocolVersion": V, "io.modelcontextprotocol/clientCapabilities": {}}}})
            .to_string(),
        )
        .send()
        .await
        .unwrap();
    assert_eq!(res.status(), 200);
    // GET and DELETE have no meaning without sessions.
    for method in [reqwest::Method::GET, reqwest::Method::DELETE] {
        let res = reqwest::Client::new()
            .request(method.clone(), &srv.url)
            .header("accept", "text/event-stream")
            .header("mcp-protocol-version", V)
            .send()
            .await
            .unwrap();
        assert_eq!(res.status(), 405, "{method}");
        assert_eq!(res.headers()["allow"], "POST");
    }
    // Resource not found is -32602 with the URI in this era (-32002 stays legacy's).
    let missing = modern.send(json!(4), "resources/read", json!({"uri": "test://nope"}), json!({})).await;
    assert_eq!(missing.error_code(), Some(-32602));
    assert_eq!(missing.last()["error"]["data"]["uri"], "test://nope");
    let legacy_missing = legacy.call(5, "resources/read", json!({"uri": "test://nope"})).await;
    assert_eq!(legacy_missing["error"]["code"], -32002);
}

#[tokio::test]
async fn an_elicitation_takes_two_requests_and_its_state_is_single_use() {
    let srv = start_default().await;
    let client = Modern::new(&srv.url);
    let args = json!({"message": "hi"});
    let first = client.call(1, "test_elicitation", args.clone()).await;
    assert_eq!(first.status, 200);
    assert_eq!(first.result()["resultType"], "input_required");
    let (key, request) = first.result()["inputRequests"].as_object().unwrap().iter().next().map(|(k, v)| (k.clone(), v.clone())).unwrap();
    assert_eq!(request["method"], "elicitation/create");
    assert_eq!(request["params"]["message"], "hi");
    assert!(first.result().get("ttlMs").is_none(), "input_required is never cached");
    let state = first.state();
    let answer = json!({key.clone(): {"action": "accept", "content": {"username": "ada", "email": "ada@example.com"}}});
    let second = client.retry(2, "test_elicitation", args.clone(), &state, answer.clone()).await;
    assert_eq!(second.last()["id"], 2, "answered under the retry's own id");
    assert_eq!(second.result()["resultType"], "complete");
    assert!(text(&second).contains("ada@example.com"), "{}", text(&second));
    // Fetched, the outcome still stays a moment: a fetch is not proof of receipt (the reply can
    // be lost and the retry's replica ask again, or an earlier attempt's fetch can take it first).
    let opened = srv.server.sealer().open_state(&state).unwrap();
    let refetched = srv.server.round_outcome(opened.call, opened.round, Duration::from_secs(1)).await;
    assert!(refetched.is_some_and(|o| o.contains("ada@example.com")), "the outcome went with the first fetch");
    // The same state again: refused, and the message says why.
    let again = client.retry(3, "test_elicitation", args, &state, answer).await;
    assert_eq!(again.error_code(), Some(-32602));
    assert!(again.last()["error"]["message"].as_str().unwrap().contains("already used"));
    assert_eq!(srv.server.metrics().mrtr_rejected_count("consumed"), 1);
    // Nothing of the call stays once its outcome was fetched, nor of a call that asked nothing.
    client.call(4, "test_simple_text", json!({})).await;
    let deadline = std::time::Instant::now() + Duration::from_secs(5);
    while srv.server.modern_calls_held() > 0 {
        assert!(std::time::Instant::now() < deadline, "{} calls still held", srv.server.modern_calls_held());
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

#[tokio::test]
async fn altered_foreign_and_misapplied_states_are_refused_without_consuming_the_round() {
    let srv = start_default().await;
    let client = Modern::new(&srv.url);
    let args = json!({"message": "hi"});
    let first = client.call(1, "test_elicitation", args.clone()).await;
    let state = first.state();
    let key = first.result()["inputRequests"].as_object().unwrap().keys().next().unwrap().clone();
    let answer = json!({key.clone(): {"action": "accept", "content": {"username": "a", "email": "b"}}});
    let cases = [
        (format!("{state}-TAMPERED"), args.clone(), answer.clone(), "altered"),
        ("sbs1.AAAA".to_string(), args.clone(), answer.clone(), "altered"),
        (state.clone(), json!({"message": "another"}), answer.clone(), "another call"),
        (state.clone(), args.clone(), json!({key.clone(): 12345}), "malformed"),
    ];
    for (i, (state, arguments, responses, why)) in cases.into_iter().enumerate() {
        let refused = client.retry(10 + i as i64, "test_elicitation", arguments, &state, responses).await;
        assert_eq!(refused.error_code(), Some(-32602), "{why}: {:?}", refused.messages);
        assert!(refused.last()["error"]["message"].as_str().unwrap().contains(why), "{why}: {}", refused.last());
    }
    // Another cluster's state (another key) is refused as altered too.
    let other = start_default().await;
    let foreign = Modern::new(&other.url).retry(20, "test_elicitation", args.clone(), &state, answer.clone()).await;
    assert_eq!(foreign.error_code(), Some(-32602));
    // None of those consumed the round: the genuine retry completes.
    let done = client.retry(30, "test_elicitation", args, &state, answer).await;
    assert_eq!(done.result()["resultType"], "complete", "{:?}", done.messages);
    let metrics = srv.server.metrics();
    assert_eq!((metrics.mrtr_rejected_count("tampered"), metrics.mrtr_rejected_count("wrong_call")), (2, 1));
    assert_eq!(metrics.mrtr_rejected_count("malformed"), 1);
}

#[tokio::test]
async fn concurrent_asks_share_a_round_and_missing_keys_are_asked_again() {
    let srv = start_default().await;
    let client = Modern::new(&srv.url);
    let first = client.call(1, "ask_two", json!({})).await;
    let asked: Vec<&String> = first.result()["inputRequests"].as_object().unwrap().keys().collect();
    assert_eq!(asked, vec!["color", "name"], "both asks in one round");
    // Answer one (and a key nobody asked): only the other is asked again, with a fresh state.
    let partial = client.retry(2, "ask_two", json!({}), &first.state(), json!({"name": accept("name", "ada"), "extra": {}})).await;
    assert_eq!(partial.result()["resultType"], "input_required", "{:?}", partial.messages);
    let asked: Vec<&String> = partial.result()["inputRequests"].as_object().unwrap().keys().collect();
    assert_eq!(asked, vec!["color"]);
    assert_ne!(partial.state(), first.state());
    let done = client.retry(3, "ask_two", json!({}), &partial.state(), json!({"color": accept("color", "red")})).await;
    assert_eq!(text(&done), "ada/red");
}

#[tokio::test]
async fn answers_sent_with_a_fresh_call_are_taken_and_bad_ones_refused() {
    let srv = start_default().await;
    let client = Modern::new(&srv.url);
    // Both answers ahead of time: no round trip at all.
    let params = json!({"name": "ask_two", "arguments": {}, "inputResponses": {"name": accept("name", "x"), "color": accept("color", "y"), "zzz": 1}});
    let answer = client.send(json!(1), "tools/call", params, json!({})).await;
    assert_eq!(text(&answer), "x/y");
    // One ahead: the other is asked.
    let params = json!({"name": "ask_two", "arguments": {}, "inputResponses": {"name": accept("name", "x")}});
    let answer = client.send(json!(2), "tools/call", params, json!({})).await;
    assert_eq!(answer.result()["inputRequests"].as_object().unwrap().keys().collect::<Vec<_>>(), vec!["color"]);
    // A malformed answer is an invalid-params error, not a tool result.
    let params = json!({"name": "ask_two", "arguments": {}, "inputResponses": {"name": 12345}});
    let answer = client.send(json!(3), "tools/call", params, json!({})).await;
    assert_eq!(answer.error_code(), Some(-32602), "{:?}", answer.messages);
    let params = json!({"name": "ask_two", "arguments": {}, "inputResponses": null});
    let answer = client.send(json!(4), "tools/call", params, json!({})).await;
    assert_eq!(answer.result()["resultType"], "input_required");
}

#[tokio::test]
async fn a_capability_the_request_did_not_declare_is_never_asked_for() {
    let srv = start_default().await;
    let client = Modern::with_capabilities(&srv.url, json!({}));
    let answer = client.call(1, "test_sampling", json!({"prompt": "p"})).await;
    assert_eq!(answer.status, 400);
    assert_eq!(answer.error_code(), Some(-32021));
    assert_eq!(answer.last()["error"]["data"]["requiredCapabilities"], json!({"sampling": {}}));
}

#[tokio::test]
async fn after_a_resume_notifications_go_to_the_retry_with_its_token_and_level() {
    let srv = start_default().await;
    let client = Modern::new(&srv.url);
    let first = client.send(json!(1), "tools/call", json!({"name": "ask_then_report"}), json!({"progressToken": "first"})).await;
    let params = json!({"name": "ask_then_report", "requestState": first.state(), "inputResponses": {"go": {"action": "accept", "content": {"ok": true}}}});
    let retried =
        client.send(json!(2), "tools/call", params, json!({"progressToken": "second", "io.modelcontextprotocol/logLevel": "info"})).await;
    let methods: Vec<&str> = retried.messages.iter().filter_map(|m| m["method"].as_str()).collect();
    assert_eq!(methods, vec!["notifications/progress", "notifications/message"], "{:?}", retried.messages);
    assert_eq!(retried.messages[0]["params"]["progressToken"], "second");
    assert_eq!(text(&retried), "token=\"second\"");
    // Without a log level in the request, no log notification.
    let first = client.send(json!(3), "tools/call", json!({"name": "ask_then_report"}), json!({})).await;
    let params = json!({"name": "ask_then_report", "requestState": first.state(), "inputResponses": {"go": {"action": "accept", "content": {"ok": true}}}});
    let retried = client.send(json!(4), "tools/call", params, json!({})).await;
    assert!(retried.messages.iter().all(|m| m["method"] != "notifications/message"), "{:?}", retried.messages);
}

#[tokio::test]
async fn the_first_stream_ends_with_input_required_and_its_end_cancels_nothing() {
    let srv = start_default().await;
    let client = Modern::new(&srv.url);
    // Progress first: the first answer is an SSE stream, which ends after input_required.
    let first = client.send(json!(1), "tools/call", json!({"name": "progress_then_ask"}), json!({"progressToken": "t"})).await;
    let methods: Vec<&str> = first.messages.iter().map(|m| m["method"].as_str().unwrap_or("(response)")).collect();
    assert_eq!(methods, vec!["notifications/progress", "(response)"]);
    assert_eq!(first.result()["resultType"], "input_required");
    // The stream was read to its end and closed; the call is still parked and completes.
    assert_eq!(srv.server.metrics().mrtr_parked_count(), 1);
    let params = json!({"name": "progress_then_ask", "requestState": first.state(), "inputResponses": {"go": {"action": "accept", "content": {"ok": true}}}});
    let done = client.send(json!(2), "tools/call", params, json!({})).await;
    assert_eq!(text(&done), "done");
}

#[tokio::test]
async fn a_client_that_never_retries_leaves_nothing_behind() {
    let config = ServerConfig { elicitation_timeout: Duration::from_millis(300), ..ServerConfig::default() };
    let srv = start(config, HttpConfig::default()).await;
    let client = Modern::new(&srv.url);
    let args = json!({"message": "hi"});
    let first = client.call(1, "test_elicitation", args.clone()).await;
    assert_eq!(srv.server.metrics().mrtr_parked_count(), 1);
    let deadline = tokio::time::Instant::now() + Duration::from_secs(5);
    while srv.server.metrics().mrtr_round_count("abandoned") == 0 {
        assert!(tokio::time::Instant::now() < deadline, "the parked call was never given up");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert_eq!(srv.server.metrics().mrtr_parked_count(), 0);
    let late = client.retry(2, "test_elicitation", args, &first.state(), json!({})).await;
    assert_eq!(late.error_code(), Some(-32602));
    assert!(late.last()["error"]["message"].as_str().unwrap().contains("expired"), "{}", late.last());
}

#[tokio::test]
async fn closing_the_retry_cancels_the_handler() {
    let srv = start_default().await;
    let client = Modern::new(&srv.url);
    let first = client.call(1, "ask_then_wait", json!({"flag": "one-node"})).await;
    let go = json!({"go": {"action": "accept", "content": {"ok": true}}});
    let retry = client.retry_giving_up("ask_then_wait", json!({"flag": "one-node"}), &first.state(), go, Duration::from_millis(500)).await;
    // The retry is answered only when the handler ends; the client gives up first.
    if let Ok(res) = retry {
        assert!(res.text().await.is_err(), "the handler ended without being cancelled");
    }
    let deadline = tokio::time::Instant::now() + Duration::from_secs(5);
    while !was_dropped("one-node") {
        assert!(tokio::time::Instant::now() < deadline, "the handler was not cancelled");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// A store whose deliveries commit but whose replies are lost (as when the leader changes
/// between the commit and its reply): the caller hears "unavailable", a while later.
struct LostDeliverReplies(InMemoryMailbox);

#[async_trait::async_trait]
impl Mailbox for LostDeliverReplies {
    async fn create(&self, key: &MailboxKey, session: SessionTag, owner: NodeId, ttl: Duration) -> Result<CreateOutcome, MailboxError> {
        self.0.create(key, session, owner, ttl).await
    }
    async fn deliver(
        &self,
        key: &MailboxKey,
        session: SessionTag,
        addressee: Option<Addressee>,
        value: Value,
    ) -> Result<DeliverOutcome, MailboxError> {
        self.0.deliver(key, session, addressee, value).await?;
        tokio::time::sleep(Duration::from_millis(300)).await;
        Err(MailboxError::Unavailable("the reply was lost".into()))
    }
    async fn wait(&self, key: &MailboxKey, timeout: Duration) -> Result<WaitOutcome, MailboxError> {
        self.0.wait(key, timeout).await
    }
    async fn delete(&self, key: &MailboxKey) -> Result<(), MailboxError> {
        self.0.delete(key).await
    }
}

#[tokio::test]
async fn a_retry_whose_commit_reply_was_lost_gets_the_outcome_of_the_round_its_answers_ended() {
    let stores = (Arc::new(LostDeliverReplies(InMemoryMailbox::new())), Arc::new(InMemorySessionStore::new(Duration::from_secs(3600))));
    let srv = common::start_server(common::builder(ServerConfig::default()).build(stores.0, stores.1), HttpConfig::default()).await;
    let client = Modern::new(&srv.url);
    let args = json!({"message": "hi"});
    let first = client.call(1, "test_elicitation", args.clone()).await;
    let key = first.result()["inputRequests"].as_object().unwrap().keys().next().unwrap().clone();
    let answer = json!({key: {"action": "accept", "content": {"username": "ada", "email": "ada@example.com"}}});
    let second = client.retry(2, "test_elicitation", args, &first.state(), answer).await;
    // Not "send the retry again": sent again, it would be refused as already used.
    assert_eq!(second.result()["resultType"], "complete", "{:?}", second.last());
    assert!(text(&second).contains("ada@example.com"), "{}", text(&second));
}
