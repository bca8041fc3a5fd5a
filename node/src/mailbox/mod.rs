//! The mailbox: the rendezvous between a handler parked on a server-to-client request and the
//! client's answer, which may arrive on another replica.
//!
//! The trait is shaped for a replicated backend: `create` is committed before the request is
//! sent, `deliver` may be applied before anyone `wait`s, and every call returns a typed outcome
//! rather than a boolean so callers (and metrics) can tell a late answer from a forged one.

#[cfg(any(test, feature = "testing"))]
pub mod contract;
mod memory;

pub use memory::InMemoryMailbox;

use async_trait::async_trait;
use serde::{Deserialize, Serialize};
use serde_json::Value;
use std::fmt;
use std::time::Duration;

/// A Raft node id, which is also the StatefulSet pod ordinal.
pub type NodeId = u64;

/// The longest a mailbox may live. Longer requests are refused (a typo in a timeout flag must
/// not pin memory for days).
pub const MAX_TTL: Duration = Duration::from_secs(24 * 60 * 60);

/// Identifies one server-to-client request. Random, so it can't be guessed from another session.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub struct MailboxKey(pub String);

impl MailboxKey {
    /// A fresh 128-bit random key, hex encoded.
    pub fn random() -> Self {
        MailboxKey(format!("{:032x}", rand::random::<u128>()))
    }
}

impl fmt::Display for MailboxKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum CreateOutcome {
    Created,
    /// A mailbox with this key exists already; it was left as it was.
    AlreadyExists,
}

/// What happened to a delivery. Only `Delivered` means the value will reach the waiter.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum DeliverOutcome {
    Delivered,
    /// Someone delivered first; their value stands.
    AlreadyDelivered,
    /// The mailbox's deadline passed.
    Expired,
    /// The owner gave up on it (timeout) or removed it.
    Deleted,
    /// No such mailbox was ever created (or its record is long gone).
    NotFound,
}

impl DeliverOutcome {
    /// A short label for metrics and logs.
    pub fn label(self) -> &'static str {
        match self {
            DeliverOutcome::Delivered => "delivered",
            DeliverOutcome::AlreadyDelivered => "duplicate",
            DeliverOutcome::Expired => "expired",
            DeliverOutcome::Deleted => "deleted",
            DeliverOutcome::NotFound => "unknown",
        }
    }
}

/// What a waiter woke up to.
#[derive(Debug, Clone, PartialEq)]
pub enum WaitOutcome {
    Delivered(Value),
    Expired,
    Deleted,
    /// The caller's own timeout passed first; the mailbox is untouched.
    TimedOut,
    /// There is no mailbox with this key.
    NotFound,
}

#[derive(Debug, thiserror::Error)]
pub enum MailboxError {
    #[error("mailbox ttl must be between 1 ms and {max:?}, got {ttl:?}")]
    InvalidTtl { ttl: Duration, max: Duration },
    /// The replicated store could not commit the operation (no quorum, shutting down...).
    #[error("mailbox store unavailable: {0}")]
    Unavailable(String),
}

pub fn check_ttl(ttl: Duration) -> Result<(), MailboxError> {
    if ttl.is_zero() || ttl > MAX_TTL {
        return Err(MailboxError::InvalidTtl { ttl, max: MAX_TTL });
    }
    Ok(())
}

/// The rendezvous contract every backend (in-memory, Raft) implements.
#[async_trait]
pub trait Mailbox: Send + Sync + 'static {
    /// Create-if-absent. Once this returns, a `deliver` on any node finds the mailbox.
    async fn create(&self, key: &MailboxKey, owner: NodeId, ttl: Duration) -> Result<CreateOutcome, MailboxError>;
    /// Deliver at most once.
    async fn deliver(&self, key: &MailboxKey, value: Value) -> Result<DeliverOutcome, MailboxError>;
    /// Park until the mailbox is delivered, expired or deleted, or `timeout` passes. Returns at
    /// once if the delivery was applied before the call.
    async fn wait(&self, key: &MailboxKey, timeout: Duration) -> Result<WaitOutcome, MailboxError>;
    /// Remove the mailbox (idempotent); parked waiters wake with `Deleted`, later deliveries are
    /// refused with `Deleted`.
    async fn delete(&self, key: &MailboxKey) -> Result<(), MailboxError>;
}
