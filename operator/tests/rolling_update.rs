//! A rolling update of real nodes, as the StatefulSet controller runs one after a timeout change:
//! highest ordinal first, each pod stopped with SIGTERM, restarted on its volume, and waited for
//! until ready before the next. One call is parked on each node before its restart. A stopping
//! node drains: it turns not-ready, hands Raft leadership over, lets its parked call finish
//! (answered meanwhile through another node) or ends it with the documented error when no
//! answer comes in time. Writes keep committing throughout; the longest gap is printed, and
//! must stay below the election timeout (no election had to wait it out). See `common` for how
//! the rendered pods run here.

mod common;

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use common::{Cluster, Session, initialize, mcp_post, mcpserver, next_message};
use serde_json::{Value, json};
use switchboard_operator::membership::HttpAdmin;

/// The pod's grace period; the node drains for all but the last 10 seconds of it.
const GRACE: Duration = Duration::from_secs(15);
const DRAIN: Duration = Duration::from_secs(5);
const ELECTION_TIMEOUT: Duration = Duration::from_secs(1);

/// A call parked on one node: the open SSE stream and the question it carries.
struct Parked {
    session: Session,
    stream: reqwest::Response,
    buffer: String,
    question: Value,
}

async fn park(cluster: &Cluster, ordinal: u64) -> Parked {
    let url = cluster.mcp_url(ordinal);
    let session = Session::open(&url).await;
    let call = json!({"jsonrpc": "2.0", "id": 7, "method": "tools/call", "params": {"name": "confirm", "arguments": {"action": format!("deploy {ordinal}")}}});
    let mut stream = session.post(&url, call).await;
    assert_eq!(stream.status(), 200);
    let mut buffer = String::new();
    let question = next_message(&mut stream, &mut buffer, Duration::from_secs(10)).await;
    assert_eq!(question["method"], "elicitation/create", "{question}");
    Parked { session, stream, buffer, question }
}

/// Successful writes, by time, from a client that keeps opening sessions on the running pods.
fn keep_writing(cluster: &Cluster, running: Arc<Mutex<Vec<u64>>>) -> (tokio::task::JoinHandle<Vec<Instant>>, Arc<Mutex<bool>>) {
    let stop = Arc::new(Mutex::new(false));
    let urls: Vec<String> = (0..3).map(|i| cluster.mcp_url(i)).collect();
    let done = stop.clone();
    let task = tokio::spawn(async move {
        let http = reqwest::Client::builder().timeout(Duration::from_secs(3)).build().unwrap();
        let init = initialize(json!({}));
        let mut committed = Vec::new();
        let mut turn = 0usize;
        while !*done.lock().unwrap() {
            let targets = running.lock().unwrap().clone();
            let url = &urls[targets[turn % targets.len()] as usize];
            turn += 1;
            let sent = mcp_post(&http, url, &init).send().await;
            if sent.is_ok_and(|r| r.status() == 200) {
                committed.push(Instant::now());
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        committed
    });
    (task, stop)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_rolling_update_drains_each_node_and_no_call_hangs() {
    let mcp = mcpserver(json!({
        "image": "switchboard:test",
        "raft": {"heartbeatInterval": "100ms", "electionTimeout": "1s"},
        "timeouts": {"elicitation": "2m"},
        "terminationGracePeriodSeconds": GRACE.as_secs()
    }));
    let mut cluster = Cluster::new(&mcp, 3);
    for i in 0..3 {
        cluster.start(i);
    }
    for i in 0..3 {
        cluster.wait_ready(i).await;
    }
    let admin = HttpAdmin::new(Duration::from_secs(5)).unwrap();
    cluster.wait_status(&admin, "three healthy voters", |s| s.voters.len() == 3 && s.voters.iter().all(|v| s.health(*v).is_ok())).await;
    // Node 0 leads, so the roll restarts the leader last, as in a cluster that has run a while.
    cluster.transfer_leadership(0).await;

    let mut parked: Vec<Parked> = Vec::new();
    for i in 0..3 {
        parked.push(park(&cluster, i).await);
    }
    let running = Arc::new(Mutex::new(vec![0, 1, 2]));
    let (writer, stop_writing) = keep_writing(&cluster, running.clone());
    tokio::time::sleep(Duration::from_millis(500)).await;

    for ordinal in [2u64, 1, 0] {
        let before = cluster.status(&admin).await;
        let led = before.leader == Some(ordinal);
        running.lock().unwrap().retain(|o| *o != ordinal);
        let call = &mut parked[ordinal as usize];
        // Node 1's question is left unanswered: its drain runs out and ends the call. The
        // others are answered during the drain, through another node.
        let answer_through = (ordinal + 1) % 3;
        let answer = json!({"jsonrpc": "2.0", "id": call.question["id"], "result": {"action": "accept", "content": {"confirm": true}}});
        let readyz = format!("http://{}:{}/readyz", cluster.ip(ordinal), switchboard_operator::builders::METRICS_PORT);
        let terminating = cluster.terminate(ordinal, GRACE);
        let answering = async {
            tokio::time::sleep(Duration::from_millis(300)).await;
            // Draining: not ready, so the Service sends no new calls here.
            let probe = reqwest::get(&readyz).await.expect("the probe port stays open while draining");
            assert_eq!(probe.status(), 503);
            assert!(probe.text().await.unwrap().contains("draining"));
            if ordinal == 1 {
                return;
            }
            let res = call.session.post(&cluster_url(answer_through, &before), answer).await;
            assert_eq!(res.status(), 202, "the answer is accepted while its owner drains");
        };
        let ((took, exited), ()) = tokio::join!(terminating, answering);
        assert!(exited, "node {ordinal} exits within its grace period");
        // The call's response, after any notification (the cancelled question's).
        let mut notices = Vec::new();
        let result = loop {
            let message = next_message(&mut call.stream, &mut call.buffer, Duration::from_secs(5)).await;
            if message.get("id").is_some() {
                break message;
            }
            notices.push(message);
        };
        assert_eq!(result["id"], 7, "{result}");
        let text = result.to_string();
        if ordinal == 1 {
            let cancelled = notices.iter().find(|n| n["method"] == "notifications/cancelled").expect("the question is withdrawn");
            assert_eq!(cancelled["params"]["requestId"], call.question["id"]);
            assert!(took >= DRAIN, "the drain waited for the unanswered call ({took:?})");
            assert!(text.contains("shutting down") && text.contains("call the tool again"), "the documented error: {result}");
        } else {
            assert!(took < DRAIN, "the drain ended once the call completed ({took:?})");
            assert!(text.contains("confirmed") && !text.contains("not confirmed"), "{result}");
        }
        println!("node {ordinal}{}: stopped in {} ms", if led { " (leader)" } else { "" }, took.as_millis());
        if led {
            let after = cluster.status(&admin).await;
            assert!(after.leader.is_some_and(|l| l != ordinal), "leadership was handed over: {after:?}");
        }

        let committed_before = cluster.status(&admin).await.committed_index.unwrap_or(0);
        cluster.start(ordinal);
        cluster.wait_ready(ordinal).await;
        // Ready only once caught up: it has applied what was committed before it started.
        let itself = admin_status_of(&cluster, ordinal).await;
        assert!(
            itself.last_applied_index.unwrap_or(0) >= committed_before,
            "node {ordinal} turned ready at applied {:?}, before the {committed_before} committed when it started",
            itself.last_applied_index
        );
        running.lock().unwrap().push(ordinal);
    }

    tokio::time::sleep(Duration::from_millis(500)).await;
    *stop_writing.lock().unwrap() = true;
    let committed = writer.await.unwrap();
    let longest = committed.windows(2).map(|w| w[1] - w[0]).max().unwrap();
    println!("writes committed: {}, longest gap between two: {} ms", committed.len(), longest.as_millis());
    assert!(committed.len() > 50, "writes kept committing: {}", committed.len());
    assert!(longest < ELECTION_TIMEOUT, "a gap of {longest:?}: a leader change waited for an election timeout");
    for ordinal in 0..3 {
        cluster.kill(ordinal).await;
    }
}

/// The MCP URL of `ordinal` (the cluster is borrowed mutably elsewhere while answering).
fn cluster_url(ordinal: u64, status: &switchboard_contract::admin::ClusterStatus) -> String {
    let peer = &status.members[&ordinal];
    let ip = peer.rsplit_once(':').unwrap().0;
    format!("http://{ip}:{}/mcp", switchboard_operator::builders::MCP_PORT)
}

async fn admin_status_of(cluster: &Cluster, ordinal: u64) -> switchboard_contract::admin::ClusterStatus {
    let admin = HttpAdmin::new(Duration::from_secs(5)).unwrap();
    let addr = cluster.addresses().into_iter().find(|(i, _)| *i == ordinal).unwrap().1;
    switchboard_operator::membership::AdminApi::status(&admin, &addr, &cluster.cluster_secret).await.unwrap()
}
