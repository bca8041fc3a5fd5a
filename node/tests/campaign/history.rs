//! What a campaign run records: every client operation's steps and every fault, with wall
//! times in milliseconds since the run started. Written as JSONL beside the run for reading,
//! and checked by [`super::checker`].

use serde::{Deserialize, Serialize};
use std::sync::Mutex;
use std::time::Instant;

/// One step of a client operation (an elicitation or sampling round trip).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum Event {
    /// The call goes to `node`; its answer will carry `value` (unique in the run).
    Invoke { op: u64, t: u64, kind: String, node: usize, session: String, value: String, late: bool },
    /// The server's question arrived on the call's stream.
    Asked { op: u64, t: u64 },
    /// The answer was posted to `node`; `status` is the HTTP status, 0 when no answer came.
    Answered { op: u64, t: u64, node: usize, status: u16 },
    /// The call ended with a result; `echo` is the value the handler received (if it said).
    Ok { op: u64, t: u64, echo: Option<String> },
    /// The call ended with an error (a timeout, the node stopping).
    Fail { op: u64, t: u64, error: String },
    /// Nobody knows: the stream broke or nothing came in time.
    Unknown { op: u64, t: u64, error: String },
    /// A write (opening a session) committed; the probe of liveness.
    Committed { t: u64, node: usize, session: String },
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
