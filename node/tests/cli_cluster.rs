//! Real `switchboard serve` processes forming a cluster from their flags, a fourth joining with
//! `--join`, inspected with `switchboard cluster status`, and a restart from the data directory.

mod common;

use common::free_port;
use serde_json::Value;
use std::path::Path;
use std::process::Stdio;
use std::time::Duration;
use tokio::process::{Child, Command};

const BIN: &str = env!("CARGO_BIN_EXE_switchboard");

struct Node {
    child: Child,
    peer: String,
    /// Address of `/metrics`, `/healthz` and `/readyz`.
    metrics: String,
}

fn spawn(id: u64, dir: &Path, secret: &Path, membership: &[&str], peer_port: u16) -> Node {
    let metrics = format!("127.0.0.1:{}", free_port());
    let child = Command::new(BIN)
        .args(["serve", "--node-id", &id.to_string()])
        .args(["--listen", &format!("127.0.0.1:{}", free_port())])
        .args(["--metrics-listen", &metrics])
        .args(["--peer-listen", &format!("127.0.0.1:{peer_port}")])
        .arg("--data-dir")
        .arg(dir.join(format!("node-{id}")))
        .arg("--cluster-secret-file")
        .arg(secret)
        .arg("--encryption-key-file")
        .arg(secret.with_file_name("key"))
        .args(["--heartbeat-interval", "50ms", "--election-timeout", "300ms"])
        .args(membership)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .kill_on_drop(true)
        .spawn()
        .unwrap();
    Node { child, peer: format!("127.0.0.1:{peer_port}"), metrics }
}

async fn status(peer: &str, secret: &Path) -> Option<Value> {
    let out = Command::new(BIN)
        .args(["cluster", "-o", "json", "--peer", peer, "--cluster-secret-file"])
        .arg(secret)
        .arg("status")
        .output()
        .await
        .unwrap();
    out.status.success().then(|| serde_json::from_slice(&out.stdout).unwrap())
}

/// Poll `cluster status` on `peer` until `check` holds.
async fn wait_until(peer: &str, secret: &Path, what: &str, check: impl Fn(&Value) -> bool) -> Value {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(20);
    loop {
        if let Some(s) = status(peer, secret).await
            && check(&s)
        {
            return s;
        }
        assert!(tokio::time::Instant::now() < deadline, "timed out waiting for {what}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

#[tokio::test]
async fn processes_form_a_cluster_a_node_joins_and_one_restarts() {
    let dir = tempfile::tempdir().unwrap();
    let secret = dir.path().join("secret");
    std::fs::write(&secret, "s3cret\n").unwrap();
    std::fs::write(dir.path().join("key"), "ab".repeat(32)).unwrap();
    let ports: Vec<u16> = (0..4).map(|_| free_port()).collect();
    let peers = (0..3).map(|i| format!("{i}=127.0.0.1:{}", ports[i])).collect::<Vec<_>>().join(",");
    let mut nodes: Vec<Node> = (0..3).map(|i| spawn(i as u64, dir.path(), &secret, &["--peers", &peers], ports[i])).collect();

    let s = wait_until(&nodes[2].peer, &secret, "three voters and a leader", |s| {
        s["voters"].as_array().map(Vec::len) == Some(3) && !s["leader"].is_null()
    })
    .await;
    assert_eq!(s["node_id"], 2);

    // A fourth node joins through a follower's address and ends up a voter.
    let joiner = format!("127.0.0.1:{}", ports[1]);
    nodes.push(spawn(3, dir.path(), &secret, &["--join", &joiner], ports[3]));
    wait_until(&nodes[0].peer, &secret, "the fourth voter", |s| s["voters"].as_array().map(Vec::len) == Some(4)).await;

    // For people, by default: a table with a row per member and the leader marked.
    let out = Command::new(BIN)
        .args(["cluster", "--peer", &nodes[0].peer, "--cluster-secret-file"])
        .arg(&secret)
        .arg("status")
        .output()
        .await
        .unwrap();
    let table = String::from_utf8_lossy(&out.stdout);
    let lines: Vec<&str> = table.lines().collect();
    assert!(lines[0].starts_with("node 0 sees: leader "), "{table}");
    assert_eq!(lines[1].split_whitespace().collect::<Vec<_>>(), ["ID", "ROLE", "ADDRESS", "LEADER", "LAG", "LAST", "CONTACT"], "{table}");
    assert_eq!(lines.len(), 2 + 4, "four members: {table}");
    assert_eq!(lines[2..].iter().filter(|l| l.split_whitespace().nth(3) == Some("*")).count(), 1, "one leader: {table}");

    // Wrong secret: refused with a clear error.
    let wrong = dir.path().join("wrong");
    std::fs::write(&wrong, "nope").unwrap();
    let out = Command::new(BIN)
        .args(["cluster", "--peer", &nodes[0].peer, "--cluster-secret-file"])
        .arg(&wrong)
        .arg("status")
        .output()
        .await
        .unwrap();
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("401"), "{}", String::from_utf8_lossy(&out.stderr));

    // Remove node 3 through the admin API, then restart node 1 from its data directory.
    let out = Command::new(BIN)
        .args(["cluster", "--peer", &nodes[2].peer, "--cluster-secret-file"])
        .arg(&secret)
        .args(["remove", "--id", "3"])
        .output()
        .await
        .unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    wait_until(&nodes[0].peer, &secret, "three voters again", |s| s["voters"].as_array().map(Vec::len) == Some(3)).await;
    nodes[1].child.kill().await.unwrap();
    nodes[1] = spawn(1, dir.path(), &secret, &["--peers", &peers], ports[1]);
    let s = wait_until(&nodes[1].peer, &secret, "node 1 back with a leader", |s| !s["leader"].is_null()).await;
    assert_eq!(s["voters"], serde_json::json!([0, 1, 2]));
}

/// `/readyz` of `node`: its status and body (`None` while it does not answer).
async fn readyz(node: &Node) -> Option<(u16, String)> {
    let res = reqwest::get(format!("http://{}/readyz", node.metrics)).await.ok()?;
    Some((res.status().as_u16(), res.text().await.ok()?))
}

/// Poll `/readyz` of `node` until its status is `status`; the body it answered with.
async fn wait_readyz(node: &Node, status: u16, within: Duration) -> String {
    let deadline = tokio::time::Instant::now() + within;
    loop {
        let seen = readyz(node).await;
        if let Some((s, body)) = &seen
            && *s == status
        {
            return body.clone();
        }
        assert!(tokio::time::Instant::now() < deadline, "/readyz of {} not {status} within {within:?}: {seen:?}", node.peer);
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

#[tokio::test]
async fn a_leader_that_hears_from_no_quorum_stops_being_ready() {
    let dir = tempfile::tempdir().unwrap();
    let secret = dir.path().join("secret");
    std::fs::write(&secret, "s3cret\n").unwrap();
    std::fs::write(dir.path().join("key"), "ab".repeat(32)).unwrap();
    let ports: Vec<u16> = (0..3).map(|_| free_port()).collect();
    let peers = (0..3).map(|i| format!("{i}=127.0.0.1:{}", ports[i])).collect::<Vec<_>>().join(",");
    let mut nodes: Vec<Node> = (0..3).map(|i| spawn(i as u64, dir.path(), &secret, &["--peers", &peers], ports[i])).collect();
    for node in &nodes {
        assert_eq!(wait_readyz(node, 200, Duration::from_secs(20)).await, "ready");
    }
    let s = wait_until(&nodes[0].peer, &secret, "a leader", |s| !s["leader"].is_null()).await;
    let leader = s["leader"].as_u64().unwrap() as usize;

    // Its followers die: it still leads (nobody tells it otherwise), but cannot commit.
    for (i, node) in nodes.iter_mut().enumerate() {
        if i != leader {
            node.child.kill().await.unwrap();
        }
    }
    // Ready within three election timeouts (900 ms) of the last acknowledgement.
    let body = wait_readyz(&nodes[leader], 503, Duration::from_secs(3)).await;
    assert!(body.starts_with("not ready: leader without a quorum"), "{body}");
    let s = status(&nodes[leader].peer, &secret).await.unwrap();
    assert_eq!(s["leader"].as_u64(), Some(leader as u64), "it still calls itself leader");

    for i in (0..3).filter(|i| *i != leader) {
        nodes[i] = spawn(i as u64, dir.path(), &secret, &["--peers", &peers], ports[i]);
    }
    for node in &nodes {
        wait_readyz(node, 200, Duration::from_secs(20)).await;
    }
}

#[tokio::test]
async fn bad_flags_are_refused_with_clear_errors() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("key"), "ab".repeat(32)).unwrap();
    std::fs::write(dir.path().join("short-key"), "abcd").unwrap();
    for (args, expected) in [
        (vec!["serve", "--peers", "0=a"], "expected HOST:PORT"),
        (vec!["serve", "--node-id", "5", "--peers", "0=127.0.0.1:1", "--encryption-key-file", "key"], "give --advertise-peer"),
        (vec!["serve", "--node-id", "0", "--encryption-key-file", "short-key"], "invalid id-encryption key"),
        (vec!["serve", "--node-id", "0", "--encryption-key-file", "missing"], "could not read missing"),
        (vec!["serve", "--node-id", "0", "--peers", "0=127.0.0.1:1"], "--encryption-key-file is required"),
        (vec!["serve", "--elicitation-timeout", "soon"], "invalid value 'soon' for '--elicitation-timeout"),
        (vec!["serve", "--heartbeat-interval", "2s", "--election-timeout", "1s", "--node-id", "0"], "must be longer"),
        (vec!["serve", "--max-entry-bytes", "1000"], "1000 is not between 65536 and 67108864 bytes"),
        (vec!["serve", "--replication-batch-bytes", "1gb"], "invalid byte count"),
        (vec!["serve", "--allowed-origins", "*"], "* is not an origin"),
        (vec!["serve", "--allowed-origins", "https://app.example.com/"], "is not an origin: write http://HOST or https://HOST"),
        (vec!["serve", "--allowed-hosts", "mcp.example.com:8080"], "is not a host name"),
        (vec!["serve", "--worker-threads", "0"], "0 is not in 1..=1024"),
        (vec!["cluster", "status"], "--cluster-secret-file is required"),
    ] {
        let out = Command::new(BIN).args(&args).current_dir(dir.path()).output().await.unwrap();
        assert!(!out.status.success(), "{args:?} should fail");
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(stderr.contains(expected), "{args:?}: {stderr}");
    }
}

/// A memory-store node serving (ready), started with `args` and `env` added.
async fn memory_node(args: &[&str], env: &[(&str, &str)]) -> Node {
    let metrics = format!("127.0.0.1:{}", free_port());
    let child = Command::new(BIN)
        .args(["serve", "--store", "memory", "--node-id", "0"])
        .args(["--listen", &format!("127.0.0.1:{}", free_port()), "--metrics-listen", &metrics])
        .args(args)
        // Only what a test passes decides the allocator's options, not the environment it runs in.
        .env_remove("MIMALLOC_ALLOW_THP")
        .envs(env.iter().copied())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .kill_on_drop(true)
        .spawn()
        .unwrap();
    let node = Node { child, peer: "(memory store)".into(), metrics };
    wait_readyz(&node, 200, Duration::from_secs(20)).await;
    node
}

/// `--worker-threads` sizes the runtime that serves (the bench's co-located cluster runs one
/// worker per node).
#[cfg(target_os = "linux")]
#[tokio::test]
async fn worker_threads_sizes_the_runtime() {
    for threads in [1, 3] {
        let node = memory_node(&["--worker-threads", &threads.to_string()], &[]).await;
        let pid = node.child.id().unwrap();
        let workers = std::fs::read_dir(format!("/proc/{pid}/task"))
            .unwrap()
            .filter_map(|task| std::fs::read_to_string(task.ok()?.path().join("comm")).ok())
            .filter(|comm| comm.trim() == "tokio-rt-worker")
            .count();
        assert_eq!(workers, threads, "--worker-threads {threads}");
    }
}

/// The binary runs with transparent huge pages off (`allocator::tune`), unless mimalloc's own
/// `MIMALLOC_ALLOW_THP` is set, whose value then stands.
#[cfg(target_os = "linux")]
#[tokio::test]
async fn transparent_huge_pages_are_off_unless_the_allocator_option_is_set() {
    let thp_enabled = |node: &Node| {
        let status = std::fs::read_to_string(format!("/proc/{}/status", node.child.id().unwrap())).unwrap();
        let line = status.lines().find_map(|l| l.strip_prefix("THP_enabled:")).expect("the kernel reports THP_enabled");
        line.trim().to_string()
    };
    assert_eq!(thp_enabled(&memory_node(&[], &[]).await), "0");
    assert_eq!(thp_enabled(&memory_node(&[], &[("MIMALLOC_ALLOW_THP", "1")]).await), "1");
}

#[tokio::test]
async fn dev_serves_a_round_robin_cluster_and_stops_on_ctrl_c() {
    use tokio::io::{AsyncBufReadExt, BufReader};
    let mut child = Command::new(BIN)
        .args(["dev", "--listen", "127.0.0.1:0"])
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .kill_on_drop(true)
        .spawn()
        .unwrap();
    let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
    let url = loop {
        let line = tokio::time::timeout(Duration::from_secs(30), lines.next_line()).await.expect("dev prints its URL").unwrap().unwrap();
        if let Some(url) = line.strip_prefix("MCP URL: ") {
            break url.to_string();
        }
    };
    let http = reqwest::Client::new();
    let init = r#"{"jsonrpc":"2.0","id":0,"method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":{},"clientInfo":{"name":"t","version":"1"}}}"#;
    let mut nodes = std::collections::BTreeSet::new();
    for _ in 0..3 {
        let res = http
            .post(&url)
            .header("content-type", "application/json")
            .header("accept", "application/json, text/event-stream")
            .body(init)
            .send()
            .await
            .unwrap();
        assert_eq!(res.status(), 200);
        nodes.insert(res.headers()["x-switchboard-node"].to_str().unwrap().to_string());
    }
    assert_eq!(nodes.len(), 3, "round robin over the three nodes: {nodes:?}");
    let pid = child.id().unwrap().to_string();
    assert!(Command::new("kill").args(["-INT", &pid]).status().await.unwrap().success());
    let status = tokio::time::timeout(Duration::from_secs(20), child.wait()).await.expect("stops on Ctrl-C").unwrap();
    assert!(status.success());
    let mut rest = Vec::new();
    while let Ok(Some(line)) = lines.next_line().await {
        rest.push(line);
    }
    assert!(rest.iter().any(|l| l.contains("dev cluster stopped")), "{rest:?}");
}
