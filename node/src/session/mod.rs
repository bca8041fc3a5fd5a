//! Sessions: the record created by `initialize` and read by every later request.
//!
//! Records go through [`SessionStore`] so a replicated store can stand in for the in-memory
//! one without touching handlers. Node-local state that can't be replicated (open streams,
//! running tasks) lives in [`crate::server`] instead.

mod memory;

pub use memory::InMemorySessionStore;

use crate::protocol::types::{CapabilityFlags, Implementation, LogLevel, ProtocolVersion};
use async_trait::async_trait;
use serde::{Deserialize, Serialize};
use std::sync::Arc;

/// An `Mcp-Session-Id`: 256 random bits, hex encoded (visible ASCII, as the spec requires).
/// Shared text: every stream, entry and record of the session holds the same allocation (a
/// parked call's stream kept a copy of its own).
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub struct SessionId(pub Arc<str>);

impl SessionId {
    pub fn random() -> Self {
        let bytes: [u8; 32] = rand::random();
        SessionId(bytes.iter().map(|b| format!("{b:02x}")).collect::<String>().into())
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

/// What every node must know about a session, and no more: it is replicated to every node
/// and kept for the session's life, so nothing in it may grow with what a client sends.
/// Stores hand it out behind an [`Arc`]: a request holds a pointer, never a copy.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SessionRecord {
    pub id: SessionId,
    pub protocol_version: ProtocolVersion,
    /// Each field at most [`crate::protocol::types::MAX_CLIENT_INFO_FIELD_BYTES`].
    pub client_info: Implementation,
    /// The capabilities the server asks about, not the client's whole declaration.
    pub capabilities: CapabilityFlags,
    pub log_level: LogLevel,
    /// Resource URIs the client subscribed to (`resources/subscribe`).
    #[serde(default)]
    pub subscriptions: std::collections::BTreeSet<String>,
}

impl SessionRecord {
    /// Whether subscribing to `uri` adds a subscription (`false`: it is there already), or the
    /// limit it would break. Both stores decide with this, where the record is kept, so
    /// concurrent subscribes through different replicas cannot overshoot a limit together.
    pub fn check_subscribe(&self, uri: &str, limits: SubscriptionLimits) -> Result<bool, LimitReached> {
        if self.subscriptions.contains(uri) {
            return Ok(false);
        }
        if self.subscriptions.len() >= limits.max_count {
            return Err(LimitReached::Subscriptions(limits.max_count));
        }
        let bytes = self.subscriptions.iter().map(String::len).sum::<usize>() + uri.len();
        if bytes > limits.max_bytes {
            return Err(LimitReached::SubscriptionBytes(limits.max_bytes));
        }
        Ok(true)
    }
}

/// Bounds on one session's subscriptions, carried by each subscribe so every replica applies
/// the proposer's limits (and so agrees, whatever its own configuration).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct SubscriptionLimits {
    /// Subscribed URIs.
    pub max_count: usize,
    /// Bytes of the subscribed URIs together.
    pub max_bytes: usize,
}

/// A change the session store refused because it would break a limit. Nothing changed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, thiserror::Error)]
pub enum LimitReached {
    #[error("a session may subscribe to at most {0} resources (--max-subscriptions-per-session)")]
    Subscriptions(usize),
    #[error("a session's subscribed URIs may take at most {0} bytes together (--max-session-record-bytes)")]
    SubscriptionBytes(usize),
    #[error("the server holds its limit of {0} sessions (--max-sessions); retry later")]
    Sessions(usize),
}

impl LimitReached {
    /// The limit's name, as in metrics and in the `data` of the client's error.
    pub fn label(self) -> &'static str {
        match self {
            LimitReached::Subscriptions(_) => "subscriptions_per_session",
            LimitReached::SubscriptionBytes(_) => "session_record_bytes",
            LimitReached::Sessions(_) => "sessions",
        }
    }

    /// The configured value that was reached.
    pub fn max(self) -> usize {
        match self {
            LimitReached::Subscriptions(max) | LimitReached::SubscriptionBytes(max) | LimitReached::Sessions(max) => max,
        }
    }
}

#[derive(Debug, thiserror::Error)]
pub enum SessionError {
    #[error("session store unavailable: {0}")]
    Unavailable(#[source] crate::mailbox::BoxError),
    #[error(transparent)]
    Limit(#[from] LimitReached),
    /// The record or change is larger than the store replicates; nothing was written.
    #[error("session data too large to replicate: {size} bytes, at most {limit}")]
    TooLarge { size: usize, limit: usize },
}

#[async_trait]
pub trait SessionStore: Send + Sync + 'static {
    /// Store a new session. Once this returns, `get` finds it on every node. Refused with
    /// [`SessionError::Limit`] (nothing stored) when the store holds `max_sessions` already.
    async fn create(&self, record: SessionRecord, max_sessions: usize) -> Result<(), SessionError>;
    /// The live session with this id, if any (expired and deleted sessions are `None`): the
    /// store's own shared copy, not a clone.
    async fn get(&self, id: &SessionId) -> Result<Option<Arc<SessionRecord>>, SessionError>;
    /// Whether the session is still live as far as this node knows, without counting as a use
    /// (its TTL is not extended) and without asking other nodes. For a session this node has
    /// served, `false` means it ended (expired or deleted); one created elsewhere a moment ago
    /// may not be known here yet (`get` waits for it).
    async fn is_live(&self, id: &SessionId) -> Result<bool, SessionError>;
    /// Set the minimum level of `notifications/message`. `false` when the session is unknown.
    async fn set_log_level(&self, id: &SessionId, level: LogLevel) -> Result<bool, SessionError>;
    /// Subscribe to (or unsubscribe from) updates of `uri`. `false` when the session is unknown;
    /// [`SessionError::Limit`] (and no change) when subscribing would break `limits`.
    async fn set_subscription(&self, id: &SessionId, uri: &str, subscribed: bool, limits: SubscriptionLimits)
    -> Result<bool, SessionError>;
    /// End the session. `false` when it was unknown already.
    async fn delete(&self, id: &SessionId) -> Result<bool, SessionError>;
}
