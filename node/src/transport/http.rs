//! Streamable HTTP transport: one endpoint, POST/GET/DELETE, JSON or SSE chosen lazily.

pub use super::connections::{ConnectionLimits, serve, serve_limited};
use super::modern;
use super::sse::{EventLog, RelayError, StreamLogs, StreamRelay, StreamSink};
use crate::protocol::era::{self, Era};
use crate::protocol::jsonrpc::{self, Message};
use crate::protocol::types::ProtocolVersion;
use crate::server::{AnswerOutcome, InitializeError, Outbound, Outgoing, Server, SessionLookupError};
use crate::session::{SessionId, SessionRecord};
use axum::Router;
use axum::body::Bytes;
use axum::extract::{DefaultBodyLimit, Request, State};
use axum::http::{HeaderMap, HeaderName, HeaderValue, StatusCode, header};
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Response};
use std::sync::Arc;
use std::time::Duration;
use switchboard_contract::origin::AllowedOrigin;
use tokio::sync::mpsc;

pub use super::responses::PROTOCOL_VERSION_HEADER;
use super::responses::{header_text, http_error, json_body, sse_body};
pub const SESSION_HEADER: &str = "mcp-session-id";
pub const NODE_HEADER: &str = "x-switchboard-node";
/// `Retry-After` of an `initialize` refused because the cluster holds its limit of sessions:
/// sessions end as clients close them or leave them idle, so minutes rather than seconds.
pub const SESSION_LIMIT_RETRY_AFTER_SECS: u32 = 60;

#[derive(Debug, Clone)]
pub struct HttpConfig {
    /// Path of the MCP endpoint.
    pub endpoint: String,
    /// Largest accepted request body, in bytes.
    pub max_body_bytes: usize,
    /// Host names (without port) accepted in `Host`; `*` accepts any Host (and no Origin).
    pub allowed_hosts: Vec<String>,
    /// Origins accepted in `Origin` (a request without one is not a browser's and passes).
    /// Empty: `http` and `https` on any port of each named host in `allowed_hosts`.
    pub allowed_origins: Vec<AllowedOrigin>,
    /// Whether GET opens a standalone server-to-client stream (else 405).
    pub standalone_stream: bool,
    pub keep_alive: Duration,
    /// Reconnection delay suggested to clients in the SSE `retry` field.
    pub retry: Duration,
    /// How long a finished stream can still be resumed.
    pub stream_retention: Duration,
    /// Events kept per stream for resumption.
    pub stream_capacity: usize,
    /// Bounds on the connections of every port the node serves (MCP, peer, metrics).
    pub connections: ConnectionLimits,
}

impl Default for HttpConfig {
    fn default() -> Self {
        HttpConfig {
            endpoint: "/mcp".into(),
            max_body_bytes: 4 * 1024 * 1024,
            allowed_hosts: vec!["localhost".into(), "127.0.0.1".into(), "[::1]".into()],
            allowed_origins: Vec::new(),
            standalone_stream: true,
            keep_alive: Duration::from_secs(15),
            retry: Duration::from_millis(1000),
            // A client resumes a broken stream within seconds (it retries after `retry`); kept
            // longer, every finished call's events were the bulk of a replica's memory under
            // load (five minutes of round trips).
            stream_retention: Duration::from_secs(60),
            stream_capacity: 1024,
            connections: ConnectionLimits::default(),
        }
    }
}

struct HttpState {
    server: Server,
    config: HttpConfig,
    /// The origins browser pages may send: `config.allowed_origins`, or derived from the hosts.
    origins: Vec<AllowedOrigin>,
    streams: Arc<StreamLogs>,
    /// Reaches streams owned by other replicas (none for a single process).
    relay: Option<Arc<dyn StreamRelay>>,
}

type Shared = Arc<HttpState>;

/// The MCP endpoint of one node: the server, its HTTP settings, and the streams it has served
/// (kept for resumption, locally or relayed to another replica).
pub struct Endpoint {
    server: Server,
    config: HttpConfig,
    streams: Arc<StreamLogs>,
}

impl Endpoint {
    pub fn new(server: Server, config: HttpConfig) -> Arc<Endpoint> {
        let streams = StreamLogs::new(server.node_id(), server.sealer().clone(), config.stream_retention, config.stream_capacity);
        // A session that ends (expired, or deleted through another replica) takes its streams
        // with it, standalone or not; held weakly, so the server does not keep them alive.
        let held = Arc::downgrade(&streams);
        server.on_session_end(move |session| {
            if let Some(streams) = held.upgrade() {
                streams.forget_session(session);
            }
        });
        Arc::new(Endpoint { server, config, streams })
    }

    pub fn server(&self) -> &Server {
        &self.server
    }

    /// The endpoint as a router. In a cluster, streams another replica owns resume through
    /// `relay`.
    pub fn router(&self, relay: Option<Arc<dyn StreamRelay>>) -> Router {
        let config = &self.config;
        let node = HeaderValue::from_str(&self.server.node_id().to_string()).expect("digits are a valid header");
        let origins = effective_origins(config);
        let state =
            Arc::new(HttpState { server: self.server.clone(), config: config.clone(), origins, streams: self.streams.clone(), relay });
        Router::new()
            .route(&config.endpoint, axum::routing::post(post).get(get).delete(delete))
            .layer(middleware::from_fn_with_state(state.clone(), check_host_and_origin))
            .layer(DefaultBodyLimit::max(config.max_body_bytes))
            .layer(middleware::map_response(move |mut res: Response| {
                let node = node.clone();
                async move {
                    res.headers_mut().insert(HeaderName::from_static(NODE_HEADER), node);
                    res
                }
            }))
            .with_state(state)
    }

    /// The SSE body of a stream of `session` this node owns, from sequence `from` on, with this
    /// endpoint's retry and keep-alive: what a replica that a resuming client reached relays.
    pub fn resume(
        &self,
        session: &SessionId,
        stream: u64,
        from: u64,
    ) -> Option<impl futures::Stream<Item = Result<Bytes, std::convert::Infallible>> + use<>> {
        self.streams.reader_for(session, stream, from, self.config.retry, self.config.keep_alive)
    }
}

/// The MCP endpoint of a single process as an axum router.
pub fn router(server: Server, config: HttpConfig) -> Router {
    Endpoint::new(server, config).router(None)
}

/// Host name of a `Host` header or origin authority, without port.
fn host_name(authority: &str) -> &str {
    if authority.starts_with('[') {
        return authority.split_inclusive(']').next().unwrap_or(authority);
    }
    authority.split(':').next().unwrap_or(authority)
}

/// The origins `config` lets in: the listed ones, or else `http` and `https` on any port of each
/// named allowed host (`*` derives none: accepting any Host never accepts any Origin).
fn effective_origins(config: &HttpConfig) -> Vec<AllowedOrigin> {
    if !config.allowed_origins.is_empty() {
        return config.allowed_origins.clone();
    }
    config.allowed_hosts.iter().flat_map(|host| AllowedOrigin::any_port_of(host)).collect()
}

/// DNS-rebinding protection: `Host` must name an allowed host, and `Origin`, when a browser sent
/// one, an allowed origin. The two lists are separate: `*` in the hosts never opens the origins.
async fn check_host_and_origin(State(state): State<Shared>, request: Request, next: Next) -> Response {
    let allowed = &state.config.allowed_hosts;
    let ok = |name: &str| allowed.iter().any(|a| a == "*" || a.eq_ignore_ascii_case(name));
    let host = request.headers().get(header::HOST).and_then(|h| h.to_str().ok()).or_else(|| request.uri().authority().map(|a| a.as_str()));
    let refused = |reason: &'static str, message: String| {
        tracing::debug!(reason, %message, "request refused before the server");
        state.server.metrics().http_refused(reason);
        http_error(StatusCode::FORBIDDEN, message)
    };
    match host {
        Some(h) if ok(host_name(h)) => {}
        Some(h) => return refused("host", format!("Invalid Host: {h}")),
        None => return refused("host", "missing Host header".into()),
    }
    if let Some(origin) = request.headers().get(header::ORIGIN) {
        let origin = origin.to_str().unwrap_or("<non-ASCII>");
        if !state.origins.iter().any(|allowed| allowed.admits(origin)) {
            return refused("origin", format!("Invalid Origin: {origin}"));
        }
    }
    next.run(request).await
}

/// Whether an Accept header admits `media` (`type/subtype`), honouring wildcards and `q=0`.
fn accepts(headers: &HeaderMap, media: &str) -> bool {
    let (ty, _) = media.split_once('/').expect("media types have a slash");
    headers.get_all(header::ACCEPT).iter().filter_map(|v| v.to_str().ok()).flat_map(|v| v.split(',')).any(|range| {
        let mut parts = range.split(';').map(str::trim);
        let name = parts.next().unwrap_or("").to_ascii_lowercase();
        let refused = parts.any(|p| p.replace(' ', "").eq_ignore_ascii_case("q=0") || p.replace(' ', "") == "q=0.0");
        !refused && (name == media || name == "*/*" || name == format!("{ty}/*"))
    })
}

fn check_protocol_version(headers: &HeaderMap) -> Result<(), Response> {
    match headers.get(PROTOCOL_VERSION_HEADER).map(|v| v.to_str()) {
        None => Ok(()),
        Some(Ok(v)) if ProtocolVersion::parse(v).is_some() => Ok(()),
        Some(v) => Err(http_error(StatusCode::BAD_REQUEST, format!("Unsupported MCP-Protocol-Version: {}", v.unwrap_or("<non-ASCII>")))),
    }
}

/// The session a request names: 400 without the header, 404 when unknown or terminated.
async fn require_session(state: &HttpState, headers: &HeaderMap) -> Result<Arc<SessionRecord>, Response> {
    let Some(id) = headers.get(SESSION_HEADER).and_then(|v| v.to_str().ok()) else {
        return Err(http_error(StatusCode::BAD_REQUEST, "Bad Request: Mcp-Session-Id header is required"));
    };
    match state.server.session(&SessionId(id.into())).await {
        Ok(record) => Ok(record),
        Err(SessionLookupError::NotFound) => Err(http_error(StatusCode::NOT_FOUND, "Session not found")),
        Err(SessionLookupError::Store(e)) => Err(http_error(StatusCode::SERVICE_UNAVAILABLE, e.to_string())),
    }
}

/// Whether streams of this session start with a priming event (2025-11-25 and later).
fn primes(session: &SessionRecord) -> bool {
    session.protocol_version >= ProtocolVersion::V2025_11_25
}

async fn post(State(state): State<Shared>, headers: HeaderMap, body: Result<Bytes, axum::extract::rejection::BytesRejection>) -> Response {
    if !(accepts(&headers, "application/json") && accepts(&headers, "text/event-stream")) {
        return http_error(StatusCode::NOT_ACCEPTABLE, "Not Acceptable: Accept must allow application/json and text/event-stream");
    }
    let content_type = headers.get(header::CONTENT_TYPE).and_then(|v| v.to_str().ok()).unwrap_or("");
    if !content_type.split(';').next().unwrap_or("").trim().eq_ignore_ascii_case("application/json") {
        return http_error(StatusCode::UNSUPPORTED_MEDIA_TYPE, "Unsupported Media Type: Content-Type must be application/json");
    }
    let body = match body {
        Ok(body) => body,
        Err(rejection) => {
            let status = rejection.status();
            return http_error(status, format!("could not read body: {}", rejection.body_text()));
        }
    };
    let message = match jsonrpc::parse_message(&body) {
        Ok(m) => m,
        Err(e) => return json_body(StatusCode::BAD_REQUEST, &e.to_message()),
    };
    if era::classify(header_text(&headers, PROTOCOL_VERSION_HEADER), &message) == Era::Modern {
        return modern::post(&state.server, state.config.keep_alive, &headers, message).await;
    }
    if let Err(response) = check_protocol_version(&headers) {
        return response;
    }
    if let Message::Request { id, method, params } = &message
        && method == "initialize"
    {
        return match state.server.initialize(params.clone()).await {
            Ok((record, result)) => {
                let mut response = json_body(StatusCode::OK, &Message::response(id.clone(), result));
                let value = HeaderValue::from_str(record.id.as_str()).expect("session ids are visible ASCII");
                response.headers_mut().insert(SESSION_HEADER, value);
                response
            }
            Err(error @ InitializeError::TooManySessions { .. }) => {
                let mut response = json_body(StatusCode::SERVICE_UNAVAILABLE, &Message::error(Some(id.clone()), error.to_error_object()));
                response.headers_mut().insert(header::RETRY_AFTER, HeaderValue::from(SESSION_LIMIT_RETRY_AFTER_SECS));
                response
            }
            Err(error) => json_body(StatusCode::OK, &Message::error(Some(id.clone()), error.to_error_object())),
        };
    }
    let session = match require_session(&state, &headers).await {
        Ok(s) => s,
        Err(response) => return response,
    };
    match message {
        Message::Notification { method, params } => {
            state.server.handle_notification(&session, &method, params);
            StatusCode::ACCEPTED.into_response()
        }
        answer @ (Message::Response { .. } | Message::Error { .. }) => {
            // Committed before the 202, so an acknowledged answer is never lost; one that could
            // not be committed is refused with a retryable 503, never acknowledged.
            match state.server.handle_client_response(&session, answer).await {
                AnswerOutcome::Delivered | AnswerOutcome::Dropped(_) => StatusCode::ACCEPTED.into_response(),
                AnswerOutcome::Unavailable(e) => {
                    let mut response = http_error(StatusCode::SERVICE_UNAVAILABLE, format!("answer not delivered, send it again: {e}"));
                    response.headers_mut().insert(header::RETRY_AFTER, HeaderValue::from_static("1"));
                    response
                }
                AnswerOutcome::TooLarge { size, limit } => http_error(
                    StatusCode::PAYLOAD_TOO_LARGE,
                    format!("answer too large to deliver: {size} bytes, at most {limit}; nothing was delivered"),
                ),
            }
        }
        Message::Request { id, method, params } => {
            let (tx, mut rx) = mpsc::unbounded_channel();
            let priming = primes(&session);
            let session_id = session.id.clone();
            let sink = Arc::new(StreamSink::undecided(tx));
            // Held weakly, so `rx` ends when the request drops its outbound.
            let undecided = Arc::downgrade(&sink);
            state.server.spawn_request(session, id, method, params, Outbound::from(sink));
            // Answer with plain JSON when the handler's first output is its result; anything
            // it emits before that upgrades the response to an SSE stream.
            let first = rx.recv().await;
            if let Some(Outgoing::Message(m)) = &first
                && m.is_response()
            {
                return json_body(StatusCode::OK, m);
            }
            let log = state.streams.open(&session_id, priming);
            // The reader attaches before the first output is applied, so a disconnect request
            // (SSE polling) ends this response after what came before it.
            let response = sse_response(&state, &log, 0);
            let queued = first.into_iter().chain(std::iter::from_fn(|| rx.try_recv().ok()));
            match undecided.upgrade() {
                Some(sink) => sink.stream_into(log, queued),
                // The request is over and all it sent is queued.
                None => {
                    queued.for_each(|outgoing| log.apply(outgoing));
                    log.close();
                }
            }
            response
        }
    }
}

fn sse_response(state: &HttpState, log: &Arc<EventLog>, from: u64) -> Response {
    sse_body(axum::body::Body::from_stream(log.reader(from, state.config.retry, state.config.keep_alive)))
}

/// A GET or DELETE of a 2026-07-28 client: nothing to open or end without sessions.
fn modern_method_not_allowed(headers: &HeaderMap) -> Option<Response> {
    if era::classify_header(header_text(headers, PROTOCOL_VERSION_HEADER)) != Era::Modern {
        return None;
    }
    let mut response = http_error(StatusCode::METHOD_NOT_ALLOWED, "2026-07-28 has no sessions and no GET stream: POST requests only");
    response.headers_mut().insert(header::ALLOW, HeaderValue::from_static("POST"));
    Some(response)
}

async fn get(State(state): State<Shared>, headers: HeaderMap) -> Response {
    if let Some(response) = modern_method_not_allowed(&headers) {
        return response;
    }
    if !accepts(&headers, "text/event-stream") {
        return http_error(StatusCode::NOT_ACCEPTABLE, "Not Acceptable: Accept must allow text/event-stream");
    }
    if !state.config.standalone_stream {
        let mut response = http_error(StatusCode::METHOD_NOT_ALLOWED, "GET streams are disabled on this server");
        response.headers_mut().insert(header::ALLOW, HeaderValue::from_static("POST, DELETE"));
        return response;
    }
    if let Err(response) = check_protocol_version(&headers) {
        return response;
    }
    let session = match require_session(&state, &headers).await {
        Ok(s) => s,
        Err(response) => return response,
    };
    if let Some(last) = headers.get("last-event-id") {
        let opened = last.to_str().map_err(|_| ()).and_then(|s| state.server.sealer().open_event(s, session.id.as_str()).map_err(|_| ()));
        let Ok(event) = opened else {
            return http_error(StatusCode::BAD_REQUEST, "invalid Last-Event-ID: not an event id of this session");
        };
        if event.owner != state.server.node_id() {
            // Another replica owns the stream: relay the rest of it from there.
            let Some(relay) = &state.relay else {
                return http_error(StatusCode::NOT_FOUND, format!("the stream lives on node {}", event.owner));
            };
            return match relay.resume(event.owner, &session.id, event.stream, event.seq + 1).await {
                Ok(bytes) => sse_body(axum::body::Body::from_stream(bytes)),
                Err(e @ RelayError::NotFound) => http_error(StatusCode::NOT_FOUND, e.to_string()),
                Err(e) => http_error(StatusCode::BAD_GATEWAY, e.to_string()),
            };
        }
        return match state.streams.find(event.stream).filter(|log| log.session == session.id) {
            Some(log) => sse_response(&state, &log, event.seq + 1),
            None => http_error(StatusCode::NOT_FOUND, "no stream to resume for this Last-Event-ID"),
        };
    }
    let (log, created) = state.streams.standalone(&session.id, primes(&session));
    if created {
        state.server.attach_notifier(&session.id, Outbound::new(StreamSink::new(log.clone())));
    } else {
        // One live standalone reader per session, so no message goes out twice.
        log.disconnect_readers();
    }
    let from = if created { 0 } else { log.end() };
    sse_response(&state, &log, from)
}

async fn delete(State(state): State<Shared>, headers: HeaderMap) -> Response {
    if let Some(response) = modern_method_not_allowed(&headers) {
        return response;
    }
    let session = match require_session(&state, &headers).await {
        Ok(s) => s,
        Err(response) => return response,
    };
    state.streams.forget_session(&session.id);
    match state.server.terminate(&session.id).await {
        Ok(_) => StatusCode::NO_CONTENT.into_response(),
        Err(e) => http_error(StatusCode::SERVICE_UNAVAILABLE, e.to_string()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A session that ends while this endpoint keeps streams of it (expired here by TTL) takes
    /// them along: the endpoint hears of it through the server's session-end hook.
    #[tokio::test]
    async fn an_ended_session_takes_its_streams_with_it() {
        use crate::mailbox::InMemoryMailbox;
        use crate::server::{ServerBuilder, ServerConfig};
        use crate::session::InMemorySessionStore;
        let config = ServerConfig { local_sweep_interval: Duration::from_millis(20), ..Default::default() };
        let server = ServerBuilder::new("t", "1")
            .config(config)
            .build(Arc::new(InMemoryMailbox::new()), Arc::new(InMemorySessionStore::new(Duration::from_millis(100))));
        let endpoint = Endpoint::new(server.clone(), HttpConfig::default());
        let params = serde_json::json!({"protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "c", "version": "1"}});
        let (record, _) = server.initialize(Some(params)).await.unwrap();
        let (standalone, _) = endpoint.streams.standalone(&record.id, true);
        server.attach_notifier(&record.id, Outbound::new(StreamSink::new(standalone.clone())));
        let posted = endpoint.streams.open(&record.id, true);
        let deadline = tokio::time::Instant::now() + Duration::from_secs(5);
        while endpoint.streams.find(standalone.stream).is_some() || endpoint.streams.find(posted.stream).is_some() {
            assert!(tokio::time::Instant::now() < deadline, "the expired session's streams are still kept");
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        assert!(endpoint.streams.standalone(&record.id, true).1, "its standalone stream is forgotten too");
    }

    fn accept(v: &str) -> HeaderMap {
        let mut h = HeaderMap::new();
        h.insert(header::ACCEPT, HeaderValue::from_str(v).unwrap());
        h
    }

    #[test]
    fn accept_matching() {
        assert!(accepts(&accept("application/json, text/event-stream"), "text/event-stream"));
        assert!(accepts(&accept("*/*"), "application/json"));
        assert!(accepts(&accept("text/*;q=0.5"), "text/event-stream"));
        assert!(!accepts(&accept("application/json"), "text/event-stream"));
        assert!(!accepts(&accept("text/event-stream;q=0"), "text/event-stream"));
        assert!(!accepts(&HeaderMap::new(), "application/json"));
    }

    #[test]
    fn host_names_drop_ports() {
        assert_eq!(host_name("localhost:8080"), "localhost");
        assert_eq!(host_name("[::1]:8080"), "[::1]");
        assert_eq!(host_name("127.0.0.1"), "127.0.0.1");
    }
}
