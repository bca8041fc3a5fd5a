//! The Tasks extension (`io.modelcontextprotocol/tasks`) on the server: a `tools/call` that
//! becomes a task, run detached on the node that got it, and `tasks/get`, `tasks/update` and
//! `tasks/cancel` answered by any replica through the replicated task records.
//!
//! A task is the driver of a 2026-07-28 call (`super::mrtr`) in another mode: the call is
//! answered with a `CreateTaskResult` once the task's record is committed, and the handler keeps
//! running; an ask becomes the task's `input_required` with its requests (`TaskAsk`), answered by
//! `tasks/update` on any replica (the owner hears of each answer as it is applied); the client's
//! `tasks/cancel` reaches the owner the same way; the handler's result or JSON-RPC error ends the
//! task (`TaskFinish`). Progress and log notifications are not sent for tasks.

use super::handle::Server;
use super::round::{ModernCall, ModernClient};
use crate::mcp_tasks::{TaskError, TaskEvent, TaskId, TaskOutcome, TaskRefusal, TaskStore};
use crate::protocol::json_text::JsonText;
use crate::protocol::jsonrpc::{ErrorObject, INTERNAL_ERROR, LIMIT_REACHED, MISSING_REQUIRED_CLIENT_CAPABILITY};
use crate::protocol::types::TASKS_EXTENSION;
use serde_json::{Map, Value, json};
use std::collections::HashSet;
use std::future::Future;
use std::pin::Pin;
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

/// -32021 for a request that needs the Tasks extension its `_meta` did not declare.
pub(super) fn extension_required() -> ErrorObject {
    ErrorObject::new(MISSING_REQUIRED_CLIENT_CAPABILITY, "Missing required client capability: the Tasks extension")
        .with_data(json!({"requiredCapabilities": {"extensions": {TASKS_EXTENSION: {}}}}))
}

/// How a task operation's failure reads to the client: unknown or expired ids are invalid
/// params (-32602, "Failed to <what> task: Task not found"), an unavailable store -32603.
fn task_error(what: &str, e: TaskError) -> ErrorObject {
    match e {
        TaskError::Refused(refusal @ (TaskRefusal::NotFound | TaskRefusal::Expired)) => {
            ErrorObject::invalid_params(format!("Failed to {what} task: {refusal}"))
        }
        TaskError::Refused(refusal @ TaskRefusal::TooMany(max)) => {
            ErrorObject::new(LIMIT_REACHED, refusal.to_string()).with_data(json!({"limit": "tasks", "max": max}))
        }
        TaskError::Refused(refusal) => ErrorObject::invalid_params(format!("Failed to {what} task: {refusal}")),
        e => ErrorObject::new(INTERNAL_ERROR, format!("Failed to {what} task: {e}")),
    }
}

impl Server {
    pub(super) fn task_store(&self) -> &dyn TaskStore {
        self.inner.tasks.as_ref()
    }

    /// `tasks/get`, `tasks/update`, `tasks/cancel`, from any replica.
    pub(super) async fn answer_task_method(&self, client: &ModernClient, method: &str, params: &Value) -> Result<Value, ErrorObject> {
        if !client.capabilities.tasks {
            return Err(extension_required());
        }
        let what = match method {
            "tasks/get" => "retrieve",
            "tasks/update" => "update",
            _ => "cancel",
        };
        let id: TaskId = params
            .get("taskId")
            .and_then(Value::as_str)
            .and_then(|id| id.parse().ok())
            .ok_or_else(|| ErrorObject::invalid_params(format!("Failed to {what} task: Task not found")))?;
        let store = self.task_store();
        match method {
            "tasks/get" => {
                let view = store.get(id).await.map_err(|e| task_error(what, e))?;
                Ok(view.to_json())
            }
            "tasks/update" => {
                let responses: Vec<(String, Value)> = match params.get("inputResponses") {
                    Some(Value::Object(given)) => given.iter().map(|(k, v)| (k.clone(), v.clone())).collect(),
                    None | Some(Value::Null) => Vec::new(),
                    Some(_) => return Err(ErrorObject::invalid_params("inputResponses must be an object")),
                };
                let taken = store.answer(id, responses).await.map_err(|e| task_error(what, e))?;
                tracing::debug!(task = %id, answered = taken.len(), "task input delivered");
                Ok(json!({}))
            }
            _ => {
                store.cancel(id).await.map_err(|e| task_error(what, e))?;
                Ok(json!({}))
            }
        }
    }

    /// Make the call a task: commit its record, then answer the `CreateTaskResult`. `None` when
    /// the record could not be created (the error is the answer).
    pub(super) async fn create_task(&self) -> Result<(TaskId, mpsc::UnboundedReceiver<TaskEvent>, Value), ErrorObject> {
        let id = TaskId::random();
        let settings = self.inner.config.tasks;
        // Subscribed before the record exists, so no answer or cancellation can slip by.
        let events = self.task_store().subscribe(id);
        self.task_store().create(id, self.node_id(), settings).await.map_err(|e| task_error("create", e))?;
        self.metrics().task_created();
        let now = crate::clock::iso8601(crate::clock::now_ms());
        let created = json!({
            "resultType": "task",
            "taskId": id.to_string(),
            "status": "working",
            "createdAt": now,
            "lastUpdatedAt": now,
            "ttlMs": crate::mcp_tasks::millis(settings.ttl),
            "pollIntervalMs": crate::mcp_tasks::millis(settings.poll_interval),
        });
        tracing::debug!(task = %id, "call became a task");
        Ok((id, events, created))
    }

    /// Run a task's handler to its end: publish its asks, hand it the answers, stop it when the
    /// client cancels, and record how it ended.
    pub(super) async fn run_task<F>(
        &self,
        id: TaskId,
        call: &ModernCall,
        mut handler: Pin<&mut F>,
        mut events: mpsc::UnboundedReceiver<TaskEvent>,
        cancel: &CancellationToken,
    ) where
        F: Future<Output = Result<Value, ErrorObject>>,
    {
        let store = self.task_store();
        let mut published: HashSet<String> = HashSet::new();
        // When each outstanding key was asked, for the wait metric.
        let mut asked_at: std::collections::HashMap<String, std::time::Instant> = Default::default();
        let outcome = loop {
            tokio::select! {
                biased;
                _ = cancel.cancelled() => break TaskOutcome::Cancelled,
                result = &mut handler => {
                    break match call.settle(result) {
                        Ok(result) => TaskOutcome::Completed(JsonText::from(&result)),
                        Err(error) => TaskOutcome::Failed(JsonText::from(&json!(error))),
                    };
                }
                event = events.recv() => match event {
                    Some(TaskEvent::Answered { key, value, .. }) => {
                        if let Some(at) = asked_at.remove(&key) {
                            self.metrics().observe_task_input_wait(at.elapsed());
                        }
                        let mut answer = Map::new();
                        answer.insert(key, value.decode());
                        call.answer(answer);
                    }
                    Some(TaskEvent::CancelRequested { .. }) => break TaskOutcome::Cancelled,
                    None => break TaskOutcome::Cancelled,
                },
                _ = call.asked.notified() => {
                    let new: Vec<(String, Value)> = call
                        .outstanding()
                        .into_iter()
                        .filter(|(key, _, _)| !published.contains(key))
                        .map(|(key, _, request)| (key, request))
                        .collect();
                    if new.is_empty() {
                        continue;
                    }
                    published.extend(new.iter().map(|(key, _)| key.clone()));
                    asked_at.extend(new.iter().map(|(key, _)| (key.clone(), std::time::Instant::now())));
                    if let Err(e) = store.ask(id, new).await {
                        tracing::warn!(task = %id, error = %e, "task input requests not recorded; the task fails");
                        break TaskOutcome::Failed(JsonText::from(&json!(ErrorObject::internal(format!("the task could not ask for input: {e}")))));
                    }
                }
            }
        };
        let label = match &outcome {
            TaskOutcome::Completed(_) => "completed",
            TaskOutcome::Failed(_) => "failed",
            TaskOutcome::Cancelled => "cancelled",
        };
        match store.finish(id, outcome).await {
            Ok(()) => tracing::debug!(task = %id, outcome = label, "task ended"),
            // Failed meanwhile (its owner taken for lost) or expired: it stays as it is.
            Err(e) => tracing::debug!(task = %id, error = %e, "task end not recorded"),
        }
        self.metrics().task_ended(label);
    }
}
