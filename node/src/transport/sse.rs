//! Resumable SSE streams.
//!
//! Every stream the server opens (the response to one POST, or a session's standalone GET
//! stream) is an [`EventLog`]: producers append to it, HTTP responses are readers over it. A
//! reader that goes away loses nothing: a new GET with `Last-Event-ID` reads on from where the
//! client stopped. The server can also end the current readers (SSE polling) while the stream
//! goes on.

use crate::protocol::json_text::kept;
use crate::protocol::jsonrpc::Message;
use crate::server::correlation::{IdSealer, SealedEvent};
use crate::server::{OutboundSink, Outgoing, StreamClosed};
use crate::session::SessionId;
use bytes::Bytes;
use std::collections::{HashMap, VecDeque};
use std::convert::Infallible;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use tokio::sync::{Notify, mpsc};

struct LogState {
    /// Boxed text: kept for as long as the stream can be resumed, without spare capacity.
    events: VecDeque<Event>,
    next_seq: u64,
    /// When the producer finished; the stream stays resumable for the stream logs' retention.
    closed_at: Option<Instant>,
    /// Bumped to end the readers attached so far.
    reader_generation: u64,
    /// Readers of older generations stop before this sequence number.
    disconnect_at: u64,
}

/// One event of a stream.
#[derive(Clone)]
struct Event {
    seq: u64,
    data: EventData,
}

#[derive(Clone)]
enum EventData {
    /// The priming event: an id and an empty data field.
    Priming,
    /// A request to the client. Dropped when the stream closes: the call that waited for its
    /// answer is over, so replaying it to a resuming client would only ask again for nothing.
    Request(Box<str>),
    /// A notification, or the response that ends the stream.
    Message(Box<str>),
}

impl EventData {
    /// The SSE data field (empty for the priming event).
    fn text(&self) -> Option<&str> {
        match self {
            EventData::Priming => None,
            EventData::Request(text) | EventData::Message(text) => Some(text),
        }
    }
}

/// One resumable stream of events.
pub struct EventLog {
    pub stream: u64,
    pub session: SessionId,
    /// What it shares with the node's other streams (one pointer, not four fields in every
    /// parked call's stream).
    shared: Arc<StreamsShared>,
    state: Mutex<LogState>,
    /// Wakes the readers waiting for the log to change (lighter than a watch channel: one per
    /// parked call).
    changed: Notify,
}

impl EventLog {
    /// A closed log again, to read a compacted stream from.
    fn reopened(shared: Arc<StreamsShared>, stream: u64, closed: &ClosedStream) -> Arc<Self> {
        let state = LogState {
            events: closed.events.iter().cloned().collect(),
            next_seq: closed.next_seq,
            closed_at: Some(closed.closed_at),
            reader_generation: 0,
            disconnect_at: 0,
        };
        Arc::new(EventLog { stream, session: closed.session.clone(), shared, state: Mutex::new(state), changed: Notify::new() })
    }

    /// What a closed log keeps for resumption, without the rest (`None` while it is open).
    /// `only_holder`: nothing else can read it any more, so its events move out.
    fn compact(&self, only_holder: bool) -> Option<ClosedStream> {
        let mut state = self.state.lock().unwrap();
        let closed_at = state.closed_at?;
        let events = if only_holder {
            Vec::from(std::mem::take(&mut state.events)).into_boxed_slice()
        } else {
            state.events.iter().cloned().collect()
        };
        Some(ClosedStream { session: self.session.clone(), closed_at, next_seq: state.next_seq, events })
    }

    fn new(shared: Arc<StreamsShared>, stream: u64, session: SessionId, priming: bool) -> Arc<Self> {
        // Room for the priming event and one more: a parked call's stream holds its request.
        let mut events = VecDeque::with_capacity(2);
        if priming {
            events.push_back(Event { seq: 0, data: EventData::Priming });
        }
        let state = LogState { events, next_seq: 1, closed_at: None, reader_generation: 0, disconnect_at: 0 };
        Arc::new(EventLog { stream, session, shared, state: Mutex::new(state), changed: Notify::new() })
    }

    /// The sealed id of event `seq`: names this node as the owner, opens only in the session.
    fn id(&self, seq: u64) -> String {
        self.shared.sealer.seal_event(SealedEvent { owner: self.shared.node, stream: self.stream, seq }, self.session.as_str())
    }

    /// Sequence number the next reader without `Last-Event-ID` starts at.
    pub fn end(&self) -> u64 {
        self.state.lock().unwrap().next_seq
    }

    pub fn push(&self, message: &Message) {
        // Kept while the stream is resumable (a parked call's request, for as long as it waits).
        let text = kept(message.to_json()).into_boxed_str();
        let data = match message {
            Message::Request { .. } => EventData::Request(text),
            _ => EventData::Message(text),
        };
        let mut state = self.state.lock().unwrap();
        let seq = state.next_seq;
        state.next_seq += 1;
        state.events.push_back(Event { seq, data });
        if state.events.len() > self.shared.capacity {
            state.events.pop_front();
        }
        drop(state);
        self.changed.notify_waiters();
    }

    pub fn apply(&self, outgoing: Outgoing) {
        match outgoing {
            Outgoing::Message(m) => self.push(&m),
            Outgoing::Disconnect => self.disconnect_readers(),
        }
    }

    /// No more events will come; readers end after the last one. What stays for resumption
    /// is the notifications and the response: the requests went with their call (under load a
    /// closed stream's request was the larger part of what it kept, for its retention).
    pub fn close(&self) {
        let mut state = self.state.lock().unwrap();
        if state.closed_at.is_none() {
            let now = Instant::now();
            state.closed_at = Some(now);
            state.events.retain(|event| !matches!(event.data, EventData::Request(_)));
            state.events.shrink_to_fit();
            drop(state);
            self.shared.closings.lock().unwrap().push_back((now, self.stream));
            self.shared.to_compact.lock().unwrap().push(self.stream);
        }
        self.changed.notify_waiters();
    }

    /// Closed for longer than `retention`: no longer resumable.
    fn expired(&self, now: Instant, retention: Duration) -> bool {
        self.state.lock().unwrap().closed_at.is_some_and(|closed| now.duration_since(closed) >= retention)
    }

    /// End the HTTP responses reading this log once they have sent what is in it now; clients
    /// resume with `Last-Event-ID`. Readers attached later are unaffected.
    pub fn disconnect_readers(&self) {
        let mut state = self.state.lock().unwrap();
        state.reader_generation += 1;
        state.disconnect_at = state.next_seq;
        drop(state);
        self.changed.notify_waiters();
    }

    /// An SSE body over this log from sequence `from` on, as encoded bytes. The first event
    /// carries `retry`; idle periods get keep-alive comments.
    pub fn reader(
        self: &Arc<Self>,
        from: u64,
        retry: Duration,
        keep_alive: Duration,
    ) -> impl futures::Stream<Item = Result<Bytes, Infallible>> + use<> {
        let generation = self.state.lock().unwrap().reader_generation;
        futures::stream::unfold((self.clone(), from, true), move |(log, mut cursor, first)| async move {
            loop {
                // Registered before looking at the log, so a change right after the look wakes it.
                let mut changed = std::pin::pin!(log.changed.notified());
                changed.as_mut().enable();
                {
                    let state = log.state.lock().unwrap();
                    let disconnected = state.reader_generation != generation;
                    let next = state.events.iter().find(|event| event.seq >= cursor);
                    match next {
                        Some(Event { seq, data }) if !disconnected || *seq < state.disconnect_at => {
                            let event = encode_event(&log.id(*seq), data.text(), first.then_some(retry));
                            cursor = seq + 1;
                            drop(state);
                            return Some((Ok(event), (log.clone(), cursor, false)));
                        }
                        _ if disconnected || state.closed_at.is_some() => return None,
                        _ => {}
                    }
                }
                if tokio::time::timeout(keep_alive, changed).await.is_err() {
                    return Some((Ok(Bytes::from_static(b": keep-alive\n\n")), (log.clone(), cursor, first)));
                }
            }
        })
    }
}

/// One SSE event. `data` of `None` is the priming event: an id and an empty data field.
fn encode_event(id: &str, data: Option<&str>, retry: Option<Duration>) -> Bytes {
    let retry = retry.map(|r| format!("retry: {}\n", r.as_millis()));
    let data = data.unwrap_or("");
    // One data line: JSON from serde_json has no raw newlines. `concat` allocates the frame at
    // its exact size once; grown by pushes, a large message was copied as the buffer grew and
    // the last push doubled it.
    let frame = ["id: ", id, "\n", retry.as_deref().unwrap_or(""), "data: ", data, "\n\n"].concat();
    Bytes::from(frame)
}

/// The [`Outbound`](crate::server::Outbound) of a stream: the producer writes into the log itself (no task or channel
/// per stream, which a parked request would keep as long as it waits), and the log is closed
/// once the producer drops its last handle.
pub struct StreamSink {
    state: Mutex<SinkState>,
}

enum SinkState {
    /// A POST whose response is not decided yet: outputs queue in a channel the handler reads
    /// (and, if it goes away, sends fail as the client's stream being closed).
    Undecided(mpsc::UnboundedSender<Outgoing>),
    Streaming(Arc<EventLog>),
}

impl StreamSink {
    /// Writes straight into `log` (a standalone stream).
    pub fn new(log: Arc<EventLog>) -> Self {
        StreamSink { state: Mutex::new(SinkState::Streaming(log)) }
    }

    /// Queues into `queue` until [`StreamSink::stream_into`].
    pub fn undecided(queue: mpsc::UnboundedSender<Outgoing>) -> Self {
        StreamSink { state: Mutex::new(SinkState::Undecided(queue)) }
    }

    /// Write into `log` from now on, after `queued` (the outputs sent so far; drained under
    /// the lock sends take, so none overtakes them).
    pub fn stream_into(&self, log: Arc<EventLog>, queued: impl Iterator<Item = Outgoing>) {
        let mut state = self.state.lock().unwrap();
        queued.for_each(|outgoing| log.apply(outgoing));
        *state = SinkState::Streaming(log);
    }
}

impl OutboundSink for StreamSink {
    fn send(&self, outgoing: Outgoing) -> Result<(), StreamClosed> {
        match &*self.state.lock().unwrap() {
            SinkState::Undecided(queue) => queue.send(outgoing).map_err(|_| StreamClosed),
            SinkState::Streaming(log) => {
                log.apply(outgoing);
                Ok(())
            }
        }
    }
}

impl Drop for StreamSink {
    fn drop(&mut self) {
        if let SinkState::Streaming(log) = &*self.state.get_mut().unwrap() {
            log.close();
        }
    }
}

/// Streams in the order they closed, with when: the oldest are the first to expire.
/// What all the streams of a node share.
struct StreamsShared {
    node: u64,
    sealer: Arc<IdSealer>,
    /// Events a stream keeps for resumption.
    capacity: usize,
    /// `(when, stream)` of each closing, oldest first: where a log says when it closed, for the
    /// sweep of its [`StreamLogs`].
    closings: Mutex<VecDeque<(Instant, u64)>>,
    /// Streams closed since their [`StreamLogs`] last compacted the closed ones.
    to_compact: Mutex<Vec<u64>>,
}

/// What a node keeps of one of its streams.
enum Kept {
    Open(Arc<EventLog>),
    /// A finished stream: its events, without the lock, waker and reader state of a live log
    /// (under load most of what a closed stream kept for its retention, beside the response).
    Closed(Box<ClosedStream>),
}

impl Kept {
    fn session(&self) -> &SessionId {
        match self {
            Kept::Open(log) => &log.session,
            Kept::Closed(closed) => &closed.session,
        }
    }
}

/// A closed stream, as [`Kept`].
struct ClosedStream {
    session: SessionId,
    closed_at: Instant,
    next_seq: u64,
    events: Box<[Event]>,
}

/// The streams of this node, for resumption.
pub struct StreamLogs {
    shared: Arc<StreamsShared>,
    next: AtomicU64,
    streams: Mutex<HashMap<u64, Kept>>,
    standalone: Mutex<HashMap<SessionId, Arc<EventLog>>>,
    /// How long a finished stream stays resumable.
    retention: Duration,
}

impl StreamLogs {
    pub fn new(node: u64, sealer: Arc<IdSealer>, retention: Duration, capacity: usize) -> Arc<Self> {
        let shared = Arc::new(StreamsShared { node, sealer, capacity, closings: Mutex::default(), to_compact: Mutex::default() });
        Arc::new(StreamLogs { shared, next: AtomicU64::new(1), streams: Mutex::default(), standalone: Mutex::default(), retention })
    }

    /// A new stream for the response to one request.
    pub fn open(&self, session: &SessionId, priming: bool) -> Arc<EventLog> {
        let stream = self.next.fetch_add(1, Ordering::Relaxed);
        let log = EventLog::new(self.shared.clone(), stream, session.clone(), priming);
        let mut streams = self.streams.lock().unwrap();
        // Streams whose retention passed are swept here, the oldest closed first, rather than
        // each watched by a task of its own (one more task per parked call); `find` already
        // ignores them. Each goes once: a sweep costs what it removes.
        let now = Instant::now();
        let mut closings = self.shared.closings.lock().unwrap();
        while let Some(&(closed, expired)) = closings.front()
            && now.duration_since(closed) >= self.retention
        {
            closings.pop_front();
            streams.remove(&expired);
        }
        drop(closings);
        // The streams closed since the last open are compacted here too, for the same reason.
        for closed in std::mem::take(&mut *self.shared.to_compact.lock().unwrap()) {
            if let Some(kept) = streams.get_mut(&closed)
                && let Kept::Open(log) = kept
                && let Some(compact) = log.compact(Arc::strong_count(log) == 1)
            {
                *kept = Kept::Closed(Box::new(compact));
            }
        }
        streams.insert(stream, Kept::Open(log.clone()));
        log
    }

    /// The session's standalone stream, created on first use. Returns it and whether it is new.
    pub fn standalone(&self, session: &SessionId, priming: bool) -> (Arc<EventLog>, bool) {
        let mut standalone = self.standalone.lock().unwrap();
        if let Some(log) = standalone.get(session) {
            return (log.clone(), false);
        }
        let stream = self.next.fetch_add(1, Ordering::Relaxed);
        let log = EventLog::new(self.shared.clone(), stream, session.clone(), priming);
        standalone.insert(session.clone(), log.clone());
        self.streams.lock().unwrap().insert(stream, Kept::Open(log.clone()));
        (log, true)
    }

    /// A stream of this node, if it still has it.
    pub fn find(&self, stream: u64) -> Option<Arc<EventLog>> {
        let now = Instant::now();
        let log = match self.streams.lock().unwrap().get(&stream)? {
            Kept::Open(log) => log.clone(),
            Kept::Closed(closed) if now.duration_since(closed.closed_at) < self.retention => {
                return Some(EventLog::reopened(self.shared.clone(), stream, closed));
            }
            Kept::Closed(_) => return None,
        };
        (!log.expired(now, self.retention)).then_some(log)
    }

    /// Drop every stream of a terminated session.
    pub fn forget_session(&self, session: &SessionId) {
        if let Some(log) = self.standalone.lock().unwrap().remove(session) {
            log.close();
        }
        self.streams.lock().unwrap().retain(|_, kept| {
            let keep = kept.session() != session;
            if !keep && let Kept::Open(log) = kept {
                log.close();
            }
            keep
        });
    }
}

/// Why a stream owned by another node could not be resumed.
#[derive(Debug, thiserror::Error)]
pub enum RelayError {
    #[error("the owner has no such stream for this session")]
    NotFound,
    #[error("node {0} is not reachable: {1}")]
    Unreachable(u64, String),
}

/// SSE bytes relayed from another node.
pub type RelayedStream = futures::stream::BoxStream<'static, Result<Bytes, std::io::Error>>;

/// Fetches the rest of a stream from the node that owns it (event ids name their owner).
#[async_trait::async_trait]
pub trait StreamRelay: Send + Sync {
    async fn resume(&self, owner: u64, session: &SessionId, stream: u64, from: u64) -> Result<RelayedStream, RelayError>;
}

impl StreamLogs {
    /// The SSE body of a local stream of `session` from sequence `from` on, for a relay.
    pub fn reader_for(
        &self,
        session: &SessionId,
        stream: u64,
        from: u64,
        retry: Duration,
        keep_alive: Duration,
    ) -> Option<impl futures::Stream<Item = Result<Bytes, Infallible>> + use<>> {
        let log = self.find(stream).filter(|log| &log.session == session)?;
        Some(log.reader(from, retry, keep_alive))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn stream_logs(retention: Duration) -> Arc<StreamLogs> {
        StreamLogs::new(1, Arc::new(IdSealer::random()), retention, 16)
    }

    fn progress(n: u64) -> Message {
        Message::notification("notifications/progress", json!({"progress": n}))
    }

    fn note(n: u64) -> Outgoing {
        Outgoing::Message(Box::new(progress(n)))
    }

    fn logged(log: &EventLog) -> Vec<String> {
        log.state.lock().unwrap().events.iter().filter_map(|event| event.data.text().map(str::to_owned)).collect()
    }

    #[test]
    fn a_sink_keeps_order_across_the_switch_and_closes_the_log_when_dropped() {
        let (tx, mut rx) = mpsc::unbounded_channel();
        let sink = StreamSink::undecided(tx);
        sink.send(note(1)).unwrap();
        sink.send(note(2)).unwrap();
        let log = stream_logs(Duration::from_secs(60)).open(&SessionId("s".into()), false);
        sink.stream_into(log.clone(), std::iter::from_fn(|| rx.try_recv().ok()));
        sink.send(note(3)).unwrap();
        assert_eq!(logged(&log), (1..=3).map(|n| progress(n).to_json()).collect::<Vec<_>>());
        assert!(log.state.lock().unwrap().closed_at.is_none());
        drop(sink);
        assert!(log.state.lock().unwrap().closed_at.is_some());
    }

    #[test]
    fn an_event_is_framed_with_its_id_optional_retry_and_one_data_line() {
        let big = "x".repeat(100_000);
        assert_eq!(&encode_event("e1", Some("{}"), None)[..], b"id: e1\ndata: {}\n\n");
        assert_eq!(&encode_event("e2", None, Some(Duration::from_millis(1500)))[..], b"id: e2\nretry: 1500\ndata: \n\n");
        let framed = encode_event("e3", Some(&big), Some(Duration::from_secs(2)));
        assert_eq!(framed.len(), "id: e3\nretry: 2000\ndata: \n\n".len() + big.len());
        assert!(framed.ends_with(b"\n\n") && framed.starts_with(b"id: e3\nretry: 2000\ndata: xxx"));
    }

    #[test]
    fn an_undecided_sink_fails_once_its_handler_is_gone() {
        let (tx, rx) = mpsc::unbounded_channel();
        let sink = StreamSink::undecided(tx);
        drop(rx);
        assert_eq!(sink.send(note(1)), Err(StreamClosed));
    }

    #[tokio::test]
    async fn a_closed_stream_keeps_its_notifications_and_response_under_their_ids_not_its_requests() {
        use crate::protocol::jsonrpc::RequestId;
        use futures::StreamExt;
        let logs = stream_logs(Duration::from_secs(60));
        let session = SessionId("s".into());
        let log = logs.open(&session, true);
        let ask = Message::request(RequestId::Number(7), "elicitation/create", json!({"message": "ship?"}));
        let done = Message::response(RequestId::Number(1), json!({"ok": true}));
        for message in [&progress(1), &ask, &progress(2), &done] {
            log.push(message);
        }
        assert_eq!(logged(&log).len(), 4, "an open stream keeps its requests");
        log.close();
        assert_eq!(logged(&log), [progress(1), progress(2), done].map(|m| m.to_json()));

        // A reader from the start (after the priming event) gets what is kept, each under the
        // id it had when it was first sent.
        let frames: Vec<Bytes> = log.reader(1, Duration::from_secs(1), Duration::from_secs(15)).map(|f| f.unwrap()).collect().await;
        let ids: Vec<u64> = frames
            .iter()
            .map(|frame| {
                let text = std::str::from_utf8(frame).unwrap();
                let id = text.strip_prefix("id: ").unwrap().split('\n').next().unwrap();
                logs.shared.sealer.open_event(id, "s").unwrap().seq
            })
            .collect();
        assert_eq!(ids, [1, 3, 4]);
    }

    /// The ids (sequence numbers) and data of what a reader of `log` from `from` gets.
    async fn read_all(logs: &StreamLogs, log: &Arc<EventLog>, from: u64) -> Vec<(u64, String)> {
        use futures::StreamExt;
        let frames: Vec<Bytes> = log.reader(from, Duration::from_secs(1), Duration::from_secs(15)).map(|f| f.unwrap()).collect().await;
        frames
            .iter()
            .map(|frame| {
                let text = std::str::from_utf8(frame).unwrap();
                let id = text.strip_prefix("id: ").unwrap().split('\n').next().unwrap();
                let data = text.split("data: ").nth(1).unwrap().trim_end().to_owned();
                (logs.shared.sealer.open_event(id, log.session.as_str()).unwrap().seq, data)
            })
            .collect()
    }

    #[tokio::test]
    async fn a_closed_stream_is_kept_compact_from_the_next_open_and_resumes_the_same() {
        use crate::protocol::jsonrpc::RequestId;
        let logs = stream_logs(Duration::from_secs(60));
        let session = SessionId("s".into());
        let is_compact = |stream| matches!(logs.streams.lock().unwrap().get(&stream), Some(Kept::Closed(_)));
        // One stream still read when the next opens (its events are copied), one not (moved).
        for still_read in [true, false] {
            let log = logs.open(&session, true);
            let ask = Message::request(RequestId::Number(7), "elicitation/create", json!({"message": "ship?"}));
            for message in [&progress(1), &Message::response(RequestId::Number(1), json!({"ok": true})), &ask] {
                log.push(message);
            }
            log.close();
            let (stream, before, end) = (log.stream, read_all(&logs, &log, 0).await, log.end());
            assert_eq!(before.iter().map(|(seq, _)| *seq).collect::<Vec<_>>(), [0, 1, 2], "the priming event and two kept");
            let reader = still_read.then_some(log);
            assert!(!is_compact(stream), "compacted when the next stream opens, not before");
            let next = logs.open(&session, true);
            assert!(is_compact(stream));
            let found = logs.find(stream).expect("still resumable");
            assert_eq!((read_all(&logs, &found, 0).await, found.end()), (before.clone(), end));
            assert_eq!(read_all(&logs, &found, 2).await, before[2..]);
            if let Some(log) = reader {
                assert_eq!(read_all(&logs, &log, 0).await, before, "a reader of the log itself still reads it all");
            }
            next.close();
        }
        // A compacted stream goes with its session, and at the end of its retention.
        logs.forget_session(&session);
        assert!(logs.streams.lock().unwrap().is_empty());
        let brief = stream_logs(Duration::from_millis(50));
        let log = brief.open(&session, false);
        log.close();
        brief.open(&session, false);
        assert!(matches!(brief.streams.lock().unwrap().get(&log.stream), Some(Kept::Closed(_))));
        assert!(brief.find(log.stream).is_some());
        std::thread::sleep(Duration::from_millis(60));
        assert!(brief.find(log.stream).is_none(), "found past its retention, before any sweep");
    }

    #[test]
    fn closed_streams_stay_resumable_for_the_retention_only() {
        let session = SessionId("s".into());
        let (kept, gone) = (stream_logs(Duration::from_secs(60)), stream_logs(Duration::ZERO));
        for logs in [&kept, &gone] {
            let log = logs.open(&session, false);
            assert!(logs.find(log.stream).is_some(), "an open stream is always found");
            log.close();
        }
        assert!(kept.find(1).is_some());
        assert!(gone.find(1).is_none());
    }

    #[test]
    fn the_next_stream_opened_sweeps_the_expired_ones_and_only_them() {
        let session = SessionId("s".into());
        let held = |logs: &StreamLogs| {
            let mut ids: Vec<u64> = logs.streams.lock().unwrap().keys().copied().collect();
            ids.sort();
            ids
        };
        let (kept, gone) = (stream_logs(Duration::from_secs(60)), stream_logs(Duration::ZERO));
        for logs in [&kept, &gone] {
            let (closed, open) = (logs.open(&session, false), logs.open(&session, false));
            closed.close();
            closed.close();
            assert_eq!(open.stream, 2);
            logs.open(&session, false);
        }
        assert_eq!(held(&kept), [1, 2, 3], "within its retention a closed stream stays");
        assert_eq!(held(&gone), [2, 3], "the expired stream is swept; the open one stays");
        assert!(gone.shared.closings.lock().unwrap().is_empty(), "a swept stream leaves nothing behind");
    }
}
