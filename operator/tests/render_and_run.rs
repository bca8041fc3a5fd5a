//! Render and run: the StatefulSet the operator builds for a 3-replica McpServer becomes three
//! local `switchboard serve` processes, started with the pod template's command, args and
//! environment exactly as Kubernetes would resolve them (`$(VAR)` expansion, `fieldRef`,
//! `configMapKeyRef`), with each pod's DNS name mapped to its own loopback address and the
//! volume paths to temporary directories. The cluster forms and serves a cross-node
//! elicitation; then the operator's membership code scales it up and back down against the
//! real admin API while that call stays parked, and the call still completes.
//!
//! Needs the `switchboard` binary next to this test's executable (`cargo test --workspace`
//! builds it; alone: `cargo build -p switchboard-node --bin switchboard`).

mod common;

use std::time::Duration;

use common::{Cluster, Session, expand, mcpserver, next_message, render, scale};
use serde_json::json;
use switchboard_operator::builders;
use switchboard_operator::membership::{self, HttpAdmin, Step};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_rendered_statefulset_runs_as_a_cluster_that_serves_and_scales() {
    let mcp = mcpserver(json!({
        "image": "switchboard:test",
        "raft": {"heartbeatInterval": "50ms", "electionTimeout": "300ms"},
        "timeouts": {"elicitation": "2m"}
    }));
    let mut cluster = Cluster::new(&mcp, 5);
    for i in 0..3 {
        cluster.start(i);
    }
    for i in 0..3 {
        cluster.wait_ready(i).await;
    }
    let admin = HttpAdmin::new(Duration::from_secs(5)).unwrap();
    let formed = cluster.wait_status(&admin, "three voters and a leader", |s| s.voters.len() == 3 && s.leader.is_some()).await;
    assert_eq!(formed.voters, vec![0, 1, 2]);
    assert_eq!(membership::plan(3, 3, &formed).step, None, "founded by --peers: nothing for the operator to do");

    // A call parked on node 0: its elicitation question arrives on node 0's stream.
    let session = Session::open(&cluster.mcp_url(0)).await;
    // The pods answer the Service's names, and no foreign browser page.
    let ping = json!({"jsonrpc": "2.0", "id": 1, "method": "ping"}).to_string();
    let send = |host: &'static str, origin: Option<&'static str>| {
        let mut request = session.http.post(cluster.mcp_url(1)).header("host", host).header("mcp-session-id", &session.id);
        if let Some(origin) = origin {
            request = request.header("origin", origin);
        }
        request.header("accept", "application/json, text/event-stream").header("content-type", "application/json").body(ping.clone()).send()
    };
    assert_eq!(send("demo", None).await.unwrap().status(), 200);
    assert_eq!(send("demo.tools:8080", Some("http://demo.tools:8080")).await.unwrap().status(), 200);
    assert_eq!(send("demo.tools", Some("https://evil.example.com")).await.unwrap().status(), 403);
    assert_eq!(send("evil.example.com", None).await.unwrap().status(), 403);
    let call = json!({"jsonrpc": "2.0", "id": 7, "method": "tools/call", "params": {"name": "confirm", "arguments": {"action": "deploy"}}});
    let mut stream = session.post(&cluster.mcp_url(0), call).await;
    assert_eq!(stream.status(), 200);
    let mut buffer = String::new();
    let question = next_message(&mut stream, &mut buffer, Duration::from_secs(10)).await;
    assert_eq!(question["method"], "elicitation/create", "{question}");

    // Scale 3 → 5 → 3 through the operator's membership code while the call is parked: new pods
    // start empty and wait, are added as learners, promoted once caught up; on the way down the
    // highest ordinals leave the group before their pods go.
    let up = scale(&mut cluster, &admin, 5, 3).await;
    let steps: Vec<Step> = up.iter().map(|(s, _)| s.clone()).collect();
    assert!(steps.contains(&Step::AddLearner { id: 3 }) && steps.contains(&Step::AddLearner { id: 4 }), "{steps:?}");
    assert!(steps.contains(&Step::Promote { id: 3 }) && steps.contains(&Step::Promote { id: 4 }), "{steps:?}");
    let grown = cluster.wait_status(&admin, "five voters", |s| s.voters == vec![0, 1, 2, 3, 4]).await;
    assert!(grown.learners.is_empty());

    let down = scale(&mut cluster, &admin, 3, 5).await;
    assert_eq!(down.iter().map(|(s, _)| s.clone()).collect::<Vec<_>>(), vec![Step::Remove { id: 4 }, Step::Remove { id: 3 }]);
    assert!(cluster.pods.iter().all(|p| p.ordinal < 3), "pods 3 and 4 went after leaving the group");
    let shrunk = cluster.wait_status(&admin, "three voters again", |s| s.voters == vec![0, 1, 2]).await;
    assert!(shrunk.learners.is_empty());

    // The answer goes to node 2; the call parked on node 0 throughout completes.
    let answer = json!({"jsonrpc": "2.0", "id": question["id"], "result": {"action": "accept", "content": {"confirm": true}}});
    let res = session.post(&cluster.mcp_url(2), answer).await;
    assert_eq!(res.status(), 202, "{:?}", res.text().await);
    let result = next_message(&mut stream, &mut buffer, Duration::from_secs(15)).await;
    assert_eq!(result["id"], 7, "{result}");
    let text = result["result"]["content"][0]["text"].as_str().unwrap_or_default().to_string();
    assert!(text.contains("confirmed") && !text.contains("not confirmed"), "{result}");

    for ordinal in cluster.pods.iter().map(|p| p.ordinal).collect::<Vec<_>>() {
        cluster.stop(ordinal).await;
    }
}

#[test]
fn the_pod_environment_resolves_like_the_kubelet() {
    let mcp = mcpserver(json!({"image": "switchboard:test"}));
    let rendered = render(&mcp);
    let names: Vec<&str> = rendered.container.env.as_ref().unwrap().iter().map(|e| e.name.as_str()).collect();
    assert_eq!(names[0], "POD_NAME");
    let defined = vec![("POD_NAME".to_string(), "demo-1".to_string())];
    assert_eq!(expand("$(POD_NAME).demo-peers.tools.svc.cluster.local:7070", &defined), "demo-1.demo-peers.tools.svc.cluster.local:7070");
    assert_eq!(rendered.config["elicitation-timeout"], "5m");
    assert_eq!(rendered.secret[builders::ENCRYPTION_KEY_KEY].len(), 64);
}
