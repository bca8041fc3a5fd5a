//! Sessions: the record created by `initialize` and read by every later request.
//!
//! Records go through [`SessionStore`] so a replicated store can stand in for the in-memory
//! one without touching handlers. Node-local state that can't be replicated (open streams,
//! running tasks) lives in [`crate::server`] instead.

mod memory;

pub use memory::InMemorySessionStore;

use crate::protocol::types::{ClientCapabilities, Implementation, LogLevel, ProtocolVersion};
use async_trait::async_trait;
use serde::{Deserialize, Serialize};

/// An `Mcp-Session-Id`: 256 random bits, hex encoded (visible ASCII, as the spec requires).
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub struct SessionId(pub String);

impl SessionId {
    pub fn random() -> Self {
        let bytes: [u8; 32] = rand::random();
        SessionId(bytes.iter().map(|b| format!("{b:02x}")).collect())
    }
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl std::fmt::Display for SessionId {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

/// What every node must know about a session.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SessionRecord {
    pub id: SessionId,
    pub protocol_version: ProtocolVersion,
    pub client_info: Implementation,
    pub capabilities: ClientCapabilities,
    pub log_level: LogLevel,
    /// Resource URIs the client subscribed to (`resources/subscribe`).
    #[serde(default)]
    pub subscriptions: std::collections::BTreeSet<String>,
}

#[derive(Debug, thiserror::Error)]
pub enum SessionError {
    #[error("session store unavailable: {0}")]
    Unavailable(#[source] crate::mailbox::BoxError),
    /// The record or change is larger than the store replicates; nothing was written.
    #[error("session data too large to replicate: {size} bytes, at most {limit}")]
    TooLarge { size: usize, limit: usize },
}

#[async_trait]
pub trait SessionStore: Send + Sync + 'static {
    /// Store a new session. Once this returns, `get` finds it on every node.
    async fn create(&self, record: SessionRecord) -> Result<(), SessionError>;
    /// The live session with this id, if any (expired and deleted sessions are `None`).
    async fn get(&self, id: &SessionId) -> Result<Option<SessionRecord>, SessionError>;
    /// Whether the session is still live as far as this node knows, without counting as a use
    /// (its TTL is not extended) and without asking other nodes. For a session this node has
    /// served, `false` means it ended (expired or deleted); one created elsewhere a moment ago
    /// may not be known here yet (`get` waits for it).
    async fn is_live(&self, id: &SessionId) -> Result<bool, SessionError>;
    /// Set the minimum level of `notifications/message`. `false` when the session is unknown.
    async fn set_log_level(&self, id: &SessionId, level: LogLevel) -> Result<bool, SessionError>;
    /// Subscribe to (or unsubscribe from) updates of `uri`. `false` when the session is unknown.
    async fn set_subscription(&self, id: &SessionId, uri: &str, subscribed: bool) -> Result<bool, SessionError>;
    /// End the session. `false` when it was unknown already.
    async fn delete(&self, id: &SessionId) -> Result<bool, SessionError>;
}
