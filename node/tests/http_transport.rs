//! Streamable HTTP status-code and framing rules, over real HTTP with a hand-driven client.

mod common;

use common::{ACCEPT_BOTH, RawClient, parse_sse, read_events, read_until_request, start, start_default};
use serde_json::{Value, json};
use std::time::Duration;
use switchboard_node::mailbox::WaitOutcome;
use switchboard_node::protocol::jsonrpc::RequestId;
use switchboard_node::server::ServerConfig;
use switchboard_node::transport::http::HttpConfig;

const PING: &str = r#"{"jsonrpc":"2.0","id":7,"method":"ping"}"#;

#[tokio::test]
async fn initialize_assigns_a_visible_ascii_session_and_answers_json() {
    let srv = start_default().await;
    let client = RawClient::new(&srv.url);
    let body = json!({"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": {
        "protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "raw", "version": "1"}}});
    let res = client.post(body.to_string()).send().await.unwrap();
    assert_eq!(res.status(), 200);
    assert_eq!(res.headers()["content-type"], "application/json");
    let session = res.headers()["mcp-session-id"].to_str().unwrap().to_string();
    assert!(session.len() >= 32 && session.bytes().all(|b| (0x21..=0x7e).contains(&b)));
    let result: Value = res.json().await.unwrap();
    assert_eq!(result["result"]["protocolVersion"], "2025-06-18");
    assert_eq!(result["result"]["capabilities"]["resources"]["subscribe"], true);

    // An unknown version gets our latest; two sessions never share an id.
    let mut other = RawClient::new(&srv.url);
    let init = other.initialize_with(json!({}), "1999-01-01").await;
    assert_eq!(init["result"]["protocolVersion"], "2025-11-25");
    assert_ne!(other.session.unwrap(), session);
}

#[tokio::test]
async fn accept_and_content_type_are_enforced() {
    let srv = start_default().await;
    let mut client = RawClient::new(&srv.url);
    client.initialize().await;
    for accept in ["application/json", "text/event-stream", "text/html", "application/json, text/event-stream;q=0"] {
        let res = client.post_without_accept(PING).header("accept", accept).send().await.unwrap();
        assert_eq!(res.status(), 406, "Accept: {accept}");
    }
    let res = client
        .http
        .post(&client.url)
        .header("accept", ACCEPT_BOTH)
        .header("content-type", "text/plain")
        .header("mcp-session-id", client.session.clone().unwrap())
        .body(PING)
        .send()
        .await
        .unwrap();
    assert_eq!(res.status(), 415);
    let res = client.post_without_accept(PING).header("accept", "*/*").send().await.unwrap();
    assert_eq!(res.status(), 200, "a wildcard allows both");
    let res = client
        .http
        .get(&client.url)
        .header("accept", "application/json")
        .header("mcp-session-id", client.session.clone().unwrap())
        .send()
        .await
        .unwrap();
    assert_eq!(res.status(), 406);
}

#[tokio::test]
async fn sessions_are_required_known_and_terminable() {
    let srv = start_default().await;
    let mut client = RawClient::new(&srv.url);
    let res = client.post(PING).send().await.unwrap();
    assert_eq!(res.status(), 400, "no session header");
    client.session = Some("not-a-session".into());
    assert_eq!(client.post(PING).send().await.unwrap().status(), 404);
    assert_eq!(client.get().send().await.unwrap().status(), 404);

    client.initialize().await;
    assert_eq!(client.post(PING).send().await.unwrap().status(), 200);
    let res = client.http.delete(&client.url).header("mcp-session-id", client.session.clone().unwrap()).send().await.unwrap();
    assert!(res.status().is_success());
    assert_eq!(client.post(PING).send().await.unwrap().status(), 404, "terminated session");
    let res = client.http.delete(&client.url).header("mcp-session-id", client.session.clone().unwrap()).send().await.unwrap();
    assert_eq!(res.status(), 404);
}

#[tokio::test]
async fn protocol_version_header_is_validated() {
    let srv = start_default().await;
    let mut client = RawClient::new(&srv.url);
    client.initialize().await;
    // A handshake-era version this server does not speak.
    let res = client.post(PING).header("mcp-protocol-version", "2024-11-05").send().await.unwrap();
    assert_eq!(res.status(), 400);
    assert!(res.text().await.unwrap().contains("Unsupported MCP-Protocol-Version"));
    // Any other version makes the request a 2026-07-28 one, which must carry its `_meta`.
    let res = client.post(PING).header("mcp-protocol-version", "2099-01-01").send().await.unwrap();
    assert_eq!(res.status(), 400);
    let body: Value = res.json().await.unwrap();
    assert_eq!((body["id"].clone(), body["error"]["code"].clone()), (json!(7), json!(-32602)), "{body}");
    for version in ["2025-11-25", "2025-06-18", "2025-03-26"] {
        let res = client.post(PING).header("mcp-protocol-version", version).send().await.unwrap();
        assert_eq!(res.status(), 200, "{version}");
    }
}

#[tokio::test]
async fn host_and_origin_are_checked_against_the_allow_list() {
    let srv = start_default().await;
    let client = RawClient::new(&srv.url);
    let init = json!({"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": {
        "protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "raw", "version": "1"}}})
    .to_string();
    let res = client.post(init.clone()).header("host", "evil.example.com").send().await.unwrap();
    assert_eq!(res.status(), 403);
    let res = client.post(init.clone()).header("origin", "http://evil.example.com").send().await.unwrap();
    assert_eq!(res.status(), 403);
    let res = client.post(init.clone()).header("origin", format!("http://localhost:{}", srv.addr.port())).send().await.unwrap();
    assert_eq!(res.status(), 200);

    // An operator can widen the list.
    let open = start(ServerConfig::default(), HttpConfig { allowed_hosts: vec!["mcp.example.com".into()], ..Default::default() }).await;
    let client = RawClient::new(&open.url);
    let res = client.post(init.clone()).header("host", "mcp.example.com").send().await.unwrap();
    assert_eq!(res.status(), 200);
    let res = client.post(init).send().await.unwrap();
    assert_eq!(res.status(), 403, "127.0.0.1 is no longer listed");
}

/// `Host` and `Origin` are checked against separate lists: `*` for hosts accepts any Host but
/// never any Origin; origins default to http and https on any port of the named hosts.
#[tokio::test]
async fn hosts_and_origins_are_separate_lists() {
    use switchboard_contract::origin::parse_allowed_origin;
    let init = json!({"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": {
        "protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "raw", "version": "1"}}})
    .to_string();
    let config = |hosts: &[&str], origins: &[&str]| HttpConfig {
        allowed_hosts: hosts.iter().map(|h| h.to_string()).collect(),
        allowed_origins: origins.iter().map(|o| parse_allowed_origin(o).unwrap()).collect(),
        ..Default::default()
    };
    // (allowed hosts, allowed origins, Host sent (None: the server's address), Origin sent,
    //  refused because of: None for 200, else the header that made it 403)
    type Row<'a> = (&'a [&'a str], &'a [&'a str], Option<&'a str>, Option<&'a str>, Option<&'a str>);
    let table: &[Row] = &[
        // The defaults: loopback hosts, their http(s) origins on any port.
        (&["localhost", "127.0.0.1", "[::1]"], &[], None, None, None),
        (&["localhost", "127.0.0.1", "[::1]"], &[], Some("evil.example.com"), None, Some("host")),
        (&["localhost", "127.0.0.1", "[::1]"], &[], None, Some("http://localhost:5173"), None),
        (&["localhost", "127.0.0.1", "[::1]"], &[], None, Some("https://127.0.0.1"), None),
        (&["localhost", "127.0.0.1", "[::1]"], &[], None, Some("http://evil.example.com"), Some("origin")),
        (&["localhost", "127.0.0.1", "[::1]"], &[], None, Some("http://localhost.evil.example.com"), Some("origin")),
        (&["localhost", "127.0.0.1", "[::1]"], &[], None, Some("null"), Some("origin")),
        (&["localhost", "127.0.0.1", "[::1]"], &[], None, Some("file://localhost"), Some("origin")),
        // Any Host, but still no foreign Origin: `*` derives no origin at all.
        (&["*"], &[], Some("evil.example.com"), None, None),
        (&["*"], &[], Some("evil.example.com"), Some("http://evil.example.com"), Some("origin")),
        (&["*"], &[], None, Some("http://localhost:3000"), Some("origin")),
        // Any Host, listed origins only, on their exact port.
        (&["*"], &["https://app.example.com"], Some("mcp.internal"), Some("https://app.example.com"), None),
        (&["*"], &["https://app.example.com"], Some("mcp.internal"), Some("https://app.example.com:443"), None),
        (&["*"], &["https://app.example.com"], Some("mcp.internal"), Some("https://app.example.com:8443"), Some("origin")),
        (&["*"], &["https://app.example.com"], Some("mcp.internal"), Some("http://app.example.com"), Some("origin")),
        (&["*"], &["https://app.example.com"], Some("mcp.internal"), Some("https://evil.example.com"), Some("origin")),
        // A named host: its own origins pass, the loopback defaults are gone.
        (&["mcp.example.com"], &[], Some("mcp.example.com"), Some("https://mcp.example.com"), None),
        (&["mcp.example.com"], &[], Some("MCP.example.com:8080"), Some("http://mcp.example.com:8080"), None),
        (&["mcp.example.com"], &[], None, None, Some("host")),
        (&["mcp.example.com"], &[], Some("mcp.example.com"), Some("http://localhost:8080"), Some("origin")),
        // Listed origins replace the derived ones.
        (&["mcp.example.com"], &["https://app.example.com"], Some("mcp.example.com"), Some("https://mcp.example.com"), Some("origin")),
    ];
    for (i, (hosts, origins, host, origin, refused)) in table.iter().enumerate() {
        let srv = start(ServerConfig::default(), config(hosts, origins)).await;
        let client = RawClient::new(&srv.url);
        let mut request = client.post(init.clone());
        if let Some(host) = host {
            request = request.header("host", *host);
        }
        if let Some(origin) = origin {
            request = request.header("origin", *origin);
        }
        let res = request.send().await.unwrap();
        let row = format!("row {i}: hosts {hosts:?}, origins {origins:?}, Host {host:?}, Origin {origin:?}");
        let Some(reason) = refused else {
            assert_eq!(res.status(), 200, "{row}");
            continue;
        };
        assert_eq!(res.status(), 403, "{row}");
        let body: Value = res.json().await.unwrap();
        assert_eq!((&body["jsonrpc"], &body["id"], &body["error"]["code"]), (&json!("2.0"), &Value::Null, &json!(-32000)), "{row}: {body}");
        let expected = if *reason == "origin" { "Invalid Origin" } else { "Invalid Host" };
        assert!(body["error"]["message"].as_str().unwrap().starts_with(expected), "{row}: {body}");
        assert_eq!(srv.server.metrics().http_refused_count(reason), 1, "{row}: counted as {reason}");
    }
}

#[tokio::test]
async fn oversized_bodies_get_413_and_change_nothing() {
    let srv = start(ServerConfig::default(), HttpConfig { max_body_bytes: 1024, ..Default::default() }).await;
    let mut client = RawClient::new(&srv.url);
    client.initialize().await;
    let big =
        json!({"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": {"name": "echo", "arguments": {"text": "x".repeat(4096)}}});
    let res = client.post(big.to_string()).send().await.unwrap();
    assert_eq!(res.status(), 413);
    assert_eq!(client.post(PING).send().await.unwrap().status(), 200);
}

#[tokio::test]
async fn notifications_and_client_responses_get_202_without_body() {
    let srv = start_default().await;
    let mut client = RawClient::new(&srv.url);
    client.initialize().await;
    for body in [
        json!({"jsonrpc": "2.0", "method": "notifications/roots/list_changed"}),
        json!({"jsonrpc": "2.0", "id": "sb:00000000000000000000000000000000", "result": {}}),
        json!({"jsonrpc": "2.0", "id": 99, "error": {"code": -1, "message": "nobody asked"}}),
    ] {
        let res = client.post(body.to_string()).send().await.unwrap();
        assert_eq!(res.status(), 202, "{body}");
        assert!(res.text().await.unwrap().is_empty());
    }
    // Answers that are not ours are counted, not delivered.
    assert_eq!(srv.server.metrics().orphan_count("foreign_id"), 2);
}

#[tokio::test]
async fn forged_and_cross_session_answers_are_dropped_and_the_real_one_wins() {
    let srv = start_default().await;
    let mut owner = RawClient::new(&srv.url);
    owner.initialize().await;
    let mut stranger = RawClient::new(&srv.url);
    stranger.initialize().await;
    let call = json!({"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": {"name": "confirm", "arguments": {"action": "ship"}}});
    let mut res = owner.post(call.to_string()).send().await.unwrap();
    let mut buffer = String::new();
    let request = read_until_request(&mut res, &mut buffer).await;
    assert_eq!(request["method"], "elicitation/create");
    let id = request["id"].as_str().unwrap().to_string();
    assert!(id.starts_with("sb2."), "sealed id: {id}");

    let answer = |id: &str| json!({"jsonrpc": "2.0", "id": id, "result": {"action": "accept", "content": {"confirm": true}}}).to_string();
    let mut tampered = id.clone().into_bytes();
    // A character inside the ciphertext (the last one may only carry padding bits).
    let inside = tampered.len() - 10;
    tampered[inside] = if tampered[inside] == b'A' { b'B' } else { b'A' };
    let tampered = String::from_utf8(tampered).unwrap();
    assert_eq!(owner.post(answer(&tampered)).send().await.unwrap().status(), 202);
    assert_eq!(stranger.post(answer(&id)).send().await.unwrap().status(), 202);
    assert_eq!(srv.server.metrics().orphan_count("tampered"), 1);
    assert_eq!(srv.server.metrics().orphan_count("wrong_session"), 1);

    assert_eq!(owner.post(answer(&id)).send().await.unwrap().status(), 202);
    let rest = read_events(&mut res, usize::MAX, &mut buffer).await;
    let result: Value = serde_json::from_str(&rest.last().unwrap().data).unwrap();
    assert_eq!(result["result"]["structuredContent"]["answer"], "confirmed");
    // A second copy of the real answer is a counted duplicate.
    assert_eq!(owner.post(answer(&id)).send().await.unwrap().status(), 202);
    assert_eq!(srv.server.metrics().orphan_count("deleted") + srv.server.metrics().orphan_count("duplicate"), 1);
}

/// The attack on the old fingerprint construction ended with a victim's id re-sealed for the
/// attacker's session. Should a seal ever be broken again, the mailbox itself still refuses an
/// answer from any session but its own: here the id is re-sealed with the real key, as the
/// attacker would have done.
#[tokio::test]
async fn an_id_rebound_to_another_session_is_refused_by_the_mailbox_as_wrong_session() {
    let srv = start_default().await;
    let mut victim = RawClient::new(&srv.url);
    victim.initialize().await;
    let mut attacker = RawClient::new(&srv.url);
    attacker.initialize().await;
    let call = json!({"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": {"name": "confirm", "arguments": {"action": "delete production"}}});
    let mut res = victim.post(call.to_string()).send().await.unwrap();
    let mut buffer = String::new();
    let request = read_until_request(&mut res, &mut buffer).await;
    let leaked = RequestId::String(request["id"].as_str().unwrap().to_string());
    let sealer = srv.server.sealer();
    let opened = sealer.open_request(&leaked, victim.session.as_deref().unwrap()).unwrap();
    let rebound = sealer.seal_request(&opened, attacker.session.as_deref().unwrap());
    let answer =
        |id: &RequestId| json!({"jsonrpc": "2.0", "id": id, "result": {"action": "accept", "content": {"confirm": true}}}).to_string();
    assert_eq!(attacker.post(answer(&rebound)).send().await.unwrap().status(), 202);
    assert_eq!(srv.server.metrics().orphan_count("wrong_session"), 1, "refused by the mailbox");
    // The victim's call is still waiting, and their own answer is the one that counts.
    let decline = json!({"jsonrpc": "2.0", "id": &leaked, "result": {"action": "decline"}}).to_string();
    assert_eq!(victim.post(decline).send().await.unwrap().status(), 202);
    let rest = read_events(&mut res, usize::MAX, &mut buffer).await;
    let result: Value = serde_json::from_str(&rest.last().unwrap().data).unwrap();
    assert_ne!(result["result"]["structuredContent"]["answer"], "confirmed", "{result}");
}

#[tokio::test]
async fn get_is_405_when_the_standalone_stream_is_off() {
    let srv = start(ServerConfig::default(), HttpConfig { standalone_stream: false, ..Default::default() }).await;
    let mut client = RawClient::new(&srv.url);
    client.initialize().await;
    let res = client.get().send().await.unwrap();
    assert_eq!(res.status(), 405);
    assert!(res.headers()["allow"].to_str().unwrap().contains("POST"));
}

#[tokio::test]
async fn plain_answers_are_json_and_anything_emitted_first_upgrades_to_sse() {
    let srv = start_default().await;
    let mut client = RawClient::new(&srv.url);
    client.initialize().await;
    let echo = json!({"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": {"name": "echo", "arguments": {"text": "hi"}}});
    let res = client.post(echo.to_string()).send().await.unwrap();
    assert_eq!(res.headers()["content-type"], "application/json");
    let body: Value = res.json().await.unwrap();
    assert_eq!(body["result"]["content"][0]["text"], "hi");

    let countdown = json!({"jsonrpc": "2.0", "id": 2, "method": "tools/call",
        "params": {"name": "countdown", "arguments": {"steps": 3, "delay_ms": 1}, "_meta": {"progressToken": "p"}}});
    let res = client.post(countdown.to_string()).send().await.unwrap();
    assert_eq!(res.headers()["content-type"], "text/event-stream");
    let events = parse_sse(&res.text().await.unwrap());
    // Priming event first (id, retry, empty data), ids on every event, the result last, then the end.
    assert_eq!(events[0].data, "");
    assert!(events[0].retry.is_some());
    assert!(events.iter().all(|e| e.id.is_some()));
    let messages: Vec<Value> = events[1..].iter().map(|e| serde_json::from_str(&e.data).unwrap()).collect();
    let progress: Vec<f64> =
        messages.iter().filter(|m| m["method"] == "notifications/progress").map(|m| m["params"]["progress"].as_f64().unwrap()).collect();
    assert_eq!(progress, vec![1.0, 2.0, 3.0]);
    assert!(messages.iter().all(|m| m["method"] != "notifications/progress" || m["params"]["progressToken"] == "p"));
    assert_eq!(messages.last().unwrap()["id"], 2);
    assert_eq!(messages.last().unwrap()["result"]["content"][0]["text"], "counted down 3 steps");

    // No progress token: no notifications, so plain JSON again.
    let quiet = json!({"jsonrpc": "2.0", "id": 3, "method": "tools/call", "params": {"name": "countdown", "arguments": {"steps": 2, "delay_ms": 1}}});
    let res = client.post(quiet.to_string()).send().await.unwrap();
    assert_eq!(res.headers()["content-type"], "application/json");
}

#[tokio::test]
async fn older_protocol_versions_get_no_priming_event() {
    let srv = start_default().await;
    let mut client = RawClient::new(&srv.url);
    client.initialize_with(json!({}), "2025-06-18").await;
    let countdown = json!({"jsonrpc": "2.0", "id": 2, "method": "tools/call",
        "params": {"name": "countdown", "arguments": {"steps": 1, "delay_ms": 1}, "_meta": {"progressToken": 1}}});
    let res = client.post(countdown.to_string()).send().await.unwrap();
    let events = parse_sse(&res.text().await.unwrap());
    assert!(events.iter().all(|e| !e.data.is_empty()), "{events:?}");
}

#[tokio::test]
async fn standalone_stream_carries_session_notifications_and_keep_alives() {
    let srv = start(ServerConfig::default(), HttpConfig { keep_alive: Duration::from_millis(100), ..Default::default() }).await;
    let mut client = RawClient::new(&srv.url);
    client.initialize().await;
    let reply = client.call(1, "resources/subscribe", json!({"uri": "test://watched-resource"})).await;
    assert_eq!(reply["result"], json!({}));

    let mut stream = client.get().send().await.unwrap();
    assert_eq!(stream.status(), 200);
    let mut buffer = String::new();
    let priming = read_events(&mut stream, 1, &mut buffer).await;
    assert_eq!(priming[0].data, "");

    srv.server.notify_resource_updated("test://watched-resource");
    srv.server.notify_resource_updated("test://not-subscribed");
    srv.server.remove_tool("echo");
    let events = read_events(&mut stream, 2, &mut buffer).await;
    let messages: Vec<Value> = events.iter().map(|e| serde_json::from_str(&e.data).unwrap()).collect();
    assert_eq!(messages[0]["method"], "notifications/resources/updated");
    assert_eq!(messages[0]["params"]["uri"], "test://watched-resource");
    assert_eq!(messages[1]["method"], "notifications/tools/list_changed");

    // Idle: a keep-alive comment arrives.
    let chunk = tokio::time::timeout(Duration::from_secs(2), stream.chunk()).await.unwrap().unwrap().unwrap();
    assert!(std::str::from_utf8(&chunk).unwrap().starts_with(": keep-alive"));

    // Unsubscribed: no more updates.
    client.call(2, "resources/unsubscribe", json!({"uri": "test://watched-resource"})).await;
    let tools = client.call(3, "tools/list", json!({})).await;
    assert!(tools["result"]["tools"].as_array().unwrap().iter().all(|t| t["name"] != "echo"));
}

#[tokio::test]
async fn cancelled_requests_stop_and_send_no_response() {
    let srv = start_default().await;
    let mut client = RawClient::new(&srv.url);
    client.initialize().await;
    let call = json!({"jsonrpc": "2.0", "id": 5, "method": "tools/call",
        "params": {"name": "wait_for_cancel", "arguments": {}, "_meta": {"progressToken": 5}}});
    let mut res = client.post(call.to_string()).send().await.unwrap();
    let mut buffer = String::new();
    let first = read_events(&mut res, 2, &mut buffer).await;
    assert!(first[1].data.contains("notifications/progress"));
    let cancel = json!({"jsonrpc": "2.0", "method": "notifications/cancelled", "params": {"requestId": 5, "reason": "test"}});
    assert_eq!(client.post(cancel.to_string()).send().await.unwrap().status(), 202);
    let rest = read_events(&mut res, usize::MAX, &mut buffer).await;
    assert!(rest.iter().all(|e| !e.data.contains("\"result\"")), "a cancelled request sends no response: {rest:?}");
    // The session goes on.
    let pong = client.call(6, "ping", json!({})).await;
    assert_eq!(pong["result"], json!({}));
}

/// The call is cancelled while its elicitation is out: the mailbox goes with it, so the
/// client's late answer is told the request is gone (counted `deleted`), not acknowledged into
/// a mailbox no one waits on until its deadline.
#[tokio::test]
async fn a_call_cancelled_while_it_waits_for_an_answer_deletes_its_mailbox() {
    let srv = start_default().await;
    let mut client = RawClient::new(&srv.url);
    client.initialize().await;
    let call = json!({"jsonrpc": "2.0", "id": 9, "method": "tools/call", "params": {"name": "confirm", "arguments": {"action": "ship"}}});
    let mut res = client.post(call.to_string()).send().await.unwrap();
    let mut buffer = String::new();
    let request = read_until_request(&mut res, &mut buffer).await;
    let id = RequestId::String(request["id"].as_str().unwrap().to_string());
    let key = srv.server.sealer().open_request(&id, client.session.as_deref().unwrap()).unwrap().key;

    let cancel = json!({"jsonrpc": "2.0", "method": "notifications/cancelled", "params": {"requestId": 9, "reason": "changed my mind"}});
    assert_eq!(client.post(cancel.to_string()).send().await.unwrap().status(), 202);
    let give_up = tokio::time::Instant::now() + Duration::from_secs(5);
    let mut state = srv.server.mailbox().wait(&key, Duration::ZERO).await.unwrap();
    while state != WaitOutcome::Deleted && tokio::time::Instant::now() < give_up {
        tokio::time::sleep(Duration::from_millis(10)).await;
        state = srv.server.mailbox().wait(&key, Duration::ZERO).await.unwrap();
    }
    assert_eq!(state, WaitOutcome::Deleted, "the cancelled call's mailbox is deleted");

    let late = json!({"jsonrpc": "2.0", "id": &id, "result": {"action": "accept", "content": {"confirm": true}}});
    assert_eq!(client.post(late.to_string()).send().await.unwrap().status(), 202);
    assert_eq!(srv.server.metrics().orphan_count("deleted"), 1, "the late answer is told the request is gone");
    let rest = read_events(&mut res, usize::MAX, &mut buffer).await;
    assert!(rest.iter().all(|e| !e.data.contains("\"result\"")), "a cancelled call sends no response: {rest:?}");
}

#[tokio::test]
async fn url_mode_elicitation_needs_its_capability_and_completes() {
    let srv = start_default().await;
    let call = json!({"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": {"name": "visit", "arguments": {"url": "https://example.com/login"}}});

    // A client with form mode only gets a typed error and no request.
    let mut form_only = RawClient::new(&srv.url);
    form_only.initialize_with(json!({"elicitation": {"form": {}}}), "2025-11-25").await;
    let reply = form_only.call(1, "tools/call", call["params"].clone()).await;
    assert_eq!(reply["result"]["isError"], true);
    assert!(reply["result"]["content"][0]["text"].as_str().unwrap().contains("elicitation.url"));

    let mut client = RawClient::new(&srv.url);
    client.initialize_with(json!({"elicitation": {"url": {}}}), "2025-11-25").await;
    let mut res = client.post(call.to_string()).send().await.unwrap();
    let mut buffer = String::new();
    let request = read_until_request(&mut res, &mut buffer).await;
    assert_eq!(request["params"]["mode"], "url");
    assert_eq!(request["params"]["url"], "https://example.com/login");
    let elicitation_id = request["params"]["elicitationId"].as_str().unwrap().to_string();
    let answer = json!({"jsonrpc": "2.0", "id": request["id"], "result": {"action": "accept"}});
    assert_eq!(client.post(answer.to_string()).send().await.unwrap().status(), 202);
    let rest: Vec<Value> =
        read_events(&mut res, usize::MAX, &mut buffer).await.iter().map(|e| serde_json::from_str(&e.data).unwrap()).collect();
    assert_eq!(rest[0]["method"], "notifications/elicitation/complete");
    assert_eq!(rest[0]["params"]["elicitationId"], elicitation_id);
    assert_eq!(rest.last().unwrap()["result"]["structuredContent"]["action"], "accept");
}
