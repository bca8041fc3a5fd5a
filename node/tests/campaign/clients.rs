//! The workload: concurrent clients running elicitation and sampling round trips (2025 SSE
//! path) against random nodes, each answer carrying a value unique in the run and posted to
//! another random node; a few answer only after the deadline. A probe opens a session every
//! 50 ms (one committed write each) to time outages. Everything goes to the [`Recorder`].

use super::cluster::ANSWER_TIMEOUT;
use super::history::{Event, Recorder};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use serde_json::{Value, json};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::time::Duration;

pub struct Workload {
    pub urls: Vec<String>,
    pub recorder: Arc<Recorder>,
    pub stop: Arc<AtomicBool>,
    next_op: AtomicU64,
    /// Calls parked on each node now.
    pub parked: Vec<AtomicUsize>,
    http: reqwest::Client,
}

impl Workload {
    pub fn new(urls: Vec<String>, recorder: Arc<Recorder>) -> Arc<Self> {
        let parked = urls.iter().map(|_| AtomicUsize::new(0)).collect();
        let http = reqwest::Client::builder().timeout(Duration::from_secs(20)).build().unwrap();
        Arc::new(Self { urls, recorder, stop: Arc::default(), next_op: AtomicU64::new(1), parked, http })
    }

    /// The node with the most calls parked on it.
    pub fn busiest(&self) -> usize {
        (0..self.parked.len()).max_by_key(|i| self.parked[*i].load(Ordering::Relaxed)).unwrap_or(0)
    }

    fn post(&self, node: usize, body: &Value, session: Option<&str>) -> reqwest::RequestBuilder {
        let mut request = self
            .http
            .post(&self.urls[node])
            .header("accept", "application/json, text/event-stream")
            .header("content-type", "application/json")
            .body(body.to_string());
        if let Some(session) = session {
            request = request.header("mcp-session-id", session);
        }
        request
    }

    /// Open a session on `node`: a committed write when it answers 200.
    async fn open(&self, node: usize) -> Option<String> {
        let init = json!({"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": {"protocolVersion": "2025-11-25",
            "capabilities": {"elicitation": {}, "sampling": {}}, "clientInfo": {"name": "campaign", "version": "1"}}});
        let res = tokio::time::timeout(Duration::from_secs(3), self.post(node, &init, None).send()).await.ok()?.ok()?;
        if res.status() != 200 {
            return None;
        }
        let session = res.headers().get("mcp-session-id")?.to_str().ok()?.to_string();
        self.recorder.record(Event::Committed { t: self.recorder.now(), node, session: session.clone() });
        let _ = self.post(node, &json!({"jsonrpc": "2.0", "method": "notifications/initialized"}), Some(&session)).send().await;
        Some(session)
    }

    /// The probe: a session opened every 50 ms on a random node.
    pub async fn probe(self: Arc<Self>, seed: u64) {
        let mut rng = StdRng::seed_from_u64(seed ^ 0x9e37_79b9);
        while !self.stop.load(Ordering::Acquire) {
            let node = rng.random_range(0..self.urls.len());
            let _ = self.open(node).await;
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    /// One client: round trips until told to stop.
    pub async fn client(self: Arc<Self>, seed: u64) {
        let mut rng = StdRng::seed_from_u64(seed);
        while !self.stop.load(Ordering::Acquire) {
            let n = self.urls.len();
            let (a, b, c) = (rng.random_range(0..n), rng.random_range(0..n), rng.random_range(0..n));
            let sampling = rng.random_bool(0.3);
            let late = rng.random_bool(0.04);
            let Some(session) = self.open(a).await else {
                tokio::time::sleep(Duration::from_millis(100)).await;
                continue;
            };
            self.round_trip(&session, b, c, sampling, late, rng.random_range(0..200)).await;
        }
    }

    async fn round_trip(&self, session: &str, owner: usize, answerer: usize, sampling: bool, late: bool, delay_ms: u64) {
        let op = self.next_op.fetch_add(1, Ordering::Relaxed);
        let value = format!("v{op}-{:08x}", rand::random::<u32>());
        let (tool, args) =
            if sampling { ("test_sampling", json!({"prompt": value})) } else { ("test_elicitation", json!({"message": value})) };
        let call = json!({"jsonrpc": "2.0", "id": op, "method": "tools/call", "params": {"name": tool, "arguments": args}});
        let Ok(Ok(mut stream)) = tokio::time::timeout(Duration::from_secs(3), self.post(owner, &call, Some(session)).send()).await else {
            return;
        };
        if stream.status() != 200 {
            return;
        }
        let kind = if sampling { "sampling" } else { "elicitation" };
        let rec = &self.recorder;
        rec.record(Event::Invoke { op, t: rec.now(), kind: kind.into(), node: owner, session: session.into(), value: value.clone(), late });
        self.parked[owner].fetch_add(1, Ordering::Relaxed);
        let outcome = self.converse(&mut stream, op, session, answerer, sampling, late, delay_ms, &value).await;
        self.parked[owner].fetch_sub(1, Ordering::Relaxed);
        rec.record(outcome);
    }

    #[allow(clippy::too_many_arguments)]
    async fn converse(
        &self,
        stream: &mut reqwest::Response,
        op: u64,
        session: &str,
        answerer: usize,
        sampling: bool,
        late: bool,
        delay_ms: u64,
        value: &str,
    ) -> Event {
        let rec = &self.recorder;
        let mut buffer = String::new();
        let question = loop {
            match next_message(stream, &mut buffer, ANSWER_TIMEOUT + Duration::from_secs(2)).await {
                Ok(m) if m.get("method").is_some() && m.get("id").is_some() => break m,
                Ok(m) if m.get("id") == Some(&json!(op)) => return ending(rec, op, &m, sampling),
                Ok(_) => continue,
                Err(e) => return Event::Unknown { op, t: rec.now(), error: format!("before the question: {e}") },
            }
        };
        rec.record(Event::Asked { op, t: rec.now() });
        let wait = if late { ANSWER_TIMEOUT + Duration::from_secs(6) } else { Duration::from_millis(delay_ms) };
        tokio::time::sleep(wait).await;
        let result = if sampling {
            json!({"role": "assistant", "content": {"type": "text", "text": value}, "model": "campaign"})
        } else {
            json!({"action": "accept", "content": {"username": value, "email": "campaign@example.com"}})
        };
        let answer = json!({"jsonrpc": "2.0", "id": question["id"], "result": result});
        let status = match tokio::time::timeout(Duration::from_secs(8), self.post(answerer, &answer, Some(session)).send()).await {
            Ok(Ok(res)) => res.status().as_u16(),
            _ => 0,
        };
        rec.record(Event::Answered { op, t: rec.now(), node: answerer, status });
        loop {
            match next_message(stream, &mut buffer, ANSWER_TIMEOUT + Duration::from_secs(8)).await {
                Ok(m) if m.get("id") == Some(&json!(op)) && m.get("method").is_none() => return ending(rec, op, &m, sampling),
                Ok(_) => continue,
                Err(e) => return Event::Unknown { op, t: rec.now(), error: format!("after the answer: {e}") },
            }
        }
    }
}

/// The call's response as an ending: the value the handler echoed, or the error.
fn ending(rec: &Recorder, op: u64, response: &Value, sampling: bool) -> Event {
    let t = rec.now();
    if let Some(error) = response.get("error") {
        return Event::Fail { op, t, error: error.to_string() };
    }
    let result = &response["result"];
    let text = result["content"][0]["text"].as_str().unwrap_or_default();
    if result["isError"] == json!(true) {
        return Event::Fail { op, t, error: text.into() };
    }
    let echo = if sampling {
        text.strip_prefix("LLM response: ").map(str::to_string)
    } else {
        text.split_once("content=")
            .and_then(|(_, c)| serde_json::from_str::<Value>(c).ok())
            .and_then(|c| c["username"].as_str().map(str::to_string))
    };
    Event::Ok { op, t, echo }
}

/// The next JSON-RPC message on an SSE response.
async fn next_message(res: &mut reqwest::Response, buffer: &mut String, within: Duration) -> Result<Value, String> {
    let deadline = tokio::time::Instant::now() + within;
    loop {
        while let Some(end) = buffer.find("\n\n") {
            let block: String = buffer.drain(..end + 2).collect();
            let data: Vec<&str> = block.lines().filter_map(|l| l.strip_prefix("data:")).map(str::trim_start).collect();
            if !data.is_empty() && !data.concat().is_empty() {
                return serde_json::from_str(&data.join("\n")).map_err(|e| e.to_string());
            }
        }
        let left = deadline.saturating_duration_since(tokio::time::Instant::now());
        match tokio::time::timeout(left, res.chunk()).await {
            Err(_) => return Err(format!("nothing within {within:?}")),
            Ok(Err(e)) => return Err(format!("stream broke: {e}")),
            Ok(Ok(None)) => return Err("stream closed".into()),
            Ok(Ok(Some(chunk))) => buffer.push_str(&String::from_utf8_lossy(&chunk)),
        }
    }
}
