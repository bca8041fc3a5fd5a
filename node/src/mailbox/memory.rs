//! A single-process mailbox: what `switchboard stdio` and a one-node `serve` use, and the
//! reference the replicated store is tested against.

use super::{CreateOutcome, DeliverOutcome, Mailbox, MailboxError, MailboxKey, NodeId, SessionTag, WaitOutcome, check_ttl};
use async_trait::async_trait;
use serde_json::Value;
use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use tokio::sync::Notify;

/// How long the record of a finished mailbox is kept so a late delivery is told why it lost.
const TOMBSTONE_RETENTION: Duration = Duration::from_secs(600);

#[derive(Debug, Clone, PartialEq)]
enum State {
    Pending,
    Delivered(Value),
    Deleted,
}

struct Slot {
    session: SessionTag,
    deadline: Instant,
    state: State,
    /// Wakes the waiter when the state leaves `Pending` (a `Notify` rather than a watch
    /// channel: a fraction of the memory, and there is one per parked call).
    settled: Arc<Notify>,
}

impl Slot {
    fn expired(&self, now: Instant) -> bool {
        now >= self.deadline && matches!(self.state, State::Pending)
    }

    /// Set the state and wake the waiter.
    fn settle(&mut self, state: State) {
        self.state = state;
        self.settled.notify_waiters();
    }
}

#[derive(Default)]
pub struct InMemoryMailbox {
    slots: Mutex<HashMap<MailboxKey, Slot>>,
}

impl InMemoryMailbox {
    pub fn new() -> Self {
        Self::default()
    }

    /// Number of mailboxes still waiting for an answer.
    pub fn pending(&self) -> usize {
        let now = Instant::now();
        let slots = self.slots.lock().unwrap();
        slots.values().filter(|s| matches!(s.state, State::Pending) && !s.expired(now)).count()
    }

    /// Drop records whose retention has passed. Amortised over creates.
    fn sweep(slots: &mut HashMap<MailboxKey, Slot>, now: Instant) {
        slots.retain(|_, s| now < s.deadline + TOMBSTONE_RETENTION);
    }
}

#[async_trait]
impl Mailbox for InMemoryMailbox {
    async fn create(&self, key: &MailboxKey, session: SessionTag, _owner: NodeId, ttl: Duration) -> Result<CreateOutcome, MailboxError> {
        check_ttl(ttl)?;
        let now = Instant::now();
        let mut slots = self.slots.lock().unwrap();
        if slots.len() % 1024 == 1023 {
            Self::sweep(&mut slots, now);
        }
        if slots.contains_key(key) {
            return Ok(CreateOutcome::AlreadyExists);
        }
        slots.insert(key.clone(), Slot { session, deadline: now + ttl, state: State::Pending, settled: Arc::default() });
        Ok(CreateOutcome::Created)
    }

    async fn deliver(&self, key: &MailboxKey, session: SessionTag, value: Value) -> Result<DeliverOutcome, MailboxError> {
        let mut slots = self.slots.lock().unwrap();
        let Some(slot) = slots.get_mut(key) else { return Ok(DeliverOutcome::NotFound) };
        if slot.session != session {
            return Ok(DeliverOutcome::WrongSession);
        }
        if slot.expired(Instant::now()) {
            return Ok(DeliverOutcome::Expired);
        }
        Ok(match slot.state {
            State::Pending => {
                slot.settle(State::Delivered(value));
                DeliverOutcome::Delivered
            }
            State::Delivered(_) => DeliverOutcome::AlreadyDelivered,
            State::Deleted => DeliverOutcome::Deleted,
        })
    }

    async fn wait(&self, key: &MailboxKey, timeout: Duration) -> Result<WaitOutcome, MailboxError> {
        let (settled, deadline) = {
            let slots = self.slots.lock().unwrap();
            let Some(slot) = slots.get(key) else { return Ok(WaitOutcome::NotFound) };
            match &slot.state {
                State::Delivered(v) => return Ok(WaitOutcome::Delivered(v.clone())),
                State::Deleted => return Ok(WaitOutcome::Deleted),
                // Taken under the lock, so a delivery right after it still wakes it.
                State::Pending => (slot.settled.clone().notified_owned(), slot.deadline),
            }
        };
        let wake_by = (Instant::now() + timeout).min(deadline);
        let woken = tokio::time::timeout_at(wake_by.into(), settled).await;
        Ok(match woken {
            Ok(()) => match self.slots.lock().unwrap().get(key).map(|slot| &slot.state) {
                Some(State::Delivered(v)) => WaitOutcome::Delivered(v.clone()),
                // Only a settled state wakes the waiter, and the record outlives the deadline
                // by long: anything else is a deletion.
                _ => WaitOutcome::Deleted,
            },
            Err(_) if wake_by == deadline => WaitOutcome::Expired,
            Err(_) => WaitOutcome::TimedOut,
        })
    }

    async fn delete(&self, key: &MailboxKey) -> Result<(), MailboxError> {
        if let Some(slot) = self.slots.lock().unwrap().get_mut(key)
            && slot.state != State::Deleted
        {
            slot.settle(State::Deleted);
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;

    #[tokio::test]
    async fn meets_the_mailbox_contract() {
        crate::mailbox::contract::run_all(Arc::new(InMemoryMailbox::new())).await;
    }

    #[tokio::test]
    async fn pending_counts_only_open_mailboxes() {
        let mailbox = InMemoryMailbox::new();
        let (a, b) = (MailboxKey::random(), MailboxKey::random());
        mailbox.create(&a, SessionTag::default(), 0, Duration::from_secs(60)).await.unwrap();
        mailbox.create(&b, SessionTag::default(), 0, Duration::from_secs(60)).await.unwrap();
        mailbox.deliver(&a, SessionTag::default(), serde_json::json!(1)).await.unwrap();
        assert_eq!(mailbox.pending(), 1);
    }
}
