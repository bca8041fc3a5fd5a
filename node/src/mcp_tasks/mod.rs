//! Task records of the MCP Tasks extension (`io.modelcontextprotocol/tasks`): a tool call the
//! server turned into a task, that any replica can report on, feed input to and cancel.
//!
//! The store is shaped like the mailbox: `create` returns once a `get` anywhere finds the
//! task; the owner (the node running the handler) hears of answers and cancellation through
//! [`TaskStore::subscribe`]; every operation returns a typed outcome. The record logic is pure
//! ([`table`]) and shared by the in-memory store and the Raft state machine.

#[cfg(any(test, feature = "testing"))]
pub mod contract;
mod memory;
pub mod table;

pub use memory::InMemoryTaskStore;

use crate::clock::Millis;
use crate::id128::Id128;
use crate::mailbox::{BoxError, NodeId};
use crate::protocol::json_text::JsonText;
use async_trait::async_trait;
use serde::{Deserialize, Serialize};
use serde_json::Value;
use std::fmt;
use std::time::Duration;
use table::TaskRecord;
use tokio::sync::mpsc;

/// A task's id: 128 random bits (unguessable: there is no `tasks/list`, and knowing an id is
/// what lets a client read or cancel the task), written as 32 hex digits.
#[derive(Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct TaskId(Id128);

impl TaskId {
    pub fn random() -> Self {
        TaskId(Id128::random())
    }
    pub fn from_bits(bits: u128) -> Self {
        TaskId(Id128::from_bits(bits))
    }
}

impl fmt::Display for TaskId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(&self.0, f)
    }
}

impl fmt::Debug for TaskId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "TaskId({self})")
    }
}

impl std::str::FromStr for TaskId {
    type Err = ();
    fn from_str(text: &str) -> Result<Self, ()> {
        Id128::parse(text).map(TaskId).ok_or(())
    }
}

impl Serialize for TaskId {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.collect_str(self)
    }
}

impl<'de> Deserialize<'de> for TaskId {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let text = std::borrow::Cow::<str>::deserialize(deserializer)?;
        text.parse().map_err(|_| serde::de::Error::custom(format!("invalid task id {text:?}")))
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum TaskStatus {
    Working,
    InputRequired,
    Completed,
    Failed,
    Cancelled,
}

impl TaskStatus {
    pub fn is_terminal(self) -> bool {
        matches!(self, TaskStatus::Completed | TaskStatus::Failed | TaskStatus::Cancelled)
    }
    pub fn label(self) -> &'static str {
        match self {
            TaskStatus::Working => "working",
            TaskStatus::InputRequired => "input_required",
            TaskStatus::Completed => "completed",
            TaskStatus::Failed => "failed",
            TaskStatus::Cancelled => "cancelled",
        }
    }
}

/// How a task ended.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub enum TaskOutcome {
    /// The tool's result (a `CallToolResult`, `isError` results included).
    Completed(JsonText),
    /// A JSON-RPC error object.
    Failed(JsonText),
    Cancelled,
}

/// What the owner of a task hears.
#[derive(Debug, Clone, PartialEq)]
pub enum TaskEvent {
    Answered { id: TaskId, key: String, value: JsonText },
    CancelRequested { id: TaskId },
}

impl TaskEvent {
    pub fn task(&self) -> TaskId {
        match self {
            TaskEvent::Answered { id, .. } | TaskEvent::CancelRequested { id } => *id,
        }
    }
}

/// Why an operation changed nothing.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, thiserror::Error)]
pub enum TaskRefusal {
    #[error("Task not found")]
    NotFound,
    #[error("Task has expired")]
    Expired,
    #[error("a task with this id exists")]
    Exists,
    #[error("the task is {} already", .0.label())]
    Terminal(TaskStatus),
    #[error("input request key {0:?} was used before in this task")]
    KeyReused(String),
    #[error("the server holds its limit of {0} tasks (--max-tasks); retry later")]
    TooMany(usize),
}

#[derive(Debug, thiserror::Error)]
pub enum TaskError {
    #[error(transparent)]
    Refused(#[from] TaskRefusal),
    /// The replicated store could not commit or read (no quorum, shutting down...).
    #[error("task store unavailable: {0}")]
    Unavailable(#[source] BoxError),
    /// The value is larger than the store replicates; nothing was written.
    #[error("too large to replicate: {size} bytes, at most {limit}")]
    TooLarge { size: usize, limit: usize },
}

/// A task as a client sees it.
#[derive(Debug, Clone, PartialEq)]
pub struct TaskView {
    pub id: TaskId,
    pub record: TaskRecord,
}

impl TaskView {
    /// The fields of a `Task` / `DetailedTask` (`taskId`, `status`, ISO 8601 times, `ttlMs`,
    /// `pollIntervalMs`, and by status the outstanding `inputRequests`, `result` or `error`).
    pub fn to_json(&self) -> Value {
        let r = &self.record;
        let mut task = serde_json::json!({
            "taskId": self.id.to_string(),
            "status": r.status,
            "createdAt": crate::clock::iso8601(r.created_at),
            "lastUpdatedAt": crate::clock::iso8601(r.updated_at),
            "ttlMs": r.ttl_ms,
            "pollIntervalMs": r.poll_ms,
        });
        if let Some(message) = &r.status_message {
            task["statusMessage"] = Value::String(message.clone());
        }
        match r.status {
            TaskStatus::InputRequired => {
                let requests: serde_json::Map<String, Value> = r.input_requests.iter().map(|(k, v)| (k.clone(), v.decode())).collect();
                task["inputRequests"] = Value::Object(requests);
            }
            TaskStatus::Completed => task["result"] = r.result.as_ref().map(JsonText::decode).unwrap_or(Value::Null),
            TaskStatus::Failed => task["error"] = r.error.as_ref().map(JsonText::decode).unwrap_or(Value::Null),
            TaskStatus::Working | TaskStatus::Cancelled => {}
        }
        task
    }
}

/// Settings of new tasks.
#[derive(Debug, Clone, Copy)]
pub struct TaskSettings {
    pub ttl: Duration,
    pub poll_interval: Duration,
    pub max_tasks: usize,
}

impl Default for TaskSettings {
    fn default() -> Self {
        TaskSettings { ttl: Duration::from_secs(3600), poll_interval: Duration::from_millis(500), max_tasks: 10_000 }
    }
}

/// The task store every backend (in-memory, Raft) implements.
#[async_trait]
pub trait TaskStore: Send + Sync + 'static {
    /// Create a `working` task owned by `owner`. Once this returns, `get` on any node finds it.
    async fn create(&self, id: TaskId, owner: NodeId, settings: TaskSettings) -> Result<(), TaskError>;
    /// The handler waits on input: record the requests (`{method, params}` by key).
    async fn ask(&self, id: TaskId, requests: Vec<(String, Value)>) -> Result<(), TaskError>;
    /// The client's answers: the outstanding keys among them are taken (the owner hears of each);
    /// returns those keys.
    async fn answer(&self, id: TaskId, responses: Vec<(String, Value)>) -> Result<Vec<String>, TaskError>;
    /// Ask the owner to stop the task (a finished task is left as it is).
    async fn cancel(&self, id: TaskId) -> Result<(), TaskError>;
    /// End the task; refused if it ended already.
    async fn finish(&self, id: TaskId, outcome: TaskOutcome) -> Result<(), TaskError>;
    /// The task as it is now, including every change committed before the call, on any node.
    async fn get(&self, id: TaskId) -> Result<TaskView, TaskError>;
    /// What the owner of `id` hears (answers, cancellation), until the receiver is dropped.
    /// Subscribe before `create`, so nothing is missed.
    fn subscribe(&self, id: TaskId) -> mpsc::UnboundedReceiver<TaskEvent>;
}

/// Forward `events` to their subscribers, dropping those whose receiver is gone.
pub fn dispatch(
    subscribers: &std::sync::Mutex<std::collections::HashMap<TaskId, mpsc::UnboundedSender<TaskEvent>>>,
    events: Vec<TaskEvent>,
) {
    if events.is_empty() {
        return;
    }
    let mut subscribers = subscribers.lock().unwrap();
    for event in events {
        let id = event.task();
        if let Some(tx) = subscribers.get(&id)
            && tx.send(event).is_err()
        {
            subscribers.remove(&id);
        }
    }
}

/// `(key, value)` pairs as the JSON text the records keep.
pub fn json_texts(pairs: Vec<(String, Value)>) -> Vec<(String, JsonText)> {
    pairs.into_iter().map(|(k, v)| (k, JsonText::from(&v))).collect()
}

/// Milliseconds of a `Duration`, as stored.
pub fn millis(d: Duration) -> Millis {
    d.as_millis() as Millis
}
