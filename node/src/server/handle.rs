//! The server handle: what every request path shares, and the session lifecycle (`initialize`,
//! lookup, termination). The request paths are in their own files: [`super::requests`],
//! [`super::answers`], [`super::dispatch`], [`super::notices`].

use super::config::ServerConfig;
use super::correlation::IdSealer;
use super::link::ClusterLink;
use super::local::{LocalSession, LocalSessions};
use super::offerings::Offerings;
use super::outbound::Outbound;
use super::rendezvous::Rendezvous;
use crate::mailbox::Mailbox;
use crate::metrics::Metrics;
use crate::protocol::jsonrpc::ErrorObject;
use crate::protocol::types::{Implementation, InitializeParams, LogLevel, ProtocolVersion};
use crate::session::{SessionError, SessionId, SessionRecord, SessionStore};
use serde_json::{Value, json};
use std::sync::{Arc, RwLock};

pub(super) struct Inner {
    pub(super) cluster: Option<Arc<dyn ClusterLink>>,
    pub(super) info: Implementation,
    pub(super) rendezvous: Arc<Rendezvous>,
    pub(super) instructions: Option<String>,
    pub(super) config: ServerConfig,
    pub(super) offerings: RwLock<Offerings>,
    pub(super) sessions: Arc<dyn SessionStore>,
    pub(super) local: LocalSessions,
}

/// A cheaply clonable handle on the server.
#[derive(Clone)]
pub struct Server {
    pub(super) inner: Arc<Inner>,
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
    pub async fn initialize(&self, params: Option<Value>) -> Result<(SessionRecord, Value), ErrorObject> {
        let params: InitializeParams = serde_json::from_value(params.unwrap_or(Value::Null))
            .map_err(|e| ErrorObject::invalid_params(format!("invalid initialize params: {e}")))?;
        let version = ProtocolVersion::negotiate(&params.protocol_version);
        let record = SessionRecord {
            id: SessionId::random(),
            protocol_version: version,
            client_info: params.client_info,
            capabilities: params.capabilities,
            log_level: LogLevel::Info,
            subscriptions: Default::default(),
        };
        self.inner.sessions.create(record.clone()).await.map_err(|e| ErrorObject::internal(e.to_string()))?;
        let mut result = json!({
            "protocolVersion": version,
            "capabilities": {
                "tools": {"listChanged": true},
                "prompts": {"listChanged": true},
                "resources": {"subscribe": true, "listChanged": true},
                "logging": {},
                "completions": {},
            },
            "serverInfo": self.inner.info,
        });
        if let Some(text) = &self.inner.instructions {
            result["instructions"] = json!(text);
        }
        tracing::info!(session = %record.id, client = %record.client_info.name, %version, "session initialized");
        Ok((record, result))
    }

    pub async fn session(&self, id: &SessionId) -> Result<SessionRecord, SessionLookupError> {
        self.inner.sessions.get(id).await?.ok_or(SessionLookupError::NotFound)
    }

    /// End a session everywhere: cancel its running requests here and remove its record.
    pub async fn terminate(&self, id: &SessionId) -> Result<bool, SessionError> {
        if let Some(local) = self.inner.local.remove(id) {
            for token in local.running.lock().unwrap().values() {
                token.cancel();
            }
        }
        self.inner.sessions.delete(id).await
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
