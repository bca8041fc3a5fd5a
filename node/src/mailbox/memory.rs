//! A single-process mailbox: what `switchboard stdio` and a one-node `serve` use, and the
//! reference the replicated store is tested against.

use super::{Addressee, CreateOutcome, DeliverOutcome, Mailbox, MailboxError, MailboxKey, NodeId, SessionTag, WaitOutcome, check_ttl};
use async_trait::async_trait;
use serde_json::Value;
use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use tokio::sync::Notify;

/// How long the record of a finished mailbox outlives its deadline (as in the replicated
/// store): until the deadline it refuses a second answer, after it the answer's own deadline
/// tells it that it is late.
const TOMBSTONE_RETENTION: Duration = Duration::from_secs(60);

#[derive(Debug, Clone, PartialEq)]
enum State {
    Pending,
    /// An answer that came before the create, kept for it until the addressee's deadline.
    Early(Value),
    Delivered(Value),
    /// Delivered, and the waiter took the value: only the tombstone is left.
    Taken,
    Deleted,
}

struct Slot {
    session: SessionTag,
    /// Whom an early answer is kept for (the create's owner once created).
    owner: NodeId,
    deadline: Instant,
    state: State,
    /// Wakes the waiter when the state leaves `Pending` (a `Notify` rather than a watch
    /// channel: a fraction of the memory, and there is one per parked call).
    settled: Arc<Notify>,
}

impl Slot {
    fn expired(&self, now: Instant) -> bool {
        now >= self.deadline && matches!(self.state, State::Pending | State::Early(_))
    }

    /// Hand a delivered value to its waiter, keeping the tombstone.
    fn take(&mut self) -> WaitOutcome {
        match std::mem::replace(&mut self.state, State::Taken) {
            State::Delivered(value) => WaitOutcome::Delivered(value),
            other => {
                self.state = other;
                WaitOutcome::Deleted
            }
        }
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
    async fn create(&self, key: &MailboxKey, session: SessionTag, owner: NodeId, ttl: Duration) -> Result<CreateOutcome, MailboxError> {
        check_ttl(ttl)?;
        let now = Instant::now();
        let mut slots = self.slots.lock().unwrap();
        if slots.len() % 1024 == 1023 {
            Self::sweep(&mut slots, now);
        }
        let state = match slots.remove(key) {
            None => State::Pending,
            Some(Slot { state: State::Early(value), session: s, owner: o, deadline, .. }) if now < deadline => {
                // Kept only for the session and owner the create names.
                if s == session && o == owner { State::Delivered(value) } else { State::Pending }
            }
            Some(slot) => {
                slots.insert(key.clone(), slot);
                return Ok(CreateOutcome::AlreadyExists);
            }
        };
        slots.insert(key.clone(), Slot { session, owner, deadline: now + ttl, state, settled: Arc::default() });
        Ok(CreateOutcome::Created)
    }

    async fn deliver(
        &self,
        key: &MailboxKey,
        session: SessionTag,
        addressee: Option<Addressee>,
        value: Value,
    ) -> Result<DeliverOutcome, MailboxError> {
        let mut slots = self.slots.lock().unwrap();
        let Some(slot) = slots.get_mut(key) else {
            let Some(to) = addressee else { return Ok(DeliverOutcome::NotFound) };
            let left = Duration::from_millis(to.deadline_ms.saturating_sub(crate::clock::now_ms()));
            if left.is_zero() {
                return Ok(DeliverOutcome::Expired);
            }
            let early =
                Slot { session, owner: to.owner, deadline: Instant::now() + left, state: State::Early(value), settled: Arc::default() };
            slots.insert(key.clone(), early);
            return Ok(DeliverOutcome::Delivered);
        };
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
            State::Delivered(_) | State::Taken | State::Early(_) => DeliverOutcome::AlreadyDelivered,
            State::Deleted => DeliverOutcome::Deleted,
        })
    }

    async fn wait(&self, key: &MailboxKey, timeout: Duration) -> Result<WaitOutcome, MailboxError> {
        let (settled, deadline) = {
            let mut slots = self.slots.lock().unwrap();
            let Some(slot) = slots.get_mut(key) else { return Ok(WaitOutcome::NotFound) };
            match &slot.state {
                State::Delivered(_) => return Ok(slot.take()),
                State::Taken | State::Deleted => return Ok(WaitOutcome::Deleted),
                // Taken under the lock, so a delivery right after it still wakes it.
                State::Pending | State::Early(_) => (slot.settled.clone().notified_owned(), slot.deadline),
            }
        };
        let wake_by = (Instant::now() + timeout).min(deadline);
        let woken = tokio::time::timeout_at(wake_by.into(), settled).await;
        Ok(match woken {
            Ok(()) => match self.slots.lock().unwrap().get_mut(key) {
                Some(slot) if matches!(slot.state, State::Delivered(_)) => slot.take(),
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
            && !matches!(slot.state, State::Deleted | State::Taken)
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
        mailbox.deliver(&a, SessionTag::default(), None, serde_json::json!(1)).await.unwrap();
        assert_eq!(mailbox.pending(), 1);
    }
}
