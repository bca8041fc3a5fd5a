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

use crate::mailbox::{Addressee, CreateOutcome, DeliverOutcome, MailboxKey, NodeId, SessionTag};
use crate::mcp_tasks::table::TaskTable;
use crate::mcp_tasks::{TaskEvent, TaskId, TaskOutcome, TaskRefusal};
pub use crate::protocol::json_text::JsonText;
use crate::protocol::types::LogLevel;
use crate::session::{LimitReached, SessionId, SessionRecord, SubscriptionLimits};
use serde::{Deserialize, Serialize};
use std::collections::{BTreeMap, BTreeSet, HashMap, VecDeque};
use std::sync::Arc;

/// A table keyed by what this service makes (mailbox keys, write serials): no one else chooses
/// the keys, so a fast hash serves (SipHash was a tenth of a snapshot build's CPU).
type FastMap<K, V> = HashMap<K, V, foldhash::fast::RandomState>;

pub mod snapshot;
mod write_outcomes;

use write_outcomes::{Remembered, WriteOutcomes};

/// Milliseconds since the Unix epoch, as read by a leader's clock.
pub type Millis = u64;

/// How long the record of a finished mailbox outlives its deadline. Until the deadline it tells
/// a second answer `AlreadyDelivered`/`Deleted` (and keeps it from being kept as an early
/// delivery); after it, an answer is late whatever became of the mailbox, and its addressee's
/// deadline says so (`Expired`) once the record is gone. The margin covers owners whose clocks
/// (which set the sealed deadline) run ahead of log time. A delivered value goes sooner, once
/// its owner took it (`MailboxRelease`).
pub const TOMBSTONE_RETENTION_MS: Millis = 60 * 1000;
/// How long a tombstone outlives the release of its taken value, if its deadline is later. It
/// refuses the retries of an answer (a client resending it, a 2026 retry sent again) with
/// `AlreadyDelivered`; a copy that comes later still, before the deadline, is kept as an early
/// delivery no create will take, and goes at the deadline. Without this, at the default
/// timeouts every round trip's record stayed six minutes, the bulk of a replica's memory and
/// of every snapshot under load. Half a minute still covers a client resending an answer it
/// got no acknowledgement for (one is acknowledged once committed, in milliseconds); a copy
/// later than that costs a record until the deadline and changes no outcome. It was a minute:
/// at thousands of round trips a second those tombstones were most of the state, and a
/// snapshot build holds the state twice.
pub const TAKEN_RETENTION_MS: Millis = 30 * 1000;
/// Most keys one `MailboxRelease` names.
pub const MAX_RELEASE_BATCH: usize = 1024;
/// How long a write's outcome is remembered for a retry of the same write: a write is retried
/// only within its write timeout (5 s), so four times that is ample, and the table (one entry
/// per write, a good part of the state at thousands of writes a second) stays small.
pub const DEDUP_RETENTION_MS: Millis = 20 * 1000;
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
        /// Whom to keep the value for if the create has not been applied yet (absent in entries
        /// of older versions: `NotFound`).
        #[serde(default)]
        addressee: Option<Addressee>,
    },
    MailboxDelete {
        key: MailboxKey,
    },
    /// The owners of these delivered mailboxes took their values: drop the values, keep the
    /// tombstones (a late answer is still told `AlreadyDelivered`). Other states are left as
    /// they are.
    MailboxRelease {
        keys: Vec<MailboxKey>,
    },
    /// Refused (nothing stored) when `max_sessions` live sessions exist already. The record is
    /// boxed: inline it would make every log entry, most of them mailbox entries, half again
    /// as large (the same encoding either way).
    SessionCreate {
        record: Box<SessionRecord>,
        ttl_ms: Millis,
        max_sessions: usize,
    },
    SessionSetLogLevel {
        id: SessionId,
        level: LogLevel,
    },
    /// Subscribing is refused (nothing changes) if it would break `limits`.
    SessionSubscribe {
        id: SessionId,
        uri: String,
        subscribed: bool,
        limits: SubscriptionLimits,
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
    /// A task of the MCP Tasks extension, run by `owner` (see `mcp_tasks`). Refused beyond
    /// `max_tasks` live tasks.
    TaskCreate {
        id: TaskId,
        owner: NodeId,
        incarnation: u64,
        ttl_ms: Millis,
        poll_ms: Millis,
        max_tasks: usize,
    },
    /// The task's handler waits on these input requests (`{method, params}` by key).
    TaskAsk {
        id: TaskId,
        requests: Vec<(String, JsonText)>,
    },
    /// The client's answers to a task's input requests.
    TaskAnswer {
        id: TaskId,
        responses: Vec<(String, JsonText)>,
    },
    TaskCancel {
        id: TaskId,
    },
    TaskFinish {
        id: TaskId,
        outcome: TaskOutcome,
    },
    /// `node` is gone, or restarted as incarnation `survivor`: its other live tasks fail.
    TaskOwnerLost {
        node: NodeId,
        survivor: Option<u64>,
    },
    /// Writes proposed together as one entry (see `super::batcher`): each applied in turn at
    /// the entry's time, as a write of its own (its id deduplicated, its own response).
    Batch {
        writes: Vec<BatchedWrite>,
    },
}

impl Command {
    /// How many writes the command carries: a batch's, or one.
    pub fn writes(&self) -> usize {
        match self {
            Command::Batch { writes } => writes.len(),
            _ => 1,
        }
    }
}

/// One write of a [`Command::Batch`].
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct BatchedWrite {
    pub write: Option<WriteId>,
    pub command: Command,
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
    /// Not applied: it would have broken this limit.
    Refused(LimitReached),
    /// A task operation: the keys it took (answers), or why it changed nothing.
    Task(Result<Vec<String>, TaskRefusal>),
    /// How many tasks a lost owner's loss failed.
    TasksFailed(usize),
    /// A [`Command::Batch`]'s responses, one per write in its order.
    Batch(Vec<Response>),
}

/// The responses nearly every remembered write has (a create's, a delivery's): a remembered
/// write keeps its place here instead (a snapshot writes the same).
pub(super) static COMMON_RESPONSES: [Response; 11] = [
    Response::Done,
    Response::Created(CreateOutcome::Created),
    Response::Created(CreateOutcome::AlreadyExists),
    Response::Delivered(DeliverOutcome::Delivered),
    Response::Delivered(DeliverOutcome::AlreadyDelivered),
    Response::Delivered(DeliverOutcome::Expired),
    Response::Delivered(DeliverOutcome::Deleted),
    Response::Delivered(DeliverOutcome::NotFound),
    Response::Delivered(DeliverOutcome::WrongSession),
    Response::Session(true),
    Response::Session(false),
];

/// A change waiters on some node may be parked on.
#[derive(Debug, Clone, PartialEq)]
pub enum Wake {
    Delivered(MailboxKey, JsonText),
    Expired(MailboxKey),
    Deleted(MailboxKey),
    /// For the owner of a task: an answer, or the client's cancellation.
    Task(TaskEvent),
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub enum MailboxState {
    Pending,
    /// An answer that came before the mailbox's create, kept for it until the deadline the
    /// request's sealed id gave.
    Early(JsonText),
    /// Delivered, the value not taken by its owner yet.
    Delivered(JsonText),
    /// Delivered, and the owner took the value: only the tombstone is left.
    Taken,
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

/// What a mailbox that was answered and taken, or expired, leaves for late answers: whose
/// session it was and how it ended. Under load nearly every record of the state is one of
/// these, so it keeps no more: 40 bytes a record in its map, against 80 for a [`Mailbox`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct Tombstone {
    pub session: SessionTag,
    pub ending: Ending,
}

/// How a mailbox with a [`Tombstone`] ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub enum Ending {
    Taken,
    Expired,
}

impl Ending {
    /// The state a reader of the mailbox sees.
    fn state(self) -> &'static MailboxState {
        static TAKEN: MailboxState = MailboxState::Taken;
        static EXPIRED: MailboxState = MailboxState::Expired;
        match self {
            Ending::Taken => &TAKEN,
            Ending::Expired => &EXPIRED,
        }
    }
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Session {
    /// Shared with the requests that read it: a read hands out a pointer, and a change copies
    /// the (small) record only while a request still holds the old one.
    #[serde(with = "shared")]
    pub record: Arc<SessionRecord>,
    pub ttl_ms: Millis,
    pub expires_at: Millis,
}

/// Serde of an `Arc<T>` as the `T` it points to (serde's own needs its `rc` feature, which
/// would rebuild every crate that uses serde).
mod shared {
    use serde::{Deserialize, Deserializer, Serialize, Serializer};
    use std::sync::Arc;

    pub fn serialize<T: Serialize, S: Serializer>(value: &Arc<T>, serializer: S) -> Result<S::Ok, S::Error> {
        T::serialize(value, serializer)
    }

    pub fn deserialize<'de, T: Deserialize<'de>, D: Deserializer<'de>>(deserializer: D) -> Result<Arc<T>, D::Error> {
        T::deserialize(deserializer).map(Arc::new)
    }
}

/// Record counts of the replicated state ([`StateMachine::sizes`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct StateSizes {
    /// Every mailbox record: pending, early, delivered, or a tombstone.
    pub mailboxes: usize,
    pub pending: usize,
    /// Finished mailboxes kept to refuse late answers.
    pub tombstones: usize,
    pub sessions: usize,
    /// Remembered write outcomes, for retried writes.
    pub dedup: usize,
    pub tasks: usize,
}

/// Everything replicated, and what a snapshot holds.
///
/// A mailbox's record is in [`Self::mailboxes`] while it waits or holds a value (pending, an
/// early answer, a delivered value not taken yet) or was deleted, and in [`Self::tombstones`]
/// once its value was taken or it expired. Under load nearly every record is a tombstone, and
/// a snapshot build holds a second copy of the state: so tombstones are compact, and ordered by
/// a deque rather than a tree (they are made in drop order, nearly always).
#[derive(Debug, Clone, PartialEq, Default)]
pub struct StateMachine {
    /// The latest leader time seen in the log; never goes back.
    pub now: Millis,
    /// Hashed, not ordered: looked up on every mailbox write (order lives in the sets below).
    mailboxes: FastMap<MailboxKey, Mailbox>,
    /// `(deadline, key)` of pending mailboxes and early answers, for expiry in deadline order.
    pending_by_deadline: BTreeSet<(Millis, MailboxKey)>,
    /// `(drop at, key)` of the other records of `mailboxes` (delivered values not taken yet,
    /// deleted mailboxes): they go at their deadline plus [`TOMBSTONE_RETENTION_MS`].
    held_by_drop: BTreeSet<(Millis, MailboxKey)>,
    tombstones: FastMap<MailboxKey, Tombstone>,
    /// `(drop at, key)` of every tombstone, in that order.
    tombstones_by_drop: VecDeque<(Millis, MailboxKey)>,
    pub sessions: BTreeMap<SessionId, Session>,
    sessions_by_expiry: BTreeSet<(Millis, SessionId)>,
    /// The outcomes of recent writes, for their retries.
    dedup: WriteOutcomes,
    /// Tasks of the MCP Tasks extension.
    pub tasks: TaskTable,
}

impl StateMachine {
    /// SHA-256 (hex) of the whole state in a canonical order: replicas at the same applied
    /// index must agree on it (a fault campaign's checker compares them).
    pub fn digest(&self) -> String {
        use sha2::{Digest, Sha256};
        let mut mailboxes: Vec<_> = self.mailboxes.iter().collect();
        mailboxes.sort_unstable_by(|a, b| a.0.cmp(b.0));
        let mut tombstones: Vec<_> = self.tombstones.iter().collect();
        tombstones.sort_unstable_by(|a, b| a.0.cmp(b.0));
        let dedup: Vec<_> = self.dedup.iter().collect();
        let canonical = (
            self.now,
            mailboxes,
            &self.pending_by_deadline,
            &self.held_by_drop,
            tombstones,
            &self.tombstones_by_drop,
            &self.sessions,
            &self.sessions_by_expiry,
            dedup,
            self.tasks.canonical(),
        );
        Sha256::digest(crate::peer::codec::encode(&canonical)).iter().map(|b| format!("{b:02x}")).collect()
    }

    /// Apply one entry. Returns the command's response and the wake-ups it caused.
    pub fn apply(&mut self, request: &Request) -> (Response, Vec<Wake>) {
        let mut wakes = Vec::new();
        self.advance(self.log_time_after(request), &mut wakes);
        let response = self.write_once(request.write, &request.command, &mut wakes);
        (response, wakes)
    }

    /// Execute `command`, or, if `write` was applied before (a retry), answer its first outcome.
    fn write_once(&mut self, write: Option<WriteId>, command: &Command, wakes: &mut Vec<Wake>) -> Response {
        if let Some(write) = write
            && let Some(remembered) = self.dedup.get(write)
        {
            return remembered.response();
        }
        let response = self.execute(command, wakes);
        if let Some(write) = write {
            self.dedup.remember(write, Remembered::of(&response), self.now);
        }
        response
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
            // An early delivery whose create never came expires like a pending mailbox.
            if let Some(mailbox) = self.mailboxes.remove(&key) {
                self.bury(key.clone(), Tombstone { session: mailbox.session, ending: Ending::Expired }, deadline + TOMBSTONE_RETENTION_MS);
                wakes.push(Wake::Expired(key));
            }
        }
        while let Some((drop_at, key)) = self.held_by_drop.first().cloned() {
            if drop_at > now {
                break;
            }
            self.held_by_drop.pop_first();
            self.mailboxes.remove(&key);
        }
        while let Some((drop_at, _)) = self.tombstones_by_drop.front() {
            if *drop_at > now {
                break;
            }
            if let Some((_, key)) = self.tombstones_by_drop.pop_front() {
                self.tombstones.remove(&key);
            }
        }
        while let Some((expires_at, id)) = self.sessions_by_expiry.first().cloned() {
            if expires_at > now {
                break;
            }
            self.sessions_by_expiry.pop_first();
            self.sessions.remove(&id);
        }
        self.tasks.expire(now);
        self.dedup.forget_before(now);
    }

    /// Settle a mailbox that waits or holds a value (delivered, deleted): kept until its deadline
    /// plus retention.
    fn finish(&mut self, key: &MailboxKey, state: MailboxState) {
        let Some(mailbox) = self.mailboxes.get_mut(key) else { return };
        if matches!(mailbox.state, MailboxState::Pending | MailboxState::Early(_)) {
            self.pending_by_deadline.remove(&(mailbox.deadline, key.clone()));
            self.held_by_drop.insert((mailbox.deadline + TOMBSTONE_RETENTION_MS, key.clone()));
        }
        mailbox.state = state;
    }

    /// Keep `tombstone` for `key` until `drop_at`. An expiry's and a release's drop times follow
    /// log time, so its place is at or near the end (a release near its deadline drops earlier
    /// than [`TAKEN_RETENTION_MS`] after it).
    fn bury(&mut self, key: MailboxKey, tombstone: Tombstone, drop_at: Millis) {
        self.tombstones.insert(key.clone(), tombstone);
        insert_in_order(&mut self.tombstones_by_drop, (drop_at, key));
    }

    fn execute(&mut self, command: &Command, wakes: &mut Vec<Wake>) -> Response {
        let now = self.now;
        match command {
            Command::Tick => Response::Done,
            Command::MailboxCreate { key, session, owner, ttl_ms } => {
                if self.tombstones.contains_key(key) {
                    return Response::Created(CreateOutcome::AlreadyExists);
                }
                let early = match self.mailboxes.get(key) {
                    None => None,
                    Some(Mailbox { state: MailboxState::Early(value), session: s, owner: o, deadline }) => {
                        // Kept only for the session and owner the create names: anything else
                        // was not this request's answer.
                        let value = (s == session && o == owner).then(|| value.clone());
                        self.pending_by_deadline.remove(&(*deadline, key.clone()));
                        value
                    }
                    Some(_) => return Response::Created(CreateOutcome::AlreadyExists),
                };
                let deadline = now.saturating_add(*ttl_ms);
                self.mailboxes.insert(key.clone(), Mailbox { owner: *owner, session: *session, deadline, state: MailboxState::Pending });
                self.pending_by_deadline.insert((deadline, key.clone()));
                if let Some(value) = early {
                    self.finish(key, MailboxState::Delivered(value.clone()));
                    wakes.push(Wake::Delivered(key.clone(), value));
                }
                Response::Created(CreateOutcome::Created)
            }
            Command::MailboxDeliver { key, session, value, addressee } => {
                let record = match (self.mailboxes.get(key), self.tombstones.get(key)) {
                    (Some(m), _) => Some((&m.state, m.session == *session)),
                    (None, Some(t)) => Some((t.ending.state(), t.session == *session)),
                    (None, None) => None,
                };
                let outcome = match record {
                    None => match addressee {
                        None => DeliverOutcome::NotFound,
                        Some(to) if to.deadline_ms <= now => DeliverOutcome::Expired,
                        Some(to) => {
                            let early = Mailbox {
                                owner: to.owner,
                                session: *session,
                                deadline: to.deadline_ms,
                                state: MailboxState::Early(value.clone()),
                            };
                            self.mailboxes.insert(key.clone(), early);
                            self.pending_by_deadline.insert((to.deadline_ms, key.clone()));
                            DeliverOutcome::Delivered
                        }
                    },
                    // Told before anything about the mailbox's state, which is not theirs to know.
                    Some((_, false)) => DeliverOutcome::WrongSession,
                    Some((state, true)) => match state {
                        MailboxState::Delivered(_) | MailboxState::Taken | MailboxState::Early(_) => DeliverOutcome::AlreadyDelivered,
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
                if matches!(
                    self.mailboxes.get(key).map(|m| &m.state),
                    Some(MailboxState::Pending | MailboxState::Early(_) | MailboxState::Delivered(_))
                ) {
                    self.finish(key, MailboxState::Deleted);
                    wakes.push(Wake::Deleted(key.clone()));
                }
                Response::Done
            }
            Command::MailboxRelease { keys } => {
                for key in keys {
                    if let Some(mailbox) = self.mailboxes.get(key)
                        && matches!(mailbox.state, MailboxState::Delivered(_))
                    {
                        let until_deadline = mailbox.deadline + TOMBSTONE_RETENTION_MS;
                        let tombstone = Tombstone { session: mailbox.session, ending: Ending::Taken };
                        self.mailboxes.remove(key);
                        self.held_by_drop.remove(&(until_deadline, key.clone()));
                        self.bury(key.clone(), tombstone, now.saturating_add(TAKEN_RETENTION_MS).min(until_deadline));
                    }
                }
                Response::Done
            }
            Command::SessionCreate { record, ttl_ms, max_sessions } => {
                // Decided here, in log order, on every replica: the count is exact cluster-wide
                // (creates racing through different nodes are serialized by the log), and the
                // limit travels in the command, so replicas configured differently still agree.
                if !self.sessions.contains_key(&record.id) && self.sessions.len() >= *max_sessions {
                    return Response::Refused(LimitReached::Sessions(*max_sessions));
                }
                let expires_at = now.saturating_add(*ttl_ms);
                let session = Session { record: Arc::new(SessionRecord::clone(record)), ttl_ms: *ttl_ms, expires_at };
                if let Some(old) = self.sessions.insert(record.id.clone(), session) {
                    self.sessions_by_expiry.remove(&(old.expires_at, record.id.clone()));
                }
                self.sessions_by_expiry.insert((expires_at, record.id.clone()));
                Response::Session(true)
            }
            Command::SessionSetLogLevel { id, level } => match self.sessions.get_mut(id) {
                Some(session) => {
                    Arc::make_mut(&mut session.record).log_level = *level;
                    Response::Session(true)
                }
                None => Response::Session(false),
            },
            Command::SessionSubscribe { id, uri, subscribed, limits } => match self.sessions.get_mut(id) {
                Some(session) if !*subscribed => {
                    if session.record.subscriptions.contains(uri) {
                        Arc::make_mut(&mut session.record).subscriptions.remove(uri);
                    }
                    Response::Session(true)
                }
                Some(session) => match session.record.check_subscribe(uri, *limits) {
                    Ok(true) => {
                        Arc::make_mut(&mut session.record).subscriptions.insert(uri.clone());
                        Response::Session(true)
                    }
                    Ok(false) => Response::Session(true),
                    Err(limit) => Response::Refused(limit),
                },
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
            Command::TaskCreate { id, owner, incarnation, ttl_ms, poll_ms, max_tasks } => {
                Response::Task(self.tasks.create(now, *id, *owner, *incarnation, *ttl_ms, *poll_ms, *max_tasks).map(|()| Vec::new()))
            }
            Command::TaskAsk { id, requests } => Response::Task(self.tasks.ask(now, id, requests).map(|()| Vec::new())),
            Command::TaskAnswer { id, responses } => {
                let mut events = Vec::new();
                let taken = self.tasks.answer(now, id, responses, &mut events);
                wakes.extend(events.into_iter().map(Wake::Task));
                Response::Task(taken)
            }
            Command::TaskCancel { id } => {
                let mut events = Vec::new();
                let cancelled = self.tasks.cancel(now, id, &mut events);
                wakes.extend(events.into_iter().map(Wake::Task));
                Response::Task(cancelled.map(|()| Vec::new()))
            }
            Command::TaskFinish { id, outcome } => Response::Task(self.tasks.finish(now, id, outcome).map(|()| Vec::new())),
            Command::TaskOwnerLost { node, survivor } => Response::TasksFailed(self.tasks.owner_lost(now, *node, *survivor)),
            Command::Batch { writes } => {
                Response::Batch(writes.iter().map(|batched| self.write_once(batched.write, &batched.command, wakes)).collect())
            }
            Command::SessionDelete { id } => match self.sessions.remove(id) {
                Some(session) => {
                    self.sessions_by_expiry.remove(&(session.expires_at, id.clone()));
                    Response::Session(true)
                }
                None => Response::Session(false),
            },
        }
    }

    /// The record of a mailbox that waits, holds a value or was deleted (not a tombstone's).
    pub fn mailbox(&self, key: &MailboxKey) -> Option<&Mailbox> {
        self.mailboxes.get(key)
    }

    /// The state of every mailbox the state knows of, tombstones included.
    pub fn states(&self) -> impl Iterator<Item = &MailboxState> {
        self.mailboxes.values().map(|m| &m.state).chain(self.tombstones.values().map(|t| t.ending.state()))
    }

    /// The state of a mailbox the state knows of, tombstones included.
    pub fn state_of(&self, key: &MailboxKey) -> Option<&MailboxState> {
        match self.mailboxes.get(key) {
            Some(mailbox) => Some(&mailbox.state),
            None => self.tombstones.get(key).map(|t| t.ending.state()),
        }
    }

    pub fn session(&self, id: &SessionId) -> Option<&Session> {
        self.sessions.get(id)
    }

    /// Mailboxes still waiting for an answer.
    pub fn pending_mailboxes(&self) -> usize {
        self.pending_by_deadline.len()
    }

    /// How many records each part of the state holds (what a replica's memory and every
    /// snapshot grow with).
    pub fn sizes(&self) -> StateSizes {
        StateSizes {
            mailboxes: self.mailboxes.len() + self.tombstones.len(),
            pending: self.pending_by_deadline.len(),
            tombstones: self.held_by_drop.len() + self.tombstones.len(),
            sessions: self.sessions.len(),
            dedup: self.dedup.len(),
            tasks: self.tasks.len(),
        }
    }

    /// The earliest time at which something expires, if anything will (the leader proposes a
    /// `Tick` once its clock passes it).
    pub fn next_expiry(&self) -> Option<Millis> {
        [
            self.pending_by_deadline.first().map(|(t, _)| *t),
            self.held_by_drop.first().map(|(t, _)| *t),
            self.tombstones_by_drop.front().map(|(t, _)| *t),
            self.sessions_by_expiry.first().map(|(t, _)| *t),
            self.dedup.next_expiry(),
        ]
        .into_iter()
        .flatten()
        .min()
    }
}

/// Put `entry` into `queue`, which is in order, where a tree would keep it: at the end when it
/// comes in order (times follow log time, so nearly always), else after the last smaller one.
fn insert_in_order<T: Ord>(queue: &mut VecDeque<T>, entry: T) {
    let place = match queue.back() {
        Some(last) if *last > entry => queue.partition_point(|queued| *queued < entry),
        _ => queue.len(),
    };
    queue.insert(place, entry);
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::protocol::types::{CapabilityFlags, Implementation};

    fn encode(sm: &StateMachine) -> Vec<u8> {
        snapshot::encode(sm)
    }

    /// `value` as a JSON string.
    fn text(value: &str) -> JsonText {
        JsonText::from(&serde_json::Value::String(value.into()))
    }

    #[test]
    fn delivered_text_that_is_not_json_never_decodes_into_a_command() {
        let good = Command::MailboxDeliver { key: key(1), session: SessionTag::default(), value: text("yes"), addressee: None };
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
        sm.apply(&req(now, Command::MailboxDeliver { key: key(k), session: SessionTag::default(), value: text(value), addressee: None }))
    }

    fn session(id: &str) -> SessionRecord {
        SessionRecord {
            id: SessionId(id.into()),
            protocol_version: crate::protocol::types::ProtocolVersion::V2025_11_25,
            client_info: Implementation { name: "c".into(), version: "1".into(), title: None },
            capabilities: CapabilityFlags::default(),
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
        assert_eq!(sm.state_of(&key(1)), Some(&MailboxState::Delivered(text("v"))));
    }

    fn deliver_early(
        sm: &mut StateMachine,
        now: Millis,
        k: u8,
        session: SessionTag,
        owner: NodeId,
        deadline_ms: Millis,
        value: &str,
    ) -> Response {
        let addressee = Some(Addressee { owner, deadline_ms });
        sm.apply(&req(now, Command::MailboxDeliver { key: key(k), session, value: text(value), addressee })).0
    }

    #[test]
    fn an_answer_before_its_create_is_kept_for_it_and_wakes_the_owner_at_the_create() {
        let mut sm = StateMachine::default();
        let tag = SessionTag::default();
        assert_eq!(deliver_early(&mut sm, 1000, 1, tag, 1, 5000, "early"), Response::Delivered(DeliverOutcome::Delivered));
        assert_eq!(sm.state_of(&key(1)), Some(&MailboxState::Early(text("early"))));
        // First value wins: a second answer is a duplicate, whether it names an addressee or not.
        assert_eq!(deliver_early(&mut sm, 1001, 1, tag, 1, 5000, "second"), Response::Delivered(DeliverOutcome::AlreadyDelivered));
        assert_eq!(deliver(&mut sm, 1002, 1, "third").0, Response::Delivered(DeliverOutcome::AlreadyDelivered));
        let (r, wakes) = sm.apply(&req(1003, Command::MailboxCreate { key: key(1), session: tag, owner: 1, ttl_ms: 500 }));
        assert_eq!(r, Response::Created(CreateOutcome::Created));
        assert_eq!(wakes, vec![Wake::Delivered(key(1), text("early"))]);
        let mailbox = sm.mailbox(&key(1)).unwrap();
        assert_eq!((mailbox.state.clone(), mailbox.deadline), (MailboxState::Delivered(text("early")), 1503), "the create's deadline");
        assert_eq!(sm.pending_mailboxes(), 0);
        assert_eq!(create(&mut sm, 1004, 1, 500), Response::Created(CreateOutcome::AlreadyExists));
    }

    #[test]
    fn an_early_answer_from_another_session_or_for_another_owner_is_dropped_at_the_create() {
        let (ours, theirs) = (SessionTag([1; 16]), SessionTag([2; 16]));
        for (session, owner) in [(theirs, 1), (ours, 2)] {
            let mut sm = StateMachine::default();
            deliver_early(&mut sm, 1000, 1, session, owner, 5000, "foreign");
            let (r, wakes) = sm.apply(&req(1001, Command::MailboxCreate { key: key(1), session: ours, owner: 1, ttl_ms: 500 }));
            assert_eq!(r, Response::Created(CreateOutcome::Created));
            assert!(wakes.is_empty());
            assert_eq!(sm.state_of(&key(1)), Some(&MailboxState::Pending), "open for the real answer");
            assert_eq!(sm.pending_mailboxes(), 1);
            let real = Command::MailboxDeliver { key: key(1), session: ours, value: text("real"), addressee: None };
            assert_eq!(sm.apply(&req(1002, real)).0, Response::Delivered(DeliverOutcome::Delivered));
        }
    }

    #[test]
    fn an_early_answer_whose_create_never_comes_expires_at_its_deadline_and_a_late_one_keeps_nothing() {
        let mut sm = StateMachine::default();
        let tag = SessionTag::default();
        deliver_early(&mut sm, 1000, 1, tag, 1, 2000, "early");
        sm.apply(&req(2000, Command::Tick));
        assert_eq!(sm.state_of(&key(1)), Some(&MailboxState::Expired));
        assert_eq!(create(&mut sm, 2001, 1, 500), Response::Created(CreateOutcome::AlreadyExists), "too late to take it");
        // An answer whose deadline has passed in log time keeps nothing.
        assert_eq!(deliver_early(&mut sm, 2002, 2, tag, 1, 2002, "late"), Response::Delivered(DeliverOutcome::Expired));
        assert!(sm.state_of(&key(2)).is_none());
        // Without an addressee (entries of older versions) nothing is kept either.
        assert_eq!(deliver(&mut sm, 2003, 3, "x").0, Response::Delivered(DeliverOutcome::NotFound));
        sm.apply(&req(2000 + TOMBSTONE_RETENTION_MS, Command::Tick));
        assert!(sm.state_of(&key(1)).is_none(), "its tombstone goes with the others");
    }

    #[test]
    fn the_owner_deleting_an_early_answer_leaves_a_tombstone() {
        let mut sm = StateMachine::default();
        deliver_early(&mut sm, 1000, 1, SessionTag::default(), 1, 5000, "early");
        sm.apply(&req(1001, Command::MailboxDelete { key: key(1) }));
        assert_eq!(sm.state_of(&key(1)), Some(&MailboxState::Deleted));
        assert_eq!(sm.pending_mailboxes(), 0);
        assert_eq!(create(&mut sm, 1002, 1, 500), Response::Created(CreateOutcome::AlreadyExists));
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
        assert_eq!(sm.state_of(&key(1)), Some(&MailboxState::Delivered(text("first"))));
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
        assert!(sm.state_of(&key(7)).is_none(), "deleting an unknown key creates nothing");
    }

    #[test]
    fn a_taken_value_is_released_and_its_tombstone_still_refuses_late_answers() {
        let mut sm = StateMachine::default();
        create(&mut sm, 1000, 1, 500);
        create(&mut sm, 1000, 2, 500);
        let big = "v".repeat(100_000);
        deliver(&mut sm, 1100, 1, &big);
        assert!(encode(&sm).len() > 100_000, "held until the owner takes it");
        let release = Command::MailboxRelease { keys: vec![key(1), key(2), key(9)] };
        let (response, wakes) = sm.apply(&req(1200, release));
        assert_eq!((response, wakes), (Response::Done, vec![]));
        assert_eq!(sm.state_of(&key(1)), Some(&MailboxState::Taken));
        assert!(encode(&sm).len() < 1_000, "the value is gone from the state");
        assert_eq!(sm.state_of(&key(2)), Some(&MailboxState::Pending), "only delivered mailboxes are released");
        assert!(sm.state_of(&key(9)).is_none(), "releasing an unknown key creates nothing");
        // Invariant 2: a second delivery is still refused, and says why.
        assert_eq!(deliver(&mut sm, 1300, 1, "again").0, Response::Delivered(DeliverOutcome::AlreadyDelivered));
        // A delete does not turn it into another outcome; the tombstone goes at its time.
        sm.apply(&req(1301, Command::MailboxDelete { key: key(1) }));
        assert_eq!(sm.state_of(&key(1)), Some(&MailboxState::Taken));
        sm.apply(&req(1500 + TOMBSTONE_RETENTION_MS, Command::Tick));
        assert!(sm.state_of(&key(1)).is_none());
    }

    #[test]
    fn a_taken_values_tombstone_goes_a_minute_after_its_release_not_at_its_deadline() {
        let mut sm = StateMachine::default();
        let hour = 60 * 60 * 1000;
        create(&mut sm, 1000, 1, hour);
        create(&mut sm, 1000, 2, hour);
        deliver(&mut sm, 1100, 1, "v");
        deliver(&mut sm, 1100, 2, "w");
        sm.apply(&req(1200, Command::MailboxRelease { keys: vec![key(1)] }));
        sm.apply(&req(1200 + TAKEN_RETENTION_MS - 1, Command::Tick));
        assert_eq!(deliver(&mut sm, 1200 + TAKEN_RETENTION_MS - 1, 1, "again").0, Response::Delivered(DeliverOutcome::AlreadyDelivered));
        assert_eq!(sm.next_expiry(), Some(1200 + TAKEN_RETENTION_MS));
        sm.apply(&req(1200 + TAKEN_RETENTION_MS, Command::Tick));
        assert!(sm.state_of(&key(1)).is_none(), "gone long before its deadline");
        assert_eq!(sm.state_of(&key(2)), Some(&MailboxState::Delivered(text("w"))), "a value not taken stays");
        // A copy of the answer after that, before the deadline, is kept for a create that
        // never comes, and goes at its deadline: the handler got the first value only.
        assert_eq!(
            deliver_early(&mut sm, 70_000, 1, SessionTag::default(), 1, 1000 + hour, "late copy"),
            Response::Delivered(DeliverOutcome::Delivered)
        );
        sm.apply(&req(1000 + hour, Command::Tick));
        assert_eq!(sm.state_of(&key(1)), Some(&MailboxState::Expired));
    }

    /// The tombstone queue is in `(drop at, key)` order and holds exactly the tombstones.
    fn assert_tombstones_in_order(sm: &StateMachine) {
        let queue: Vec<_> = sm.tombstones_by_drop.iter().cloned().collect();
        assert!(queue.is_sorted(), "{queue:?}");
        let keys: std::collections::HashSet<_> = queue.iter().map(|(_, k)| k.clone()).collect();
        assert_eq!((keys.len(), queue.len()), (sm.tombstones.len(), sm.tombstones.len()));
        assert!(keys.iter().all(|k| sm.tombstones.contains_key(k) && !sm.mailboxes.contains_key(k)));
    }

    #[test]
    fn a_tombstone_that_drops_before_others_goes_at_its_time_whatever_order_it_came_in() {
        let mut sm = StateMachine::default();
        // Key 1's deadline passes while its value waits to be released; key 2 is taken before,
        // key 3 expires meanwhile: key 1's release comes last but drops first.
        create(&mut sm, 1000, 1, 500);
        create(&mut sm, 1000, 2, 100_000);
        create(&mut sm, 1200, 3, 500);
        deliver(&mut sm, 1100, 1, "v");
        deliver(&mut sm, 1300, 2, "w");
        sm.apply(&req(1700, Command::Tick));
        sm.apply(&req(20_000, Command::MailboxRelease { keys: vec![key(2)] }));
        sm.apply(&req(35_000, Command::MailboxRelease { keys: vec![key(1)] }));
        let drops: Vec<_> = sm.tombstones_by_drop.iter().cloned().collect();
        let release_2 = 20_000 + TAKEN_RETENTION_MS;
        let deadline_1 = 1500 + TOMBSTONE_RETENTION_MS;
        let expiry_3 = 1700 + TOMBSTONE_RETENTION_MS;
        assert_eq!(drops, vec![(release_2, key(2)), (deadline_1, key(1)), (expiry_3, key(3))]);
        assert_tombstones_in_order(&sm);
        for (at, gone) in [(release_2, 2), (deadline_1, 1), (expiry_3, 3)] {
            sm.apply(&req(at - 1, Command::Tick));
            assert!(sm.state_of(&key(gone)).is_some(), "key {gone} before {at}");
            sm.apply(&req(at, Command::Tick));
            assert!(sm.state_of(&key(gone)).is_none(), "key {gone} at {at}");
        }
        assert_eq!(sm.next_expiry(), None);
    }

    #[test]
    fn taken_and_expired_mailboxes_become_compact_tombstones_and_other_records_stay_whole() {
        assert!(std::mem::size_of::<(MailboxKey, Tombstone)>() * 2 <= std::mem::size_of::<(MailboxKey, Mailbox)>());
        let mut sm = StateMachine::default();
        let (ours, theirs) = (SessionTag([1; 16]), SessionTag([2; 16]));
        for k in 1..=4 {
            sm.apply(&req(1000, Command::MailboxCreate { key: key(k), session: ours, owner: 1, ttl_ms: 500 }));
        }
        for k in [1, 2] {
            sm.apply(&req(1100, Command::MailboxDeliver { key: key(k), session: ours, value: text("v"), addressee: None }));
        }
        sm.apply(&req(1200, Command::MailboxRelease { keys: vec![key(1)] }));
        sm.apply(&req(1300, Command::MailboxDelete { key: key(3) }));
        sm.apply(&req(1500, Command::Tick));
        // 1 taken and 4 expired: tombstones; 2 delivered and 3 deleted: whole records.
        assert_eq!(sm.tombstones.keys().cloned().collect::<BTreeSet<_>>(), [key(1), key(4)].into());
        assert_eq!(sm.mailboxes.keys().cloned().collect::<BTreeSet<_>>(), [key(2), key(3)].into());
        assert_tombstones_in_order(&sm);
        let sizes = sm.sizes();
        assert_eq!((sizes.mailboxes, sizes.pending, sizes.tombstones), (4, 0, 4));
        // A tombstone still says why to its own session, and nothing to another.
        let late = |sm: &mut StateMachine, k, session| {
            sm.apply(&req(1600, Command::MailboxDeliver { key: key(k), session, value: text("late"), addressee: None })).0
        };
        assert_eq!(late(&mut sm, 1, ours), Response::Delivered(DeliverOutcome::AlreadyDelivered));
        assert_eq!(late(&mut sm, 4, ours), Response::Delivered(DeliverOutcome::Expired));
        assert_eq!(late(&mut sm, 1, theirs), Response::Delivered(DeliverOutcome::WrongSession));
        assert_eq!(late(&mut sm, 4, theirs), Response::Delivered(DeliverOutcome::WrongSession));
        for k in [1, 4] {
            assert_eq!(create(&mut sm, 1700, k, 500), Response::Created(CreateOutcome::AlreadyExists), "key {k}");
            sm.apply(&req(1800, Command::MailboxDelete { key: key(k) }));
            assert!(matches!(sm.state_of(&key(k)), Some(MailboxState::Taken | MailboxState::Expired)), "a delete leaves key {k} as it was");
        }
        assert_eq!(snapshot::decode(&encode(&sm)).unwrap(), sm);
    }

    #[test]
    fn tombstones_are_forgotten_after_retention() {
        let mut sm = StateMachine::default();
        create(&mut sm, 1000, 1, 500);
        deliver(&mut sm, 1100, 1, "v");
        sm.apply(&req(1500 + TOMBSTONE_RETENTION_MS - 1, Command::Tick));
        assert!(sm.state_of(&key(1)).is_some());
        sm.apply(&req(1500 + TOMBSTONE_RETENTION_MS, Command::Tick));
        assert!(sm.state_of(&key(1)).is_none());
        assert_eq!(sm.next_expiry(), None);
    }

    #[test]
    fn retried_writes_get_the_first_outcome() {
        let mut sm = StateMachine::default();
        create(&mut sm, 1000, 1, 500);
        let write = Some(WriteId { origin: 2, serial: 9 });
        let deliver = Command::MailboxDeliver { key: key(1), session: SessionTag::default(), value: text("v"), addressee: None };
        let first = sm.apply(&Request { now: 1100, clock_agreed: true, write, command: deliver.clone() }).0;
        let retry = sm.apply(&Request { now: 1200, clock_agreed: true, write, command: deliver.clone() }).0;
        assert_eq!(first, Response::Delivered(DeliverOutcome::Delivered));
        assert_eq!(retry, first, "a retry is not reported as a duplicate of itself");
        let other =
            sm.apply(&Request { now: 1300, clock_agreed: true, write: Some(WriteId { origin: 2, serial: 10 }), command: deliver }).0;
        assert_eq!(other, Response::Delivered(DeliverOutcome::AlreadyDelivered));
    }

    #[test]
    fn a_batch_applies_each_write_as_its_own_and_ends_where_the_same_writes_one_entry_each_end() {
        let (a, b, c) = (WriteId { origin: 1, serial: 1 }, WriteId { origin: 1, serial: 2 }, WriteId { origin: 1, serial: 3 });
        let create = Command::MailboxCreate { key: key(1), session: SessionTag::default(), owner: 1, ttl_ms: 500 };
        let answer = |v: &str| Command::MailboxDeliver { key: key(1), session: SessionTag::default(), value: text(v), addressee: None };
        let writes = vec![(Some(a), create), (Some(b), answer("first")), (Some(c), answer("second")), (None, Command::Tick)];

        let mut batched = StateMachine::default();
        let batch = Command::Batch {
            writes: writes.iter().map(|(write, command)| BatchedWrite { write: *write, command: command.clone() }).collect(),
        };
        let (response, wakes) = batched.apply(&req(1000, batch));
        assert_eq!(
            response,
            Response::Batch(vec![
                Response::Created(CreateOutcome::Created),
                Response::Delivered(DeliverOutcome::Delivered),
                Response::Delivered(DeliverOutcome::AlreadyDelivered),
                Response::Done,
            ]),
            "one response per write, in order, each seeing the writes before it"
        );
        assert_eq!(wakes, [Wake::Delivered(key(1), text("first"))]);

        let mut one_each = StateMachine::default();
        for (write, command) in writes {
            one_each.apply(&Request { now: 1000, clock_agreed: true, write, command });
        }
        assert_eq!(batched.digest(), one_each.digest());

        // A retry of a batched write, alone or in another batch, gets its first outcome.
        let retry = Request { now: 1100, clock_agreed: true, write: Some(b), command: answer("retry") };
        assert_eq!(batched.apply(&retry).0, Response::Delivered(DeliverOutcome::Delivered));
        let again = Command::Batch { writes: vec![BatchedWrite { write: Some(c), command: answer("retry") }] };
        assert_eq!(batched.apply(&req(1200, again)).0, Response::Batch(vec![Response::Delivered(DeliverOutcome::AlreadyDelivered)]));
        assert_eq!(batched.state_of(&key(1)), Some(&MailboxState::Delivered(text("first"))));
    }

    #[test]
    fn a_batch_entry_decodes_as_it_was_written() {
        let batch = Command::Batch {
            writes: vec![
                BatchedWrite { write: Some(WriteId { origin: 7, serial: u64::MAX }), command: Command::Tick },
                BatchedWrite { write: None, command: Command::MailboxDelete { key: key(3) } },
            ],
        };
        let request = Request { now: 1, clock_agreed: false, write: None, command: batch };
        assert_eq!(crate::peer::codec::decode::<Request>(&crate::peer::codec::encode(&request)).unwrap(), request);
    }

    #[test]
    fn remembered_writes_are_forgotten_by_log_time_whatever_their_origin() {
        let mut sm = StateMachine::default();
        // Three writes in one millisecond, the later ones from lower origins.
        for (origin, serial) in [(3, 1), (2, 5), (1, 9)] {
            sm.apply(&Request { now: 1000, clock_agreed: true, write: Some(WriteId { origin, serial }), command: Command::Tick });
        }
        sm.apply(&Request { now: 1001, clock_agreed: true, write: Some(WriteId { origin: 0, serial: 1 }), command: Command::Tick });
        assert_eq!(sm.next_expiry(), Some(1000 + DEDUP_RETENTION_MS));
        sm.apply(&req(1000 + DEDUP_RETENTION_MS - 1, Command::Tick));
        assert_eq!(sm.sizes().dedup, 4);
        sm.apply(&req(1000 + DEDUP_RETENTION_MS, Command::Tick));
        let left: Vec<_> = sm.dedup.iter().map(|(write, at, _)| (write, at)).collect();
        assert_eq!(left, [(WriteId { origin: 0, serial: 1 }, 1001)], "the three of 1000 are forgotten, the one of 1001 is not");
        assert_eq!(sm.next_expiry(), Some(1001 + DEDUP_RETENTION_MS));
    }

    #[test]
    fn sessions_expire_by_log_time_and_touch_extends_them() {
        let mut sm = StateMachine::default();
        let id = SessionId("s".into());
        sm.apply(&req(1000, Command::SessionCreate { record: Box::new(session("s")), ttl_ms: 100, max_sessions: 10 }));
        sm.apply(&req(1090, Command::SessionTouch { id: id.clone() }));
        sm.apply(&req(1150, Command::Tick));
        assert!(sm.session(&id).is_some(), "touched at 1090, lives to 1190");
        assert_eq!(sm.apply(&req(1160, Command::SessionSetLogLevel { id: id.clone(), level: LogLevel::Debug })).0, Response::Session(true));
        assert_eq!(sm.session(&id).unwrap().record.log_level, LogLevel::Debug);
        let limits = SubscriptionLimits { max_count: 10, max_bytes: 1000 };
        let subscribe = |on| Command::SessionSubscribe { id: id.clone(), uri: "test://r".into(), subscribed: on, limits };
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
    fn subscriptions_stop_at_their_limits_and_a_refusal_changes_nothing() {
        let mut sm = StateMachine::default();
        let id = SessionId("s".into());
        sm.apply(&req(1000, Command::SessionCreate { record: Box::new(session("s")), ttl_ms: 60_000, max_sessions: 10 }));
        let limits = SubscriptionLimits { max_count: 2, max_bytes: 20 };
        let subscribe = |uri: &str| Command::SessionSubscribe { id: id.clone(), uri: uri.into(), subscribed: true, limits };
        assert_eq!(sm.apply(&req(1001, subscribe("test://a"))).0, Response::Session(true));
        assert_eq!(sm.apply(&req(1002, subscribe("test://a"))).0, Response::Session(true), "again: no new subscription");
        assert_eq!(sm.apply(&req(1003, subscribe("test://bbbbbbbbbbbbb"))).0, Response::Refused(LimitReached::SubscriptionBytes(20)));
        assert_eq!(sm.apply(&req(1004, subscribe("test://b"))).0, Response::Session(true));
        let before = sm.clone();
        assert_eq!(sm.apply(&req(1005, subscribe("test://c"))).0, Response::Refused(LimitReached::Subscriptions(2)));
        assert_eq!(sm.session(&id), before.session(&id), "a refused subscribe changes nothing");
        let unsubscribe = Command::SessionSubscribe { id: id.clone(), uri: "test://a".into(), subscribed: false, limits };
        sm.apply(&req(1006, unsubscribe));
        assert_eq!(sm.apply(&req(1007, subscribe("test://c"))).0, Response::Session(true), "room again after an unsubscribe");
    }

    #[test]
    fn sessions_stop_at_the_limit_carried_by_the_create() {
        let mut sm = StateMachine::default();
        let create = |id: &str| Command::SessionCreate { record: Box::new(session(id)), ttl_ms: 100, max_sessions: 2 };
        assert_eq!(sm.apply(&req(1000, create("a"))).0, Response::Session(true));
        assert_eq!(sm.apply(&req(1001, create("b"))).0, Response::Session(true));
        assert_eq!(sm.apply(&req(1002, create("c"))).0, Response::Refused(LimitReached::Sessions(2)));
        assert!(sm.session(&SessionId("c".into())).is_none(), "nothing stored");
        assert_eq!(sm.apply(&req(1003, create("a"))).0, Response::Session(true), "a retried create of a held id is no new session");
        // Expired sessions make room ("b" expired at 1101; "a" was created again at 1003).
        assert_eq!(sm.apply(&req(1101, create("c"))).0, Response::Session(true));
        assert_eq!(sm.sessions.keys().map(|id| id.as_str()).collect::<Vec<_>>(), ["a", "c"]);
    }

    #[test]
    fn replicas_applying_the_same_log_agree() {
        let log: Vec<Request> = (0..200u64)
            .map(|i| {
                let k = key((i % 17) as u8);
                let id = format!("s{}", i % 5);
                let limits = SubscriptionLimits { max_count: 2, max_bytes: 100 };
                let command = match i % 7 {
                    0 => Command::MailboxCreate { key: k, session: SessionTag::default(), owner: i % 3, ttl_ms: 50 + i },
                    1 => Command::MailboxDeliver { key: k, session: SessionTag::default(), value: text(&i.to_string()), addressee: None },
                    2 => Command::MailboxDelete { key: k },
                    3 => Command::MailboxRelease { keys: vec![k, key(((i + 1) % 17) as u8)] },
                    4 => Command::SessionCreate { record: Box::new(session(&id)), ttl_ms: 100 + i, max_sessions: 3 },
                    5 => Command::SessionSubscribe {
                        id: SessionId(id.into()),
                        uri: format!("test://{}", i % 4),
                        subscribed: i % 3 != 0,
                        limits,
                    },
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
        assert!(ra.iter().any(|(r, _)| matches!(r, Response::Refused(_))), "the limits were reached on the way");
        assert!(a.sessions.values().any(|s| !s.record.subscriptions.is_empty()), "sessions with subscriptions in the snapshot");
        // A snapshot round trip is the same state.
        assert_eq!(snapshot::decode(&encode(&a)).unwrap(), a);
    }

    #[test]
    fn a_jumped_stamp_moves_log_time_one_step_only() {
        let mut sm = StateMachine::default();
        let start = 1_000_000;
        sm.apply(&req(start, Command::SessionCreate { record: Box::new(session("s")), ttl_ms: 30 * 60 * 1000, max_sessions: 10 }));
        create(&mut sm, start, 1, 10 * 60 * 1000);
        // A leader whose clock jumped an hour ahead proposes, without a majority behind it.
        let hour = 60 * 60 * 1000;
        for i in 0..10 {
            let (_, wakes) = sm.apply(&unagreed(start + hour + i, Command::Tick));
            assert!(wakes.is_empty(), "entry {i} expired {wakes:?}");
        }
        assert!(sm.now <= start + 10 * MAX_CLOCK_STEP_MS, "log time {} ran ahead", sm.now - start);
        assert!(sm.session(&SessionId("s".into())).is_some(), "the session did not expire early");
        assert_eq!(sm.state_of(&key(1)), Some(&MailboxState::Pending));
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
        sm.apply(&req(start, Command::SessionCreate { record: Box::new(session("s")), ttl_ms: 5 * 60 * 1000, max_sessions: 10 }));
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
