//! The replicated state machine, as pure logic: mailboxes, sessions and write dedup, advanced
//! only by log entries. No I/O, no clocks: time comes from the entry, stamped by the leader
//! that proposed it, so every replica decides expiry identically.
//!
//! Log time never goes back, and one entry moves it forward by at most [`MAX_CLOCK_STEP_MS`]
//! unless its stamp was checked against a majority of the voters' clocks
//! ([`Request::clock_agreed`]; see `super::clock`). So a leader whose clock jumped ahead cannot
//! drag log time along, and expire every session and mailbox early on every replica, without a
//! majority of clocks agreeing; while after a real idle period, the first entry (checked, since
//! its stamp is far from log time) still brings log time to the present, and with it every
//! expiry that fell due meanwhile.

use crate::mailbox::{CreateOutcome, DeliverOutcome, MailboxKey, NodeId, SessionTag};
use crate::protocol::types::LogLevel;
use crate::session::{SessionId, SessionRecord};
use serde::{Deserialize, Serialize};
use std::collections::{BTreeMap, BTreeSet, HashMap};

/// Milliseconds since the Unix epoch, as read by a leader's clock.
pub type Millis = u64;

/// How long the record of a finished mailbox outlives its deadline, so late answers are told
/// `Expired`/`Deleted`/`AlreadyDelivered` rather than `NotFound`.
pub const TOMBSTONE_RETENTION_MS: Millis = 10 * 60 * 1000;
/// How long a write's outcome is remembered for a retry of the same write.
pub const DEDUP_RETENTION_MS: Millis = 5 * 60 * 1000;
/// The most one entry whose stamp no majority vouched for moves log time forward. A leader
/// whose clock is further from log time than this checks it against the voters first.
pub const MAX_CLOCK_STEP_MS: Millis = 5_000;

/// Identifies one client write for dedup: the proposing node and its serial for the write.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub struct WriteId {
    pub origin: NodeId,
    pub serial: u64,
}

/// One replicated command.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub enum Command {
    MailboxCreate {
        key: MailboxKey,
        /// The session the mailbox belongs to (older entries without it decode with the zero tag).
        #[serde(default)]
        session: SessionTag,
        owner: NodeId,
        ttl_ms: Millis,
    },
    /// `value` is the client's JSON-RPC response.
    MailboxDeliver {
        key: MailboxKey,
        /// The session the answer arrived in.
        #[serde(default)]
        session: SessionTag,
        value: JsonText,
    },
    MailboxDelete {
        key: MailboxKey,
    },
    SessionCreate {
        record: SessionRecord,
        ttl_ms: Millis,
    },
    SessionSetLogLevel {
        id: SessionId,
        level: LogLevel,
    },
    SessionSubscribe {
        id: SessionId,
        uri: String,
        subscribed: bool,
    },
    /// Push a session's expiry out to `now + ttl`.
    SessionTouch {
        id: SessionId,
    },
    SessionDelete {
        id: SessionId,
    },
    /// Only advances time (and with it expiry).
    Tick,
}

/// JSON text known to parse: a delivered answer, kept as text in the log and the state (compact,
/// compared byte for byte) and decoded when it wakes its waiter. Text that does not parse is
/// refused when a command is decoded, so it never reaches the log or the state.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(try_from = "String", into = "String")]
pub struct JsonText(String);

/// Text that is not JSON.
#[derive(Debug, thiserror::Error)]
#[error("not JSON: {0}")]
pub struct NotJson(#[source] serde_json::Error);

impl JsonText {
    /// The value. Cannot fail: the text was checked when this was built.
    pub fn decode(&self) -> serde_json::Value {
        serde_json::from_str(&self.0).expect("JsonText holds valid JSON")
    }
}

impl From<&serde_json::Value> for JsonText {
    fn from(value: &serde_json::Value) -> Self {
        JsonText(value.to_string())
    }
}

impl TryFrom<String> for JsonText {
    type Error = NotJson;

    fn try_from(text: String) -> Result<Self, NotJson> {
        serde_json::from_str::<serde::de::IgnoredAny>(&text).map_err(NotJson)?;
        Ok(JsonText(text))
    }
}

impl From<JsonText> for String {
    fn from(text: JsonText) -> String {
        text.0
    }
}

/// A command as it is written to the log.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Request {
    /// The leader's clock when it proposed the entry.
    pub now: Millis,
    /// `now` is no later than the clocks of a majority of the voters (the leader asked them
    /// just before): it may move log time any distance forward. Otherwise at most
    /// [`MAX_CLOCK_STEP_MS`]. Absent in entries of older versions: not agreed.
    #[serde(default)]
    pub clock_agreed: bool,
    pub write: Option<WriteId>,
    pub command: Command,
}

/// What applying one command did.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, Default)]
pub enum Response {
    #[default]
    Done,
    Created(CreateOutcome),
    Delivered(DeliverOutcome),
    /// Whether the session existed.
    Session(bool),
}

/// A change waiters on some node may be parked on.
#[derive(Debug, Clone, PartialEq)]
pub enum Wake {
    Delivered(MailboxKey, JsonText),
    Expired(MailboxKey),
    Deleted(MailboxKey),
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub enum MailboxState {
    Pending,
    Delivered(JsonText),
    Expired,
    Deleted,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Mailbox {
    pub owner: NodeId,
    #[serde(default)]
    pub session: SessionTag,
    pub deadline: Millis,
    pub state: MailboxState,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Session {
    pub record: SessionRecord,
    pub ttl_ms: Millis,
    pub expires_at: Millis,
}

/// Everything replicated, and what a snapshot holds.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
pub struct StateMachine {
    /// The latest leader time seen in the log; never goes back.
    pub now: Millis,
    /// Hashed, not ordered: looked up on every mailbox write (order lives in the sets below).
    pub mailboxes: HashMap<MailboxKey, Mailbox>,
    /// `(deadline, key)` of pending mailboxes, for expiry in deadline order.
    pending_by_deadline: BTreeSet<(Millis, MailboxKey)>,
    /// `(drop at, key)` of finished mailboxes, for forgetting them.
    tombstones: BTreeSet<(Millis, MailboxKey)>,
    pub sessions: BTreeMap<SessionId, Session>,
    sessions_by_expiry: BTreeSet<(Millis, SessionId)>,
    dedup: HashMap<WriteId, (Millis, Response)>,
    dedup_by_time: BTreeSet<(Millis, WriteId)>,
}

impl StateMachine {
    /// Apply one entry. Returns the command's response and the wake-ups it caused.
    pub fn apply(&mut self, request: &Request) -> (Response, Vec<Wake>) {
        let mut wakes = Vec::new();
        self.advance(self.log_time_after(request), &mut wakes);
        if let Some(write) = request.write
            && let Some((_, response)) = self.dedup.get(&write)
        {
            return (response.clone(), wakes);
        }
        let response = self.execute(&request.command, &mut wakes);
        if let Some(write) = request.write {
            self.dedup.insert(write, (self.now, response.clone()));
            self.dedup_by_time.insert((self.now, write));
        }
        (response, wakes)
    }

    /// Log time once `request` is applied: its stamp if later than log time, but no more than
    /// [`MAX_CLOCK_STEP_MS`] later unless a majority of clocks vouched for the stamp.
    fn log_time_after(&self, request: &Request) -> Millis {
        if request.clock_agreed {
            request.now.max(self.now)
        } else {
            request.now.clamp(self.now, self.now.saturating_add(MAX_CLOCK_STEP_MS))
        }
    }

    /// Move time forward to `now` (if later) and expire what fell due.
    fn advance(&mut self, now: Millis, wakes: &mut Vec<Wake>) {
        self.now = self.now.max(now);
        let now = self.now;
        while let Some((deadline, key)) = self.pending_by_deadline.first().cloned() {
            if deadline > now {
                break;
            }
            self.pending_by_deadline.pop_first();
            if let Some(mailbox) = self.mailboxes.get_mut(&key) {
                mailbox.state = MailboxState::Expired;
                self.tombstones.insert((deadline + TOMBSTONE_RETENTION_MS, key.clone()));
                wakes.push(Wake::Expired(key));
            }
        }
        while let Some((drop_at, key)) = self.tombstones.first().cloned() {
            if drop_at > now {
                break;
            }
            self.tombstones.pop_first();
            self.mailboxes.remove(&key);
        }
        while let Some((expires_at, id)) = self.sessions_by_expiry.first().cloned() {
            if expires_at > now {
                break;
            }
            self.sessions_by_expiry.pop_first();
            self.sessions.remove(&id);
        }
        while let Some((at, write)) = self.dedup_by_time.first().copied() {
            if at + DEDUP_RETENTION_MS > now {
                break;
            }
            self.dedup_by_time.pop_first();
            self.dedup.remove(&write);
        }
    }

    /// Retire a pending mailbox into a tombstone kept until its deadline plus retention.
    fn finish(&mut self, key: &MailboxKey, state: MailboxState) {
        let Some(mailbox) = self.mailboxes.get_mut(key) else { return };
        if mailbox.state == MailboxState::Pending {
            self.pending_by_deadline.remove(&(mailbox.deadline, key.clone()));
            self.tombstones.insert((mailbox.deadline + TOMBSTONE_RETENTION_MS, key.clone()));
        }
        mailbox.state = state;
    }

    fn execute(&mut self, command: &Command, wakes: &mut Vec<Wake>) -> Response {
        let now = self.now;
        match command {
            Command::Tick => Response::Done,
            Command::MailboxCreate { key, session, owner, ttl_ms } => {
                if self.mailboxes.contains_key(key) {
                    return Response::Created(CreateOutcome::AlreadyExists);
                }
                let deadline = now.saturating_add(*ttl_ms);
                self.mailboxes.insert(key.clone(), Mailbox { owner: *owner, session: *session, deadline, state: MailboxState::Pending });
                self.pending_by_deadline.insert((deadline, key.clone()));
                Response::Created(CreateOutcome::Created)
            }
            Command::MailboxDeliver { key, session, value } => {
                let outcome = match self.mailboxes.get(key).map(|m| (&m.state, m.session == *session)) {
                    None => DeliverOutcome::NotFound,
                    // Told before anything about the mailbox's state, which is not theirs to know.
                    Some((_, false)) => DeliverOutcome::WrongSession,
                    Some((state, true)) => match state {
                        MailboxState::Delivered(_) => DeliverOutcome::AlreadyDelivered,
                        MailboxState::Expired => DeliverOutcome::Expired,
                        MailboxState::Deleted => DeliverOutcome::Deleted,
                        MailboxState::Pending => {
                            self.finish(key, MailboxState::Delivered(value.clone()));
                            wakes.push(Wake::Delivered(key.clone(), value.clone()));
                            DeliverOutcome::Delivered
                        }
                    },
                };
                Response::Delivered(outcome)
            }
            Command::MailboxDelete { key } => {
                if matches!(self.mailboxes.get(key).map(|m| &m.state), Some(MailboxState::Pending | MailboxState::Delivered(_))) {
                    self.finish(key, MailboxState::Deleted);
                    wakes.push(Wake::Deleted(key.clone()));
                }
                Response::Done
            }
            Command::SessionCreate { record, ttl_ms } => {
                let expires_at = now.saturating_add(*ttl_ms);
                if let Some(old) = self.sessions.insert(record.id.clone(), Session { record: record.clone(), ttl_ms: *ttl_ms, expires_at })
                {
                    self.sessions_by_expiry.remove(&(old.expires_at, record.id.clone()));
                }
                self.sessions_by_expiry.insert((expires_at, record.id.clone()));
                Response::Session(true)
            }
            Command::SessionSetLogLevel { id, level } => match self.sessions.get_mut(id) {
                Some(session) => {
                    session.record.log_level = *level;
                    Response::Session(true)
                }
                None => Response::Session(false),
            },
            Command::SessionSubscribe { id, uri, subscribed } => match self.sessions.get_mut(id) {
                Some(session) => {
                    if *subscribed {
                        session.record.subscriptions.insert(uri.clone());
                    } else {
                        session.record.subscriptions.remove(uri);
                    }
                    Response::Session(true)
                }
                None => Response::Session(false),
            },
            Command::SessionTouch { id } => match self.sessions.get_mut(id) {
                Some(session) => {
                    self.sessions_by_expiry.remove(&(session.expires_at, id.clone()));
                    session.expires_at = now.saturating_add(session.ttl_ms);
                    self.sessions_by_expiry.insert((session.expires_at, id.clone()));
                    Response::Session(true)
                }
                None => Response::Session(false),
            },
            Command::SessionDelete { id } => match self.sessions.remove(id) {
                Some(session) => {
                    self.sessions_by_expiry.remove(&(session.expires_at, id.clone()));
                    Response::Session(true)
                }
                None => Response::Session(false),
            },
        }
    }

    pub fn mailbox(&self, key: &MailboxKey) -> Option<&Mailbox> {
        self.mailboxes.get(key)
    }

    pub fn session(&self, id: &SessionId) -> Option<&Session> {
        self.sessions.get(id)
    }

    /// Mailboxes still waiting for an answer.
    pub fn pending_mailboxes(&self) -> usize {
        self.pending_by_deadline.len()
    }

    /// The earliest time at which something expires, if anything will (the leader proposes a
    /// `Tick` once its clock passes it).
    pub fn next_expiry(&self) -> Option<Millis> {
        [
            self.pending_by_deadline.first().map(|(t, _)| *t),
            self.tombstones.first().map(|(t, _)| *t),
            self.sessions_by_expiry.first().map(|(t, _)| *t),
            self.dedup_by_time.first().map(|(t, _)| t + DEDUP_RETENTION_MS),
        ]
        .into_iter()
        .flatten()
        .min()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::protocol::types::{ClientCapabilities, Implementation};

    /// `value` as a JSON string.
    fn text(value: &str) -> JsonText {
        JsonText::from(&serde_json::Value::String(value.into()))
    }

    #[test]
    fn delivered_text_that_is_not_json_never_decodes_into_a_command() {
        let good = Command::MailboxDeliver { key: key(1), session: SessionTag::default(), value: text("yes") };
        let bytes = crate::peer::codec::encode(&good);
        assert_eq!(crate::peer::codec::decode::<Command>(&bytes).unwrap(), good);
        let forged = crate::peer::codec::encode(&serde_json::json!({"MailboxDeliver": {"key": key(1), "value": "{not json"}}));
        assert!(crate::peer::codec::decode::<Command>(&forged).is_err());
        assert!(JsonText::try_from("{not json".to_string()).is_err());
        assert_eq!(text("yes").decode(), serde_json::json!("yes"));
    }

    fn key(n: u8) -> MailboxKey {
        MailboxKey::from_bits(n as u128)
    }

    /// An entry of an honest leader, its stamp checked against the voters' clocks.
    fn req(now: Millis, command: Command) -> Request {
        Request { now, clock_agreed: true, write: None, command }
    }

    /// An entry whose stamp no majority vouched for.
    fn unagreed(now: Millis, command: Command) -> Request {
        Request { now, clock_agreed: false, write: None, command }
    }

    fn create(sm: &mut StateMachine, now: Millis, k: u8, ttl_ms: Millis) -> Response {
        sm.apply(&req(now, Command::MailboxCreate { key: key(k), session: SessionTag::default(), owner: 1, ttl_ms })).0
    }

    fn deliver(sm: &mut StateMachine, now: Millis, k: u8, value: &str) -> (Response, Vec<Wake>) {
        sm.apply(&req(now, Command::MailboxDeliver { key: key(k), session: SessionTag::default(), value: text(value) }))
    }

    fn session(id: &str) -> SessionRecord {
        SessionRecord {
            id: SessionId(id.into()),
            protocol_version: crate::protocol::types::ProtocolVersion::V2025_11_25,
            client_info: Implementation { name: "c".into(), version: "1".into(), title: None },
            capabilities: ClientCapabilities::default(),
            log_level: LogLevel::Info,
            subscriptions: Default::default(),
        }
    }

    #[test]
    fn create_is_create_if_absent() {
        let mut sm = StateMachine::default();
        assert_eq!(create(&mut sm, 1000, 1, 500), Response::Created(CreateOutcome::Created));
        deliver(&mut sm, 1001, 1, "v");
        assert_eq!(create(&mut sm, 1002, 1, 500), Response::Created(CreateOutcome::AlreadyExists));
        assert_eq!(sm.mailbox(&key(1)).unwrap().state, MailboxState::Delivered(text("v")));
    }

    #[test]
    fn delivery_is_at_most_once_and_wakes() {
        let mut sm = StateMachine::default();
        create(&mut sm, 1000, 1, 500);
        let (r, wakes) = deliver(&mut sm, 1100, 1, "first");
        assert_eq!(r, Response::Delivered(DeliverOutcome::Delivered));
        assert_eq!(wakes, vec![Wake::Delivered(key(1), text("first"))]);
        let (r, wakes) = deliver(&mut sm, 1200, 1, "second");
        assert_eq!(r, Response::Delivered(DeliverOutcome::AlreadyDelivered));
        assert!(wakes.is_empty());
        assert_eq!(sm.mailbox(&key(1)).unwrap().state, MailboxState::Delivered(text("first")));
        assert_eq!(deliver(&mut sm, 1300, 9, "x").0, Response::Delivered(DeliverOutcome::NotFound));
    }

    #[test]
    fn expiry_follows_log_time_only() {
        let mut sm = StateMachine::default();
        create(&mut sm, 1000, 1, 500);
        // A tick before the deadline changes nothing.
        let (_, wakes) = sm.apply(&req(1499, Command::Tick));
        assert!(wakes.is_empty());
        let (_, wakes) = sm.apply(&req(1500, Command::Tick));
        assert_eq!(wakes, vec![Wake::Expired(key(1))]);
        assert_eq!(deliver(&mut sm, 1501, 1, "late").0, Response::Delivered(DeliverOutcome::Expired));
        assert_eq!(sm.pending_mailboxes(), 0);
    }

    #[test]
    fn a_delivery_stamped_after_the_deadline_is_refused_without_a_tick() {
        let mut sm = StateMachine::default();
        create(&mut sm, 1000, 1, 500);
        let (r, wakes) = deliver(&mut sm, 1600, 1, "late");
        assert_eq!(r, Response::Delivered(DeliverOutcome::Expired));
        assert_eq!(wakes, vec![Wake::Expired(key(1))]);
    }

    #[test]
    fn time_never_goes_back() {
        let mut sm = StateMachine::default();
        create(&mut sm, 1000, 1, 500);
        sm.apply(&req(2000, Command::Tick));
        // An entry from a leader with a slower clock: expiry already happened and stays.
        assert_eq!(deliver(&mut sm, 1100, 1, "v").0, Response::Delivered(DeliverOutcome::Expired));
        assert_eq!(sm.now, 2000);
    }

    #[test]
    fn delete_is_idempotent_and_refuses_later_deliveries() {
        let mut sm = StateMachine::default();
        create(&mut sm, 1000, 1, 500);
        let (_, wakes) = sm.apply(&req(1001, Command::MailboxDelete { key: key(1) }));
        assert_eq!(wakes, vec![Wake::Deleted(key(1))]);
        let (_, wakes) = sm.apply(&req(1002, Command::MailboxDelete { key: key(1) }));
        assert!(wakes.is_empty());
        sm.apply(&req(1003, Command::MailboxDelete { key: key(7) }));
        assert_eq!(deliver(&mut sm, 1004, 1, "v").0, Response::Delivered(DeliverOutcome::Deleted));
        assert!(sm.mailbox(&key(7)).is_none(), "deleting an unknown key creates nothing");
    }

    #[test]
    fn tombstones_are_forgotten_after_retention() {
        let mut sm = StateMachine::default();
        create(&mut sm, 1000, 1, 500);
        deliver(&mut sm, 1100, 1, "v");
        sm.apply(&req(1500 + TOMBSTONE_RETENTION_MS - 1, Command::Tick));
        assert!(sm.mailbox(&key(1)).is_some());
        sm.apply(&req(1500 + TOMBSTONE_RETENTION_MS, Command::Tick));
        assert!(sm.mailbox(&key(1)).is_none());
        assert_eq!(sm.next_expiry(), None);
    }

    #[test]
    fn retried_writes_get_the_first_outcome() {
        let mut sm = StateMachine::default();
        create(&mut sm, 1000, 1, 500);
        let write = Some(WriteId { origin: 2, serial: 9 });
        let deliver = Command::MailboxDeliver { key: key(1), session: SessionTag::default(), value: text("v") };
        let first = sm.apply(&Request { now: 1100, clock_agreed: true, write, command: deliver.clone() }).0;
        let retry = sm.apply(&Request { now: 1200, clock_agreed: true, write, command: deliver.clone() }).0;
        assert_eq!(first, Response::Delivered(DeliverOutcome::Delivered));
        assert_eq!(retry, first, "a retry is not reported as a duplicate of itself");
        let other =
            sm.apply(&Request { now: 1300, clock_agreed: true, write: Some(WriteId { origin: 2, serial: 10 }), command: deliver }).0;
        assert_eq!(other, Response::Delivered(DeliverOutcome::AlreadyDelivered));
    }

    #[test]
    fn sessions_expire_by_log_time_and_touch_extends_them() {
        let mut sm = StateMachine::default();
        let id = SessionId("s".into());
        sm.apply(&req(1000, Command::SessionCreate { record: session("s"), ttl_ms: 100 }));
        sm.apply(&req(1090, Command::SessionTouch { id: id.clone() }));
        sm.apply(&req(1150, Command::Tick));
        assert!(sm.session(&id).is_some(), "touched at 1090, lives to 1190");
        assert_eq!(sm.apply(&req(1160, Command::SessionSetLogLevel { id: id.clone(), level: LogLevel::Debug })).0, Response::Session(true));
        assert_eq!(sm.session(&id).unwrap().record.log_level, LogLevel::Debug);
        let subscribe = |on| Command::SessionSubscribe { id: id.clone(), uri: "test://r".into(), subscribed: on };
        sm.apply(&req(1161, subscribe(true)));
        assert!(sm.session(&id).unwrap().record.subscriptions.contains("test://r"));
        sm.apply(&req(1162, subscribe(false)));
        assert!(sm.session(&id).unwrap().record.subscriptions.is_empty());
        sm.apply(&req(1190, Command::Tick));
        assert!(sm.session(&id).is_none());
        assert_eq!(sm.apply(&req(1200, Command::SessionTouch { id: id.clone() })).0, Response::Session(false));
        assert_eq!(sm.apply(&req(1200, Command::SessionDelete { id })).0, Response::Session(false));
    }

    #[test]
    fn replicas_applying_the_same_log_agree() {
        let log: Vec<Request> = (0..200u64)
            .map(|i| {
                let k = key((i % 17) as u8);
                let command = match i % 4 {
                    0 => Command::MailboxCreate { key: k, session: SessionTag::default(), owner: i % 3, ttl_ms: 50 + i },
                    1 => Command::MailboxDeliver { key: k, session: SessionTag::default(), value: text(&i.to_string()) },
                    2 => Command::MailboxDelete { key: k },
                    _ => Command::Tick,
                };
                Request { now: 1000 + i * 7, clock_agreed: i % 5 == 0, write: Some(WriteId { origin: i % 3, serial: i }), command }
            })
            .collect();
        let (mut a, mut b) = (StateMachine::default(), StateMachine::default());
        let ra: Vec<_> = log.iter().map(|r| a.apply(r)).collect();
        let rb: Vec<_> = log.iter().map(|r| b.apply(r)).collect();
        assert_eq!(ra, rb);
        assert_eq!(a, b);
        // A snapshot round trip is the same state.
        let restored: StateMachine = rmp_serde::from_slice(&rmp_serde::to_vec_named(&a).unwrap()).unwrap();
        assert_eq!(restored, a);
    }

    #[test]
    fn a_jumped_stamp_moves_log_time_one_step_only() {
        let mut sm = StateMachine::default();
        let start = 1_000_000;
        sm.apply(&req(start, Command::SessionCreate { record: session("s"), ttl_ms: 30 * 60 * 1000 }));
        create(&mut sm, start, 1, 10 * 60 * 1000);
        // A leader whose clock jumped an hour ahead proposes, without a majority behind it.
        let hour = 60 * 60 * 1000;
        for i in 0..10 {
            let (_, wakes) = sm.apply(&unagreed(start + hour + i, Command::Tick));
            assert!(wakes.is_empty(), "entry {i} expired {wakes:?}");
        }
        assert!(sm.now <= start + 10 * MAX_CLOCK_STEP_MS, "log time {} ran ahead", sm.now - start);
        assert!(sm.session(&SessionId("s".into())).is_some(), "the session did not expire early");
        assert_eq!(sm.mailbox(&key(1)).unwrap().state, MailboxState::Pending);
        // Within a step, an unchecked stamp is taken as it is; it never moves time back.
        let mut sm = StateMachine::default();
        sm.apply(&req(start, Command::Tick));
        sm.apply(&unagreed(start + MAX_CLOCK_STEP_MS - 1, Command::Tick));
        assert_eq!(sm.now, start + MAX_CLOCK_STEP_MS - 1);
        sm.apply(&unagreed(start, Command::Tick));
        assert_eq!(sm.now, start + MAX_CLOCK_STEP_MS - 1);
    }

    #[test]
    fn after_a_real_idle_period_an_agreed_stamp_expires_what_fell_due() {
        let mut sm = StateMachine::default();
        let start = 1_000_000;
        sm.apply(&req(start, Command::SessionCreate { record: session("s"), ttl_ms: 5 * 60 * 1000 }));
        create(&mut sm, start, 1, 60 * 1000);
        // Ten quiet minutes, then one entry whose stamp the voters' clocks vouch for.
        let (_, wakes) = sm.apply(&req(start + 10 * 60 * 1000, Command::Tick));
        assert_eq!(wakes, vec![Wake::Expired(key(1))]);
        assert!(sm.session(&SessionId("s".into())).is_none());
        assert_eq!(sm.now, start + 10 * 60 * 1000);
        // Unchecked, the same entry would have moved time one step only.
        let mut sm = StateMachine::default();
        sm.apply(&req(start, Command::Tick));
        sm.apply(&unagreed(start + 10 * 60 * 1000, Command::Tick));
        assert_eq!(sm.now, start + MAX_CLOCK_STEP_MS);
    }

    #[test]
    fn entries_of_older_versions_decode_as_unagreed() {
        #[derive(Serialize)]
        struct OldRequest {
            now: Millis,
            write: Option<WriteId>,
            command: Command,
        }
        let bytes = crate::peer::codec::encode(&OldRequest { now: 5, write: None, command: Command::Tick });
        let decoded: Request = crate::peer::codec::decode(&bytes).unwrap();
        assert_eq!(decoded, unagreed(5, Command::Tick));
    }
}
