//! The contract every [`Mailbox`] backend must meet, as one generic suite. The in-memory store
//! runs it in unit tests; replicated stores run it over real networking.

use super::{CreateOutcome, DeliverOutcome, MAX_TTL, Mailbox, MailboxError, MailboxKey, SessionTag, WaitOutcome};
use serde_json::json;
use std::sync::Arc;
use std::time::Duration;

const OWNER: u64 = 0;
const LONG: Duration = Duration::from_secs(60);
/// The session the cases' mailboxes belong to.
const SESSION: SessionTag = SessionTag([7; 16]);
/// Another session.
const INTRUDER: SessionTag = SessionTag([9; 16]);

/// Run every case against mailboxes from `make` (a fresh or shared store per case is fine:
/// every case uses its own random keys).
pub async fn run_all<M: Mailbox>(mailbox: Arc<M>) {
    deliver_before_wait(&*mailbox).await;
    double_delivery_keeps_the_first_value(&*mailbox).await;
    concurrent_deliveries_have_one_winner(mailbox.clone()).await;
    delete_wakes_waiters_and_refuses_later_deliveries(mailbox.clone()).await;
    expiry_is_told_apart_from_unknown(&*mailbox).await;
    create_is_create_if_absent(&*mailbox).await;
    a_waiter_timeout_leaves_the_mailbox_open(&*mailbox).await;
    ttl_bounds_are_enforced(&*mailbox).await;
    another_sessions_delivery_is_refused_and_changes_nothing(&*mailbox).await;
}

/// Invariant 10's second line: a mailbox takes answers only from the session it was made for.
pub async fn another_sessions_delivery_is_refused_and_changes_nothing(mailbox: &impl Mailbox) {
    let key = MailboxKey::random();
    mailbox.create(&key, SESSION, OWNER, LONG).await.unwrap();
    assert_eq!(mailbox.deliver(&key, INTRUDER, json!("forged")).await.unwrap(), DeliverOutcome::WrongSession);
    assert_eq!(mailbox.wait(&key, Duration::from_millis(50)).await.unwrap(), WaitOutcome::TimedOut, "still open");
    assert_eq!(mailbox.deliver(&key, SESSION, json!("real")).await.unwrap(), DeliverOutcome::Delivered);
    assert_eq!(mailbox.wait(&key, LONG).await.unwrap(), WaitOutcome::Delivered(json!("real")));
}

pub async fn deliver_before_wait(mailbox: &impl Mailbox) {
    let key = MailboxKey::random();
    assert_eq!(mailbox.create(&key, SESSION, OWNER, LONG).await.unwrap(), CreateOutcome::Created);
    assert_eq!(mailbox.deliver(&key, SESSION, json!({"v": 1})).await.unwrap(), DeliverOutcome::Delivered);
    assert_eq!(mailbox.wait(&key, LONG).await.unwrap(), WaitOutcome::Delivered(json!({"v": 1})));
}

pub async fn double_delivery_keeps_the_first_value(mailbox: &impl Mailbox) {
    let key = MailboxKey::random();
    mailbox.create(&key, SESSION, OWNER, LONG).await.unwrap();
    assert_eq!(mailbox.deliver(&key, SESSION, json!("first")).await.unwrap(), DeliverOutcome::Delivered);
    assert_eq!(mailbox.deliver(&key, SESSION, json!("second")).await.unwrap(), DeliverOutcome::AlreadyDelivered);
    assert_eq!(mailbox.wait(&key, LONG).await.unwrap(), WaitOutcome::Delivered(json!("first")));
}

pub async fn concurrent_deliveries_have_one_winner<M: Mailbox>(mailbox: Arc<M>) {
    let key = MailboxKey::random();
    mailbox.create(&key, SESSION, OWNER, LONG).await.unwrap();
    let waiter = {
        let (mailbox, key) = (mailbox.clone(), key.clone());
        tokio::spawn(async move { mailbox.wait(&key, LONG).await.unwrap() })
    };
    let deliveries: Vec<_> = (0..50)
        .map(|i| {
            let (mailbox, key) = (mailbox.clone(), key.clone());
            tokio::spawn(async move { (i, mailbox.deliver(&key, SESSION, json!(i)).await.unwrap()) })
        })
        .collect();
    let mut winners = Vec::new();
    for d in deliveries {
        let (i, outcome) = d.await.unwrap();
        match outcome {
            DeliverOutcome::Delivered => winners.push(i),
            other => assert_eq!(other, DeliverOutcome::AlreadyDelivered),
        }
    }
    assert_eq!(winners.len(), 1, "exactly one delivery wins");
    assert_eq!(waiter.await.unwrap(), WaitOutcome::Delivered(json!(winners[0])), "the waiter gets the winner's value");
}

pub async fn delete_wakes_waiters_and_refuses_later_deliveries<M: Mailbox>(mailbox: Arc<M>) {
    let key = MailboxKey::random();
    mailbox.create(&key, SESSION, OWNER, LONG).await.unwrap();
    let waiter = {
        let (mailbox, key) = (mailbox.clone(), key.clone());
        tokio::spawn(async move { mailbox.wait(&key, LONG).await.unwrap() })
    };
    tokio::time::sleep(Duration::from_millis(50)).await;
    mailbox.delete(&key).await.unwrap();
    mailbox.delete(&key).await.unwrap(); // idempotent
    let woke = tokio::time::timeout(Duration::from_secs(10), waiter).await.expect("delete wakes the waiter").unwrap();
    assert_eq!(woke, WaitOutcome::Deleted);
    assert_eq!(mailbox.deliver(&key, SESSION, json!(1)).await.unwrap(), DeliverOutcome::Deleted);
}

pub async fn expiry_is_told_apart_from_unknown(mailbox: &impl Mailbox) {
    let key = MailboxKey::random();
    mailbox.create(&key, SESSION, OWNER, Duration::from_millis(200)).await.unwrap();
    assert_eq!(mailbox.wait(&key, LONG).await.unwrap(), WaitOutcome::Expired, "the deadline ends the wait");
    // Give a replicated store time to learn of the expiry from its log.
    let mut outcome = mailbox.deliver(&key, SESSION, json!(1)).await.unwrap();
    for _ in 0..50 {
        if outcome == DeliverOutcome::Expired {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
        outcome = mailbox.deliver(&key, SESSION, json!(1)).await.unwrap();
    }
    assert_eq!(outcome, DeliverOutcome::Expired);
    assert_eq!(mailbox.deliver(&MailboxKey::random(), SESSION, json!(1)).await.unwrap(), DeliverOutcome::NotFound);
    assert_eq!(mailbox.wait(&MailboxKey::random(), LONG).await.unwrap(), WaitOutcome::NotFound);
}

pub async fn create_is_create_if_absent(mailbox: &impl Mailbox) {
    let key = MailboxKey::random();
    mailbox.create(&key, SESSION, OWNER, LONG).await.unwrap();
    mailbox.deliver(&key, SESSION, json!("kept")).await.unwrap();
    assert_eq!(mailbox.create(&key, SESSION, 1, LONG).await.unwrap(), CreateOutcome::AlreadyExists);
    assert_eq!(mailbox.wait(&key, LONG).await.unwrap(), WaitOutcome::Delivered(json!("kept")));
}

pub async fn a_waiter_timeout_leaves_the_mailbox_open(mailbox: &impl Mailbox) {
    let key = MailboxKey::random();
    mailbox.create(&key, SESSION, OWNER, LONG).await.unwrap();
    assert_eq!(mailbox.wait(&key, Duration::from_millis(50)).await.unwrap(), WaitOutcome::TimedOut);
    assert_eq!(mailbox.deliver(&key, SESSION, json!(2)).await.unwrap(), DeliverOutcome::Delivered);
}

/// Zero and over-long TTLs are refused and create nothing (a negative TTL can't be expressed:
/// the API takes a `Duration`).
pub async fn ttl_bounds_are_enforced(mailbox: &impl Mailbox) {
    for ttl in [Duration::ZERO, MAX_TTL + Duration::from_millis(1)] {
        let key = MailboxKey::random();
        assert!(matches!(mailbox.create(&key, SESSION, OWNER, ttl).await, Err(MailboxError::InvalidTtl { .. })));
        assert_eq!(mailbox.deliver(&key, SESSION, json!(1)).await.unwrap(), DeliverOutcome::NotFound, "nothing was created");
    }
    assert_eq!(mailbox.create(&MailboxKey::random(), SESSION, OWNER, MAX_TTL).await.unwrap(), CreateOutcome::Created);
}
