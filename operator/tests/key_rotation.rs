//! Rotating the cluster secret and the id-encryption key with no failed call, by the documented
//! procedure, on the operator's rendered pods (see `common`):
//!
//! 1. add the new values as `previous-cluster-secret` and `previous-encryption-key` (accepted,
//!    never used) and let the pods roll;
//! 2. make them current and the old ones previous (sent and sealed with the new, both
//!    accepted) and let the pods roll;
//! 3. remove the previous keys and let the pods roll.
//!
//! Throughout, a client runs elicitation round trips whose answer always goes to another node
//! than the one running the call, across pods in different phases of each roll.

mod common;

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::Duration;

use common::{Cluster, Session, mcpserver, next_message};
use serde_json::{Value, json};
use switchboard_operator::builders::{
    CLUSTER_SECRET_KEY, ENCRYPTION_KEY_KEY, PREVIOUS_CLUSTER_SECRET_KEY, PREVIOUS_ENCRYPTION_KEY_KEY, SecretMaterial,
};
use switchboard_operator::membership::HttpAdmin;
use tokio::sync::Mutex;

const GRACE: Duration = Duration::from_secs(15);

/// One round trip: the call runs on `owner`, the answer goes through `other`.
async fn round_trip(urls: &[String], owner: usize, other: usize, n: usize) -> Result<(), String> {
    let session = Session::open(&urls[owner]).await;
    let call = json!({"jsonrpc": "2.0", "id": 7, "method": "tools/call", "params": {"name": "confirm", "arguments": {"action": format!("step {n}")}}});
    let mut stream = session.post(&urls[owner], call).await;
    if stream.status() != 200 {
        return Err(format!("call on node {owner}: {}", stream.status()));
    }
    let mut buffer = String::new();
    let question = next_message(&mut stream, &mut buffer, Duration::from_secs(10)).await;
    let answer = json!({"jsonrpc": "2.0", "id": question["id"], "result": {"action": "accept", "content": {"confirm": true}}});
    let res = session.post(&urls[other], answer).await;
    if res.status() != 202 {
        return Err(format!("answer through node {other}: {} {}", res.status(), res.text().await.unwrap_or_default()));
    }
    let result: Value = next_message(&mut stream, &mut buffer, Duration::from_secs(10)).await;
    let text = result.to_string();
    if text.contains("confirmed") && !text.contains("not confirmed") { Ok(()) } else { Err(format!("call on {owner}: {result}")) }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn keys_rotate_in_three_rolls_without_a_failed_call() {
    let mcp = mcpserver(json!({
        "image": "switchboard:test",
        "raft": {"heartbeatInterval": "50ms", "electionTimeout": "300ms"},
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
    cluster.wait_status(&admin, "three voters", |s| s.voters.len() == 3 && s.leader.is_some()).await;

    // The client: round trips on the pods a Service would still send to.
    let urls: Vec<String> = (0..3).map(|i| cluster.mcp_url(i)).collect();
    let serving = Arc::new(Mutex::new(vec![0usize, 1, 2]));
    let (done, failures, stop) =
        (Arc::new(AtomicUsize::new(0)), Arc::new(Mutex::new(Vec::<String>::new())), Arc::new(AtomicBool::new(false)));
    let client = {
        let (serving, done, failures, stop) = (serving.clone(), done.clone(), failures.clone(), stop.clone());
        tokio::spawn(async move {
            let mut n = 0;
            while !stop.load(Ordering::Acquire) {
                let (owner, other) = {
                    let pods = serving.lock().await;
                    (pods[n % pods.len()], pods[(n + 1) % pods.len()])
                };
                if let Err(e) = round_trip(&urls, owner, other, n).await {
                    failures.lock().await.push(e);
                }
                done.fetch_add(1, Ordering::AcqRel);
                n += 1;
            }
        })
    };
    // Before a pod stops, the Service stops sending to it: wait until a round trip begun before
    // that has ended.
    let steer_away = |ordinal: u64| {
        let (serving, done) = (serving.clone(), done.clone());
        async move {
            serving.lock().await.retain(|p| *p != ordinal as usize);
            let seen = done.load(Ordering::Acquire);
            while done.load(Ordering::Acquire) < seen + 2 {
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
        }
    };
    let old = SecretMaterial {
        cluster_secret: cluster.cluster_secret.clone(),
        encryption_key: std::fs::read_to_string(cluster.secret_path(ENCRYPTION_KEY_KEY)).unwrap(),
    };
    let new = SecretMaterial::generate();
    let phases: [(&str, Option<&SecretMaterial>, &SecretMaterial); 3] =
        [("accept the new keys", Some(&new), &old), ("use the new keys", Some(&old), &new), ("retire the old keys", None, &new)];
    for (phase, previous, current) in phases {
        cluster.write_secret(PREVIOUS_CLUSTER_SECRET_KEY, previous.map(|m| m.cluster_secret.as_str()));
        cluster.write_secret(PREVIOUS_ENCRYPTION_KEY_KEY, previous.map(|m| m.encryption_key.as_str()));
        cluster.write_secret(CLUSTER_SECRET_KEY, Some(&current.cluster_secret));
        cluster.write_secret(ENCRYPTION_KEY_KEY, Some(&current.encryption_key));
        let before = done.load(Ordering::Acquire);
        // The StatefulSet rolls the pods, highest ordinal first.
        for ordinal in [2u64, 1, 0] {
            steer_away(ordinal).await;
            let (_, exited) = cluster.terminate(ordinal, GRACE).await;
            assert!(exited, "{phase}: pod {ordinal} exits within its grace period");
            cluster.start(ordinal);
            cluster.wait_ready(ordinal).await;
            serving.lock().await.push(ordinal as usize);
        }
        *serving.lock().await = vec![0, 1, 2];
        tokio::time::sleep(Duration::from_millis(500)).await;
        let during = done.load(Ordering::Acquire) - before;
        println!("{phase}: {during} round trips during the roll");
        assert!(during > 5, "{phase}: round trips kept running ({during})");
        let failed = failures.lock().await.clone();
        assert!(failed.is_empty(), "{phase}: failed calls: {failed:?}");
    }
    stop.store(true, Ordering::Release);
    client.await.unwrap();

    // The old cluster secret is retired: the admin API no longer takes it, the new one works.
    let status = cluster.wait_status(&admin, "the cluster under the new secret", |s| s.voters.len() == 3).await;
    let leader_addr = status.members[&status.leader.unwrap()].clone();
    let refused = switchboard_operator::membership::AdminApi::status(&admin, &leader_addr, &old.cluster_secret).await;
    assert!(refused.is_err_and(|e| e.to_string().contains("401")));
    for ordinal in 0..3 {
        cluster.kill(ordinal).await;
    }
}
