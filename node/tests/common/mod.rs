//! Shared fixtures: a real server on 127.0.0.1:0 and a raw HTTP client for the status-code rules.
#![allow(dead_code)]

pub mod cluster;
pub mod mcp_cluster;
pub mod modern;
pub mod nginx;

use serde_json::{Value, json};
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;
use switchboard_node::Server;
use switchboard_node::mailbox::InMemoryMailbox;
use switchboard_node::protocol::types::CallToolResult;
use switchboard_node::server::{ServerBuilder, ServerConfig, ToolDef};
use switchboard_node::session::InMemorySessionStore;
use switchboard_node::tools::ToolSet;
use switchboard_node::transport::http::{self, HttpConfig};
use tokio::sync::oneshot;

/// A port that is free now and stays free until a child process binds it: taken below Linux's
/// ephemeral range (32768+), so no outgoing connection of this or another test takes it
/// meanwhile, and never handed out twice in one test binary.
pub fn free_port() -> u16 {
    static GIVEN: std::sync::Mutex<Vec<u16>> = std::sync::Mutex::new(Vec::new());
    loop {
        let port = 20_000 + rand::random::<u16>() % 12_000;
        let mut given = GIVEN.lock().unwrap();
        if !given.contains(&port) && std::net::TcpListener::bind(("127.0.0.1", port)).is_ok() {
            given.push(port);
            return port;
        }
    }
}

/// The preloadable libfaketime, or a panic that says how to get it.
pub fn libfaketime() -> PathBuf {
    let mut candidates: Vec<PathBuf> =
        ["/usr/lib/faketime/libfaketime.so.1", "/usr/local/lib/faketime/libfaketime.so.1"].map(PathBuf::from).into();
    if let Ok(dirs) = std::fs::read_dir("/usr/lib") {
        candidates.extend(dirs.flatten().map(|d| d.path().join("faketime/libfaketime.so.1")));
    }
    candidates.into_iter().find(|p| p.exists()).expect(
        "libfaketime.so.1 not found: this test shifts one node's clock with it. Install Debian's faketime package \
         (apt-get install faketime); scripts/test.sh installs it",
    )
}

/// What libfaketime leaves in /dev/shm for a process it ran in (its shared memory and semaphore,
/// named by the pid), removed on drop. libfaketime removes them itself only at a normal exit, so
/// every node a test killed left two files behind, run after run.
pub struct FaketimeLeftovers(pub u32);

impl FaketimeLeftovers {
    pub fn paths(&self) -> [PathBuf; 2] {
        let pid = self.0;
        [format!("/dev/shm/faketime_shm_{pid}"), format!("/dev/shm/sem.faketime_sem_{pid}")].map(PathBuf::from)
    }
}

impl Drop for FaketimeLeftovers {
    fn drop(&mut self) {
        for path in self.paths() {
            let _ = std::fs::remove_file(path);
        }
    }
}

pub struct TestServer {
    pub addr: SocketAddr,
    pub url: String,
    pub server: Server,
    _shutdown: oneshot::Sender<()>,
}

/// The stock tools, the conformance set, and a few tools only tests need.
pub fn builder(config: ServerConfig) -> ServerBuilder {
    let builder = ServerBuilder::new("switchboard-test", "0.0.0").config(config);
    let builder = modern::register_test_tools(ToolSet::Conformance.register(ToolSet::Default.register(builder)));
    builder.tool(
        ToolDef::new("wait_for_cancel", json!({"type": "object"}), |ctx, _| async move {
            // Emit something first so the response is a stream the test can watch.
            ctx.progress(0.0, None, Some("waiting"));
            ctx.cancelled().await;
            Ok(CallToolResult::text("cancelled"))
        })
        .unwrap()
        .description("Runs until the client cancels it."),
    )
}

pub async fn start(config: ServerConfig, http_config: HttpConfig) -> TestServer {
    let server = builder(config).build(Arc::new(InMemoryMailbox::new()), Arc::new(InMemorySessionStore::new(Duration::from_secs(3600))));
    start_server(server, http_config).await
}

pub async fn start_default() -> TestServer {
    start(ServerConfig::default(), HttpConfig::default()).await
}

pub async fn start_server(server: Server, http_config: HttpConfig) -> TestServer {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let (tx, rx) = oneshot::channel::<()>();
    let router = http::router(server.clone(), http_config);
    tokio::spawn(http::serve(listener, router, async move {
        let _ = rx.await;
    }));
    TestServer { addr, url: format!("http://{addr}/mcp"), server, _shutdown: tx }
}

/// A hand-driven HTTP client, for the rules a real MCP client never breaks.
pub struct RawClient {
    pub http: reqwest::Client,
    pub url: String,
    pub session: Option<String>,
}

pub const ACCEPT_BOTH: &str = "application/json, text/event-stream";

impl RawClient {
    pub fn new(url: &str) -> Self {
        RawClient { http: reqwest::Client::new(), url: url.to_string(), session: None }
    }

    /// A POST with the headers a well-behaved client sends.
    pub fn post(&self, body: impl Into<reqwest::Body>) -> reqwest::RequestBuilder {
        self.post_without_accept(body).header("accept", ACCEPT_BOTH)
    }

    /// A POST with the session and content type but no Accept header (headers append in reqwest).
    pub fn post_without_accept(&self, body: impl Into<reqwest::Body>) -> reqwest::RequestBuilder {
        let mut req = self.http.post(&self.url).header("content-type", "application/json").body(body);
        if let Some(s) = &self.session {
            req = req.header("mcp-session-id", s);
        }
        req
    }

    pub fn get(&self) -> reqwest::RequestBuilder {
        let mut req = self.http.get(&self.url).header("accept", "text/event-stream");
        if let Some(s) = &self.session {
            req = req.header("mcp-session-id", s);
        }
        req
    }

    pub async fn initialize_with(&mut self, capabilities: Value, version: &str) -> Value {
        let body = json!({"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": {
            "protocolVersion": version, "capabilities": capabilities, "clientInfo": {"name": "raw", "version": "1"}}});
        let res = self.post(body.to_string()).send().await.unwrap();
        assert_eq!(res.status(), 200);
        self.session = Some(res.headers()["mcp-session-id"].to_str().unwrap().to_string());
        let body: Value = res.json().await.unwrap();
        let res = self.post(json!({"jsonrpc": "2.0", "method": "notifications/initialized"}).to_string()).send().await.unwrap();
        assert_eq!(res.status(), 202);
        body
    }

    pub async fn initialize(&mut self) -> Value {
        self.initialize_with(json!({"elicitation": {}, "sampling": {}}), "2025-11-25").await
    }

    /// POST one request and return the messages of the answer, whether JSON or SSE.
    pub async fn request(&self, id: i64, method: &str, params: Value) -> Vec<Value> {
        let body = json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params});
        let res = self.post(body.to_string()).send().await.unwrap();
        assert_eq!(res.status(), 200, "{method} answered {}", res.status());
        messages_of(res).await
    }

    /// The final response to a request (the last message).
    pub async fn call(&self, id: i64, method: &str, params: Value) -> Value {
        self.request(id, method, params).await.pop().unwrap()
    }
}

/// One parsed SSE event.
#[derive(Debug, Clone, PartialEq)]
pub struct SseEvent {
    pub id: Option<String>,
    pub data: String,
    pub retry: Option<u64>,
}

/// Parse a complete SSE text (comments dropped).
pub fn parse_sse(text: &str) -> Vec<SseEvent> {
    let mut events = Vec::new();
    for block in text.split("\n\n") {
        let (mut id, mut data, mut retry, mut any) = (None, None::<String>, None, false);
        for line in block.lines() {
            if line.starts_with(':') || line.is_empty() {
                continue;
            }
            let (field, value) = line.split_once(':').unwrap_or((line, ""));
            let value = value.strip_prefix(' ').unwrap_or(value);
            any = true;
            match field {
                "id" => id = Some(value.to_string()),
                "data" => data = Some(data.map(|d| d + "\n" + value).unwrap_or_else(|| value.to_string())),
                "retry" => retry = value.parse().ok(),
                _ => {}
            }
        }
        if any {
            events.push(SseEvent { id, data: data.unwrap_or_default(), retry });
        }
    }
    events
}

/// The JSON-RPC messages carried by SSE events (the empty-data priming event skipped).
pub fn data(events: &[SseEvent]) -> Vec<Value> {
    events.iter().filter(|e| !e.data.is_empty()).map(|e| serde_json::from_str(&e.data).unwrap()).collect()
}

/// The JSON-RPC messages in a response body (JSON, or the non-empty data of SSE events).
pub async fn messages_of(res: reqwest::Response) -> Vec<Value> {
    let sse = res.headers()["content-type"].to_str().unwrap().starts_with("text/event-stream");
    let text = res.text().await.unwrap();
    if !sse {
        return vec![serde_json::from_str(&text).unwrap()];
    }
    parse_sse(&text).into_iter().filter(|e| !e.data.is_empty()).map(|e| serde_json::from_str(&e.data).unwrap()).collect()
}

/// Call `countdown` (six progress notifications 60 ms apart, request id 1), read its first
/// `events` SSE events, then break the connection; the events read are returned.
pub async fn countdown_broken_after(client: &RawClient, events: usize) -> Vec<SseEvent> {
    let call = json!({"jsonrpc": "2.0", "id": 1, "method": "tools/call",
        "params": {"name": "countdown", "arguments": {"steps": 6, "delay_ms": 60}, "_meta": {"progressToken": "t"}}});
    let mut res = client.post(call.to_string()).send().await.unwrap();
    read_events(&mut res, events, &mut String::new()).await
}

/// The `progress` values of the `notifications/progress` among `messages`, in order.
pub fn progress_values(messages: &[Value]) -> Vec<f64> {
    messages.iter().filter(|m| m["method"] == "notifications/progress").map(|m| m["params"]["progress"].as_f64().unwrap()).collect()
}

/// Read SSE events from a streaming response until `n` events (comments skipped) have come.
pub async fn read_events(res: &mut reqwest::Response, n: usize, buffer: &mut String) -> Vec<SseEvent> {
    loop {
        if let Some(end) = nth_block_end(buffer, n) {
            let events = parse_sse(&buffer[..end]);
            buffer.drain(..end);
            return events;
        }
        let chunk = tokio::time::timeout(Duration::from_secs(10), res.chunk()).await.expect("event within 10 s").unwrap();
        match chunk {
            Some(bytes) => buffer.push_str(std::str::from_utf8(&bytes).unwrap()),
            None => return parse_sse(&std::mem::take(buffer)),
        }
    }
}

/// Byte offset just past the `n`-th non-comment event block in `text`, if it is complete.
fn nth_block_end(text: &str, n: usize) -> Option<usize> {
    let (mut seen, mut offset) = (0, 0);
    while let Some(pos) = text[offset..].find("\n\n") {
        let block = &text[offset..offset + pos];
        offset += pos + 2;
        if !block.lines().all(|l| l.starts_with(':')) {
            seen += 1;
            if seen == n {
                return Some(offset);
            }
        }
    }
    None
}

/// Read an SSE response until the server sends a request of its own (`elicitation/create`,
/// `sampling/createMessage`, ...); that request.
pub async fn read_until_request(res: &mut reqwest::Response, buffer: &mut String) -> Value {
    loop {
        for event in read_events(res, 1, buffer).await {
            if event.data.is_empty() {
                continue;
            }
            let message: Value = serde_json::from_str(&event.data).unwrap();
            if message.get("method").is_some() && message.get("id").is_some() {
                return message;
            }
        }
    }
}

/// Call the stock `confirm` tool (form elicitation) as request `id`, and read its stream until
/// the `elicitation/create` it parks on: the stream (to read on), its buffer, and that request.
pub async fn park_confirm(client: &RawClient, id: i64, action: &str) -> (reqwest::Response, String, Value) {
    let call = json!({"jsonrpc": "2.0", "id": id, "method": "tools/call", "params": {"name": "confirm", "arguments": {"action": action}}});
    let mut res = client.post(call.to_string()).send().await.unwrap();
    let mut buffer = String::new();
    let request = read_until_request(&mut res, &mut buffer).await;
    assert_eq!(request["method"], "elicitation/create");
    (res, buffer, request)
}
