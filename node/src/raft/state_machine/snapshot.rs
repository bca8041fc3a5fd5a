//! The state machine's snapshot encoding: what a snapshot file and a snapshot sent to a follower
//! carry. Pure: bytes in, bytes out.
//!
//! Version 2, written now, is binary and positional. Under load nearly all of the state is
//! finished mailboxes (tombstones) and remembered write outcomes, so those are fixed-size
//! little-endian records; the derived indexes (mailboxes by deadline and by drop time, write
//! outcomes and sessions by time) are not written but rebuilt from them. Version 1 was the
//! whole [`StateMachine`] as field-named MessagePack, every key as 32 hex digits and every
//! index written out again: about four times the bytes, each encoded and fsynced on every
//! snapshot. A version 1 snapshot still reads (it starts with a MessagePack map, never with
//! [`MAGIC`]).
//!
//! Layout of version 2 (integers little-endian):
//!
//! ```text
//! MAGIC | now: u64
//! | pending mailboxes: u64 count, then per mailbox:  key u128 | owner | session [16] | deadline u64 | state
//! | finished mailboxes: u64 count, then per mailbox: key u128 | owner | session [16] | deadline u64 | state | drop at u64
//! | write outcomes: u64 count, then per write:       origin | serial u64 | at u64 | response
//! | the rest (sessions, tasks): len u64 + field-named MessagePack
//! ```
//!
//! A tombstone (a taken or expired mailbox) keeps no owner or deadline: both are written as 0.
//! Node ids (owner, origin) are LEB128 varints: one byte for ids below 128. A state is a tag byte, followed for `Early` and `Delivered` by the answer (len u32 + JSON
//! text). A response is a byte, its place among the common ones, or 255 and its MessagePack
//! (len u32 + bytes). Records are written in index order, so replicas at one index write the
//! same bytes.

use super::{COMMON_RESPONSES, Ending, Mailbox, MailboxState, Millis, Remembered, Response, Session, StateMachine, Tombstone, WriteId};
use crate::mailbox::{MailboxKey, SessionTag};
use crate::mcp_tasks::table::TaskTable;
use crate::protocol::json_text::JsonText;
use crate::session::SessionId;
use serde::{Deserialize, Serialize};
use std::collections::{BTreeMap, BTreeSet, HashMap};

/// The first bytes of a version 2 snapshot. `S` is a MessagePack positive integer, which no
/// version 1 snapshot (a map) starts with.
pub const MAGIC: &[u8; 8] = b"SBSNAP\x00\x02";

/// Snapshot data that does not decode.
#[derive(Debug, thiserror::Error)]
pub enum SnapshotDecodeError {
    #[error("snapshot cut short at byte {0}")]
    Truncated(usize),
    #[error("unknown mailbox state {tag} at byte {at}")]
    UnknownState { tag: u8, at: usize },
    #[error("a {state} mailbox among the {section} ones")]
    Misplaced { state: &'static str, section: &'static str },
    #[error("a number longer than 64 bits at byte {0}")]
    BadNumber(usize),
    #[error("unknown write outcome {tag} at byte {at}")]
    UnknownResponse { tag: u8, at: usize },
    #[error("a delivered answer in the snapshot is not JSON: {0}")]
    NotJson(String),
    #[error("{0} bytes after the end of the snapshot")]
    TrailingBytes(usize),
    #[error("undecodable part of the snapshot: {0}")]
    MessagePack(#[from] rmp_serde::decode::Error),
}

/// What is left once the mailboxes and write outcomes are out: few records, field-named.
#[derive(Serialize)]
struct RestOut<'a> {
    sessions: &'a BTreeMap<SessionId, Session>,
    tasks: &'a TaskTable,
}

#[derive(Deserialize)]
struct RestIn {
    sessions: BTreeMap<SessionId, Session>,
    tasks: TaskTable,
}

/// The fewest bytes a mailbox record takes.
const MAILBOX_BYTES: usize = 16 + 1 + 16 + 8 + 1;

const PENDING: u8 = 0;
const EARLY: u8 = 1;
const DELIVERED: u8 = 2;
const TAKEN: u8 = 3;
const EXPIRED: u8 = 4;
const DELETED: u8 = 5;

/// `sm` as version 2 snapshot data.
pub fn encode(sm: &StateMachine) -> Vec<u8> {
    // Room for every record at once, tombstones included: grown by doubling, the buffer was
    // copied on the way and for a moment held twice (a build's peak memory). What is reserved
    // beyond the end is never touched, so never resident.
    let records = sm.mailboxes.len() + sm.tombstones.len();
    let mut out = Vec::with_capacity(64 + 64 * records + 24 * sm.dedup.len());
    out.extend_from_slice(MAGIC);
    put_u64(&mut out, sm.now);
    // Every mailbox is in exactly one of the three indexes (pending and early ones by deadline,
    // the rest of `mailboxes` and the tombstones by drop time), an invariant of the state
    // machine that its tests check: written from them, in their order.
    put_u64(&mut out, sm.pending_by_deadline.len() as u64);
    for (_, key) in &sm.pending_by_deadline {
        put_mailbox(&mut out, key, &sm.mailboxes[key]);
    }
    put_u64(&mut out, (sm.held_by_drop.len() + sm.tombstones_by_drop.len()) as u64);
    for (drop_at, key) in &sm.held_by_drop {
        put_mailbox(&mut out, key, &sm.mailboxes[key]);
        put_u64(&mut out, *drop_at);
    }
    for (drop_at, key) in &sm.tombstones_by_drop {
        let Tombstone { session, ending } = sm.tombstones[key];
        put_mailbox(&mut out, key, &Mailbox { owner: 0, session, deadline: 0, state: ending.state().clone() });
        put_u64(&mut out, *drop_at);
    }
    put_u64(&mut out, sm.dedup.len() as u64);
    for (write, at, remembered) in sm.dedup.iter() {
        put_varint(&mut out, write.origin);
        put_u64(&mut out, write.serial);
        put_u64(&mut out, at);
        put_response(&mut out, remembered);
    }
    let rest = crate::peer::codec::encode(&RestOut { sessions: &sm.sessions, tasks: &sm.tasks });
    put_u64(&mut out, rest.len() as u64);
    out.extend_from_slice(&rest);
    out
}

/// The state of snapshot data of either version.
pub fn decode(data: &[u8]) -> Result<StateMachine, SnapshotDecodeError> {
    let Some(body) = data.strip_prefix(MAGIC.as_slice()) else {
        return from_version_1(crate::peer::codec::decode(data)?);
    };
    let mut r = Reader { data: body, at: 0 };
    let mut sm = StateMachine { now: r.u64()?, ..StateMachine::default() };
    // Counts are read before their records: reserve no more than the bytes could hold.
    let most = |count: u64, record: usize| (count as usize).min(body.len() / record);
    let pending = r.u64()?;
    sm.mailboxes.reserve(most(pending, MAILBOX_BYTES));
    for _ in 0..pending {
        let (key, mailbox) = r.mailbox()?;
        restore_waiting(&mut sm, key, mailbox)?;
    }
    let finished = r.u64()?;
    sm.tombstones.reserve(most(finished, MAILBOX_BYTES));
    for _ in 0..finished {
        let (key, mailbox) = r.mailbox()?;
        restore_finished(&mut sm, key, mailbox, r.u64()?)?;
    }
    for _ in 0..r.u64()? {
        let write = WriteId { origin: r.varint()?, serial: r.u64()? };
        let at = r.u64()?;
        let response = r.response()?;
        sm.dedup.remember(write, Remembered::of(&response), at);
    }
    let len = r.u64()? as usize;
    let RestIn { sessions, tasks } = crate::peer::codec::decode(r.take(len)?)?;
    sm.sessions_by_expiry = sessions.iter().map(|(id, session)| (session.expires_at, id.clone())).collect();
    sm.sessions = sessions;
    sm.tasks = tasks;
    match r.data.len() - r.at {
        0 => Ok(sm),
        left => Err(SnapshotDecodeError::TrailingBytes(left)),
    }
}

/// Put back a pending mailbox or an early answer.
fn restore_waiting(sm: &mut StateMachine, key: MailboxKey, mailbox: Mailbox) -> Result<(), SnapshotDecodeError> {
    if !matches!(mailbox.state, MailboxState::Pending | MailboxState::Early(_)) {
        return Err(SnapshotDecodeError::Misplaced { state: state_name(&mailbox.state), section: "pending" });
    }
    sm.pending_by_deadline.insert((mailbox.deadline, key.clone()));
    sm.mailboxes.insert(key, mailbox);
    Ok(())
}

/// Put back a finished mailbox, kept until `drop_at`: a delivered value or a deleted mailbox
/// whole, a taken or expired one as a tombstone.
fn restore_finished(sm: &mut StateMachine, key: MailboxKey, mailbox: Mailbox, drop_at: Millis) -> Result<(), SnapshotDecodeError> {
    let ending = match mailbox.state {
        MailboxState::Delivered(_) | MailboxState::Deleted => {
            sm.held_by_drop.insert((drop_at, key.clone()));
            sm.mailboxes.insert(key, mailbox);
            return Ok(());
        }
        MailboxState::Taken => Ending::Taken,
        MailboxState::Expired => Ending::Expired,
        MailboxState::Pending | MailboxState::Early(_) => {
            return Err(SnapshotDecodeError::Misplaced { state: state_name(&mailbox.state), section: "finished" });
        }
    };
    sm.bury(key, Tombstone { session: mailbox.session, ending }, drop_at);
    Ok(())
}

fn state_name(state: &MailboxState) -> &'static str {
    match state {
        MailboxState::Pending => "pending",
        MailboxState::Early(_) => "early",
        MailboxState::Delivered(_) => "delivered",
        MailboxState::Taken => "taken",
        MailboxState::Expired => "expired",
        MailboxState::Deleted => "deleted",
    }
}

/// A version 1 snapshot: the state as it was then laid out, field-named (the indexes it also
/// holds are rebuilt).
#[derive(Deserialize)]
struct Version1 {
    now: Millis,
    mailboxes: HashMap<MailboxKey, Mailbox>,
    /// `(drop at, key)` of the finished mailboxes.
    tombstones: BTreeSet<(Millis, MailboxKey)>,
    sessions: BTreeMap<SessionId, Session>,
    dedup: HashMap<WriteId, (Millis, Response)>,
    dedup_by_time: BTreeSet<(Millis, WriteId)>,
    /// Absent from snapshots of versions before the Tasks extension: none.
    #[serde(default)]
    tasks: TaskTable,
}

fn from_version_1(old: Version1) -> Result<StateMachine, SnapshotDecodeError> {
    let Version1 { now, mut mailboxes, tombstones, sessions, mut dedup, dedup_by_time, tasks } = old;
    let mut sm = StateMachine { now, tasks, ..StateMachine::default() };
    for (at, write) in dedup_by_time {
        if let Some((_, response)) = dedup.remove(&write) {
            sm.dedup.remember(write, Remembered::of(&response), at);
        }
    }
    for (drop_at, key) in tombstones {
        if let Some(mailbox) = mailboxes.remove(&key) {
            restore_finished(&mut sm, key, mailbox, drop_at)?;
        }
    }
    for (key, mailbox) in mailboxes {
        restore_waiting(&mut sm, key, mailbox)?;
    }
    sm.sessions_by_expiry = sessions.iter().map(|(id, session)| (session.expires_at, id.clone())).collect();
    sm.sessions = sessions;
    Ok(sm)
}

fn put_u64(out: &mut Vec<u8>, value: u64) {
    out.extend_from_slice(&value.to_le_bytes());
}

/// A small number (a node id) in 7-bit groups, low first, the top bit set on all but the last.
fn put_varint(out: &mut Vec<u8>, mut value: u64) {
    while value >= 0x80 {
        out.push(value as u8 | 0x80);
        value >>= 7;
    }
    out.push(value as u8);
}

fn put_bytes(out: &mut Vec<u8>, bytes: &[u8]) {
    out.extend_from_slice(&(bytes.len() as u32).to_le_bytes());
    out.extend_from_slice(bytes);
}

/// The tag of a remembered response that is none of [`COMMON_RESPONSES`]: its MessagePack
/// follows. A common one's tag is its place there.
const OTHER_RESPONSE: u8 = u8::MAX;

fn put_response(out: &mut Vec<u8>, remembered: Remembered<'_>) {
    match remembered {
        Remembered::Common(place) => out.push(place),
        Remembered::Other(response) => {
            out.push(OTHER_RESPONSE);
            put_bytes(out, &crate::peer::codec::encode(response));
        }
    }
}

fn put_mailbox(out: &mut Vec<u8>, key: &MailboxKey, mailbox: &Mailbox) {
    out.extend_from_slice(&key.bits().to_le_bytes());
    put_varint(out, mailbox.owner);
    out.extend_from_slice(&mailbox.session.0);
    put_u64(out, mailbox.deadline);
    match &mailbox.state {
        MailboxState::Pending => out.push(PENDING),
        MailboxState::Early(value) => {
            out.push(EARLY);
            put_bytes(out, value.as_str().as_bytes());
        }
        MailboxState::Delivered(value) => {
            out.push(DELIVERED);
            put_bytes(out, value.as_str().as_bytes());
        }
        MailboxState::Taken => out.push(TAKEN),
        MailboxState::Expired => out.push(EXPIRED),
        MailboxState::Deleted => out.push(DELETED),
    }
}

struct Reader<'a> {
    data: &'a [u8],
    at: usize,
}

impl<'a> Reader<'a> {
    fn take(&mut self, n: usize) -> Result<&'a [u8], SnapshotDecodeError> {
        let end = self.at.checked_add(n).filter(|end| *end <= self.data.len()).ok_or(SnapshotDecodeError::Truncated(self.at))?;
        let bytes = &self.data[self.at..end];
        self.at = end;
        Ok(bytes)
    }

    fn array<const N: usize>(&mut self) -> Result<[u8; N], SnapshotDecodeError> {
        Ok(self.take(N)?.try_into().expect("took N bytes"))
    }

    fn u64(&mut self) -> Result<u64, SnapshotDecodeError> {
        Ok(u64::from_le_bytes(self.array()?))
    }

    fn varint(&mut self) -> Result<u64, SnapshotDecodeError> {
        let start = self.at;
        let mut value = 0u64;
        for shift in (0..64).step_by(7) {
            let byte = self.array::<1>()?[0];
            let bits = u64::from(byte & 0x7f);
            if shift == 63 && bits > 1 {
                break; // past 64 bits
            }
            value |= bits << shift;
            if byte & 0x80 == 0 {
                return Ok(value);
            }
        }
        Err(SnapshotDecodeError::BadNumber(start))
    }

    fn bytes(&mut self) -> Result<&'a [u8], SnapshotDecodeError> {
        let len = u32::from_le_bytes(self.array()?) as usize;
        self.take(len)
    }

    fn json(&mut self) -> Result<JsonText, SnapshotDecodeError> {
        let text = std::str::from_utf8(self.bytes()?).map_err(|e| SnapshotDecodeError::NotJson(e.to_string()))?;
        JsonText::try_from(text.to_string()).map_err(|e| SnapshotDecodeError::NotJson(e.to_string()))
    }

    fn response(&mut self) -> Result<Response, SnapshotDecodeError> {
        let at = self.at;
        match self.array::<1>()?[0] {
            OTHER_RESPONSE => Ok(crate::peer::codec::decode(self.bytes()?)?),
            tag if usize::from(tag) < COMMON_RESPONSES.len() => Ok(COMMON_RESPONSES[usize::from(tag)].clone()),
            tag => Err(SnapshotDecodeError::UnknownResponse { tag, at }),
        }
    }

    fn mailbox(&mut self) -> Result<(MailboxKey, Mailbox), SnapshotDecodeError> {
        let key = MailboxKey::from_bits(u128::from_le_bytes(self.array()?));
        let owner = self.varint()?;
        let session = SessionTag(self.array()?);
        let deadline = self.u64()?;
        let at = self.at;
        let state = match self.array::<1>()?[0] {
            PENDING => MailboxState::Pending,
            EARLY => MailboxState::Early(self.json()?),
            DELIVERED => MailboxState::Delivered(self.json()?),
            TAKEN => MailboxState::Taken,
            EXPIRED => MailboxState::Expired,
            DELETED => MailboxState::Deleted,
            tag => return Err(SnapshotDecodeError::UnknownState { tag, at }),
        };
        Ok((key, Mailbox { owner, session, deadline, state }))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::mailbox::Addressee;
    use crate::mcp_tasks::TaskId;
    use crate::protocol::types::{CapabilityFlags, Implementation, LogLevel, ProtocolVersion};
    use crate::raft::state_machine::{Command, Request};
    use crate::session::{SessionRecord, SubscriptionLimits};

    fn text(value: &str) -> JsonText {
        JsonText::from(&serde_json::Value::String(value.into()))
    }

    /// `sm` as a version 1 snapshot: the field-named layout of the state before tombstones were
    /// kept apart (every finished mailbox a whole record, in one set by drop time).
    fn version_1(sm: &StateMachine) -> Vec<u8> {
        #[derive(Serialize)]
        struct Version1Out<'a> {
            now: Millis,
            mailboxes: HashMap<MailboxKey, Mailbox>,
            pending_by_deadline: &'a BTreeSet<(Millis, MailboxKey)>,
            tombstones: BTreeSet<(Millis, MailboxKey)>,
            sessions: &'a BTreeMap<SessionId, Session>,
            sessions_by_expiry: &'a BTreeSet<(Millis, SessionId)>,
            dedup: HashMap<WriteId, (Millis, Response)>,
            dedup_by_time: BTreeSet<(Millis, WriteId)>,
            tasks: &'a TaskTable,
        }
        let mut mailboxes: HashMap<_, _> = sm.mailboxes.clone().into_iter().collect();
        for (key, t) in &sm.tombstones {
            mailboxes.insert(key.clone(), Mailbox { owner: 7, session: t.session, deadline: 1, state: t.ending.state().clone() });
        }
        crate::peer::codec::encode(&Version1Out {
            now: sm.now,
            mailboxes,
            pending_by_deadline: &sm.pending_by_deadline,
            tombstones: sm.held_by_drop.iter().chain(&sm.tombstones_by_drop).cloned().collect(),
            sessions: &sm.sessions,
            sessions_by_expiry: &sm.sessions_by_expiry,
            dedup: sm.dedup.iter().map(|(write, at, remembered)| (write, (at, remembered.response()))).collect(),
            dedup_by_time: sm.dedup.iter().map(|(write, at, _)| (at, write)).collect(),
            tasks: &sm.tasks,
        })
    }

    fn record(id: &str) -> SessionRecord {
        SessionRecord {
            id: SessionId(id.into()),
            protocol_version: ProtocolVersion::V2025_11_25,
            client_info: Implementation { name: "c".into(), version: "1".into(), title: Some("t".into()) },
            capabilities: CapabilityFlags::default(),
            log_level: LogLevel::Info,
            subscriptions: Default::default(),
        }
    }

    /// A log that leaves mailboxes in every state, early deliveries among them, with sessions,
    /// write outcomes and tasks beside them.
    fn busy_state(entries: u64) -> StateMachine {
        let mut sm = StateMachine::default();
        // Rounds of eleven entries, round k about mailbox k and the ones before it.
        let key = |k: u64| MailboxKey::from_bits(u128::from(k).wrapping_mul(0x9e37_79b9_7f4a_7c15_f39c_c060_5ced_c835));
        for i in 0..entries {
            let k = i / 11;
            let session = SessionTag([(k % 3) as u8; 16]);
            let id = format!("s{}", i % 5);
            let command = match i % 11 {
                // Some with a deadline long after the log's end: still pending there.
                0 => {
                    Command::MailboxCreate { key: key(k), session, owner: k % 3, ttl_ms: if k % 5 == 0 { 100_000 } else { 200 + k % 300 } }
                }
                1 if k % 3 != 0 => Command::MailboxDeliver { key: key(k), session, value: text(&format!("answer {k}")), addressee: None },
                2 => Command::MailboxDeliver {
                    key: MailboxKey::from_bits(u128::from(i) << 100),
                    session,
                    value: text("early"),
                    addressee: Some(Addressee { owner: 2, deadline_ms: 1000 + i * 5 + 300 }),
                },
                3 if k % 4 == 0 => Command::MailboxDelete { key: key(k.saturating_sub(1)) },
                4 if k % 2 == 0 => Command::MailboxRelease { keys: vec![key(k.saturating_sub(2)), key(k)] },
                8 if k % 3 != 0 => Command::MailboxDeliver { key: key(k), session, value: text("again"), addressee: None },
                7 => Command::SessionCreate { record: Box::new(record(&id)), ttl_ms: 500 + i, max_sessions: 4 },
                8 => Command::SessionSubscribe {
                    id: SessionId(id.into()),
                    uri: format!("test://{}", i % 4),
                    subscribed: true,
                    limits: SubscriptionLimits { max_count: 2, max_bytes: 100 },
                },
                9 => Command::TaskCreate {
                    id: TaskId::from_bits(u128::from(i)),
                    owner: 1,
                    incarnation: 7,
                    ttl_ms: 900,
                    poll_ms: 50,
                    max_tasks: 8,
                },
                _ => Command::Tick,
            };
            sm.apply(&Request { now: 1000 + i * 5, clock_agreed: true, write: Some(WriteId { origin: i % 3, serial: i }), command });
        }
        sm
    }

    #[test]
    fn a_snapshot_decodes_to_the_state_it_was_made_of() {
        for entries in [0, 1, 40, 300, 2_000] {
            let sm = busy_state(entries);
            let back = decode(&encode(&sm)).unwrap();
            assert_eq!(back, sm, "after {entries} entries");
            assert_eq!(back.digest(), sm.digest());
        }
        let sm = busy_state(2_000);
        let states: Vec<_> = sm.states().map(std::mem::discriminant).collect();
        for state in [
            MailboxState::Pending,
            MailboxState::Early(text("")),
            MailboxState::Delivered(text("")),
            MailboxState::Taken,
            MailboxState::Expired,
            MailboxState::Deleted,
        ] {
            assert!(states.contains(&std::mem::discriminant(&state)), "the log leaves a mailbox {state:?}");
        }
        assert!(!sm.sessions.is_empty() && !sm.dedup.is_empty() && !sm.tasks.is_empty());
    }

    /// Round trip `i` of a loaded replica, at log time 1000 + `i`: a fresh mailbox created with
    /// `ttl_ms`, then, if `answered`, its answer delivered and the value released.
    fn round_trip(sm: &mut StateMachine, i: u64, ttl_ms: Millis, answered: bool) {
        let key = MailboxKey::random();
        let session = SessionTag(rand::random());
        let at = |serial, command| Request { now: 1000 + i, clock_agreed: true, write: Some(WriteId { origin: i % 3, serial }), command };
        sm.apply(&at(3 * i, Command::MailboxCreate { key: key.clone(), session, owner: 1, ttl_ms }));
        if answered {
            let value = text(r#"{"action":"accept"}"#);
            sm.apply(&at(3 * i + 1, Command::MailboxDeliver { key: key.clone(), session, value, addressee: None }));
            sm.apply(&at(3 * i + 2, Command::MailboxRelease { keys: vec![key] }));
        }
    }

    #[test]
    fn a_snapshot_of_tombstones_and_write_outcomes_is_written_without_regrowing_its_buffer() {
        let mut sm = StateMachine::default();
        for i in 0..3_000u64 {
            // Half of them expire unanswered.
            round_trip(&mut sm, i, if i % 2 == 0 { 100 } else { 300_000 }, i % 2 == 1);
        }
        assert!(sm.tombstones.len() > 2_500 && sm.dedup.len() > 4_000, "{:?}", sm.sizes());
        let data = encode(&sm);
        assert_eq!(data.capacity(), 64 + 64 * (sm.mailboxes.len() + sm.tombstones.len()) + 24 * sm.dedup.len(), "never regrown");
    }

    #[test]
    fn replicas_at_one_index_write_the_same_bytes() {
        // Hash maps iterate in a random order per process and per map: the bytes must not.
        assert_eq!(encode(&busy_state(1_500)), encode(&busy_state(1_500)));
    }

    #[test]
    fn a_version_1_snapshot_still_reads() {
        let sm = busy_state(1_000);
        assert_eq!(decode(&version_1(&sm)).unwrap(), sm);
    }

    #[test]
    fn finished_mailboxes_take_a_fraction_of_the_bytes_of_version_1() {
        let mut sm = StateMachine::default();
        for i in 0..5_000u64 {
            round_trip(&mut sm, i, 300_000, true);
        }
        let (version_1, version_2) = (version_1(&sm).len(), encode(&sm).len());
        assert!(version_2 * 3 < version_1, "version 2: {version_2} bytes, version 1: {version_1}");
    }

    #[test]
    fn uncommon_write_outcomes_keep_their_whole_value() {
        let mut sm = StateMachine::default();
        let limit = crate::session::LimitReached::Sessions(0);
        let write = WriteId { origin: 1, serial: 9 };
        sm.dedup.remember(write, Remembered::of(&Response::Refused(limit)), 5);
        assert!(matches!(sm.dedup.get(write), Some(Remembered::Other(_))));
        assert_eq!(decode(&encode(&sm)).unwrap().dedup.get(write).map(Remembered::response), Some(Response::Refused(limit)));
    }

    #[test]
    fn node_ids_of_any_size_round_trip() {
        for value in [0, 1, 127, 128, 300, u64::from(u32::MAX), u64::MAX - 1, u64::MAX] {
            let mut out = Vec::new();
            put_varint(&mut out, value);
            let mut r = Reader { data: &out, at: 0 };
            assert_eq!((r.varint().unwrap(), r.at), (value, out.len()));
        }
        let mut out = Vec::new();
        put_varint(&mut out, 5);
        assert_eq!(out, [5], "an id below 128 takes one byte");
        // Eleven bytes, or a tenth byte with more than the 64th bit, is no u64.
        for bad in [vec![0xff; 10].into_iter().chain([0x01]).collect::<Vec<u8>>(), [vec![0xff; 9], vec![0x02]].concat()] {
            assert!(matches!(Reader { data: &bad, at: 0 }.varint(), Err(SnapshotDecodeError::BadNumber(0))), "{bad:?}");
        }
    }

    #[test]
    fn a_waiting_mailbox_among_the_finished_ones_is_refused() {
        let mut sm = StateMachine::default();
        sm.apply(&Request {
            now: 1000,
            clock_agreed: true,
            write: None,
            command: Command::MailboxCreate { key: MailboxKey::from_bits(1), session: SessionTag::default(), owner: 1, ttl_ms: 500 },
        });
        let mut data = Vec::from(*MAGIC);
        put_u64(&mut data, sm.now);
        put_u64(&mut data, 0);
        put_u64(&mut data, 1);
        put_mailbox(&mut data, &MailboxKey::from_bits(1), sm.mailbox(&MailboxKey::from_bits(1)).unwrap());
        put_u64(&mut data, 61_500);
        put_u64(&mut data, 0);
        let rest = crate::peer::codec::encode(&RestOut { sessions: &sm.sessions, tasks: &sm.tasks });
        put_u64(&mut data, rest.len() as u64);
        data.extend_from_slice(&rest);
        let error = decode(&data).unwrap_err();
        assert!(matches!(error, SnapshotDecodeError::Misplaced { state: "pending", section: "finished" }), "{error:?}");
        assert_eq!(error.to_string(), "a pending mailbox among the finished ones");
    }

    #[test]
    fn damaged_data_is_an_error_not_a_panic_or_a_guess() {
        let data = encode(&busy_state(300));
        for cut in (MAGIC.len()..data.len()).step_by(7) {
            assert!(decode(&data[..cut]).is_err(), "cut at {cut} of {}", data.len());
        }
        let mut longer = data.clone();
        longer.push(0);
        assert!(matches!(decode(&longer), Err(SnapshotDecodeError::TrailingBytes(1))));
        // The first mailbox's state tag: after the magic, the time, the pending count, and the
        // mailbox's 41 bytes of fields (its owner, below 128, in one).
        let mut bad_state = data.clone();
        let pending = u64::from_le_bytes(data[MAGIC.len() + 8..MAGIC.len() + 16].try_into().unwrap());
        assert!(pending > 0);
        let tag_at = MAGIC.len() + 8 + 8 + 16 + 1 + 16 + 8;
        bad_state[tag_at] = 9;
        assert!(matches!(decode(&bad_state), Err(SnapshotDecodeError::UnknownState { tag: 9, .. })), "{:?}", decode(&bad_state).err());
        // A finished state among the pending mailboxes would be indexed for expiry it cannot
        // have: refused, not put where no index finds it.
        let pending_tag = data[tag_at];
        assert!(pending_tag == PENDING || pending_tag == EARLY);
        for finished in [TAKEN, EXPIRED, DELETED] {
            bad_state[tag_at] = finished;
            assert!(
                matches!(decode(&bad_state), Err(SnapshotDecodeError::Misplaced { section: "pending", .. })),
                "{:?}",
                decode(&bad_state).err()
            );
        }
        // A count far beyond the data reserves no more than the data could hold, and fails.
        let mut huge_count = data;
        huge_count[MAGIC.len() + 8..MAGIC.len() + 16].copy_from_slice(&u64::MAX.to_le_bytes());
        assert!(decode(&huge_count).is_err());
    }
}
