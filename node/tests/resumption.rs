//! Resuming a broken SSE stream with GET + Last-Event-ID, and server-initiated disconnects.

mod common;

use common::{RawClient, countdown_broken_after, data, progress_values, read_events, start_default};
use serde_json::json;
use switchboard_node::server::correlation::SealedEvent;

#[tokio::test]
async fn a_dropped_stream_resumes_without_loss_or_duplicates() {
    let srv = start_default().await;
    let mut client = RawClient::new(&srv.url);
    client.initialize().await;
    // Priming event and two progress notifications, then the connection breaks.
    let before = countdown_broken_after(&client, 3).await;
    let last = before.last().unwrap().id.clone().unwrap();

    let mut resumed = client.get().header("last-event-id", &last).send().await.unwrap();
    assert_eq!(resumed.status(), 200);
    let after = read_events(&mut resumed, usize::MAX, &mut String::new()).await;

    let mut all = data(&before);
    all.extend(data(&after));
    assert_eq!(progress_values(&all), vec![1.0, 2.0, 3.0, 4.0, 5.0, 6.0], "every notification exactly once, in order");
    assert_eq!(all.last().unwrap()["id"], 1);
    assert!(all.last().unwrap()["result"].is_object());
    // Every event has its own (sealed) id.
    let mut ids: Vec<&String> = before.iter().chain(&after).map(|e| e.id.as_ref().unwrap()).collect();
    let count = ids.len();
    ids.sort();
    ids.dedup();
    assert_eq!(ids.len(), count);

    // Resuming again from the last event replays nothing and ends (the stream is finished).
    let final_id = after.last().unwrap().id.clone().unwrap();
    let res = client.get().header("last-event-id", final_id).send().await.unwrap();
    assert_eq!(res.status(), 200);
    assert!(data(&common::parse_sse(&res.text().await.unwrap())).is_empty());
}

#[tokio::test]
async fn server_closes_the_stream_and_the_client_polls_for_the_result() {
    let srv = start_default().await;
    let mut client = RawClient::new(&srv.url);
    client.initialize().await;
    let call = json!({"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": {"name": "test_reconnection", "arguments": {}}});
    let res = client.post(call.to_string()).send().await.unwrap();
    let events = common::parse_sse(&res.text().await.unwrap());
    assert_eq!(events.len(), 1, "only the priming event before the server closes: {events:?}");
    assert!(events[0].retry.is_some());

    let res = client.get().header("last-event-id", events[0].id.clone().unwrap()).send().await.unwrap();
    let messages = data(&common::parse_sse(&res.text().await.unwrap()));
    assert_eq!(messages.len(), 1);
    assert_eq!(messages[0]["id"], 1);
    assert!(messages[0]["result"]["content"][0]["text"].as_str().unwrap().starts_with("Reconnection test completed"));
}

/// A finished call's stream stays resumable, but without the requests it sent: their call is
/// over, so asking the client again would be for nothing (and the stream keeps less).
#[tokio::test]
async fn a_finished_stream_resumes_with_its_result_not_the_request_it_answered() {
    let srv = start_default().await;
    let mut client = RawClient::new(&srv.url);
    client.initialize().await;
    let call = json!({"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": {"name": "confirm", "arguments": {"action": "ship"}}});
    let mut res = client.post(call.to_string()).send().await.unwrap();
    let mut buffer = String::new();
    let [priming, asked] = <[_; 2]>::try_from(read_events(&mut res, 2, &mut buffer).await).unwrap();
    assert!(priming.data.is_empty(), "the priming event comes first: {priming:?}");
    let request: serde_json::Value = serde_json::from_str(&asked.data).unwrap();
    assert_eq!(request["method"], "elicitation/create");
    drop(res);

    let answer = json!({"jsonrpc": "2.0", "id": request["id"], "result": {"action": "accept", "content": {"confirm": true}}});
    assert_eq!(client.post(answer.to_string()).send().await.unwrap().status(), 202);
    // Read on from the request to the end: the stream ends once the call has finished.
    let mut after_request = client.get().header("last-event-id", asked.id.clone().unwrap()).send().await.unwrap();
    let rest = data(&read_events(&mut after_request, usize::MAX, &mut String::new()).await);
    assert_eq!(rest.len(), 1, "only the result follows the request: {rest:?}");
    assert_eq!(rest[0]["result"]["structuredContent"]["answer"], "confirmed");

    let mut from_start = client.get().header("last-event-id", priming.id.clone().unwrap()).send().await.unwrap();
    assert_eq!(from_start.status(), 200);
    let replayed = read_events(&mut from_start, usize::MAX, &mut String::new()).await;
    assert_eq!(replayed.len(), 1, "the answered request is not asked again: {replayed:?}");
    assert_eq!(data(&replayed), rest);
}

#[tokio::test]
async fn another_sessions_or_malformed_event_ids_are_refused() {
    let srv = start_default().await;
    let mut owner = RawClient::new(&srv.url);
    owner.initialize().await;
    let call = json!({"jsonrpc": "2.0", "id": 1, "method": "tools/call",
        "params": {"name": "countdown", "arguments": {"steps": 1, "delay_ms": 1}, "_meta": {"progressToken": 1}}});
    let res = owner.post(call.to_string()).send().await.unwrap();
    let events = common::parse_sse(&res.text().await.unwrap());
    let id = events[0].id.clone().unwrap();

    let mut stranger = RawClient::new(&srv.url);
    stranger.initialize().await;
    assert_eq!(stranger.get().header("last-event-id", &id).send().await.unwrap().status(), 400, "another session's event id");
    assert_eq!(stranger.get().header("last-event-id", "garbage").send().await.unwrap().status(), 400);
    // Well sealed, but no such stream (any more).
    let session = owner.session.clone().unwrap();
    let gone = srv.server.sealer().seal_event(SealedEvent { owner: 0, stream: 999_999, seq: 1 }, &session);
    assert_eq!(owner.get().header("last-event-id", gone).send().await.unwrap().status(), 404);
}
