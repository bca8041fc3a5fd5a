//! Elicitation benchmark: the whole MCP round trip of a tool call that asks the user,
//! against real `switchboard serve` processes, with a raw HTTP client (no SDK):
//!
//!   POST `tools/call confirm` → read the SSE stream until `elicitation/create` → POST the answer
//!   (through the load balancer: usually to another replica) → read the stream on to the result.
//!
//! 1. A 3-node Raft cluster behind nginx (round-robin, no affinity, keep-alive upstreams), started
//!    the way tests/e2e/cluster.py starts it; then the same cluster hit directly (answer on the
//!    next node; everything on the leader; everything on a follower) to separate nginx, forwarding
//!    and replication. Each row also gives the p50 of the three parts of a round trip.
//! 2. One node with the in-memory store, hit directly and behind nginx; the same round trips
//!    against rmcp 3.11's stateful Streamable HTTP server (the reference of `reference/rmcp.rs`,
//!    in a process of its own); and a lone Raft node (durable, no replication). Then the
//!    memory-store node, rmcp and the lone Raft node all up at once, measured in turns (five
//!    rounds, each server a short window in every round): the summary's single/rmcp and
//!    durable/memory ratios are the medians of the rounds' ratios, so the host's drift over
//!    minutes does not enter them.
//! 3. Memory per parked call: RSS (VmRSS) before and after parking 10,000 calls — each read up to
//!    its `elicitation/create`, then its connection dropped (the handler stays parked) — on a fresh
//!    memory-store node and on a fresh cluster's follower (all three members' RSS shown); then
//!    10,000 more for the marginal cost, and the same with `ask_llm` (sampling) for comparison.
//!
//! `cargo bench -p switchboard-node --bench elicitation` (a few minutes; nginx from NGINX_BIN,
//! `nginx` on PATH or /usr/sbin/nginx — the cluster and load-balanced parts are skipped without
//! it). Prints figures and targets; asserts only that every call came back confirmed.
//!
//! - `BENCH_SWITCHBOARD_BIN=path` runs another `switchboard` build (an earlier commit's) instead
//!   of this one's, for a before/after in the same conditions.
//! - `-- memory` runs section 3 alone (no nginx needed); `-- single` runs section 2 alone.
//! - `-- load [raft|memory|cluster] [seconds] [1]` runs one node (a lone Raft node, or the
//!   memory store), or 3 Raft nodes behind nginx, under 64 clients for 20 s (or `seconds`), and
//!   prints the pids first, to attach a profiler; with `1`, one client for about that long.
//! - `-- sustained [minutes]` runs the sustained-load check instead: 3 durable nodes behind
//!   nginx, 64 clients for 15 minutes (or `minutes`), a row per 30 s window with throughput,
//!   p50, p99, the longest round trip, each node's RSS at the window's end and the largest any
//!   node reached in it (read every second), the data directories' size, and the CPU the
//!   servers (nodes and nginx) spent per round trip beside the host's cores that other
//!   processes used, sat idle (or waited for I/O) and the hypervisor withheld (steal): a window
//!   that slows with its cost per trip flat was held back by something else, not made dearer.
//!   The load generator's CPU per round trip and a fixed-work probe (the fastest of a few
//!   runs of a register-only loop, timed every half second) tell a dearer trip from a slower
//!   machine: neither depends on what the servers hold.

#[path = "support/cpu.rs"]
mod cpu;
#[path = "../tests/common/nginx.rs"]
#[allow(dead_code)]
mod nginx;
#[path = "reference/rmcp.rs"]
mod rmcp_reference;

use cpu::{HostCpu, SpeedProbe, cpu_time};

use futures::StreamExt;
use futures::stream::BoxStream;
use serde_json::{Value, json};
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

// The allocator the `switchboard` binary ships with, so what runs in this process (here: the rmcp reference server) runs on it too.
#[global_allocator]
static ALLOCATOR: switchboard_node::allocator::Allocator = switchboard_node::allocator::Allocator;

const BIN: &str = env!("CARGO_BIN_EXE_switchboard");
const PROTOCOL_VERSION: &str = "2025-11-25";
const MODERN_VERSION: &str = "2026-07-28";
const ACCEPT: &str = "application/json, text/event-stream";
const NODE_HEADER: &str = "x-switchboard-node";
/// The first argument that makes this binary the rmcp reference server.
const REFERENCE_ARG: &str = "rmcp-reference";

const WARMUP: usize = 50;
const SEQUENTIAL: usize = 500;
const CONCURRENCY: usize = 64;
const WINDOW: Duration = Duration::from_secs(5);
const PARKED: usize = 10_000;
const PARK_SESSIONS: usize = 100;
const PARK_CONCURRENCY: usize = 400;
/// Long enough that nothing parked expires during the run.
const ELICITATION_TIMEOUT: &str = "10m";

/// Failed round trips across the whole run (printed, then fatal at the end).
static ERRORS: AtomicU64 = AtomicU64::new(0);

fn error(context: &str, e: String) {
    if ERRORS.fetch_add(1, Ordering::Relaxed) < 5 {
        eprintln!("ERROR ({context}): {e}");
    }
}

// ---- processes ---------------------------------------------------------------------------------

/// A node process, killed when dropped.
struct Proc {
    child: Option<tokio::process::Child>,
    log: PathBuf,
}

impl Proc {
    fn pid(&self) -> u32 {
        self.child.as_ref().and_then(|c| c.id()).expect("process is running")
    }

    fn exited(&mut self) -> bool {
        self.child.as_mut().is_none_or(|c| !matches!(c.try_wait(), Ok(None)))
    }

    fn log_tail(&self) -> String {
        let text = std::fs::read_to_string(&self.log).unwrap_or_default();
        let lines: Vec<&str> = text.lines().collect();
        lines[lines.len().saturating_sub(20)..].join("\n")
    }

    fn stop(&mut self) {
        let Some(mut child) = self.child.take() else { return };
        let _ = child.start_kill();
        let deadline = Instant::now() + Duration::from_secs(5);
        while matches!(child.try_wait(), Ok(None)) && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(10));
        }
    }
}

impl Drop for Proc {
    fn drop(&mut self) {
        self.stop();
    }
}

/// The `switchboard` binary the bench runs: this build's, or `BENCH_SWITCHBOARD_BIN` (another
/// build, e.g. an earlier commit's, to compare in the same conditions).
fn server_bin() -> PathBuf {
    std::env::var_os("BENCH_SWITCHBOARD_BIN").map_or_else(|| PathBuf::from(BIN), PathBuf::from)
}

fn spawn(program: &Path, args: &[String], envs: &[(&str, String)], dir: &Path, log: PathBuf) -> Proc {
    let file = std::fs::File::create(&log).expect("log file");
    let mut cmd = tokio::process::Command::new(program);
    cmd.args(args).current_dir(dir).stdin(Stdio::null()).stdout(file.try_clone().expect("log file")).stderr(file).kill_on_drop(true);
    // Only the flags written here configure the nodes.
    for (key, _) in std::env::vars_os() {
        if key.to_string_lossy().starts_with("SWITCHBOARD_") {
            cmd.env_remove(key);
        }
    }
    cmd.env("SWITCHBOARD_LOG", "warn").env("NO_COLOR", "1").envs(envs.iter().map(|(k, v)| (k, v)));
    let child = cmd.spawn().unwrap_or_else(|e| panic!("could not start {}: {e}", program.display()));
    Proc { child: Some(child), log }
}

fn free_ports(n: usize) -> Vec<u16> {
    let held: Vec<_> = (0..n).map(|_| std::net::TcpListener::bind("127.0.0.1:0").expect("free port")).collect();
    held.iter().map(|l| l.local_addr().unwrap().port()).collect()
}

struct Node {
    port: u16,
    metrics_port: u16,
    proc: Proc,
}

impl Node {
    fn url(&self) -> String {
        format!("http://127.0.0.1:{}/mcp", self.port)
    }

    fn metrics_url(&self) -> String {
        format!("http://127.0.0.1:{}/metrics", self.metrics_port)
    }
}

fn common_args(timeout: &str) -> Vec<String> {
    // The memory section parks 2 x PARKED calls on one node over PARK_SESSIONS sessions: more
    // than the default request limits allow, on purpose.
    let per_session = (2 * PARKED / PARK_SESSIONS + 1).to_string();
    let per_node = (2 * PARKED + CONCURRENCY + 1).to_string();
    let args = [
        "--tools",
        "default",
        "--elicitation-timeout",
        timeout,
        "--sampling-timeout",
        timeout,
        "--log-format",
        "json",
        "--max-requests-per-session",
        &per_session,
        "--max-requests-per-node",
        &per_node,
    ];
    args.map(String::from).to_vec()
}

/// `size` Raft members with `--peers` (or one lone Raft member for `size` 1), as tests/e2e/cluster.py runs them.
async fn start_raft(http: &reqwest::Client, dir: &Path, size: usize) -> Vec<Node> {
    start_raft_timing_out(http, dir, size, ELICITATION_TIMEOUT).await
}

/// [`start_raft`] with elicitation and sampling timeouts of `timeout`.
async fn start_raft_timing_out(http: &reqwest::Client, dir: &Path, size: usize, timeout: &str) -> Vec<Node> {
    let secret = dir.join("cluster-secret");
    let key = dir.join("encryption-key");
    std::fs::write(&secret, random_hex()).unwrap();
    std::fs::write(&key, random_hex()).unwrap();
    let ports = free_ports(3 * size);
    let peers: Vec<String> = (0..size).map(|i| format!("{i}=127.0.0.1:{}", ports[3 * i + 2])).collect();
    // Replicas sharing this host get a share of its cores each, as a CPU limit would give them
    // in a pod (an env var rather than the flag, so an earlier build given to compare with
    // still starts).
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
    let envs = [("SWITCHBOARD_WORKER_THREADS", (cores / size).max(1).to_string())];
    let mut nodes = Vec::new();
    for i in 0..size {
        let (port, metrics_port, peer_port) = (ports[3 * i], ports[3 * i + 1], ports[3 * i + 2]);
        let peer = format!("127.0.0.1:{peer_port}");
        let mut args: Vec<String> = vec![
            "serve".into(),
            "--node-id".into(),
            i.to_string(),
            "--listen".into(),
            format!("127.0.0.1:{port}"),
            "--metrics-listen".into(),
            format!("127.0.0.1:{metrics_port}"),
            "--peer-listen".into(),
            peer.clone(),
            "--advertise-peer".into(),
            peer,
            "--data-dir".into(),
            dir.join(format!("node{i}")).display().to_string(),
            "--heartbeat-interval".into(),
            "50ms".into(),
            "--election-timeout".into(),
            "300ms".into(),
        ];
        if size > 1 {
            args.extend(["--peers".into(), peers.join(","), "--cluster-secret-file".into(), secret.display().to_string()]);
            args.extend(["--encryption-key-file".into(), key.display().to_string()]);
        }
        args.extend(common_args(timeout));
        let proc = spawn(&server_bin(), &args, &envs, dir, dir.join(format!("node{i}.log")));
        nodes.push(Node { port, metrics_port, proc });
    }
    wait_ready(http, &mut nodes).await;
    nodes
}

/// One node with the in-memory store.
async fn start_memory(http: &reqwest::Client, dir: &Path) -> Node {
    let ports = free_ports(2);
    let mut args: Vec<String> = vec![
        "serve".into(),
        "--store".into(),
        "memory".into(),
        "--listen".into(),
        format!("127.0.0.1:{}", ports[0]),
        "--metrics-listen".into(),
        format!("127.0.0.1:{}", ports[1]),
    ];
    args.extend(common_args(ELICITATION_TIMEOUT));
    let proc = spawn(&server_bin(), &args, &[], dir, dir.join("memory.log"));
    let mut nodes = vec![Node { port: ports[0], metrics_port: ports[1], proc }];
    wait_ready(http, &mut nodes).await;
    nodes.pop().unwrap()
}

/// The rmcp reference server ([`rmcp_reference`]): this bench's own binary, started again with
/// `rmcp-reference <address>`, so its CPU is counted apart from the load generator's.
async fn start_rmcp_reference(http: &reqwest::Client, dir: &Path) -> (Proc, String) {
    let port = free_ports(1)[0];
    let exe = std::env::current_exe().expect("the bench's own path");
    let mut proc = spawn(&exe, &[REFERENCE_ARG.into(), format!("127.0.0.1:{port}")], &[], dir, dir.join("rmcp-reference.log"));
    let url = format!("http://127.0.0.1:{port}/mcp");
    let deadline = Instant::now() + Duration::from_secs(30);
    while let Err(e) = initialize(http, &url).await {
        assert!(!proc.exited(), "the rmcp reference server exited:\n{}", proc.log_tail());
        assert!(Instant::now() < deadline, "the rmcp reference server is not answering: {e}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    (proc, url)
}

/// 64 random hex digits (a secret or a 256-bit key).
fn random_hex() -> String {
    format!("{:032x}{:032x}\n", rand::random::<u128>(), rand::random::<u128>())
}

async fn wait_ready(http: &reqwest::Client, nodes: &mut [Node]) {
    let deadline = Instant::now() + Duration::from_secs(60);
    for node in nodes.iter_mut() {
        loop {
            if node.proc.exited() {
                panic!("a node exited while starting:\n{}", node.proc.log_tail());
            }
            let url = format!("http://127.0.0.1:{}/readyz", node.metrics_port);
            if http.get(&url).send().await.is_ok_and(|r| r.status() == 200) {
                break;
            }
            assert!(Instant::now() < deadline, "node not ready after 60 s:\n{}", node.proc.log_tail());
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }
}

/// nginx in front of `upstreams`, once a request through it reaches an upstream.
async fn start_nginx(http: &reqwest::Client, nginx: &Path, dir: &Path, upstreams: &[u16]) -> nginx::Nginx {
    let front = nginx::Nginx::start(nginx, dir, free_ports(1)[0], upstreams);
    let deadline = Instant::now() + Duration::from_secs(15);
    // Any answer from an upstream (it carries the node header) means the chain works.
    while !http.get(&front.url).send().await.is_ok_and(|r| r.headers().contains_key(NODE_HEADER)) {
        assert!(Instant::now() < deadline, "nginx front door not answering");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    front
}

fn rss_kb(pid: u32) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).expect("process status");
    let line = status.lines().find(|l| l.starts_with("VmRSS:")).expect("VmRSS line");
    line.split_whitespace().nth(1).and_then(|v| v.parse().ok()).expect("VmRSS value")
}

async fn metric(http: &reqwest::Client, url: &str, name: &str) -> Option<f64> {
    let text = http.get(url).send().await.ok()?.text().await.ok()?;
    text.lines().find_map(|l| l.strip_prefix(name).and_then(|rest| rest.strip_prefix(' ')).and_then(|v| v.trim().parse().ok()))
}

// ---- the raw MCP client ------------------------------------------------------------------------

fn post(http: &reqwest::Client, url: &str, session: Option<&str>, body: &Value) -> reqwest::RequestBuilder {
    let mut request = http.post(url).header("accept", ACCEPT).json(body);
    if let Some(session) = session {
        request = request.header("mcp-session-id", session).header("mcp-protocol-version", PROTOCOL_VERSION);
    }
    request
}

fn node_of(response: &reqwest::Response) -> String {
    response.headers().get(NODE_HEADER).and_then(|v| v.to_str().ok()).unwrap_or("?").to_string()
}

/// initialize (declaring form elicitation and sampling) + notifications/initialized; returns the session id.
async fn initialize(http: &reqwest::Client, url: &str) -> Result<String, String> {
    let body = json!({
        "jsonrpc": "2.0", "id": 0, "method": "initialize",
        "params": {"protocolVersion": PROTOCOL_VERSION, "capabilities": {"elicitation": {}, "sampling": {}}, "clientInfo": {"name": "elicitation-bench", "version": "0"}}
    });
    let response = post(http, url, None, &body).send().await.map_err(|e| format!("initialize: {e}"))?;
    let session = response.headers().get("mcp-session-id").and_then(|v| v.to_str().ok()).map(String::from);
    let status = response.status();
    let text = response.text().await.map_err(|e| e.to_string())?;
    let session = session.filter(|_| status == 200).ok_or_else(|| format!("initialize: {status} {text}"))?;
    let response = post(http, url, Some(&session), &json!({"jsonrpc": "2.0", "method": "notifications/initialized"}))
        .send()
        .await
        .map_err(|e| format!("notifications/initialized: {e}"))?;
    if response.status() != 202 {
        return Err(format!("notifications/initialized: {}", response.status()));
    }
    Ok(session)
}

/// JSON-RPC messages of an SSE body (events without data — priming, keep-alives — skipped).
struct Sse {
    body: BoxStream<'static, reqwest::Result<bytes::Bytes>>,
    buffer: Vec<u8>,
}

impl Sse {
    async fn next_message(&mut self) -> Result<Option<Value>, String> {
        loop {
            if let Some(end) = self.buffer.windows(2).position(|w| w == b"\n\n") {
                let event: Vec<u8> = self.buffer.drain(..end + 2).collect();
                let text = String::from_utf8_lossy(&event);
                let data: Vec<&str> =
                    text.lines().filter_map(|l| l.strip_prefix("data:")).map(|d| d.strip_prefix(' ').unwrap_or(d)).collect();
                let payload = data.join("\n");
                if payload.trim().is_empty() {
                    continue;
                }
                return serde_json::from_str(&payload).map(Some).map_err(|e| format!("bad SSE data {payload:?}: {e}"));
            }
            match self.body.next().await {
                Some(Ok(chunk)) => self.buffer.extend_from_slice(&chunk),
                Some(Err(e)) => return Err(format!("reading the stream: {e}")),
                None => return Ok(None),
            }
        }
    }
}

/// A tool that parks on a server-to-client request.
#[derive(Clone, Copy, PartialEq)]
enum Parks {
    /// `confirm`: `elicitation/create` (form; the handler holds a compiled schema validator).
    Elicitation,
    /// `ask_llm`: `sampling/createMessage` (no validator).
    Sampling,
    /// `confirm` from a 2026-07-28 client: answered `input_required`, the handler parked for
    /// the retry.
    Mrtr,
}

impl Parks {
    fn call(self) -> (&'static str, Value, &'static str) {
        match self {
            Parks::Elicitation => ("confirm", json!({"action": "bench"}), "elicitation/create"),
            Parks::Sampling => ("ask_llm", json!({"prompt": "bench"}), "sampling/createMessage"),
            Parks::Mrtr => unreachable!("a 2026-07-28 call is parked by modern_call"),
        }
    }
}

/// POST `tools/call confirm` and read its stream up to the `elicitation/create` request:
/// (the stream, the node that answered, the elicitation's request id).
async fn call_until_elicitation(http: &reqwest::Client, url: &str, session: &str, call_id: u64) -> Result<(Sse, String, Value), String> {
    call_until_parked(http, url, session, call_id, Parks::Elicitation).await
}

/// POST the tool call and read its stream up to the server-to-client request.
async fn call_until_parked(
    http: &reqwest::Client,
    url: &str,
    session: &str,
    call_id: u64,
    parks: Parks,
) -> Result<(Sse, String, Value), String> {
    let (tool, arguments, method) = parks.call();
    let body = json!({"jsonrpc": "2.0", "id": call_id, "method": "tools/call", "params": {"name": tool, "arguments": arguments}});
    let response = post(http, url, Some(session), &body).send().await.map_err(|e| format!("tools/call: {e}"))?;
    let status = response.status();
    if status != 200 {
        return Err(format!("tools/call: {status} {}", response.text().await.unwrap_or_default()));
    }
    let node = node_of(&response);
    let mut sse = Sse { body: response.bytes_stream().boxed(), buffer: Vec::new() };
    loop {
        match sse.next_message().await? {
            Some(m) if m["method"] == method => {
                let id = m["id"].clone();
                return Ok((sse, node, id));
            }
            Some(m) if m["id"] == json!(call_id) => return Err(format!("tools/call ended before {method}: {m}")),
            Some(_) => {}
            None => return Err(format!("tools/call stream ended before {method}")),
        }
    }
}

struct Trip {
    elapsed: Duration,
    /// tools/call sent → elicitation/create read (includes committing the mailbox).
    to_elicitation: Duration,
    /// answer POST sent → its 202 (includes committing the delivery).
    answer: Duration,
    /// 202 → result read (the owner applies the delivery, wakes the handler, writes the result).
    to_result: Duration,
    /// The answer was taken by another node than the tools/call.
    crossed: bool,
}

/// One elicitation round trip: tools/call on `call_url`, the answer POSTed to `answer_url`.
async fn round_trip(http: &reqwest::Client, call_url: &str, answer_url: &str, session: &str, call_id: u64) -> Result<Trip, String> {
    let start = Instant::now();
    let (mut sse, call_node, elicitation_id) = call_until_elicitation(http, call_url, session, call_id).await?;
    let elicited = start.elapsed();
    let answer = json!({"jsonrpc": "2.0", "id": elicitation_id, "result": {"action": "accept", "content": {"confirm": true}}});
    let response = post(http, answer_url, Some(session), &answer).send().await.map_err(|e| format!("answer: {e}"))?;
    let answer_node = node_of(&response);
    if response.status() != 202 {
        return Err(format!("answer: {} {}", response.status(), response.text().await.unwrap_or_default()));
    }
    let _ = response.bytes().await;
    let answered = start.elapsed();
    loop {
        match sse.next_message().await? {
            Some(m) if m["id"] == json!(call_id) => {
                let elapsed = start.elapsed();
                if m["result"]["structuredContent"]["answer"] != "confirmed" {
                    return Err(format!("tools/call result is not confirmed: {m}"));
                }
                // The stream ends right after the result; finish it so the connection is reused.
                while sse.next_message().await?.is_some() {}
                let (to_elicitation, answer, to_result) = (elicited, answered - elicited, elapsed - answered);
                return Ok(Trip { elapsed, to_elicitation, answer, to_result, crossed: call_node != answer_node });
            }
            Some(_) => {}
            None => return Err("tools/call stream ended before the result".into()),
        }
    }
}

/// A 2026-07-28 `tools/call confirm` (or its retry, with `extra` params): stateless, the version
/// and capabilities in `_meta` and the headers; the answer as JSON, and the node that gave it.
async fn modern_call(http: &reqwest::Client, url: &str, call_id: u64, extra: Value) -> Result<(Value, String), String> {
    let mut params = json!({"name": "confirm", "arguments": {"action": "bench"}, "_meta": {
        "io.modelcontextprotocol/protocolVersion": MODERN_VERSION,
        "io.modelcontextprotocol/clientCapabilities": {"elicitation": {}, "sampling": {}}}});
    for (k, v) in extra.as_object().into_iter().flatten() {
        params[k] = v.clone();
    }
    let body = json!({"jsonrpc": "2.0", "id": call_id, "method": "tools/call", "params": params});
    let response = http
        .post(url)
        .header("accept", ACCEPT)
        .header("mcp-protocol-version", MODERN_VERSION)
        .header("mcp-method", "tools/call")
        .header("mcp-name", "confirm")
        .json(&body)
        .send()
        .await
        .map_err(|e| format!("tools/call: {e}"))?;
    let node = node_of(&response);
    if response.status() != 200 {
        return Err(format!("tools/call: {} {}", response.status(), response.text().await.unwrap_or_default()));
    }
    let answer: Value = response.json().await.map_err(|e| format!("tools/call answer: {e}"))?;
    Ok((answer, node))
}

/// One 2026-07-28 elicitation round trip: `tools/call` on `call_url` answered `input_required`,
/// the retry with the answer and the state on `retry_url` answered with the result.
async fn round_trip_2026(http: &reqwest::Client, call_url: &str, retry_url: &str, call_id: u64) -> Result<Trip, String> {
    let start = Instant::now();
    let (first, call_node) = modern_call(http, call_url, call_id, json!({})).await?;
    let result = &first["result"];
    let (Some(state), Some(key)) = (result["requestState"].as_str(), result["inputRequests"].as_object().and_then(|r| r.keys().next()))
    else {
        return Err(format!("tools/call did not answer input_required: {first}"));
    };
    let asked = start.elapsed();
    let retry = json!({"requestState": state, "inputResponses": {key.as_str(): {"action": "accept", "content": {"confirm": true}}}});
    let (last, retry_node) = modern_call(http, retry_url, call_id + 1, retry).await?;
    let elapsed = start.elapsed();
    if last["result"]["structuredContent"]["answer"] != "confirmed" {
        return Err(format!("the retry's result is not confirmed: {last}"));
    }
    Ok(Trip { elapsed, to_elicitation: asked, answer: elapsed - asked, to_result: Duration::ZERO, crossed: call_node != retry_node })
}

// ---- workloads ---------------------------------------------------------------------------------

/// Where tools/call and answers go: trip `i` calls `calls[i % n]` and answers at `answers[i % n]`.
#[derive(Clone)]
struct Route {
    calls: Vec<String>,
    answers: Vec<String>,
}

impl Route {
    /// Everything to one URL (a node, or the load balancer).
    fn one(url: &str) -> Route {
        Route { calls: vec![url.to_string()], answers: vec![url.to_string()] }
    }

    /// Straight to the nodes, every answer to the node after the one that took the call.
    fn across(urls: &[String]) -> Route {
        let n = urls.len();
        Route { calls: urls.to_vec(), answers: (0..n).map(|i| urls[(i + 1) % n].clone()).collect() }
    }

    fn pick(&self, i: usize) -> (&str, &str) {
        let k = i % self.calls.len();
        (&self.calls[k], &self.answers[k])
    }
}

struct Figures {
    /// Sequential: p50 of tools/call → elicitation/create, answer → 202, 202 → result.
    phases: [Duration; 3],
    p50: Duration,
    p99: Duration,
    per_sec: f64,
    load_p50: Duration,
    load_p99: Duration,
    crossed: usize,
    trips: usize,
    /// CPU (user + system) of the server processes per round trip: sequential, under load.
    cpu_per_trip: [Duration; 2],
}

fn percentile(sorted: &[Duration], p: f64) -> Duration {
    if sorted.is_empty() {
        return Duration::ZERO;
    }
    sorted[((sorted.len() as f64 - 1.0) * p).round() as usize]
}

/// Which client drives a workload.
#[derive(Clone, Copy, PartialEq)]
enum Wire {
    /// 2025-11-25: a session, `elicitation/create` on the call's SSE stream, the answer POSTed.
    Session,
    /// 2026-07-28: `input_required`, then the retry with the answer (no session).
    Mrtr,
}

async fn trip(http: &reqwest::Client, wire: Wire, call: &str, answer: &str, session: &str, call_id: u64) -> Result<Trip, String> {
    match wire {
        Wire::Session => round_trip(http, call, answer, session, call_id).await,
        Wire::Mrtr => round_trip_2026(http, call, answer, 2 * call_id).await,
    }
}

/// What a client does before its first call: `initialize` (2025), or the `server/discover`
/// probe an auto-mode client sends (2026; no session: an empty id).
async fn open_session(http: &reqwest::Client, wire: Wire, url: &str) -> Result<String, String> {
    match wire {
        Wire::Session => initialize(http, url).await,
        Wire::Mrtr => {
            let body = json!({"jsonrpc": "2.0", "id": 0, "method": "server/discover", "params": {"_meta": {
                "io.modelcontextprotocol/protocolVersion": MODERN_VERSION,
                "io.modelcontextprotocol/clientCapabilities": {"elicitation": {}, "sampling": {}}}}});
            let response = http
                .post(url)
                .header("accept", ACCEPT)
                .header("mcp-protocol-version", MODERN_VERSION)
                .header("mcp-method", "server/discover")
                .json(&body)
                .send()
                .await
                .map_err(|e| format!("server/discover: {e}"))?;
            let status = response.status();
            let text = response.text().await.map_err(|e| e.to_string())?;
            if status != 200 || !text.contains("2026-07-28") {
                return Err(format!("server/discover: {status} {text}"));
            }
            Ok(String::new())
        }
    }
}

/// 2025-11-25 round trips over `route`; `servers` are the pids whose CPU is counted.
/// One client per session, each running round trips back to back until `stop`; every trip
/// with the time it finished.
async fn closed_loop(
    http: reqwest::Client,
    route: Route,
    wire: Wire,
    sessions: Vec<Result<String, String>>,
    stop: Instant,
) -> Vec<(Instant, Trip)> {
    let clients: Vec<_> = sessions
        .into_iter()
        .enumerate()
        .map(|(w, session)| {
            let (http, route) = (http.clone(), route.clone());
            tokio::spawn(async move {
                let session = session.expect("initialize");
                let mut trips = Vec::new();
                let mut i = w;
                while Instant::now() < stop {
                    let (call, answer) = route.pick(i);
                    match trip(&http, wire, call, answer, &session, i as u64 + 1).await {
                        Ok(trip) => trips.push((Instant::now(), trip)),
                        Err(e) => error("concurrent", e),
                    }
                    i += 1;
                }
                trips
            })
        })
        .collect();
    let mut trips = Vec::new();
    for client in clients {
        trips.extend(client.await.expect("client"));
    }
    trips
}

async fn workload(http: &reqwest::Client, route: &Route, servers: &[u32]) -> Figures {
    workload_on(http, route, Wire::Session, servers).await
}

async fn workload_on(http: &reqwest::Client, route: &Route, wire: Wire, servers: &[u32]) -> Figures {
    workload_sized(http, route, wire, servers, (WARMUP, SEQUENTIAL, WINDOW)).await
}

/// [`workload_on`] with `warmup` and `sequential` round trips at one client, then `window` at
/// [`CONCURRENCY`].
async fn workload_sized(
    http: &reqwest::Client,
    route: &Route,
    wire: Wire,
    servers: &[u32],
    (warmup, sequential, window): (usize, usize, Duration),
) -> Figures {
    let session = open_session(http, wire, &route.calls[0]).await.expect("initialize");
    let mut cpu_at_start = Duration::ZERO;
    let (mut crossed, mut trips) = (0, 0);
    let mut samples = Vec::with_capacity(sequential);
    let mut phases: [Vec<Duration>; 3] = Default::default();
    for i in 0..warmup + sequential {
        if i == warmup {
            cpu_at_start = cpu_time(servers);
        }
        let (call, answer) = route.pick(i);
        match trip(http, wire, call, answer, &session, i as u64 + 1).await {
            Ok(trip) if i >= warmup => {
                samples.push(trip.elapsed);
                for (k, d) in [trip.to_elicitation, trip.answer, trip.to_result].into_iter().enumerate() {
                    phases[k].push(d);
                }
                crossed += trip.crossed as usize;
                trips += 1;
            }
            Ok(_) => {}
            Err(e) => error("sequential", e),
        }
    }
    let sequential_cpu = (cpu_time(servers) - cpu_at_start) / samples.len().max(1) as u32;
    samples.sort();
    let phases = phases.map(|mut v| {
        v.sort();
        percentile(&v, 0.5)
    });

    let sessions = futures::future::join_all((0..CONCURRENCY).map(|w| open_session(http, wire, route.pick(w).0))).await;
    let stop = Instant::now() + window;
    let started = Instant::now();
    let cpu_at_start = cpu_time(servers);
    let mut under_load = Vec::new();
    for (_, trip) in closed_loop(http.clone(), route.clone(), wire, sessions, stop).await {
        trips += 1;
        crossed += trip.crossed as usize;
        under_load.push(trip.elapsed);
    }
    let elapsed = started.elapsed();
    let load_cpu = (cpu_time(servers) - cpu_at_start) / under_load.len().max(1) as u32;
    under_load.sort();
    Figures {
        phases,
        p50: percentile(&samples, 0.5),
        p99: percentile(&samples, 0.99),
        per_sec: under_load.len() as f64 / elapsed.as_secs_f64(),
        load_p50: percentile(&under_load, 0.5),
        load_p99: percentile(&under_load, 0.99),
        crossed,
        trips,
        cpu_per_trip: [sequential_cpu, load_cpu],
    }
}

/// Rounds of [`in_turns`], each server one turn per round.
const TURNS: usize = 5;
/// One turn: this many round trips at one client (after a few to warm up), then this long at
/// [`CONCURRENCY`].
const TURN_SEQUENTIAL: usize = 200;
const TURN_WINDOW: Duration = Duration::from_secs(2);

/// The figures of each of `servers` (name, route, pids), measured in turns: round after round,
/// each server in order for a short window. A shared host's speed drifts over minutes (here
/// rmcp's own figures moved by 2x within one session), so a ratio of two figures taken minutes
/// apart measures the drift as well; taken seconds apart, in every round, it does not.
async fn in_turns(http: &reqwest::Client, servers: &[(&str, Route, Vec<u32>)]) -> Vec<Vec<Figures>> {
    let mut figures: Vec<Vec<Figures>> = servers.iter().map(|_| Vec::new()).collect();
    for _ in 0..TURNS {
        for (i, (_, route, pids)) in servers.iter().enumerate() {
            figures[i].push(workload_sized(http, route, Wire::Session, pids, (20, TURN_SEQUENTIAL, TURN_WINDOW)).await);
        }
    }
    figures
}

/// The median of `ratios`.
fn median(mut ratios: Vec<f64>) -> f64 {
    ratios.sort_by(f64::total_cmp);
    ratios.get(ratios.len() / 2).copied().unwrap_or(f64::NAN)
}

/// The rounds' ratios of `of` to `to` by `figure`, and their median.
fn ratios(of: &[Figures], to: &[Figures], figure: impl Fn(&Figures) -> f64) -> (Vec<f64>, f64) {
    let each: Vec<f64> = of.iter().zip(to).map(|(a, b)| figure(a) / figure(b)).collect();
    (each.clone(), median(each))
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1e3
}

fn row_2026(name: &str, f: &Figures) {
    println!(
        "  {name:<40} p50 {:>6.3} ms  p99 {:>6.3} ms  | {CONCURRENCY} clients:  {:>6.0} trips/s (p50 {:>6.2} ms, p99 {:>6.2} ms) | retry on another node {:>5.1}%",
        ms(f.p50),
        ms(f.p99),
        f.per_sec,
        ms(f.load_p50),
        ms(f.load_p99),
        100.0 * f.crossed as f64 / f.trips.max(1) as f64
    );
    println!(
        "  {:<40} p50 of the parts: call -> input_required {:.3} ms, retry -> result {:.3} ms; {}",
        "",
        ms(f.phases[0]),
        ms(f.phases[1]),
        cpu_note(f)
    );
}

fn cpu_note(f: &Figures) -> String {
    format!("server CPU per round trip {:.3} ms at 1 client, {:.3} ms at {CONCURRENCY}", ms(f.cpu_per_trip[0]), ms(f.cpu_per_trip[1]))
}

fn row(name: &str, f: &Figures) {
    println!(
        "  {name:<40} p50 {:>6.3} ms  p99 {:>6.3} ms  | {CONCURRENCY} sessions: {:>6.0} trips/s (p50 {:>6.2} ms, p99 {:>6.2} ms) | answer on another node {:>5.1}%",
        ms(f.p50),
        ms(f.p99),
        f.per_sec,
        ms(f.load_p50),
        ms(f.load_p99),
        100.0 * f.crossed as f64 / f.trips.max(1) as f64
    );
    println!(
        "  {:<40} p50 of the parts: call -> elicitation/create {:.3} ms, answer -> 202 {:.3} ms, 202 -> result {:.3} ms; {}",
        "",
        ms(f.phases[0]),
        ms(f.phases[1]),
        ms(f.phases[2]),
        cpu_note(f)
    );
}

// ---- parked calls ------------------------------------------------------------------------------

struct Parked {
    /// (label, RSS before, after the first PARKED calls, after PARKED more), in KB, per process watched.
    rss: Vec<(String, u64, u64, u64)>,
    parked: [usize; 2],
    took: Duration,
    pending: Option<f64>,
}

impl Parked {
    /// (RSS after − RSS before) / PARKED for watched process `i`.
    fn per_call_kb(&self, i: usize) -> f64 {
        let (_, before, after, _) = &self.rss[i];
        (*after as f64 - *before as f64) / self.parked[0].max(1) as f64
    }

    /// The same for the second PARKED calls (fixed costs already paid).
    fn marginal_kb(&self, i: usize) -> f64 {
        let (_, _, after, more) = &self.rss[i];
        (*more as f64 - *after as f64) / self.parked[1].max(1) as f64
    }
}

/// Park PARKED calls on the node at `url` (each read to its server-to-client request, then its
/// connection dropped: the handler stays parked) and measure the RSS of `watch` (the owner
/// first) before and after; then PARKED more for the marginal cost.
async fn park(http: &reqwest::Client, url: &str, metrics_url: &str, watch: &[(String, u32)], parks: Parks) -> Parked {
    // A 2026 call's answer completes its response, so its connection would go back to the
    // client's pool and the node would keep PARK_CONCURRENCY idle connections: not memory of
    // the parked calls. Closed after each call instead, as the 2025 calls' connections are.
    let closing = reqwest::Client::builder().tcp_nodelay(true).pool_max_idle_per_host(0).build().unwrap();
    let sessions: Vec<String> = futures::stream::iter(0..PARK_SESSIONS)
        .map(|_| open_session(http, if parks == Parks::Mrtr { Wire::Mrtr } else { Wire::Session }, url))
        .buffer_unordered(50)
        .map(|s| s.expect("initialize"))
        .collect()
        .await;
    tokio::time::sleep(Duration::from_millis(500)).await;
    let mut rss: Vec<Vec<u64>> = vec![watch.iter().map(|(_, pid)| rss_kb(*pid)).collect()];
    let (mut parked, mut took, mut pending) = ([0; 2], Duration::ZERO, None);
    for (round, parked_in_round) in parked.iter_mut().enumerate() {
        let start = Instant::now();
        let (sessions, closing) = (&sessions, &closing);
        *parked_in_round = futures::stream::iter(0..PARKED)
            .map(|i| async move {
                let call_id = (round * PARKED + i) as u64 / PARK_SESSIONS as u64 + 1;
                if parks == Parks::Mrtr {
                    // Answered input_required; the handler stays parked for a retry.
                    return modern_call(closing, url, (round * PARKED + i) as u64, json!({})).await.map(drop);
                }
                // Dropping the stream closes the connection; the handler stays parked.
                call_until_parked(http, url, &sessions[i % PARK_SESSIONS], call_id, parks).await.map(drop)
            })
            .buffer_unordered(PARK_CONCURRENCY)
            .filter_map(|r| async move { r.map_err(|e| error("park", e)).ok() })
            .count()
            .await;
        if round == 0 {
            took = start.elapsed();
        }
        tokio::time::sleep(Duration::from_secs(1)).await;
        if round == 0 {
            pending = metric(http, metrics_url, "switchboard_mailboxes_pending").await;
        }
        rss.push(watch.iter().map(|(_, pid)| rss_kb(*pid)).collect());
    }
    let rss = watch.iter().enumerate().map(|(i, (label, _))| (label.clone(), rss[0][i], rss[1][i], rss[2][i])).collect();
    Parked { rss, parked, took, pending }
}

fn park_report(name: &str, p: &Parked, pending_note: &str) {
    println!(
        "  {name}: {} calls parked in {:.1} s ({PARK_CONCURRENCY} at a time over {PARK_SESSIONS} sessions)",
        p.parked[0],
        p.took.as_secs_f64()
    );
    match p.pending {
        Some(v) => println!("    switchboard_mailboxes_pending on the owner after them: {v}{pending_note}"),
        None => println!("    switchboard_mailboxes_pending: not published"),
    }
    for (i, (label, before, after, more)) in p.rss.iter().enumerate() {
        println!(
            "    {label:<26} RSS {:>7.1} MB -> {:>7.1} MB: {:>6.2} KB per parked call   (next {} parked: -> {:>7.1} MB, {:>6.2} KB each)",
            *before as f64 / 1024.0,
            *after as f64 / 1024.0,
            p.per_call_kb(i),
            p.parked[1],
            *more as f64 / 1024.0,
            p.marginal_kb(i)
        );
    }
}

fn rss_line(label: &str, trips: usize, pids: &[(String, u32)]) {
    let list: Vec<String> = pids.iter().map(|(name, pid)| format!("{name} {:.1} MB", rss_kb(*pid) as f64 / 1024.0)).collect();
    println!("  RSS of the {label} after ~{trips} round trips: {}", list.join(", "));
}

fn verdict(ok: bool) -> &'static str {
    if ok { "met" } else { "MISSED" }
}

// ---- sustained load ----------------------------------------------------------------------------

/// The elicitation timeout of the sustained run: the default, so tombstones live as long as
/// they do for users.
const SUSTAINED_TIMEOUT: &str = "5m";
const SUSTAINED_WINDOW: Duration = Duration::from_secs(30);
/// How often the sustained run reads the nodes' RSS.
const RSS_EVERY: Duration = Duration::from_secs(1);

/// One window of the sustained run, as its summary compares them.
#[derive(Clone, Copy)]
struct Window {
    per_sec: f64,
    p99: Duration,
    max: Duration,
    /// The largest RSS of any node in the window, MB.
    peak_rss: f64,
    /// The servers' CPU per round trip, ms.
    cpu_per_trip: f64,
    /// The load generator's CPU per round trip, ms.
    generator_per_trip: f64,
    /// The [`SpeedProbe`]'s median reading, µs.
    probe_us: f64,
}

/// `-- sustained [minutes]`: 3 durable nodes behind nginx, CONCURRENCY clients without pause
/// for `minutes` (15 by default), one row per 30 s window: does the cost grow with time?
async fn sustained(http: &reqwest::Client, nginx: &Path, minutes: u64) {
    println!(
        "sustained load: 3 durable nodes behind nginx, {CONCURRENCY} clients, {minutes} min, {SUSTAINED_WINDOW:?} windows, elicitation timeout {SUSTAINED_TIMEOUT}"
    );
    let dir = tempfile::tempdir().unwrap();
    let nodes = start_raft_timing_out(http, dir.path(), 3, SUSTAINED_TIMEOUT).await;
    let ports: Vec<u16> = nodes.iter().map(|n| n.port).collect();
    let front = start_nginx(http, nginx, &dir.path().join("nginx"), &ports).await;
    let route = Route::one(&front.url);
    let sessions = futures::future::join_all((0..CONCURRENCY).map(|_| open_session(http, Wire::Session, &front.url))).await;
    let started = Instant::now();
    let total = Duration::from_secs(60 * minutes);
    let windows = (total.as_secs() / SUSTAINED_WINDOW.as_secs()).max(1) as usize;
    let trips = tokio::spawn(closed_loop(http.clone(), route, Wire::Session, sessions, started + total));
    // RSS of each node and the data directories' size at the end of each window, and the
    // largest RSS of any node in the window, read every second (a snapshot build's peak lasts
    // a second or two, and a window's end rarely falls in one).
    let pids: Vec<u32> = nodes.iter().map(|n| n.proc.pid()).collect();
    let node_rss = || pids.iter().map(|pid| rss_kb(*pid) as f64 / 1024.0).collect::<Vec<f64>>();
    // CPU at each window's boundary: the servers', this process's (the load generator), the host's.
    let servers: Vec<u32> = pids.iter().copied().chain(front.pids()).collect();
    let cpu_now = || (cpu_time(&servers), cpu_time(&[std::process::id()]), HostCpu::read());
    let mut cpu = vec![cpu_now()];
    let probe = SpeedProbe::start();
    let mut samples = Vec::new();
    for k in 1..=windows {
        let end = started + SUSTAINED_WINDOW * k as u32;
        let mut peak: f64 = 0.0;
        while Instant::now() < end {
            tokio::time::sleep_until((Instant::now() + RSS_EVERY).min(end).into()).await;
            peak = node_rss().into_iter().fold(peak, f64::max);
        }
        let rss = node_rss();
        peak = rss.iter().copied().fold(peak, f64::max);
        cpu.push(cpu_now());
        samples.push((rss, peak, dir_bytes(dir.path()) as f64 / (1024.0 * 1024.0), storage(http, &nodes[0].metrics_url()).await));
    }
    let mut by_window: Vec<Vec<Duration>> = vec![Vec::new(); windows];
    for (finished, trip) in trips.await.expect("clients") {
        let k = (finished.duration_since(started).as_secs_f64() / SUSTAINED_WINDOW.as_secs_f64()) as usize;
        by_window[k.min(windows - 1)].push(trip.elapsed);
    }
    // Two yardsticks beside the servers' cost per trip. The load generator's work per trip does
    // not depend on what the servers hold: when its cost rises with theirs, the cause is shared
    // (the machine, or less batching on a slower run), not their state. The probe is the core's
    // speed alone, which no steal counter shows.
    println!(
        "  window   trips/s      p50 ms   p99 ms   max ms   RSS of the nodes (MB)   peak (MB)   data dirs (MB)   server CPU/trip ms   generator CPU/trip ms   probe us   cores: other   idle   steal"
    );
    let mut rows = Vec::new();
    for (k, mut latencies) in by_window.into_iter().take(windows).enumerate() {
        latencies.sort();
        let per_sec = latencies.len() as f64 / SUSTAINED_WINDOW.as_secs_f64();
        let ((servers_before, generator_before, host_before), (servers_after, generator_after, host_after)) = (&cpu[k], &cpu[k + 1]);
        let server_cpu = servers_after.saturating_sub(*servers_before);
        let generator_cpu = generator_after.saturating_sub(*generator_before);
        let per_trip = |cpu: Duration| cpu.as_secs_f64() * 1000.0 / latencies.len().max(1) as f64;
        let (cpu_per_trip, generator_per_trip) = (per_trip(server_cpu), per_trip(generator_cpu));
        // The host's cores in the window: busy with anything but this run, idle, withheld.
        let ours = server_cpu + generator_cpu;
        let host = host_after.since(host_before);
        let cores = |d: Duration| d.as_secs_f64() / SUSTAINED_WINDOW.as_secs_f64();
        let other = cores(host.busy.saturating_sub(ours));
        let (p50, p99, max) = (percentile(&latencies, 0.5), percentile(&latencies, 0.99), latencies.last().copied().unwrap_or_default());
        let window_start = started + SUSTAINED_WINDOW * k as u32;
        let probe_us = probe.median_between(window_start, window_start + SUSTAINED_WINDOW).map_or(f64::NAN, |d| d.as_secs_f64() * 1e6);
        let (rss, peak, data, _) = &samples[k];
        let rss_text: Vec<String> = rss.iter().map(|r| format!("{r:>6.1}")).collect();
        println!(
            "  {:>6} {per_sec:>9.0} {:>11.2} {:>8.2} {:>8.1}   {:<23} {peak:>9.1} {data:>16.1} {cpu_per_trip:>20.3} {generator_per_trip:>23.3} {probe_us:>10.0} {other:>14.2} {:>6.2} {:>7.2}",
            k + 1,
            ms(p50),
            ms(p99),
            ms(max),
            rss_text.join(" "),
            cores(host.idle),
            cores(host.steal)
        );
        rows.push(Window { per_sec, p99, max, peak_rss: *peak, cpu_per_trip, generator_per_trip, probe_us });
    }
    println!("\n  what node 0 holds at each window's end (records of the replicated state; log entries in memory; snapshot)");
    println!("  window   mailboxes  of them tombstones   pending   dedup   log entries   snapshot MB   Raft term");
    for (k, (_, _, _, held)) in samples.iter().enumerate() {
        let [mailboxes, tombstones, pending, dedup, log, snapshot, term] = held.map(|v| v.unwrap_or(f64::NAN));
        println!(
            "  {:>6} {mailboxes:>11.0} {tombstones:>19.0} {pending:>9.0} {dedup:>7.0} {log:>13.0} {:>13.1} {term:>11.0}",
            k + 1,
            snapshot / (1024.0 * 1024.0)
        );
    }
    let (first, last) = (rows[0], rows[rows.len() - 1]);
    let worst = rows.iter().map(|r| r.max).max().unwrap_or_default();
    let peak_rss = rows.iter().map(|r| r.peak_rss).fold(0.0, f64::max);
    println!("\nsummary (issue 14 sustained-load targets)");
    let target = |name: &str, measured: String, ok: bool| println!("  {name:<56} {measured:<30} {}", verdict(ok));
    let ratio = last.per_sec / first.per_sec;
    target("throughput, last window / first (>= 0.9)", format!("x{ratio:.2} ({:.0} vs {:.0})", last.per_sec, first.per_sec), ratio >= 0.9);
    let ratio = last.p99.as_secs_f64() / first.p99.as_secs_f64();
    target("p99, last window / first (<= 1.5)", format!("x{ratio:.2} ({:.1} vs {:.1} ms)", ms(last.p99), ms(first.p99)), ratio <= 1.5);
    target("longest round trip (<= 200 ms)", format!("{:.1} ms", ms(worst)), worst <= Duration::from_millis(200));
    target("largest node RSS, read every second (< 300 MB)", format!("{peak_rss:.1} MB"), peak_rss < 300.0);
    // Figures without a target: what a slow last window was made of.
    let last_over_first = |name: &str, last: f64, first: f64, figures: String, meaning: &str| {
        println!("  {name:<60} x{:.2} ({figures}; {meaning})", last / first)
    };
    last_over_first(
        "server CPU per round trip, last window / first",
        last.cpu_per_trip,
        first.cpu_per_trip,
        format!("{:.3} vs {:.3} ms", last.cpu_per_trip, first.cpu_per_trip),
        "the cost of a trip, whatever the host did",
    );
    last_over_first(
        "load generator CPU per round trip, last window / first",
        last.generator_per_trip,
        first.generator_per_trip,
        format!("{:.3} vs {:.3} ms", last.generator_per_trip, first.generator_per_trip),
        "the same work every trip, whatever the servers hold",
    );
    last_over_first(
        "fixed-work probe, last window / first",
        last.probe_us,
        first.probe_us,
        format!("{:.0} vs {:.0} us", last.probe_us, first.probe_us),
        "the core's own speed: a rise is a slower machine",
    );
    drop(front);
}

/// What a node's storage holds, from its metrics: mailboxes, tombstones, pending mailboxes,
/// dedup records, log entries in memory, snapshot bytes; and the Raft term (a leader change
/// shows as a step).
async fn storage(http: &reqwest::Client, metrics_url: &str) -> [Option<f64>; 7] {
    let mut held = [None; 7];
    let names = [
        "switchboard_replicated_records{part=\"mailboxes\"}",
        "switchboard_replicated_records{part=\"tombstones\"}",
        "switchboard_replicated_records{part=\"pending\"}",
        "switchboard_replicated_records{part=\"dedup\"}",
        "switchboard_raft_log_live_entries",
        "switchboard_raft_snapshot_bytes",
        "switchboard_raft_term",
    ];
    for (slot, name) in held.iter_mut().zip(names) {
        *slot = metric(http, metrics_url, name).await;
    }
    held
}

/// Bytes of the files under `dir`.
fn dir_bytes(dir: &Path) -> u64 {
    std::fs::read_dir(dir)
        .into_iter()
        .flatten()
        .flatten()
        .map(|entry| match entry.metadata() {
            Ok(m) if m.is_dir() => dir_bytes(&entry.path()),
            Ok(m) => m.len(),
            Err(_) => 0,
        })
        .sum()
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    if args.get(1).map(String::as_str) == Some(REFERENCE_ARG) {
        // Set up as the switchboard binary sets itself up. Not in this process otherwise: the
        // setting is inherited, and the nodes it starts (an earlier build too) set their own.
        switchboard_node::allocator::tune();
        rmcp_reference::serve(args.get(2).expect("rmcp-reference <address>"));
        return;
    }
    let runtime = tokio::runtime::Builder::new_multi_thread().enable_all().build().unwrap();
    runtime.block_on(async {
        let http = reqwest::Client::builder().tcp_nodelay(true).pool_idle_timeout(Duration::from_secs(30)).build().unwrap();
        let nginx = nginx::bin();
        println!(
            "elicitation benchmark: tools/call confirm -> elicitation/create -> answer -> result; {SEQUENTIAL} sequential round trips (after {WARMUP} warm-up) for latency, {CONCURRENCY} concurrent sessions for {WINDOW:?} for throughput"
        );
        if nginx.is_none() {
            println!("nginx not found (NGINX_BIN, PATH, /usr/sbin/nginx): the load-balanced figures are skipped");
        }
        let trips = |f: &Figures| f.trips + WARMUP;
        let memory_only = args.iter().any(|a| a == "memory");
        let single_only = args.iter().any(|a| a == "single");
        if let Some(at) = args.iter().position(|a| a == "sustained") {
            let minutes = args.get(at + 1).and_then(|m| m.parse().ok()).unwrap_or(15);
            sustained(&http, nginx.as_ref().expect("the sustained run needs nginx"), minutes).await;
            let errors = ERRORS.load(Ordering::Relaxed);
            assert_eq!(errors, 0, "{errors} round trips failed (first ones printed above)");
            return;
        }

        if let Some(at) = args.iter().position(|a| a == "load") {
            // One node under 64 clients for a while, its pid printed: for a profiler.
            let store = args.get(at + 1).map_or("raft", String::as_str);
            let seconds: u64 = args.get(at + 2).and_then(|s| s.parse().ok()).unwrap_or(20);
            let dir = tempfile::tempdir().unwrap();
            let one_client = args.get(at + 3).is_some_and(|c| c == "1");
            let window = Duration::from_secs(seconds);
            // One client makes a few hundred round trips a second: the sequential phase runs
            // about `seconds`, and the 64-client phase only a moment.
            let sized = if one_client { (20, seconds as usize * 400, Duration::from_secs(1)) } else { (20, TURN_SEQUENTIAL, window) };
            let clients = if one_client { 1 } else { CONCURRENCY };
            if store == "cluster" {
                let mut nodes = start_raft(&http, dir.path(), 3).await;
                let ports: Vec<u16> = nodes.iter().map(|n| n.port).collect();
                let front = start_nginx(&http, nginx.as_ref().expect("the cluster load needs nginx"), &dir.path().join("nginx"), &ports).await;
                let pids: Vec<u32> = nodes.iter().map(|n| n.proc.pid()).chain(front.pids()).collect();
                println!("cluster pids {pids:?} (nodes, then nginx) for {seconds} s at {clients} clients");
                let f = workload_sized(&http, &Route::one(&front.url), Wire::Session, &pids, sized).await;
                row("3 nodes through nginx", &f);
                drop(front);
                nodes.iter_mut().for_each(|n| n.proc.stop());
                return;
            }
            let mut node = match store {
                "memory" => start_memory(&http, dir.path()).await,
                _ => start_raft(&http, dir.path(), 1).await.remove(0),
            };
            println!("{store} node pid {} for {seconds} s at {clients} clients", node.proc.pid());
            let f = workload_sized(&http, &Route::one(&node.url()), Wire::Session, &[node.proc.pid()], sized).await;
            row(store, &f);
            node.proc.stop();
            return;
        }

        // 1. The cluster.
        let mut clustered = None;
        let mut clustered_2026 = None;
        let mut cluster_park = None;
        if let Some(nginx) = nginx.as_ref().filter(|_| !memory_only && !single_only) {
            println!("\n1. 3-node Raft cluster (fsync'd log, heartbeat 50 ms)");
            let dir = tempfile::tempdir().unwrap();
            let mut nodes = start_raft(&http, dir.path(), 3).await;
            let ports: Vec<u16> = nodes.iter().map(|n| n.port).collect();
            let front = start_nginx(&http, nginx, &dir.path().join("nginx"), &ports).await;
            let url = front.url.clone();
            let leader = metric(&http, &nodes[0].metrics_url(), "switchboard_raft_leader").await.map(|l| l as usize).filter(|l| *l < 3).unwrap_or(0);
            let follower = (leader + 1) % 3;
            let urls: Vec<String> = nodes.iter().map(Node::url).collect();
            let node_pids: Vec<u32> = nodes.iter().map(|n| n.proc.pid()).collect();
            let all_pids: Vec<u32> = node_pids.iter().copied().chain(front.pids()).collect();
            let f = workload(&http, &Route::one(&url), &all_pids).await;
            row("through nginx (round-robin)", &f);
            let mut served = trips(&f);
            clustered = Some(f);
            let f = workload_on(&http, &Route::one(&url), Wire::Mrtr, &all_pids).await;
            row_2026("through nginx, 2026-07-28 MRTR", &f);
            served += trips(&f);
            clustered_2026 = Some(f);
            for (name, route) in [
                ("direct, answer on the next node", Route::across(&urls)),
                ("direct, all on the leader", Route::one(&urls[leader])),
                ("direct, all on a follower", Route::one(&urls[follower])),
            ] {
                let f = workload(&http, &route, &node_pids).await;
                row(name, &f);
                served += trips(&f);
            }
            let pids: Vec<(String, u32)> =
                nodes.iter().enumerate().map(|(i, n)| (format!("node {i}{}", if i == leader { " (leader)" } else { "" }), n.proc.pid())).collect();
            rss_line("nodes", served, &pids);
            drop(front);
            for n in &mut nodes {
                n.proc.stop();
            }
        }

        // 3b, on a fresh cluster (needs no nginx).
        if (nginx.is_some() || memory_only) && !single_only {
            let dir = tempfile::tempdir().unwrap();
            let mut nodes = start_raft(&http, dir.path(), 3).await;
            let leader = metric(&http, &nodes[0].metrics_url(), "switchboard_raft_leader").await.map(|l| l as usize);
            let owner = (0..3).find(|i| Some(*i) != leader).unwrap();
            let role = |i: usize| if Some(i) == leader { "leader" } else { "follower" };
            let mut watch = vec![(format!("node {owner} (owner, {})", role(owner)), nodes[owner].proc.pid())];
            watch.extend((0..3).filter(|i| *i != owner).map(|i| (format!("node {i} ({})", role(i)), nodes[i].proc.pid())));
            let p = park(&http, &nodes[owner].url(), &nodes[owner].metrics_url(), &watch, Parks::Elicitation).await;
            println!("\n3b. memory per parked elicitation, fresh 3-node cluster (calls sent straight to one follower)");
            park_report("cluster", &p, "");
            cluster_park = Some(p.per_call_kb(0));
            for n in &mut nodes {
                n.proc.stop();
            }
        }

        // 2. One node.
        let mut single = None;
        let mut turns: Option<Vec<Vec<Figures>>> = None;
        if !memory_only {
            println!("\n2. one node");
            let dir = tempfile::tempdir().unwrap();
            let mut node = start_memory(&http, dir.path()).await;
            let pid = [node.proc.pid()];
            let f = workload(&http, &Route::one(&node.url()), &pid).await;
            row("memory store, direct", &f);
            let mut served = trips(&f);
            single = Some(f);
            let f = workload_on(&http, &Route::one(&node.url()), Wire::Mrtr, &pid).await;
            row_2026("memory store, direct, 2026-07-28 MRTR", &f);
            served += trips(&f);
            if let Some(nginx) = &nginx {
                let front = start_nginx(&http, nginx, &dir.path().join("nginx"), &[node.port]).await;
                let url = front.url.clone();
                let pids: Vec<u32> = pid.iter().copied().chain(front.pids()).collect();
                let f = workload(&http, &Route::one(&url), &pids).await;
                row("memory store, through nginx", &f);
                served += trips(&f);
                drop(front);
            }
            rss_line("memory-store node", served, &[("node".into(), node.proc.pid())]);
            node.proc.stop();
            let (mut rmcp, url) = start_rmcp_reference(&http, dir.path()).await;
            let f = workload(&http, &Route::one(&url), &[rmcp.pid()]).await;
            row("rmcp 3.11 stateful server, direct", &f);
            rmcp.stop();
            let raft_dir = tempfile::tempdir().unwrap();
            let mut lone = start_raft(&http, raft_dir.path(), 1).await;
            let f = workload(&http, &Route::one(&lone[0].url()), &[lone[0].proc.pid()]).await;
            row("1-node Raft store (fsync), direct", &f);
            lone[0].proc.stop();

            println!(
                "\n2b. the ratios, from turns: the memory-store node, rmcp and the 1-node Raft store all up, each in turn, {TURNS} rounds ({TURN_SEQUENTIAL} round trips at 1 client, then {} s at {CONCURRENCY})",
                TURN_WINDOW.as_secs()
            );
            let dir = tempfile::tempdir().unwrap();
            let mut node = start_memory(&http, dir.path()).await;
            let (mut rmcp, rmcp_url) = start_rmcp_reference(&http, dir.path()).await;
            let raft_dir = tempfile::tempdir().unwrap();
            let mut lone = start_raft(&http, raft_dir.path(), 1).await;
            let servers = [
                ("memory store", Route::one(&node.url()), vec![node.proc.pid()]),
                ("rmcp 3.11", Route::one(&rmcp_url), vec![rmcp.pid()]),
                ("1-node Raft store", Route::one(&lone[0].url()), vec![lone[0].proc.pid()]),
            ];
            let figures = in_turns(&http, &servers).await;
            for ((name, ..), f) in servers.iter().zip(&figures) {
                let rates: Vec<String> = f.iter().map(|f| format!("{:.0}", f.per_sec)).collect();
                let p50s: Vec<String> = f.iter().map(|f| format!("{:.3}", ms(f.p50))).collect();
                let cpus: Vec<String> = f.iter().map(|f| format!("{:.3}", ms(f.cpu_per_trip[1]))).collect();
                println!(
                    "  {name:<20} trips/s at {CONCURRENCY}: {:<40} p50 at 1 (ms): {:<40} CPU per trip at {CONCURRENCY} (ms): {}",
                    rates.join(" "),
                    p50s.join(" "),
                    cpus.join(" ")
                );
            }
            turns = Some(figures);
            node.proc.stop();
            rmcp.stop();
            lone[0].proc.stop();
        }

        let mut memory_park = 0.0;
        let mut mrtr_park = 0.0;
        if !single_only {
            println!("\n3a. memory per parked call, fresh node with the memory store");
        }
        for parks in [Parks::Elicitation, Parks::Sampling, Parks::Mrtr].into_iter().filter(|_| !single_only) {
            let dir = tempfile::tempdir().unwrap();
            let mut node = start_memory(&http, dir.path()).await;
            let p = park(&http, &node.url(), &node.metrics_url(), &[("memory-store node".to_string(), node.proc.pid())], parks).await;
            node.proc.stop();
            if parks == Parks::Elicitation {
                park_report("elicitation (confirm)", &p, " (the memory store does not publish this gauge)");
                memory_park = p.per_call_kb(0);
            } else if parks == Parks::Sampling {
                park_report("for comparison, sampling (ask_llm: no schema validator)", &p, " (not published by the memory store)");
            } else {
                park_report("2026-07-28 elicitation (confirm, parked for the retry)", &p, " (not published by the memory store)");
                mrtr_park = p.per_call_kb(0);
            }
        }

        println!("\nsummary (targets)");
        if let (Some(c), Some(single)) = (&clustered, &single) {
            println!("  clustered p50 {:.3} ms (target < 3 ms): {}", ms(c.p50), verdict(c.p50 < Duration::from_millis(3)));
            let ratio = c.p50.as_secs_f64() / single.p50.as_secs_f64();
            println!("  clustered/single p50 x{ratio:.2} (target < 2x): {}", verdict(ratio < 2.0));
            println!("  clustered/single throughput x{:.2} ({:.0} vs {:.0} trips/s)", c.per_sec / single.per_sec, c.per_sec, single.per_sec);
        }
        if let (Some(c), Some(m)) = (&clustered, &clustered_2026) {
            let ratio = m.p50.as_secs_f64() / c.p50.as_secs_f64();
            println!(
                "  2026-07-28 / 2025-11-25 round trip through nginx, p50 x{ratio:.2} ({:.3} vs {:.3} ms; target <= 1.25x): {}; throughput {:.0} vs {:.0} trips/s",
                ms(m.p50),
                ms(c.p50),
                verdict(ratio <= 1.25),
                m.per_sec,
                c.per_sec
            );
        }
        if !single_only {
            println!("  per parked call, memory store: {memory_park:.2} KB (target < 8 KB): {}", verdict(memory_park < 8.0));
            println!("  per parked 2026-07-28 call, memory store: {mrtr_park:.2} KB (target <= 5 KB): {}", verdict(mrtr_park <= 5.0));
        }
        if let Some(kb) = cluster_park {
            println!("  per parked call, cluster member (owner): {kb:.2} KB (target < 8 KB): {}", verdict(kb < 8.0));
        }
        println!("\nsummary (issue 14 targets, this run)");
        let target = |name: &str, measured: String, ok: bool| println!("  {name:<62} {measured:<34} {}", verdict(ok));
        if let Some(c) = &clustered {
            target("3 durable nodes via nginx, trips/s at 64 clients (>= 3,000)", format!("{:.0} (x{:.2})", c.per_sec, c.per_sec / 3000.0), c.per_sec >= 3000.0);
            target("3 durable nodes via nginx, p50 at 1 client (<= 1.5 ms)", format!("{:.3} ms (x{:.2})", ms(c.p50), ms(c.p50) / 1.5), ms(c.p50) <= 1.5);
            target("3 durable nodes via nginx, p99 at 64 clients (<= 40 ms)", format!("{:.1} ms (x{:.2})", ms(c.load_p99), ms(c.load_p99) / 40.0), ms(c.load_p99) <= 40.0);
            let [one, many] = c.cpu_per_trip.map(ms);
            target("  server CPU per round trip at 64 clients (<= 0.5 ms)", format!("{many:.3} ms (x{:.2})", many / 0.5), many <= 0.5);
            target("  server CPU per round trip at 1 client (<= 1.5 ms)", format!("{one:.3} ms (x{:.2})", one / 1.5), one <= 1.5);
        }
        // The ratios from the turns (see `in_turns`); the rows of section 2 were minutes apart.
        if let Some([memory, rmcp, durable]) = turns.as_deref() {
            let shown = |each: &[f64]| each.iter().map(|r| format!("{r:.2}")).collect::<Vec<_>>().join(" ");
            let (each, ratio) = ratios(durable, memory, |f| f.per_sec);
            target("1 durable node / 1 memory node, trips/s at 64 (>= 0.8x)", format!("x{ratio:.2} (rounds {})", shown(&each)), ratio >= 0.8);
            // At one client the rate is the inverse of the latency.
            let (each, one) = ratios(rmcp, memory, |f| f.p50.as_secs_f64());
            target("1 memory node / rmcp 3.11 stateful server, at 1 client (>= 1.0x)", format!("x{one:.2} (rounds {})", shown(&each)), one >= 1.0);
            let (each, many) = ratios(memory, rmcp, |f| f.per_sec);
            target("1 memory node / rmcp 3.11, trips/s at 64 clients (>= 1.0x)", format!("x{many:.2} (rounds {})", shown(&each)), many >= 1.0);
            for (k, clients) in [(0, 1), (1, CONCURRENCY)] {
                let (each, cpu) = ratios(memory, rmcp, |f| f.cpu_per_trip[k].as_secs_f64());
                target(&format!("  CPU per round trip at {clients} client(s) (<= rmcp's)"), format!("x{cpu:.2} (rounds {})", shown(&each)), cpu <= 1.0);
            }
        }
        if let Some(kb) = cluster_park {
            target("owner memory per parked call, 3-node cluster (<= 4 KB)", format!("{kb:.2} KB (x{:.2})", kb / 4.0), kb <= 4.0);
        }
        let errors = ERRORS.load(Ordering::Relaxed);
        assert_eq!(errors, 0, "{errors} round trips failed (first ones printed above)");
    });
}
