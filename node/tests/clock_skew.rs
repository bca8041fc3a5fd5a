//! A leader whose wall clock jumps an hour ahead: three real `switchboard serve` processes, each
//! under libfaketime (Debian's `faketime` package) with a clock offset read from a file, so the
//! leader's clock alone can be moved while the cluster runs. Sessions and a parked elicitation
//! on the other replicas must not expire early: log time follows the majority of the voters'
//! clocks, not the leader's.
//!
//! Needs libfaketime (`apt-get install faketime`; `scripts/test.sh` installs it).

mod common;

use common::{FaketimeLeftovers, RawClient, free_port, libfaketime};
use serde_json::{Value, json};
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::{Duration, SystemTime, UNIX_EPOCH};
use tokio::process::{Child, Command};
use tokio::time::Instant;

const BIN: &str = env!("CARGO_BIN_EXE_switchboard");
const HOUR: u64 = 3600;

struct Node {
    _child: Child,
    /// Dropped after the child, whose drop kills it.
    leftovers: FaketimeLeftovers,
    mcp: String,
    metrics: String,
    /// libfaketime reads this node's clock offset from here (`+0`, `+3600`).
    clock: PathBuf,
}

fn spawn(id: usize, dir: &Path, peers: &str, peer_port: u16, lib: &Path) -> Node {
    let (mcp, metrics) = (free_port(), free_port());
    let clock = dir.join(format!("clock-{id}"));
    std::fs::write(&clock, "+0\n").unwrap();
    let child = Command::new(BIN)
        .args(["serve", "--node-id", &id.to_string(), "--peers", peers])
        .args(["--listen", &format!("127.0.0.1:{mcp}"), "--metrics-listen", &format!("127.0.0.1:{metrics}")])
        .args(["--peer-listen", &format!("127.0.0.1:{peer_port}")])
        .arg("--data-dir")
        .arg(dir.join(format!("node-{id}")))
        .arg("--cluster-secret-file")
        .arg(dir.join("secret"))
        .arg("--encryption-key-file")
        .arg(dir.join("key"))
        // A leader that stays leader through the test, even on a loaded machine.
        .args(["--heartbeat-interval", "100ms", "--election-timeout", "1s"])
        .args(["--session-ttl", "30m", "--elicitation-timeout", "10m"])
        .env("LD_PRELOAD", lib)
        .env("FAKETIME_TIMESTAMP_FILE", &clock)
        // Re-read the offset at most once a second; the monotonic clock (Raft's and tokio's
        // timers) stays real, as it does when a wall clock is stepped.
        .env("FAKETIME_CACHE_DURATION", "1")
        .env("FAKETIME_DONT_FAKE_MONOTONIC", "1")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .kill_on_drop(true)
        .spawn()
        .unwrap();
    let leftovers = FaketimeLeftovers(child.id().unwrap());
    Node { _child: child, leftovers, mcp: format!("http://127.0.0.1:{mcp}/mcp"), metrics: format!("http://127.0.0.1:{metrics}"), clock }
}

/// `switchboard_raft_leader` as node `metrics` sees it.
async fn leader_seen_by(http: &reqwest::Client, metrics: &str) -> Option<i64> {
    let text = http.get(format!("{metrics}/metrics")).send().await.ok()?.text().await.ok()?;
    text.lines().find_map(|l| l.strip_prefix("switchboard_raft_leader ")).and_then(|v| v.trim().parse().ok()).filter(|l| *l >= 0)
}

/// Seconds since the epoch of an HTTP date (`Mon, 30 Nov 2026 18:20:42 GMT`).
fn http_date_secs(date: &str) -> u64 {
    let parts: Vec<&str> = date.split([' ', ':']).collect();
    let (day, year): (i64, i64) = (parts[1].parse().unwrap(), parts[3].parse().unwrap());
    let month =
        ["Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec"].iter().position(|m| *m == parts[2]).unwrap()
            as i64
            + 1;
    let (h, m, s): (i64, i64, i64) = (parts[4].parse().unwrap(), parts[5].parse().unwrap(), parts[6].parse().unwrap());
    // Days from 1970-01-01 to the date (proleptic Gregorian; H. Hinnant's days_from_civil).
    let y = if month <= 2 { year - 1 } else { year };
    let era = y.div_euclid(400);
    let yoe = y - era * 400;
    let doy = (153 * ((month + 9) % 12) + 2) / 5 + day - 1;
    let days = era * 146_097 + yoe * 365 + yoe / 4 - yoe / 100 + doy - 719_468;
    (days * 86_400 + h * 3600 + m * 60 + s) as u64
}

/// The wall clock of the node serving `metrics`, from its `Date` header.
async fn clock_of(http: &reqwest::Client, metrics: &str) -> u64 {
    let res = http.get(format!("{metrics}/healthz")).send().await.unwrap();
    http_date_secs(res.headers()["date"].to_str().unwrap())
}

fn real_now() -> u64 {
    SystemTime::now().duration_since(UNIX_EPOCH).unwrap().as_secs()
}

/// The same session, talking to `url`.
fn at(client: &RawClient, url: &str) -> RawClient {
    RawClient { http: client.http.clone(), url: url.to_string(), session: client.session.clone() }
}

async fn ping(client: &RawClient) -> u16 {
    client.post(json!({"jsonrpc": "2.0", "id": 99, "method": "ping"}).to_string()).send().await.unwrap().status().as_u16()
}

/// The next JSON-RPC message on an SSE response (priming events and comments skipped).
async fn next_message(res: &mut reqwest::Response, buffer: &mut String) -> Value {
    loop {
        while let Some(end) = buffer.find("\n\n") {
            let block: String = buffer.drain(..end + 2).collect();
            let data: String = block.lines().filter_map(|l| l.strip_prefix("data: ")).collect();
            if !data.is_empty() {
                return serde_json::from_str(&data).unwrap();
            }
        }
        let chunk = tokio::time::timeout(Duration::from_secs(15), res.chunk()).await.expect("a message within 15 s").unwrap();
        buffer.push_str(std::str::from_utf8(&chunk.expect("the stream is still open")).unwrap());
    }
}

/// Three nodes under libfaketime in one temporary directory (dropped with it), once every node
/// sees the same leader: the directory, the nodes and the leader.
async fn start_three(http: &reqwest::Client) -> (tempfile::TempDir, Vec<Node>, usize) {
    let lib = libfaketime();
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("secret"), "s3cret\n").unwrap();
    std::fs::write(dir.path().join("key"), "cd".repeat(32)).unwrap();
    let ports: Vec<u16> = (0..3).map(|_| free_port()).collect();
    let peers = ports.iter().enumerate().map(|(i, p)| format!("{i}=127.0.0.1:{p}")).collect::<Vec<_>>().join(",");
    let nodes: Vec<Node> = (0..3).map(|i| spawn(i, dir.path(), &peers, ports[i], &lib)).collect();
    let deadline = Instant::now() + Duration::from_secs(30);
    let leader = loop {
        let seen: Vec<Option<i64>> = futures::future::join_all(nodes.iter().map(|n| leader_seen_by(http, &n.metrics))).await;
        if let Some(Some(l)) = seen.first()
            && seen.iter().all(|s| s == &Some(*l))
        {
            break *l as usize;
        }
        assert!(Instant::now() < deadline, "no leader agreed on: {seen:?}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    (dir, nodes, leader)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_leader_whose_clock_jumps_an_hour_ahead_expires_nothing_early() {
    let http = reqwest::Client::new();
    let (_dir, nodes, leader) = start_three(&http).await;
    let deadline = Instant::now() + Duration::from_secs(30);
    let (a, b) = ((leader + 1) % 3, (leader + 2) % 3);

    // A session on node a, with a confirmation parked there (mailbox deadline: 10 minutes).
    let mut client = RawClient::new(&nodes[a].mcp);
    client.initialize().await;
    let call = json!({"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": {"name": "confirm", "arguments": {"action": "ship"}}});
    let mut call_stream = client.post(call.to_string()).send().await.unwrap();
    let mut buffer = String::new();
    let question = next_message(&mut call_stream, &mut buffer).await;
    assert_eq!(question["method"], "elicitation/create", "{question}");

    // The leader's wall clock jumps an hour ahead.
    std::fs::write(&nodes[leader].clock, format!("+{HOUR}\n")).unwrap();
    while clock_of(&http, &nodes[leader].metrics).await < real_now() + HOUR - 60 {
        assert!(Instant::now() < deadline + Duration::from_secs(10), "the leader's clock never jumped");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert!(clock_of(&http, &nodes[a].metrics).await < real_now() + 60, "only the leader's clock moved");

    // Writes the leader stamps after the jump: new sessions, made through every node.
    for url in [&nodes[leader].mcp, &nodes[a].mcp, &nodes[b].mcp] {
        let mut other = RawClient::new(url);
        other.initialize().await;
        for node in &nodes {
            assert_eq!(ping(&at(&other, &node.mcp)).await, 200, "a session made after the jump");
        }
    }
    assert_eq!(leader_seen_by(&http, &nodes[a].metrics).await, Some(leader as i64), "still the jumped leader");

    // The first session (30 minutes TTL) lives on every node...
    for node in &nodes {
        assert_eq!(ping(&at(&client, &node.mcp)).await, 200, "the session expired early on {}", node.mcp);
    }
    // ...and the parked call's mailbox did not expire: its answer, given on node b, completes it.
    let answer = json!({"jsonrpc": "2.0", "id": question["id"], "result": {"action": "accept", "content": {"confirm": true}}});
    let res = at(&client, &nodes[b].mcp).post(answer.to_string()).send().await.unwrap();
    assert_eq!(res.status(), 202);
    let result = next_message(&mut call_stream, &mut buffer).await;
    assert_eq!(result["id"], 1, "{result}");
    let text = result["result"]["content"][0]["text"].as_str().unwrap_or_default();
    assert!(text.contains("confirmed") && !text.contains("not confirmed"), "{result}");
}

/// libfaketime removes its shared memory and semaphore only at a normal exit; a node the test
/// kills must not leave them in /dev/shm.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn killed_nodes_leave_nothing_of_libfaketime_behind() {
    let http = reqwest::Client::new();
    let (_dir, nodes, _) = start_three(&http).await;
    let files: Vec<PathBuf> = nodes.iter().flat_map(|n| n.leftovers.paths()).collect();
    assert!(files.iter().all(|f| f.exists()), "libfaketime's files of the running nodes, by these names: {files:?}");
    drop(nodes);
    let left: Vec<&PathBuf> = files.iter().filter(|f| f.exists()).collect();
    assert!(left.is_empty(), "left in /dev/shm: {left:?}");
}

/// Found by the fault campaign (seed 2): a replica whose wall clock ran ahead judged every
/// answer it received late, from the deadline sealed in the request id, and dropped it (with a
/// 202) while the call waited on its owner. Lateness is now the mailbox's to decide, in log
/// time.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_replica_whose_clock_runs_ahead_still_delivers_answers_in_time() {
    let http = reqwest::Client::new();
    let (_dir, nodes, leader) = start_three(&http).await;
    let deadline = Instant::now() + Duration::from_secs(30);
    let (owner, ahead) = ((leader + 1) % 3, (leader + 2) % 3);

    // A follower's wall clock runs an hour ahead (past the 10-minute answer deadline).
    std::fs::write(&nodes[ahead].clock, format!("+{HOUR}\n")).unwrap();
    while clock_of(&http, &nodes[ahead].metrics).await < real_now() + HOUR - 60 {
        assert!(Instant::now() < deadline + Duration::from_secs(10), "the clock never jumped");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }

    // A call parked on another node; its answer reaches the replica that is ahead.
    let mut client = RawClient::new(&nodes[owner].mcp);
    client.initialize().await;
    let call = json!({"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": {"name": "confirm", "arguments": {"action": "ship"}}});
    let mut call_stream = client.post(call.to_string()).send().await.unwrap();
    let mut buffer = String::new();
    let question = next_message(&mut call_stream, &mut buffer).await;
    let answer = json!({"jsonrpc": "2.0", "id": question["id"], "result": {"action": "accept", "content": {"confirm": true}}});
    let res = at(&client, &nodes[ahead].mcp).post(answer.to_string()).send().await.unwrap();
    assert_eq!(res.status(), 202);
    let result = next_message(&mut call_stream, &mut buffer).await;
    assert_eq!(result["id"], 1, "the answer reached the call: {result}");
    let text = result["result"]["content"][0]["text"].as_str().unwrap_or_default();
    assert!(text.contains("confirmed") && !text.contains("not confirmed"), "{result}");
}
