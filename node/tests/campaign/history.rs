//! What a campaign run records: every client operation's steps and every fault, with wall
//! times in milliseconds since the run started. Written as JSONL beside the run for reading,
//! and checked by [`super::checker`].

use serde::{Deserialize, Serialize};
use std::sync::Mutex;
use std::time::Instant;

/// How a round trip travels: a 2025-11-25 session with the question on the call's SSE stream and
/// the answer POSTed, or a 2026-07-28 multi-round-trip call (the answers in a retry).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
pub enum Era {
    #[serde(rename = "2025-sse")]
    Sse2025,
    #[serde(rename = "2026-mrtr")]
    Mrtr2026,
}

/// One step of a client operation (an elicitation or sampling round trip).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum Event {
    /// The call runs on `node` (reached through nginx when `balanced`); its answer will carry
    /// `value` (unique in the run). `session` is empty for 2026-07-28 calls.
    Invoke { op: u64, t: u64, kind: String, era: Era, balanced: bool, node: usize, session: String, value: String, late: bool },
    /// The server's question arrived (on the call's stream, or as its `input_required` result).
    Asked { op: u64, t: u64 },
    /// The answer was posted to `node` (`None`: through nginx, no node answered); `status` is the
    /// HTTP status, 0 when no answer came, and 202 for an acknowledged answer in either era (a
    /// 2026 retry whose answers were delivered counts as acknowledged). A 2026 call may record
    /// several: a retry the cluster could not take is sent again.
    Answered { op: u64, t: u64, node: Option<usize>, status: u16 },
    /// The call ended with a result; `echo` is the value the handler received (if it said).
    Ok { op: u64, t: u64, echo: Option<String> },
    /// The call ended with an error (a timeout, the node stopping).
    Fail { op: u64, t: u64, error: String },
    /// Nobody knows: the stream broke or nothing came in time.
    Unknown { op: u64, t: u64, error: String },
    /// A write (opening a session) sent at `sent` committed; the probe of liveness.
    Committed { t: u64, sent: u64, node: usize, session: String },
}

impl Event {
    pub fn t(&self) -> u64 {
        match self {
            Event::Invoke { t, .. }
            | Event::Asked { t, .. }
            | Event::Answered { t, .. }
            | Event::Ok { t, .. }
            | Event::Fail { t, .. }
            | Event::Unknown { t, .. }
            | Event::Committed { t, .. } => *t,
        }
    }
}

/// One fault as the nemesis applied it: `nodes` were affected from `start` to `end`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Fault {
    pub kind: String,
    pub nodes: Vec<usize>,
    pub start: u64,
    pub end: u64,
    /// For a killed leader: when its successor first committed a write (the failover time is
    /// `recovered - start`).
    pub leader: bool,
}

/// The run's clock and its event log.
pub struct Recorder {
    started: Instant,
    events: Mutex<Vec<Event>>,
}

impl Recorder {
    pub fn new() -> Self {
        Self { started: Instant::now(), events: Mutex::default() }
    }

    pub fn now(&self) -> u64 {
        self.started.elapsed().as_millis() as u64
    }

    pub fn record(&self, event: Event) {
        self.events.lock().unwrap().push(event);
    }

    pub fn events(&self) -> Vec<Event> {
        self.events.lock().unwrap().clone()
    }
}
