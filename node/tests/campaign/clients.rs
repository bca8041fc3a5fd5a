//! The workload: concurrent clients running elicitation and sampling round trips, each answer
//! carrying a value unique in the run. A round trip is either a 2025-11-25 session (the question
//! on the call's SSE stream, the answer POSTed) or a 2026-07-28 multi-round-trip call (the
//! question as an `input_required` result, the answers in a retry, sent again while the cluster
//! cannot take them). The call and its answer each go to a random node, or through nginx; a
//! few answer only after the deadline. A probe opens a session every 50 ms (one committed write
//! each) to time outages. Everything goes to the [`Recorder`].

use super::cluster::ANSWER_TIMEOUT;
use super::history::{Era, Event, Recorder};
use crate::common::modern::Modern;
use crate::common::parse_sse;
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use serde_json::{Value, json};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::time::Duration;
use switchboard_node::transport::http::NODE_HEADER;

/// Where a request goes: a node directly, or nginx in front of them all.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Entry {
    Node(usize),
    Balancer,
}

/// How often a 2026 retry is sent when the cluster could not take its answers.
const RETRY_ATTEMPTS: usize = 4;

pub struct Workload {
    urls: Vec<String>,
    balancer: Option<String>,
    pub recorder: Arc<Recorder>,
    pub stop: Arc<AtomicBool>,
    next_op: AtomicU64,
    /// Calls parked on each node now.
    pub parked: Vec<AtomicUsize>,
    http: reqwest::Client,
}

impl Workload {
    /// Clients of the nodes at `urls`, and of nginx in front of them when `balancer` is given.
    pub fn new(urls: Vec<String>, balancer: Option<String>, recorder: Arc<Recorder>) -> Arc<Self> {
        let parked = urls.iter().map(|_| AtomicUsize::new(0)).collect();
        let http = reqwest::Client::builder().timeout(Duration::from_secs(20)).build().unwrap();
        Arc::new(Self { urls, balancer, recorder, stop: Arc::default(), next_op: AtomicU64::new(1), parked, http })
    }

    /// The node with the most calls parked on it.
    pub fn busiest(&self) -> usize {
        (0..self.parked.len()).max_by_key(|i| self.parked[*i].load(Ordering::Relaxed)).unwrap_or(0)
    }

    fn url(&self, entry: Entry) -> &str {
        match entry {
            Entry::Node(i) => &self.urls[i],
            Entry::Balancer => self.balancer.as_deref().expect("nginx runs"),
        }
    }

    /// A random entry: through nginx (when it runs) one time in three, else a random node.
    fn pick(&self, rng: &mut StdRng) -> Entry {
        if self.balancer.is_some() && rng.random_bool(1.0 / 3.0) {
            Entry::Balancer
        } else {
            Entry::Node(rng.random_range(0..self.urls.len()))
        }
    }

    fn post(&self, entry: Entry, body: &Value, session: Option<&str>) -> reqwest::RequestBuilder {
        let mut request = self
            .http
            .post(self.url(entry))
            .header("accept", "application/json, text/event-stream")
            .header("content-type", "application/json")
            .body(body.to_string());
        if let Some(session) = session {
            request = request.header("mcp-session-id", session);
        }
        request
    }

    /// Open a session through `entry`: a committed write when it answers 200.
    async fn open(&self, entry: Entry) -> Option<String> {
        let init = json!({"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": {"protocolVersion": "2025-11-25",
            "capabilities": {"elicitation": {}, "sampling": {}}, "clientInfo": {"name": "campaign", "version": "1"}}});
        let sent = self.recorder.now();
        let res = tokio::time::timeout(Duration::from_secs(3), self.post(entry, &init, None).send()).await.ok()?.ok()?;
        if res.status() != 200 {
            return None;
        }
        let node = served_by(&res)?;
        let session = res.headers().get("mcp-session-id")?.to_str().ok()?.to_string();
        self.recorder.record(Event::Committed { t: self.recorder.now(), sent, node, session: session.clone() });
        let _ = self.post(entry, &json!({"jsonrpc": "2.0", "method": "notifications/initialized"}), Some(&session)).send().await;
        Some(session)
    }

    /// The probe: a session opened every 50 ms on a random node.
    pub async fn probe(self: Arc<Self>, seed: u64) {
        let mut rng = StdRng::seed_from_u64(seed ^ 0x9e37_79b9);
        while !self.stop.load(Ordering::Acquire) {
            let node = rng.random_range(0..self.urls.len());
            let _ = self.open(Entry::Node(node)).await;
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    /// One client: round trips until told to stop, a third of them 2026-07-28 calls.
    pub async fn client(self: Arc<Self>, seed: u64) {
        let mut rng = StdRng::seed_from_u64(seed);
        while !self.stop.load(Ordering::Acquire) {
            let (call, answer) = (self.pick(&mut rng), self.pick(&mut rng));
            let trip = Trip {
                op: self.next_op.fetch_add(1, Ordering::Relaxed),
                sampling: rng.random_bool(0.3),
                late: rng.random_bool(0.04),
                delay: Duration::from_millis(rng.random_range(0..200)),
                balanced: call == Entry::Balancer,
            };
            if rng.random_bool(1.0 / 3.0) {
                let answerers: Vec<Entry> = std::iter::once(answer).chain((1..RETRY_ATTEMPTS).map(|_| self.pick(&mut rng))).collect();
                self.modern_round_trip(&trip, call, &answerers).await;
            } else {
                let Some(session) = self.open(call).await else {
                    tokio::time::sleep(Duration::from_millis(100)).await;
                    continue;
                };
                self.round_trip(&trip, &session, call, answer).await;
            }
        }
    }

    fn record_invoke(&self, trip: &Trip, era: Era, node: usize, session: &str, value: &str) {
        let rec = &self.recorder;
        let kind = if trip.sampling { "sampling" } else { "elicitation" };
        let (op, balanced, late) = (trip.op, trip.balanced, trip.late);
        rec.record(Event::Invoke {
            op,
            t: rec.now(),
            kind: kind.into(),
            era,
            balanced,
            node,
            session: session.into(),
            value: value.into(),
            late,
        });
    }

    /// The wait before answering: a short think, or past the deadline for a late answer.
    fn think(trip: &Trip) -> Duration {
        if trip.late { ANSWER_TIMEOUT + Duration::from_secs(6) } else { trip.delay }
    }

    /// A 2025-11-25 round trip in `session`: the call through `call`, its answer through `answer`.
    async fn round_trip(&self, trip: &Trip, session: &str, call: Entry, answer: Entry) {
        let op = trip.op;
        let value = format!("v{op}-{:08x}", rand::random::<u32>());
        let request = json!({"jsonrpc": "2.0", "id": op, "method": "tools/call", "params": call_params(trip.sampling, &value)});
        let Ok(Ok(mut stream)) = tokio::time::timeout(Duration::from_secs(3), self.post(call, &request, Some(session)).send()).await else {
            return;
        };
        let Some(owner) = served_by(&stream).filter(|_| stream.status() == 200) else { return };
        self.record_invoke(trip, Era::Sse2025, owner, session, &value);
        self.parked[owner].fetch_add(1, Ordering::Relaxed);
        let outcome = self.converse(&mut stream, trip, session, answer, &value).await;
        self.parked[owner].fetch_sub(1, Ordering::Relaxed);
        self.recorder.record(outcome);
    }

    async fn converse(&self, stream: &mut reqwest::Response, trip: &Trip, session: &str, answer: Entry, value: &str) -> Event {
        let (rec, op) = (&self.recorder, trip.op);
        let mut buffer = String::new();
        let question = loop {
            match next_message(stream, &mut buffer, ANSWER_TIMEOUT + Duration::from_secs(2)).await {
                Ok(m) if m.get("method").is_some() && m.get("id").is_some() => break m,
                Ok(m) if m.get("id") == Some(&json!(op)) => return ending(rec, op, &m, trip.sampling),
                Ok(_) => continue,
                Err(e) => return Event::Unknown { op, t: rec.now(), error: format!("before the question: {e}") },
            }
        };
        rec.record(Event::Asked { op, t: rec.now() });
        tokio::time::sleep(Self::think(trip)).await;
        let reply = json!({"jsonrpc": "2.0", "id": question["id"], "result": answer_result(trip.sampling, value)});
        let (node, status) = match tokio::time::timeout(Duration::from_secs(8), self.post(answer, &reply, Some(session)).send()).await {
            Ok(Ok(res)) => (served_by(&res), res.status().as_u16()),
            _ => (entry_node(answer), 0),
        };
        rec.record(Event::Answered { op, t: rec.now(), node, status });
        loop {
            match next_message(stream, &mut buffer, ANSWER_TIMEOUT + Duration::from_secs(8)).await {
                Ok(m) if m.get("id") == Some(&json!(op)) && m.get("method").is_none() => return ending(rec, op, &m, trip.sampling),
                Ok(_) => continue,
                Err(e) => return Event::Unknown { op, t: rec.now(), error: format!("after the answer: {e}") },
            }
        }
    }

    /// A 2026-07-28 round trip: the call through `call` parks on the node that takes it and
    /// comes back `input_required`; the retry with the answer goes through `answerers[0]`, and
    /// again through the next while the cluster cannot take it.
    async fn modern_round_trip(&self, trip: &Trip, call: Entry, answerers: &[Entry]) {
        let (rec, op) = (&self.recorder, trip.op);
        let value = format!("v{op}-{:08x}", rand::random::<u32>());
        let params = call_params(trip.sampling, &value);
        let client = Modern::with_client(self.http.clone(), self.url(call));
        let sent = client.request(json!(op), "tools/call", params.clone(), json!({})).timeout(Duration::from_secs(3)).send().await;
        let Some(res) = sent.ok().filter(|r| r.status() == 200) else { return };
        let Some(owner) = served_by(&res) else { return };
        self.record_invoke(trip, Era::Mrtr2026, owner, "", &value);
        self.parked[owner].fetch_add(1, Ordering::Relaxed);
        let outcome = self.modern_converse(res, trip, &params, answerers, &value).await;
        self.parked[owner].fetch_sub(1, Ordering::Relaxed);
        rec.record(outcome);
    }

    async fn modern_converse(&self, res: reqwest::Response, trip: &Trip, params: &Value, answerers: &[Entry], value: &str) -> Event {
        let (rec, op) = (&self.recorder, trip.op);
        let first = match last_message(res, Duration::from_secs(3)).await {
            Ok(m) => m,
            Err(e) => return Event::Unknown { op, t: rec.now(), error: format!("before the question: {e}") },
        };
        let result = &first["result"];
        let (Some(key), Some(state)) = (
            result["inputRequests"].as_object().and_then(|r| r.keys().next().cloned()),
            result["requestState"].as_str().filter(|_| result["resultType"] == "input_required"),
        ) else {
            return ending(rec, op, &first, trip.sampling);
        };
        rec.record(Event::Asked { op, t: rec.now() });
        tokio::time::sleep(Self::think(trip)).await;
        let mut retry = params.clone();
        retry["requestState"] = json!(state);
        retry["inputResponses"] = json!({ key: answer_result(trip.sampling, value) });
        // Whether an earlier attempt may have delivered the answers although its reply was lost.
        let mut maybe_delivered = false;
        for (attempt, &entry) in answerers.iter().enumerate() {
            if attempt > 0 {
                tokio::time::sleep(Duration::from_millis(200)).await;
            }
            let client = Modern::with_client(self.http.clone(), self.url(entry));
            let sent = client.request(json!(op), "tools/call", retry.clone(), json!({})).timeout(ANSWER_TIMEOUT + Duration::from_secs(4));
            let res = match sent.send().await {
                Ok(res) if res.status() == 200 => res,
                Ok(res) => {
                    // nginx found no node, or one turned the request away before reading it.
                    rec.record(Event::Answered { op, t: rec.now(), node: served_by(&res), status: res.status().as_u16() });
                    continue;
                }
                Err(_) => {
                    rec.record(Event::Answered { op, t: rec.now(), node: entry_node(entry), status: 0 });
                    maybe_delivered = true;
                    continue;
                }
            };
            let node = served_by(&res);
            let reply = match last_message(res, ANSWER_TIMEOUT + Duration::from_secs(4)).await {
                Ok(reply) => reply,
                Err(_) => {
                    rec.record(Event::Answered { op, t: rec.now(), node, status: 0 });
                    maybe_delivered = true;
                    continue;
                }
            };
            let message = reply["error"]["message"].as_str().unwrap_or_default();
            let status = match message {
                "" => 202,
                m if m.contains("send the retry again") => 503,
                m if m.contains("already used") => 409,
                m if m.contains("expired") => 410,
                m if m.contains("gone") || m.contains("without an outcome") => 202,
                _ => 400,
            };
            rec.record(Event::Answered { op, t: rec.now(), node, status });
            match status {
                503 => continue,
                409 if maybe_delivered => {
                    return Event::Unknown { op, t: rec.now(), error: format!("spent by an attempt whose reply was lost: {message}") };
                }
                _ => return ending(rec, op, &reply, trip.sampling),
            }
        }
        let t = rec.now();
        if maybe_delivered {
            Event::Unknown { op, t, error: "no reply to any retry".into() }
        } else {
            Event::Fail { op, t, error: format!("the cluster took no retry in {RETRY_ATTEMPTS} attempts") }
        }
    }
}

/// One round trip's draw.
struct Trip {
    op: u64,
    sampling: bool,
    /// Answer only after the deadline.
    late: bool,
    /// The client's think time before answering.
    delay: Duration,
    /// The call goes through nginx.
    balanced: bool,
}

/// The `tools/call` params of a round trip that carries `value`.
fn call_params(sampling: bool, value: &str) -> Value {
    if sampling {
        json!({"name": "test_sampling", "arguments": {"prompt": value}})
    } else {
        json!({"name": "test_elicitation", "arguments": {"message": value}})
    }
}

/// The client's answer to the server's question, carrying `value`.
fn answer_result(sampling: bool, value: &str) -> Value {
    if sampling {
        json!({"role": "assistant", "content": {"type": "text", "text": value}, "model": "campaign"})
    } else {
        json!({"action": "accept", "content": {"username": value, "email": "campaign@example.com"}})
    }
}

/// The node that answered (its `x-switchboard-node` header; nodes are numbered from 0).
fn served_by(res: &reqwest::Response) -> Option<usize> {
    res.headers().get(NODE_HEADER)?.to_str().ok()?.parse().ok()
}

fn entry_node(entry: Entry) -> Option<usize> {
    match entry {
        Entry::Node(i) => Some(i),
        Entry::Balancer => None,
    }
}

/// The last JSON-RPC message of a whole response (JSON, or the data of its SSE events).
async fn last_message(res: reqwest::Response, within: Duration) -> Result<Value, String> {
    let sse = res.headers().get("content-type").and_then(|v| v.to_str().ok()).is_some_and(|t| t.starts_with("text/event-stream"));
    let text = match tokio::time::timeout(within, res.text()).await {
        Err(_) => return Err(format!("nothing within {within:?}")),
        Ok(Err(e)) => return Err(format!("reply broke: {e}")),
        Ok(Ok(text)) => text,
    };
    let data = if sse { parse_sse(&text).into_iter().rfind(|e| !e.data.is_empty()).map(|e| e.data) } else { Some(text) };
    serde_json::from_str(&data.ok_or("no message in the reply")?).map_err(|e| e.to_string())
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
