//! A single-process mailbox: what `switchboard stdio` and a one-node `serve` use, and the
//! reference the replicated store is tested against.

use super::{CreateOutcome, DeliverOutcome, Mailbox, MailboxError, MailboxKey, NodeId, WaitOutcome, check_ttl};
use async_trait::async_trait;
use serde_json::Value;
use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};
use tokio::sync::watch;

/// How long the record of a finished mailbox is kept so a late delivery is told why it lost.
const TOMBSTONE_RETENTION: Duration = Duration::from_secs(600);

#[derive(Debug, Clone, PartialEq)]
enum State {
    Pending,
    Delivered(Value),
    Deleted,
}

struct Slot {
    deadline: Instant,
    state: watch::Sender<State>,
}

impl Slot {
    fn expired(&self, now: Instant) -> bool {
        now >= self.deadline && matches!(*self.state.borrow(), State::Pending)
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
        slots.values().filter(|s| matches!(*s.state.borrow(), State::Pending) && !s.expired(now)).count()
    }

    /// Drop records whose retention has passed. Amortised over creates.
    fn sweep(slots: &mut HashMap<MailboxKey, Slot>, now: Instant) {
        slots.retain(|_, s| now < s.deadline + TOMBSTONE_RETENTION);
    }
}

#[async_trait]
impl Mailbox for InMemoryMailbox {
    async fn create(&self, key: &MailboxKey, _owner: NodeId, ttl: Duration) -> Result<CreateOutcome, MailboxError> {
        check_ttl(ttl)?;
        let now = Instant::now();
        let mut slots = self.slots.lock().unwrap();
        if slots.len() % 1024 == 1023 {
            Self::sweep(&mut slots, now);
        }
        if slots.contains_key(key) {
            return Ok(CreateOutcome::AlreadyExists);
        }
        let (state, _) = watch::channel(State::Pending);
        slots.insert(key.clone(), Slot { deadline: now + ttl, state });
        Ok(CreateOutcome::Created)
    }

    async fn deliver(&self, key: &MailboxKey, value: Value) -> Result<DeliverOutcome, MailboxError> {
        let slots = self.slots.lock().unwrap();
        let Some(slot) = slots.get(key) else { return Ok(DeliverOutcome::NotFound) };
        if slot.expired(Instant::now()) {
            return Ok(DeliverOutcome::Expired);
        }
        let mut outcome = DeliverOutcome::Delivered;
        slot.state.send_if_modified(|state| match state {
            State::Pending => {
                *state = State::Delivered(value);
                true
            }
            State::Delivered(_) => {
                outcome = DeliverOutcome::AlreadyDelivered;
                false
            }
            State::Deleted => {
                outcome = DeliverOutcome::Deleted;
                false
            }
        });
        Ok(outcome)
    }

    async fn wait(&self, key: &MailboxKey, timeout: Duration) -> Result<WaitOutcome, MailboxError> {
        let (mut rx, deadline) = {
            let slots = self.slots.lock().unwrap();
            let Some(slot) = slots.get(key) else { return Ok(WaitOutcome::NotFound) };
            (slot.state.subscribe(), slot.deadline)
        };
        let wake_by = (Instant::now() + timeout).min(deadline);
        let settled = tokio::time::timeout_at(wake_by.into(), rx.wait_for(|s| *s != State::Pending)).await;
        Ok(match settled {
            Ok(Ok(state)) => match &*state {
                State::Delivered(v) => WaitOutcome::Delivered(v.clone()),
                State::Deleted => WaitOutcome::Deleted,
                State::Pending => unreachable!("wait_for returned a pending state"),
            },
            // The sender lives in the map until swept, long after the deadline.
            Ok(Err(_)) => WaitOutcome::Deleted,
            Err(_) if wake_by == deadline => WaitOutcome::Expired,
            Err(_) => WaitOutcome::TimedOut,
        })
    }

    async fn delete(&self, key: &MailboxKey) -> Result<(), MailboxError> {
        if let Some(slot) = self.slots.lock().unwrap().get(key) {
            slot.state.send_if_modified(|state| {
                let changed = *state != State::Deleted;
                *state = State::Deleted;
                changed
            });
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
        mailbox.create(&a, 0, Duration::from_secs(60)).await.unwrap();
        mailbox.create(&b, 0, Duration::from_secs(60)).await.unwrap();
        mailbox.deliver(&a, serde_json::json!(1)).await.unwrap();
        assert_eq!(mailbox.pending(), 1);
    }
}
