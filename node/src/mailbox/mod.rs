//! The mailbox: the rendezvous between a handler parked on a server-to-client request and the
//! client's answer, which may arrive on another replica.
//!
//! The trait is shaped for a replicated backend: a `create` may still be on its way when the
//! request goes out (its commit overlaps the client's turn), so an answer that reaches the
//! store first is kept for it as an *early delivery*, addressed by what the request's sealed id
//! says (owner, deadline); `deliver` may be applied before anyone `wait`s; and every call
//! returns a typed outcome rather than a boolean so callers (and metrics) can tell a late
//! answer from a forged one.

#[cfg(any(test, feature = "testing"))]
pub mod contract;
mod memory;

pub use memory::InMemoryMailbox;

use crate::id128::Id128;
use async_trait::async_trait;
use futures::FutureExt;
use futures::future::{BoxFuture, MaybeDone, maybe_done};
use serde::{Deserialize, Serialize};
use serde_json::Value;
use std::fmt;
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

/// The cause of a store failure, kept (not flattened to text) so its whole chain can be logged.
pub type BoxError = Box<dyn std::error::Error + Send + Sync + 'static>;

/// A Raft node id, which is also the StatefulSet pod ordinal.
pub type NodeId = u64;

/// The longest a mailbox may live. Longer requests are refused (a typo in a timeout flag must
/// not pin memory for days).
pub const MAX_TTL: Duration = Duration::from_secs(24 * 60 * 60);

/// Identifies one server-to-client request: 128 random bits, so it can't be guessed from
/// another session. Written as 32 hex digits (in logs, the Raft log and snapshots); text that
/// is not exactly that is refused when parsed, so every key can be sealed.
#[derive(Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct MailboxKey(Id128);

/// Text that is not a mailbox key.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("invalid mailbox key {0:?}: expected 32 hex digits")]
pub struct InvalidMailboxKey(pub String);

impl MailboxKey {
    /// A fresh random key.
    pub fn random() -> Self {
        MailboxKey(Id128::random())
    }

    pub fn from_bits(bits: u128) -> Self {
        MailboxKey(Id128::from_bits(bits))
    }

    pub fn bits(&self) -> u128 {
        self.0.bits()
    }
}

impl std::str::FromStr for MailboxKey {
    type Err = InvalidMailboxKey;

    fn from_str(text: &str) -> Result<Self, Self::Err> {
        Id128::parse(text).map(MailboxKey).ok_or_else(|| InvalidMailboxKey(text.chars().take(64).collect()))
    }
}

impl fmt::Display for MailboxKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(&self.0, f)
    }
}

impl fmt::Debug for MailboxKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "MailboxKey({self})")
    }
}

impl Serialize for MailboxKey {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.collect_str(self)
    }
}

impl<'de> Deserialize<'de> for MailboxKey {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let text = std::borrow::Cow::<str>::deserialize(deserializer)?;
        text.parse().map_err(serde::de::Error::custom)
    }
}

/// Who waits for a mailbox and until when, as the request's sealed id says (so only an answer
/// to an id this cluster sealed carries one). A delivery that finds no mailbox is kept for its
/// create until `deadline_ms`, rather than refused as unknown.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct Addressee {
    pub owner: NodeId,
    /// Milliseconds since the Unix epoch.
    pub deadline_ms: u64,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum CreateOutcome {
    /// Created; if an early delivery was waiting for it, already delivered.
    Created,
    /// A mailbox with this key exists already; it was left as it was.
    AlreadyExists,
}

/// What happened to a delivery. Only `Delivered` means the value will reach the waiter.
/// Which session a mailbox belongs to: a keyed hash of the session id (never the id itself), set
/// at create and compared at deliver. A second line behind sealed ids: an id re-bound to another
/// session, should its seal ever be broken, still cannot deliver into this mailbox.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default, Serialize, Deserialize)]
pub struct SessionTag(pub [u8; 16]);

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum DeliverOutcome {
    Delivered,
    /// Someone delivered first; their value stands.
    AlreadyDelivered,
    /// The mailbox's deadline passed.
    Expired,
    /// The owner gave up on it (timeout) or removed it.
    Deleted,
    /// No such mailbox was ever created (or its record is long gone), and the delivery named
    /// no addressee to keep it for.
    NotFound,
    /// The mailbox belongs to another session; nothing changed.
    WrongSession,
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
            DeliverOutcome::WrongSession => "wrong_session",
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
    Unavailable(#[source] BoxError),
    /// The value is larger than the store replicates; nothing was written.
    #[error("value too large to replicate: {size} bytes, at most {limit}")]
    TooLarge { size: usize, limit: usize },
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
    /// Create-if-absent, for the session `session` tags. Once this returns, a `deliver` on any
    /// node finds the mailbox. An early delivery waiting for it (same session and owner) is
    /// delivered into it; one from another session or for another owner is dropped.
    async fn create(&self, key: &MailboxKey, session: SessionTag, owner: NodeId, ttl: Duration) -> Result<CreateOutcome, MailboxError>;
    /// Deliver at most once, from the session `session` tags (another session's delivery is
    /// refused with [`DeliverOutcome::WrongSession`] and changes nothing). A delivery to a
    /// mailbox whose value was delivered, taken or not, is `AlreadyDelivered`. With no mailbox
    /// yet, a delivery naming its `addressee` is kept for the create (`Delivered`) until the
    /// addressee's deadline (after it: `Expired`); without one it is `NotFound`.
    async fn deliver(
        &self,
        key: &MailboxKey,
        session: SessionTag,
        addressee: Option<Addressee>,
        value: Value,
    ) -> Result<DeliverOutcome, MailboxError>;
    /// Park until the mailbox is delivered, expired or deleted, or `timeout` passes. Returns at
    /// once if the delivery was applied before the call. A delivered value is *taken*: the store
    /// drops it (everywhere) and keeps only the tombstone, so later deliveries are still told
    /// `AlreadyDelivered` and a second wait gets `Deleted`.
    async fn wait(&self, key: &MailboxKey, timeout: Duration) -> Result<WaitOutcome, MailboxError>;
    /// Remove the mailbox (idempotent); parked waiters wake with `Deleted`, later deliveries are
    /// refused with `Deleted`.
    async fn delete(&self, key: &MailboxKey) -> Result<(), MailboxError>;
}

/// Create a mailbox whose request is already on its way to the client: retried while the store
/// is unavailable (an answer may already be kept for it, acknowledged to the client), until
/// `ttl` has passed. [`SentMailbox::propose`] polls it once before the request is sent, so
/// the create is proposed first and its commit overlaps the client's turn.
async fn create_for_sent_request(
    mailbox: &dyn Mailbox,
    key: &MailboxKey,
    session: SessionTag,
    owner: NodeId,
    ttl: Duration,
) -> Result<CreateOutcome, MailboxError> {
    let give_up = tokio::time::Instant::now() + ttl;
    let mut backoff = Duration::from_millis(50);
    loop {
        match mailbox.create(key, session, owner, ttl).await {
            Err(MailboxError::Unavailable(e)) if tokio::time::Instant::now() + backoff < give_up => {
                tracing::debug!(%key, error = %e, "mailbox create not committed yet; retrying");
                tokio::time::sleep(backoff).await;
                backoff = (backoff * 2).min(Duration::from_secs(1));
            }
            outcome => return outcome,
        }
    }
}

/// The owner's hold on the mailbox of a request that has gone out, its create possibly still
/// committing (see `create_for_sent_request`). Giving the request up waits for the create to
/// settle before deleting the mailbox: a delete that overtook its create would leave the
/// mailbox pending until its deadline. Dropped while the request is still open (its call was
/// cancelled or its task dropped), it does the same in a task of its own, so a late answer is
/// told the request is gone rather than parked for no one. The create is boxed, so its retry
/// state is freed once it settles rather than kept while the call is parked.
pub struct SentMailbox {
    key: MailboxKey,
    /// `None` once nothing is left to delete: the answer was taken, the mailbox is gone, or
    /// its create failed.
    store: Option<Arc<dyn Mailbox>>,
    create: MaybeDone<BoxFuture<'static, Result<CreateOutcome, MailboxError>>>,
}

impl SentMailbox {
    /// Starts the create and polls it once, so it is proposed before the request goes out.
    pub async fn propose(store: Arc<dyn Mailbox>, key: MailboxKey, session: SessionTag, owner: NodeId, ttl: Duration) -> Self {
        let creating = (store.clone(), key.clone());
        let mut create = maybe_done(
            async move {
                let (store, key) = creating;
                create_for_sent_request(&*store, &key, session, owner, ttl).await
            }
            .boxed(),
        );
        let _ = futures::poll!(&mut create);
        SentMailbox { key, store: Some(store), create }
    }

    pub fn key(&self) -> &MailboxKey {
        &self.key
    }

    /// The create's error, if it has already failed (without waiting).
    pub fn failed_already(&mut self) -> Option<MailboxError> {
        match &self.create {
            MaybeDone::Done(Err(_)) => {
                self.store = None;
                Pin::new(&mut self.create).take_output().and_then(Result::err)
            }
            _ => None,
        }
    }

    /// Waits until the create has settled, and returns its error the first time it is asked.
    /// Asked again after that, it is `Ok`: whoever got the error has given the request up.
    pub async fn settled(&mut self) -> Result<(), MailboxError> {
        if matches!(self.create, MaybeDone::Gone) {
            return Ok(());
        }
        (&mut self.create).await;
        let settled = Pin::new(&mut self.create).take_output().map_or(Ok(()), |outcome| outcome.map(drop));
        if settled.is_err() {
            self.store = None;
        }
        settled
    }

    /// [`Mailbox::wait`] on it, once [`SentMailbox::settled`] is `Ok`. Once the wait ends with
    /// the mailbox finished (answered, expired, deleted), nothing is left to delete.
    pub async fn wait(&mut self, timeout: Duration) -> Result<WaitOutcome, MailboxError> {
        let Some(store) = &self.store else { return Ok(WaitOutcome::Deleted) };
        let outcome = store.wait(&self.key, timeout).await?;
        if !matches!(outcome, WaitOutcome::TimedOut) {
            self.store = None;
        }
        Ok(outcome)
    }

    /// Gives the request up: deletes the mailbox once its create has settled (the create's
    /// error, if it failed and no one was told yet).
    pub async fn delete(&mut self) -> Result<(), MailboxError> {
        self.settled().await?;
        if let Some(store) = &self.store {
            store.delete(&self.key).await?;
            self.store = None;
        }
        Ok(())
    }
}

impl Drop for SentMailbox {
    fn drop(&mut self) {
        let Some(store) = self.store.take() else { return };
        // Without a runtime (it is shutting down) no answer can arrive either.
        let Ok(runtime) = tokio::runtime::Handle::try_current() else { return };
        let key = self.key.clone();
        let create = std::mem::replace(&mut self.create, MaybeDone::Gone);
        runtime.spawn(async move {
            let created = match create {
                MaybeDone::Future(create) => create.await.map(drop),
                MaybeDone::Done(outcome) => outcome.map(drop),
                MaybeDone::Gone => Ok(()),
            };
            if created.is_ok() {
                match store.delete(&key).await {
                    Ok(()) => tracing::debug!(%key, "request given up; its mailbox deleted"),
                    Err(e) => tracing::debug!(%key, error = %e, "request given up; its mailbox not deleted (it expires)"),
                }
            }
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    /// A store whose creates take a while to commit.
    struct SlowCreates(InMemoryMailbox);

    #[async_trait]
    impl Mailbox for SlowCreates {
        async fn create(&self, key: &MailboxKey, session: SessionTag, owner: NodeId, ttl: Duration) -> Result<CreateOutcome, MailboxError> {
            tokio::time::sleep(Duration::from_millis(50)).await;
            self.0.create(key, session, owner, ttl).await
        }
        async fn deliver(
            &self,
            key: &MailboxKey,
            session: SessionTag,
            addressee: Option<Addressee>,
            value: Value,
        ) -> Result<DeliverOutcome, MailboxError> {
            self.0.deliver(key, session, addressee, value).await
        }
        async fn wait(&self, key: &MailboxKey, timeout: Duration) -> Result<WaitOutcome, MailboxError> {
            self.0.wait(key, timeout).await
        }
        async fn delete(&self, key: &MailboxKey) -> Result<(), MailboxError> {
            self.0.delete(key).await
        }
    }

    #[tokio::test]
    async fn a_request_given_up_while_its_create_commits_leaves_no_pending_mailbox() {
        let store = Arc::new(SlowCreates(InMemoryMailbox::new()));
        let key = MailboxKey::random();
        let mut sent = SentMailbox::propose(store.clone(), key.clone(), SessionTag::default(), 1, Duration::from_secs(60)).await;
        assert!(sent.failed_already().is_none(), "the create is still committing");
        sent.delete().await.unwrap();
        assert_eq!(store.0.pending(), 0);
        let answer = store.deliver(&key, SessionTag::default(), None, json!(1)).await.unwrap();
        assert_eq!(answer, DeliverOutcome::Deleted, "a late answer is told the request is gone");
        assert!(sent.settled().await.is_ok(), "settled again once it has settled");
    }

    #[tokio::test]
    async fn a_delete_that_overtakes_its_create_leaves_the_mailbox_pending() {
        // Why `SentMailbox::delete` waits for the create first.
        let store = SlowCreates(InMemoryMailbox::new());
        let key = MailboxKey::random();
        let create = create_for_sent_request(&store, &key, SessionTag::default(), 1, Duration::from_secs(60));
        let (created, ()) = tokio::join!(create, async { store.delete(&key).await.unwrap() });
        assert_eq!(created.unwrap(), CreateOutcome::Created);
        assert_eq!(store.0.pending(), 1);
    }

    /// The mailbox's state once it is deleted or five seconds have passed: the drop's delete
    /// runs in a task of its own (after the create, which may not have reached the store yet).
    async fn until_deleted(store: &dyn Mailbox, key: &MailboxKey) -> WaitOutcome {
        let give_up = tokio::time::Instant::now() + Duration::from_secs(5);
        loop {
            let outcome = store.wait(key, Duration::ZERO).await.unwrap();
            if outcome == WaitOutcome::Deleted || tokio::time::Instant::now() > give_up {
                return outcome;
            }
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    }

    #[tokio::test]
    async fn a_request_dropped_while_parked_deletes_its_mailbox() {
        let store = Arc::new(InMemoryMailbox::new());
        let key = MailboxKey::random();
        let mut sent = SentMailbox::propose(store.clone(), key.clone(), SessionTag::default(), 1, Duration::from_secs(60)).await;
        sent.settled().await.unwrap();
        let parked = sent.wait(Duration::from_secs(60));
        assert!(futures::poll!(Box::pin(parked)).is_pending());
        drop(sent);
        assert_eq!(until_deleted(&*store, &key).await, WaitOutcome::Deleted);
        let late = store.deliver(&key, SessionTag::default(), None, json!(1)).await.unwrap();
        assert_eq!(late, DeliverOutcome::Deleted, "a late answer is told the request is gone");
    }

    #[tokio::test]
    async fn a_request_dropped_while_its_create_commits_deletes_the_mailbox_after_it() {
        let store = Arc::new(SlowCreates(InMemoryMailbox::new()));
        let key = MailboxKey::random();
        let sent = SentMailbox::propose(store.clone(), key.clone(), SessionTag::default(), 1, Duration::from_secs(60)).await;
        drop(sent);
        assert_eq!(until_deleted(&*store, &key).await, WaitOutcome::Deleted);
        assert_eq!(store.0.pending(), 0);
    }

    #[tokio::test]
    async fn an_answered_request_leaves_its_tombstone_when_dropped() {
        let store = Arc::new(InMemoryMailbox::new());
        let key = MailboxKey::random();
        let mut sent = SentMailbox::propose(store.clone(), key.clone(), SessionTag::default(), 1, Duration::from_secs(60)).await;
        sent.settled().await.unwrap();
        assert_eq!(store.deliver(&key, SessionTag::default(), None, json!(1)).await.unwrap(), DeliverOutcome::Delivered);
        assert_eq!(sent.wait(Duration::from_secs(1)).await.unwrap(), WaitOutcome::Delivered(json!(1)));
        drop(sent);
        tokio::task::yield_now().await;
        let again = store.deliver(&key, SessionTag::default(), None, json!(2)).await.unwrap();
        assert_eq!(again, DeliverOutcome::AlreadyDelivered, "a duplicate is told so, not that the request is gone");
    }

    #[tokio::test]
    async fn a_create_that_failed_is_reported_once() {
        let store = Arc::new(InMemoryMailbox::new());
        let key = MailboxKey::random();
        let mut sent = SentMailbox::propose(store, key, SessionTag::default(), 1, Duration::ZERO).await;
        assert!(matches!(sent.failed_already(), Some(MailboxError::InvalidTtl { .. })));
        assert!(sent.failed_already().is_none());
    }

    #[test]
    fn keys_are_32_hex_digits_and_round_trip() {
        let key = MailboxKey::random();
        let text = key.to_string();
        assert_eq!(text.len(), 32);
        assert_eq!(text.parse::<MailboxKey>(), Ok(key.clone()));
        assert_eq!(MailboxKey::from_bits(1).to_string(), "00000000000000000000000000000001");
        let json = serde_json::to_string(&key).unwrap();
        assert_eq!(json, format!("\"{text}\""));
        assert_eq!(serde_json::from_str::<MailboxKey>(&json).unwrap(), key);
    }

    #[test]
    fn text_that_is_not_a_key_is_refused() {
        for bad in ["", "abc", "g0000000000000000000000000000000", "0000000000000000000000000000000000", "+0000000000000000000000000000000"]
        {
            assert!(bad.parse::<MailboxKey>().is_err(), "{bad:?} parsed");
            assert!(serde_json::from_str::<MailboxKey>(&format!("\"{bad}\"")).is_err(), "{bad:?} deserialized");
        }
    }
}
