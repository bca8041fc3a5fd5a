//! A single-process mailbox: what `switchboard stdio` and a one-node `serve` use, and the
//! reference the replicated store is tested against.

use super::{Addressee, CreateOutcome, DeliverOutcome, Mailbox, MailboxError, MailboxKey, NodeId, SessionTag, WaitOutcome, check_ttl};
use async_trait::async_trait;
use serde_json::Value;
use std::cmp::Reverse;
use std::collections::{BinaryHeap, HashMap};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use tokio::sync::Notify;

/// How long the record of a finished mailbox outlives its deadline (as in the replicated
/// store): until the deadline it refuses a second answer, after it the answer's own deadline
/// tells it that it is late.
const TOMBSTONE_RETENTION: Duration = Duration::from_secs(60);
/// How long the tombstone of a taken value stays, if its deadline is later (as in the
/// replicated store): long enough to refuse the retries of an answer, short enough that a
/// long timeout does not keep every finished round trip in memory.
const TAKEN_RETENTION: Duration = Duration::from_secs(30);

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
    /// When the record may be forgotten.
    drop_at: Instant,
    state: State,
    /// Wakes the waiter when the state leaves `Pending` (a `Notify` rather than a watch
    /// channel: a fraction of the memory, and there is one per parked call).
    settled: Arc<Notify>,
}

impl Slot {
    fn expired(&self, now: Instant) -> bool {
        now >= self.deadline && matches!(self.state, State::Pending | State::Early(_))
    }

    fn new(session: SessionTag, owner: NodeId, deadline: Instant, state: State) -> Self {
        Slot { session, owner, deadline, drop_at: deadline + TOMBSTONE_RETENTION, state, settled: Arc::default() }
    }

    /// Set the state and wake the waiter.
    fn settle(&mut self, state: State) {
        self.state = state;
        self.settled.notify_waiters();
    }
}

#[derive(Default)]
struct Records {
    slots: HashMap<MailboxKey, Slot>,
    /// When each record may go, earliest first. A record whose time moves (an early answer
    /// that a create took, a taken value) gets a second entry; the stale one is skipped when
    /// it comes up. A queue rather than a periodic scan: the scan's cost grew with every
    /// record the retention keeps, and it ran on the create path.
    drops: BinaryHeap<Reverse<(Instant, MailboxKey)>>,
}

impl Records {
    fn insert(&mut self, key: &MailboxKey, slot: Slot) {
        self.drops.push(Reverse((slot.drop_at, key.clone())));
        self.slots.insert(key.clone(), slot);
    }

    /// Forget the records whose time has come.
    fn sweep(&mut self, now: Instant) {
        while let Some(Reverse((at, _))) = self.drops.peek()
            && *at <= now
        {
            let Some(Reverse((_, key))) = self.drops.pop() else { break };
            if self.slots.get(&key).is_some_and(|slot| slot.drop_at <= now) {
                self.slots.remove(&key);
            }
        }
    }

    /// Hand a delivered value to its waiter, keeping a tombstone; any other state is a
    /// deletion.
    fn take(&mut self, key: &MailboxKey, now: Instant) -> WaitOutcome {
        let Some(slot) = self.slots.get_mut(key) else { return WaitOutcome::Deleted };
        match std::mem::replace(&mut slot.state, State::Taken) {
            State::Delivered(value) => {
                let drop_at = (now + TAKEN_RETENTION).min(slot.drop_at);
                if drop_at < slot.drop_at {
                    slot.drop_at = drop_at;
                    self.drops.push(Reverse((drop_at, key.clone())));
                }
                WaitOutcome::Delivered(value)
            }
            other => {
                slot.state = other;
                WaitOutcome::Deleted
            }
        }
    }
}

#[derive(Default)]
pub struct InMemoryMailbox {
    records: Mutex<Records>,
}

impl InMemoryMailbox {
    pub fn new() -> Self {
        Self::default()
    }

    /// Number of mailboxes still waiting for an answer.
    pub fn pending(&self) -> usize {
        let now = Instant::now();
        let records = self.records.lock().unwrap();
        records.slots.values().filter(|s| matches!(s.state, State::Pending) && !s.expired(now)).count()
    }

    /// Number of records kept, tombstones included.
    #[cfg(test)]
    fn records(&self) -> usize {
        self.records.lock().unwrap().slots.len()
    }
}

#[async_trait]
impl Mailbox for InMemoryMailbox {
    async fn create(&self, key: &MailboxKey, session: SessionTag, owner: NodeId, ttl: Duration) -> Result<CreateOutcome, MailboxError> {
        check_ttl(ttl)?;
        let now = Instant::now();
        let mut records = self.records.lock().unwrap();
        records.sweep(now);
        let state = match records.slots.remove(key) {
            None => State::Pending,
            Some(Slot { state: State::Early(value), session: s, owner: o, deadline, .. }) if now < deadline => {
                // Kept only for the session and owner the create names.
                if s == session && o == owner { State::Delivered(value) } else { State::Pending }
            }
            Some(slot) => {
                records.slots.insert(key.clone(), slot);
                return Ok(CreateOutcome::AlreadyExists);
            }
        };
        records.insert(key, Slot::new(session, owner, now + ttl, state));
        Ok(CreateOutcome::Created)
    }

    async fn deliver(
        &self,
        key: &MailboxKey,
        session: SessionTag,
        addressee: Option<Addressee>,
        value: Value,
    ) -> Result<DeliverOutcome, MailboxError> {
        let now = Instant::now();
        let mut records = self.records.lock().unwrap();
        records.sweep(now);
        let Some(slot) = records.slots.get_mut(key) else {
            let Some(to) = addressee else { return Ok(DeliverOutcome::NotFound) };
            let left = Duration::from_millis(to.deadline_ms.saturating_sub(crate::clock::now_ms()));
            if left.is_zero() {
                return Ok(DeliverOutcome::Expired);
            }
            records.insert(key, Slot::new(session, to.owner, now + left, State::Early(value)));
            return Ok(DeliverOutcome::Delivered);
        };
        if slot.session != session {
            return Ok(DeliverOutcome::WrongSession);
        }
        if slot.expired(now) {
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
            let mut records = self.records.lock().unwrap();
            let Some(slot) = records.slots.get(key) else { return Ok(WaitOutcome::NotFound) };
            match &slot.state {
                State::Delivered(_) => return Ok(records.take(key, Instant::now())),
                State::Taken | State::Deleted => return Ok(WaitOutcome::Deleted),
                // Taken under the lock, so a delivery right after it still wakes it.
                State::Pending | State::Early(_) => (slot.settled.clone().notified_owned(), slot.deadline),
            }
        };
        let wake_by = (Instant::now() + timeout).min(deadline);
        let woken = tokio::time::timeout_at(wake_by.into(), settled).await;
        Ok(match woken {
            // Only a settled state wakes the waiter, and the record outlives the deadline by
            // long: anything but a delivered value is a deletion.
            Ok(()) => self.records.lock().unwrap().take(key, Instant::now()),
            Err(_) if wake_by == deadline => WaitOutcome::Expired,
            Err(_) => WaitOutcome::TimedOut,
        })
    }

    async fn delete(&self, key: &MailboxKey) -> Result<(), MailboxError> {
        if let Some(slot) = self.records.lock().unwrap().slots.get_mut(key)
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

    #[tokio::test]
    async fn a_taken_values_tombstone_goes_a_minute_after_the_take_not_at_the_deadline() {
        let mailbox = InMemoryMailbox::new();
        let key = MailboxKey::random();
        mailbox.create(&key, SessionTag::default(), 0, Duration::from_secs(600)).await.unwrap();
        mailbox.deliver(&key, SessionTag::default(), None, serde_json::json!(1)).await.unwrap();
        let before = Instant::now();
        assert_eq!(mailbox.wait(&key, Duration::from_secs(1)).await.unwrap(), WaitOutcome::Delivered(serde_json::json!(1)));
        let after = Instant::now();

        mailbox.records.lock().unwrap().sweep(before + TAKEN_RETENTION - Duration::from_millis(1));
        assert_eq!(mailbox.records(), 1, "the tombstone refuses retries for a while");
        let again = mailbox.deliver(&key, SessionTag::default(), None, serde_json::json!(2)).await.unwrap();
        assert_eq!(again, DeliverOutcome::AlreadyDelivered);

        mailbox.records.lock().unwrap().sweep(after + TAKEN_RETENTION);
        assert_eq!(mailbox.records(), 0, "gone long before the ten-minute deadline");
    }

    #[tokio::test]
    async fn records_go_in_deadline_order_and_a_moved_time_is_kept() {
        let mailbox = InMemoryMailbox::new();
        let start = Instant::now();
        let (early, short, long) = (MailboxKey::random(), MailboxKey::random(), MailboxKey::random());
        // An early answer kept for a second, then created with ten minutes: its first time
        // in the queue is stale and must not take the record with it.
        let to = Addressee { owner: 0, deadline_ms: crate::clock::now_ms() + 1000 };
        mailbox.deliver(&early, SessionTag::default(), Some(to), serde_json::json!("early")).await.unwrap();
        mailbox.create(&early, SessionTag::default(), 0, Duration::from_secs(600)).await.unwrap();
        mailbox.create(&short, SessionTag::default(), 0, Duration::from_secs(5)).await.unwrap();
        mailbox.create(&long, SessionTag::default(), 0, Duration::from_secs(1200)).await.unwrap();
        assert_eq!(mailbox.records(), 3);

        mailbox.records.lock().unwrap().sweep(start + TOMBSTONE_RETENTION + Duration::from_secs(120));
        assert_eq!(mailbox.records(), 2, "only the five-second mailbox is past its retention");
        assert_eq!(mailbox.wait(&early, Duration::from_secs(1)).await.unwrap(), WaitOutcome::Delivered(serde_json::json!("early")));

        mailbox.records.lock().unwrap().sweep(start + TOMBSTONE_RETENTION + Duration::from_secs(1300));
        let records = mailbox.records.lock().unwrap();
        assert!(records.slots.is_empty() && records.drops.is_empty(), "every record and queue entry is gone");
    }
}
