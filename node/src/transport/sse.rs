//! Resumable SSE streams.
//!
//! Every stream the server opens (the response to one POST, or a session's standalone GET
//! stream) is an [`EventLog`]: producers append to it, HTTP responses are readers over it. A
//! reader that goes away loses nothing: a new GET with `Last-Event-ID` reads on from where the
//! client stopped. The server can also end the current readers (SSE polling) while the stream
//! goes on.

use crate::protocol::jsonrpc::Message;
use crate::server::Outgoing;
use crate::server::correlation::{IdSealer, SealedEvent};
use crate::session::SessionId;
use bytes::Bytes;
use std::collections::{HashMap, VecDeque};
use std::convert::Infallible;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::sync::{mpsc, watch};

struct LogState {
    /// `(seq, data)`; `None` data is the priming event.
    events: VecDeque<(u64, Option<String>)>,
    next_seq: u64,
    closed: bool,
    /// Bumped to end the readers attached so far.
    reader_generation: u64,
    /// Readers of older generations stop before this sequence number.
    disconnect_at: u64,
}

/// One resumable stream of events.
pub struct EventLog {
    pub node: u64,
    pub stream: u64,
    pub session: SessionId,
    sealer: Arc<IdSealer>,
    capacity: usize,
    state: Mutex<LogState>,
    changed: watch::Sender<()>,
}

impl EventLog {
    fn new(node: u64, stream: u64, session: SessionId, sealer: Arc<IdSealer>, capacity: usize, priming: bool) -> Arc<Self> {
        let mut events = VecDeque::new();
        if priming {
            events.push_back((0, None));
        }
        let state = LogState { events, next_seq: 1, closed: false, reader_generation: 0, disconnect_at: 0 };
        Arc::new(EventLog { node, stream, session, sealer, capacity, state: Mutex::new(state), changed: watch::channel(()).0 })
    }

    /// The sealed id of event `seq`: names this node as the owner, opens only in the session.
    fn id(&self, seq: u64) -> String {
        self.sealer.seal_event(SealedEvent { owner: self.node, stream: self.stream, seq }, self.session.as_str())
    }

    /// Sequence number the next reader without `Last-Event-ID` starts at.
    pub fn end(&self) -> u64 {
        self.state.lock().unwrap().next_seq
    }

    pub fn push(&self, message: &Message) {
        let mut state = self.state.lock().unwrap();
        let seq = state.next_seq;
        state.next_seq += 1;
        state.events.push_back((seq, Some(message.to_json())));
        if state.events.len() > self.capacity {
            state.events.pop_front();
        }
        drop(state);
        self.changed.send_replace(());
    }

    pub fn apply(&self, outgoing: Outgoing) {
        match outgoing {
            Outgoing::Message(m) => self.push(&m),
            Outgoing::Disconnect => self.disconnect_readers(),
        }
    }

    /// No more events will come; readers end after the last one.
    pub fn close(&self) {
        self.state.lock().unwrap().closed = true;
        self.changed.send_replace(());
    }

    pub fn is_closed(&self) -> bool {
        self.state.lock().unwrap().closed
    }

    /// End the HTTP responses reading this log once they have sent what is in it now; clients
    /// resume with `Last-Event-ID`. Readers attached later are unaffected.
    pub fn disconnect_readers(&self) {
        let mut state = self.state.lock().unwrap();
        state.reader_generation += 1;
        state.disconnect_at = state.next_seq;
        drop(state);
        self.changed.send_replace(());
    }

    /// An SSE body over this log from sequence `from` on, as encoded bytes. The first event
    /// carries `retry`; idle periods get keep-alive comments.
    pub fn reader(self: &Arc<Self>, from: u64, retry: Duration, keep_alive: Duration) -> impl futures::Stream<Item = Result<Bytes, Infallible>> + use<> {
        let generation = self.state.lock().unwrap().reader_generation;
        let rx = self.changed.subscribe();
        let log = self.clone();
        futures::stream::unfold((log, rx, from, true), move |(log, mut rx, mut cursor, first)| async move {
            loop {
                rx.mark_unchanged();
                {
                    let state = log.state.lock().unwrap();
                    let disconnected = state.reader_generation != generation;
                    let next = state.events.iter().find(|(seq, _)| *seq >= cursor);
                    match next {
                        Some((seq, data)) if !disconnected || *seq < state.disconnect_at => {
                            let event = encode_event(&log.id(*seq), data.as_deref(), first.then_some(retry));
                            cursor = seq + 1;
                            drop(state);
                            return Some((Ok(event), (log, rx, cursor, false)));
                        }
                        _ if disconnected || state.closed => return None,
                        _ => {}
                    }
                }
                match tokio::time::timeout(keep_alive, rx.changed()).await {
                    Ok(Ok(())) => {}
                    Ok(Err(_)) => return None,
                    Err(_) => return Some((Ok(Bytes::from_static(b": keep-alive\n\n")), (log, rx, cursor, first))),
                }
            }
        })
    }
}

/// One SSE event. `data` of `None` is the priming event: an id and an empty data field.
fn encode_event(id: &str, data: Option<&str>, retry: Option<Duration>) -> Bytes {
    let mut out = format!("id: {id}\n");
    if let Some(retry) = retry {
        out.push_str(&format!("retry: {}\n", retry.as_millis()));
    }
    // JSON from serde_json has no raw newlines, so one data line suffices.
    out.push_str("data: ");
    out.push_str(data.unwrap_or(""));
    out.push_str("\n\n");
    Bytes::from(out)
}

/// Pump a request's outgoing messages into its log, closing it when the request is done.
pub fn pump(log: Arc<EventLog>, mut rx: mpsc::UnboundedReceiver<Outgoing>) {
    tokio::spawn(async move {
        while let Some(outgoing) = rx.recv().await {
            log.apply(outgoing);
        }
        log.close();
    });
}

/// The streams of this node, for resumption.
pub struct StreamRegistry {
    node: u64,
    sealer: Arc<IdSealer>,
    next: AtomicU64,
    streams: Mutex<HashMap<u64, Arc<EventLog>>>,
    standalone: Mutex<HashMap<SessionId, Arc<EventLog>>>,
    /// How long a finished stream stays resumable.
    retention: Duration,
    capacity: usize,
}

impl StreamRegistry {
    pub fn new(node: u64, sealer: Arc<IdSealer>, retention: Duration, capacity: usize) -> Arc<Self> {
        Arc::new(StreamRegistry {
            node,
            sealer,
            next: AtomicU64::new(1),
            streams: Mutex::default(),
            standalone: Mutex::default(),
            retention,
            capacity,
        })
    }

    /// A new stream for the response to one request.
    pub fn open(self: &Arc<Self>, session: &SessionId, priming: bool) -> Arc<EventLog> {
        let stream = self.next.fetch_add(1, Ordering::Relaxed);
        let log = EventLog::new(self.node, stream, session.clone(), self.sealer.clone(), self.capacity, priming);
        self.streams.lock().unwrap().insert(stream, log.clone());
        // Forget the stream once it is closed and its retention passed.
        let (registry, watched) = (Arc::downgrade(self), log.clone());
        tokio::spawn(async move {
            let mut rx = watched.changed.subscribe();
            while !watched.is_closed() {
                if rx.changed().await.is_err() {
                    break;
                }
            }
            tokio::time::sleep(registry.upgrade().map(|r| r.retention).unwrap_or_default()).await;
            if let Some(registry) = registry.upgrade() {
                registry.streams.lock().unwrap().remove(&watched.stream);
            }
        });
        log
    }

    /// The session's standalone stream, created on first use. Returns it and whether it is new.
    pub fn standalone(&self, session: &SessionId, priming: bool) -> (Arc<EventLog>, bool) {
        let mut standalone = self.standalone.lock().unwrap();
        if let Some(log) = standalone.get(session) {
            return (log.clone(), false);
        }
        let stream = self.next.fetch_add(1, Ordering::Relaxed);
        let log = EventLog::new(self.node, stream, session.clone(), self.sealer.clone(), self.capacity, priming);
        standalone.insert(session.clone(), log.clone());
        self.streams.lock().unwrap().insert(stream, log.clone());
        (log, true)
    }

    /// A stream of this node, if it still has it.
    pub fn find(&self, stream: u64) -> Option<Arc<EventLog>> {
        self.streams.lock().unwrap().get(&stream).cloned()
    }

    /// Drop every stream of a terminated session.
    pub fn forget_session(&self, session: &SessionId) {
        if let Some(log) = self.standalone.lock().unwrap().remove(session) {
            log.close();
        }
        self.streams.lock().unwrap().retain(|_, log| {
            let keep = &log.session != session;
            if !keep {
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

impl StreamRegistry {
    /// The SSE body of a local stream of `session` from sequence `from` on, for a relay.
    pub fn reader_for(&self, session: &SessionId, stream: u64, from: u64, retry: Duration, keep_alive: Duration) -> Option<impl futures::Stream<Item = Result<Bytes, Infallible>> + use<>> {
        let log = self.find(stream).filter(|log| &log.session == session)?;
        Some(log.reader(from, retry, keep_alive))
    }
}
