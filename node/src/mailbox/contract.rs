//! The contract every [`Mailbox`] backend must meet, as one generic suite. The in-memory store
//! runs it in unit tests; replicated stores run it over real networking.

use super::{Addressee, CreateOutcome, DeliverOutcome, MAX_TTL, Mailbox, MailboxError, MailboxKey, SessionTag, WaitOutcome};
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
    a_taken_value_still_refuses_late_deliveries(&*mailbox).await;
    concurrent_deliveries_have_one_winner(mailbox.clone()).await;
    delete_wakes_waiters_and_refuses_later_deliveries(mailbox.clone()).await;
    expiry_is_told_apart_from_unknown(&*mailbox).await;
    create_is_create_if_absent(&*mailbox).await;
    a_waiter_timeout_leaves_the_mailbox_open(&*mailbox).await;
    ttl_bounds_are_enforced(&*mailbox).await;
    another_sessions_delivery_is_refused_and_changes_nothing(&*mailbox).await;
    an_answer_before_its_create_is_kept_for_it(&*mailbox, &*mailbox).await;
    an_early_answer_from_another_session_is_not_taken(&*mailbox, &*mailbox).await;
    an_answer_past_its_deadline_keeps_nothing(&*mailbox).await;
}

/// The addressee of a request sealed now, answerable for `LONG`.
fn addressee() -> Option<Addressee> {
    Some(Addressee { owner: OWNER, deadline_ms: crate::clock::now_ms() + LONG.as_millis() as u64 })
}

/// Early delivery: the create may commit after the request went out, so an answer (on any
/// node: `answerer`) can reach the store first; it is kept, and the create delivers it. First
/// value still wins.
pub async fn an_answer_before_its_create_is_kept_for_it(owner: &impl Mailbox, answerer: &impl Mailbox) {
    let key = MailboxKey::random();
    assert_eq!(answerer.deliver(&key, SESSION, addressee(), json!("early")).await.unwrap(), DeliverOutcome::Delivered);
    assert_eq!(answerer.deliver(&key, SESSION, addressee(), json!("second")).await.unwrap(), DeliverOutcome::AlreadyDelivered);
    assert_eq!(owner.create(&key, SESSION, OWNER, LONG).await.unwrap(), CreateOutcome::Created);
    assert_eq!(owner.wait(&key, LONG).await.unwrap(), WaitOutcome::Delivered(json!("early")));
    assert_eq!(answerer.deliver(&key, SESSION, addressee(), json!("third")).await.unwrap(), DeliverOutcome::AlreadyDelivered);
}

/// An early answer is taken only by a create for its session: another session's does not
/// fill the mailbox, which stays open for the real answer.
pub async fn an_early_answer_from_another_session_is_not_taken(owner: &impl Mailbox, answerer: &impl Mailbox) {
    let key = MailboxKey::random();
    assert_eq!(answerer.deliver(&key, INTRUDER, addressee(), json!("forged")).await.unwrap(), DeliverOutcome::Delivered);
    assert_eq!(owner.create(&key, SESSION, OWNER, LONG).await.unwrap(), CreateOutcome::Created);
    assert_eq!(owner.wait(&key, Duration::from_millis(50)).await.unwrap(), WaitOutcome::TimedOut, "still open");
    assert_eq!(answerer.deliver(&key, SESSION, addressee(), json!("real")).await.unwrap(), DeliverOutcome::Delivered);
    assert_eq!(owner.wait(&key, LONG).await.unwrap(), WaitOutcome::Delivered(json!("real")));
}

/// An answer whose addressee's deadline has passed is late: nothing is kept for it.
pub async fn an_answer_past_its_deadline_keeps_nothing(mailbox: &impl Mailbox) {
    let key = MailboxKey::random();
    let past = Some(Addressee { owner: OWNER, deadline_ms: crate::clock::now_ms().saturating_sub(1_000) });
    assert_eq!(mailbox.deliver(&key, SESSION, past, json!(1)).await.unwrap(), DeliverOutcome::Expired);
    assert_eq!(mailbox.wait(&key, LONG).await.unwrap(), WaitOutcome::NotFound, "nothing was kept");
}

/// Invariant 10's second line: a mailbox takes answers only from the session it was made for.
pub async fn another_sessions_delivery_is_refused_and_changes_nothing(mailbox: &impl Mailbox) {
    let key = MailboxKey::random();
    mailbox.create(&key, SESSION, OWNER, LONG).await.unwrap();
    assert_eq!(mailbox.deliver(&key, INTRUDER, None, json!("forged")).await.unwrap(), DeliverOutcome::WrongSession);
    assert_eq!(mailbox.wait(&key, Duration::from_millis(50)).await.unwrap(), WaitOutcome::TimedOut, "still open");
    assert_eq!(mailbox.deliver(&key, SESSION, None, json!("real")).await.unwrap(), DeliverOutcome::Delivered);
    assert_eq!(mailbox.wait(&key, LONG).await.unwrap(), WaitOutcome::Delivered(json!("real")));
}

pub async fn deliver_before_wait(mailbox: &impl Mailbox) {
    let key = MailboxKey::random();
    assert_eq!(mailbox.create(&key, SESSION, OWNER, LONG).await.unwrap(), CreateOutcome::Created);
    assert_eq!(mailbox.deliver(&key, SESSION, None, json!({"v": 1})).await.unwrap(), DeliverOutcome::Delivered);
    assert_eq!(mailbox.wait(&key, LONG).await.unwrap(), WaitOutcome::Delivered(json!({"v": 1})));
}

pub async fn double_delivery_keeps_the_first_value(mailbox: &impl Mailbox) {
    let key = MailboxKey::random();
    mailbox.create(&key, SESSION, OWNER, LONG).await.unwrap();
    assert_eq!(mailbox.deliver(&key, SESSION, None, json!("first")).await.unwrap(), DeliverOutcome::Delivered);
    assert_eq!(mailbox.deliver(&key, SESSION, None, json!("second")).await.unwrap(), DeliverOutcome::AlreadyDelivered);
    assert_eq!(mailbox.wait(&key, LONG).await.unwrap(), WaitOutcome::Delivered(json!("first")));
}

/// The waiter takes the value (the store may drop it); the mailbox still remembers it was
/// delivered.
pub async fn a_taken_value_still_refuses_late_deliveries(mailbox: &impl Mailbox) {
    let key = MailboxKey::random();
    mailbox.create(&key, SESSION, OWNER, LONG).await.unwrap();
    assert_eq!(mailbox.deliver(&key, SESSION, None, json!("first")).await.unwrap(), DeliverOutcome::Delivered);
    assert_eq!(mailbox.wait(&key, LONG).await.unwrap(), WaitOutcome::Delivered(json!("first")));
    assert_eq!(mailbox.deliver(&key, SESSION, None, json!("late")).await.unwrap(), DeliverOutcome::AlreadyDelivered);
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
            tokio::spawn(async move { (i, mailbox.deliver(&key, SESSION, None, json!(i)).await.unwrap()) })
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
    assert_eq!(mailbox.deliver(&key, SESSION, None, json!(1)).await.unwrap(), DeliverOutcome::Deleted);
}

pub async fn expiry_is_told_apart_from_unknown(mailbox: &impl Mailbox) {
    let key = MailboxKey::random();
    mailbox.create(&key, SESSION, OWNER, Duration::from_millis(200)).await.unwrap();
    assert_eq!(mailbox.wait(&key, LONG).await.unwrap(), WaitOutcome::Expired, "the deadline ends the wait");
    // Give a replicated store time to learn of the expiry from its log.
    let mut outcome = mailbox.deliver(&key, SESSION, None, json!(1)).await.unwrap();
    for _ in 0..50 {
        if outcome == DeliverOutcome::Expired {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
        outcome = mailbox.deliver(&key, SESSION, None, json!(1)).await.unwrap();
    }
    assert_eq!(outcome, DeliverOutcome::Expired);
    assert_eq!(mailbox.deliver(&MailboxKey::random(), SESSION, None, json!(1)).await.unwrap(), DeliverOutcome::NotFound);
    assert_eq!(mailbox.wait(&MailboxKey::random(), LONG).await.unwrap(), WaitOutcome::NotFound);
}

pub async fn create_is_create_if_absent(mailbox: &impl Mailbox) {
    let key = MailboxKey::random();
    mailbox.create(&key, SESSION, OWNER, LONG).await.unwrap();
    mailbox.deliver(&key, SESSION, None, json!("kept")).await.unwrap();
    assert_eq!(mailbox.create(&key, SESSION, 1, LONG).await.unwrap(), CreateOutcome::AlreadyExists);
    assert_eq!(mailbox.wait(&key, LONG).await.unwrap(), WaitOutcome::Delivered(json!("kept")));
}

pub async fn a_waiter_timeout_leaves_the_mailbox_open(mailbox: &impl Mailbox) {
    let key = MailboxKey::random();
    mailbox.create(&key, SESSION, OWNER, LONG).await.unwrap();
    assert_eq!(mailbox.wait(&key, Duration::from_millis(50)).await.unwrap(), WaitOutcome::TimedOut);
    assert_eq!(mailbox.deliver(&key, SESSION, None, json!(2)).await.unwrap(), DeliverOutcome::Delivered);
}

/// Zero and over-long TTLs are refused and create nothing (a negative TTL can't be expressed:
/// the API takes a `Duration`).
pub async fn ttl_bounds_are_enforced(mailbox: &impl Mailbox) {
    for ttl in [Duration::ZERO, MAX_TTL + Duration::from_millis(1)] {
        let key = MailboxKey::random();
        assert!(matches!(mailbox.create(&key, SESSION, OWNER, ttl).await, Err(MailboxError::InvalidTtl { .. })));
        assert_eq!(mailbox.deliver(&key, SESSION, None, json!(1)).await.unwrap(), DeliverOutcome::NotFound, "nothing was created");
    }
    assert_eq!(mailbox.create(&MailboxKey::random(), SESSION, OWNER, MAX_TTL).await.unwrap(), CreateOutcome::Created);
}
