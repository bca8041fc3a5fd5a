//! The server handle: what every request path shares, and the session lifecycle (`initialize`,
//! lookup, termination). The request paths are in their own files: [`super::requests`],
//! [`super::answers`], [`super::dispatch`], [`super::notices`].

use super::config::ServerConfig;
use super::correlation::IdSealer;
use super::link::ClusterLink;
use super::listeners::Listener;
use super::local::{LocalSession, LocalSessions};
use super::offerings::Offerings;
use super::outbound::Outbound;
use super::rendezvous::Rendezvous;
use super::round::ModernCall;
use crate::mailbox::Mailbox;
use crate::mcp_tasks::TaskStore;
use crate::metrics::Metrics;
use crate::protocol::jsonrpc::{ErrorObject, LIMIT_REACHED, encodes_longer_than};
use crate::protocol::types::{Implementation, InitializeParams, LogLevel, MAX_CLIENT_INFO_FIELD_BYTES, ProtocolVersion};
use crate::session::{LimitReached, SessionError, SessionId, SessionRecord, SessionStore};
use serde_json::{Value, json};
use std::collections::HashMap;
use std::sync::atomic::AtomicUsize;
use std::sync::{Arc, Mutex, RwLock};

pub(super) struct Inner {
    pub(super) cluster: Option<Arc<dyn ClusterLink>>,
    pub(super) info: Implementation,
    pub(super) rendezvous: Arc<Rendezvous>,
    pub(super) instructions: Option<String>,
    pub(super) config: ServerConfig,
    pub(super) offerings: RwLock<Offerings>,
    pub(super) sessions: Arc<dyn SessionStore>,
    /// Task records (Tasks extension).
    pub(super) tasks: Arc<dyn TaskStore>,
    pub(super) local: LocalSessions,
    /// Requests running on this node (parked ones included), every session together.
    pub(super) in_flight: AtomicUsize,
    /// The 2026-07-28 calls whose handlers run (or just ran) here, by call id: to cancel one,
    /// tell a replica serving its retry that it still runs, and hand it the round's outcome.
    pub(super) modern_calls: Mutex<HashMap<u128, Arc<ModernCall>>>,
    /// Open `subscriptions/listen` streams on this node, by an id of this node's.
    pub(super) listeners: Mutex<Vec<(u64, Listener)>>,
    pub(super) next_listener: std::sync::atomic::AtomicU64,
    /// Told of every session that ended while this node held state for it (see
    /// [`Server::on_session_end`]).
    pub(super) session_end_hooks: RwLock<Vec<SessionEndHook>>,
}

/// Called with the id of a session that ended (terminated here, expired, or deleted elsewhere).
pub type SessionEndHook = Box<dyn Fn(&SessionId) + Send + Sync>;

/// A cheaply clonable handle on the server.
#[derive(Clone)]
pub struct Server {
    pub(super) inner: Arc<Inner>,
}

/// Why `initialize` created no session. Nothing was stored in any case.
#[derive(Debug, thiserror::Error)]
pub enum InitializeError {
    #[error("invalid initialize params: {0}")]
    InvalidParams(String),
    #[error("initialize params exceed {limit} bytes, the most a session may hold (--max-session-record-bytes)")]
    RecordTooLarge { limit: usize },
    /// The cluster holds its limit of sessions: retryable (HTTP 503 with `Retry-After`).
    #[error("the server holds its limit of {limit} sessions (--max-sessions); retry later")]
    TooManySessions { limit: usize },
    #[error(transparent)]
    Store(SessionError),
}

impl From<SessionError> for InitializeError {
    fn from(e: SessionError) -> Self {
        match e {
            SessionError::Limit(LimitReached::Sessions(limit)) => InitializeError::TooManySessions { limit },
            other => InitializeError::Store(other),
        }
    }
}

impl InitializeError {
    /// The JSON-RPC error the client gets.
    pub fn to_error_object(&self) -> ErrorObject {
        match self {
            InitializeError::InvalidParams(_) => ErrorObject::invalid_params(self.to_string()),
            InitializeError::RecordTooLarge { limit } => {
                ErrorObject::invalid_params(self.to_string()).with_data(json!({"limit": "session_record_bytes", "max": limit}))
            }
            InitializeError::TooManySessions { limit } => {
                ErrorObject::new(LIMIT_REACHED, self.to_string()).with_data(json!({"limit": "sessions", "max": limit}))
            }
            InitializeError::Store(e @ SessionError::TooLarge { .. }) => ErrorObject::invalid_params(e.to_string()),
            InitializeError::Store(_) => ErrorObject::internal(self.to_string()),
        }
    }
}

/// Why a message could not be handled at the session level (mapped to HTTP statuses by the
/// transport).
#[derive(Debug, thiserror::Error)]
pub enum SessionLookupError {
    #[error("unknown or terminated session")]
    NotFound,
    #[error(transparent)]
    Store(#[from] SessionError),
}

/// What the server offers, in `initialize` and `server/discover` results.
pub(super) fn server_capabilities() -> Value {
    json!({
        "tools": {"listChanged": true},
        "prompts": {"listChanged": true},
        "resources": {"subscribe": true, "listChanged": true},
        "logging": {},
        "completions": {},
    })
}

/// A session store failure as the client sees it: data too large to replicate is the client's
/// to fix (invalid params); anything else is the server's (internal error).
pub(super) fn store_error(e: SessionError) -> ErrorObject {
    match e {
        SessionError::TooLarge { .. } => ErrorObject::invalid_params(e.to_string()),
        SessionError::Limit(_) | SessionError::Unavailable(_) => ErrorObject::internal(e.to_string()),
    }
}

impl Server {
    pub fn node_id(&self) -> u64 {
        self.inner.config.node_id
    }
    pub fn config(&self) -> &ServerConfig {
        &self.inner.config
    }
    pub fn mailbox(&self) -> &Arc<dyn Mailbox> {
        &self.inner.rendezvous.mailbox
    }
    pub fn metrics(&self) -> &Arc<Metrics> {
        &self.inner.rendezvous.metrics
    }
    pub fn sealer(&self) -> &Arc<IdSealer> {
        &self.inner.rendezvous.sealer
    }

    /// Answer `initialize`: negotiate the version, store the session, return its record and result.
    /// The record keeps only what the server reads of the params: the capability flags and
    /// the client info cut to [`MAX_CLIENT_INFO_FIELD_BYTES`] per field. Params larger than
    /// `max_session_record_bytes` are refused before anything is stored.
    pub async fn initialize(&self, params: Option<Value>) -> Result<(Arc<SessionRecord>, Value), InitializeError> {
        let params = params.unwrap_or(Value::Null);
        let limit = self.inner.config.max_session_record_bytes;
        if encodes_longer_than(&params, limit) {
            self.metrics().limit_refused("session_record_bytes");
            tracing::debug!(limit, "initialize refused: params over the session record limit");
            return Err(InitializeError::RecordTooLarge { limit });
        }
        let params: InitializeParams = serde_json::from_value(params).map_err(|e| InitializeError::InvalidParams(e.to_string()))?;
        let version = ProtocolVersion::negotiate(&params.protocol_version);
        let record = SessionRecord {
            id: SessionId::random(),
            protocol_version: version,
            client_info: params.client_info.truncated(MAX_CLIENT_INFO_FIELD_BYTES),
            capabilities: params.capabilities.flags(),
            log_level: LogLevel::Info,
            subscriptions: Default::default(),
        };
        if let Err(e) = self.inner.sessions.create(record.clone(), self.inner.config.max_sessions).await {
            let e = InitializeError::from(e);
            if let InitializeError::TooManySessions { limit } = e {
                self.metrics().limit_refused("sessions");
                tracing::debug!(limit, "initialize refused: the session limit is reached");
            }
            return Err(e);
        }
        let record = Arc::new(record);
        let mut result = json!({
            "protocolVersion": version,
            "capabilities": server_capabilities(),
            "serverInfo": self.inner.info,
        });
        if let Some(text) = &self.inner.instructions {
            result["instructions"] = json!(text);
        }
        tracing::debug!(session = %record.id, client = %record.client_info.name, %version, "session initialized");
        Ok((record, result))
    }

    /// The session's record, shared with the store (no copy per request).
    pub async fn session(&self, id: &SessionId) -> Result<Arc<SessionRecord>, SessionLookupError> {
        self.inner.sessions.get(id).await?.ok_or(SessionLookupError::NotFound)
    }

    /// End a session everywhere: cancel its running requests here and remove its record.
    pub async fn terminate(&self, id: &SessionId) -> Result<bool, SessionError> {
        self.end_here(id);
        self.inner.sessions.delete(id).await
    }

    /// Call `hook` with every session that ends while this node holds state for it: terminated
    /// here, or found ended (by TTL, or deleted through another node) by the periodic sweep. A
    /// transport forgets what it keeps for the session (its streams) there.
    pub fn on_session_end(&self, hook: impl Fn(&SessionId) + Send + Sync + 'static) {
        self.inner.session_end_hooks.write().unwrap().push(Box::new(hook));
    }

    /// Drop this node's state of a session that ended, cancel its running requests, close its
    /// standalone stream, and tell the hooks.
    fn end_here(&self, id: &SessionId) {
        self.inner.local.end(id, &self.inner.rendezvous.metrics);
        for hook in self.inner.session_end_hooks.read().unwrap().iter() {
            hook(id);
        }
    }
}

impl Server {
    pub(super) fn local(&self, id: &SessionId) -> Arc<LocalSession> {
        self.inner.local.entry(id, &self.inner.rendezvous.metrics)
    }

    /// Attach the standalone stream of a session; notifications not tied to a request go there.
    pub fn attach_notifier(&self, id: &SessionId, out: Outbound) {
        *self.local(id).notifier.lock().unwrap() = Some(out);
    }
}

impl Server {
    /// Every `local_sweep_interval`, drop idle node-local session entries, and end the entries
    /// of sessions that ended meanwhile (expired by TTL, or deleted through another node): their
    /// requests are cancelled and their standalone streams closed, else a stream held open by a
    /// client would keep them here forever. Holds the server weakly: the task ends once the
    /// server is gone.
    pub(super) fn spawn_local_sweep(&self) {
        let inner = Arc::downgrade(&self.inner);
        let every = self.inner.config.local_sweep_interval;
        tokio::spawn(async move {
            let mut timer = tokio::time::interval(every);
            timer.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Skip);
            timer.tick().await;
            loop {
                timer.tick().await;
                let Some(inner) = inner.upgrade() else { return };
                let server = Server { inner };
                let dropped = server.inner.local.sweep_idle(&server.inner.rendezvous.metrics);
                if dropped > 0 {
                    tracing::debug!(dropped, "idle node-local session entries dropped");
                }
                server.end_ended_sessions().await;
            }
        });
    }

    /// End the local state of every session the store no longer has (see
    /// [`Server::spawn_local_sweep`]). The check does not count as a use of the session.
    async fn end_ended_sessions(&self) {
        let mut ended = 0;
        for id in self.inner.local.ids() {
            match self.inner.sessions.is_live(&id).await {
                Ok(true) => {}
                Ok(false) => {
                    tracing::debug!(session = %id, "session ended; its local state and streams are dropped");
                    self.end_here(&id);
                    ended += 1;
                }
                Err(e) => tracing::debug!(session = %id, error = %e, "session liveness unknown; kept until the next sweep"),
            }
        }
        if ended > 0 {
            tracing::debug!(ended, "node-local state of ended sessions dropped");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::mailbox::InMemoryMailbox;
    use crate::server::ServerBuilder;
    use crate::session::InMemorySessionStore;
    use std::time::Duration;

    #[tokio::test]
    async fn idle_local_session_entries_are_swept_periodically() {
        let config = ServerConfig { local_sweep_interval: Duration::from_millis(20), ..Default::default() };
        let server = ServerBuilder::new("t", "1")
            .config(config)
            .build(Arc::new(InMemoryMailbox::new()), Arc::new(InMemorySessionStore::new(Duration::from_secs(60))));
        // Live sessions: the sweep ends the entries of sessions the store no longer has.
        let params = || Some(json!({"protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "c", "version": "1"}}));
        let idle = server.initialize(params()).await.unwrap().0.id.clone();
        let busy = server.initialize(params()).await.unwrap().0.id.clone();
        drop(server.local(&idle));
        let held = server.local(&busy);
        let deadline = tokio::time::Instant::now() + Duration::from_secs(5);
        while server.inner.local.get(&idle).is_some() {
            assert!(tokio::time::Instant::now() < deadline, "the idle entry was never swept");
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        assert!(server.inner.local.get(&busy).is_some(), "an entry a task holds stays");
        drop(held);
    }
}
