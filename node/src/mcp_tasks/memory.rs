//! The task store of a single process: the pure table under a lock, on the wall clock.

use super::table::{Lookup, TaskTable};
use super::{TaskError, TaskEvent, TaskId, TaskOutcome, TaskRefusal, TaskSettings, TaskStore, TaskView, dispatch, millis};
use crate::clock::now_ms;
use crate::mailbox::NodeId;
use async_trait::async_trait;
use serde_json::Value;
use std::collections::HashMap;
use std::sync::Mutex;
use tokio::sync::mpsc;

/// Tasks of this process (`--store memory`, stdio): gone with it.
#[derive(Default)]
pub struct InMemoryTaskStore {
    table: Mutex<TaskTable>,
    subscribers: Mutex<HashMap<TaskId, mpsc::UnboundedSender<TaskEvent>>>,
}

impl InMemoryTaskStore {
    pub fn new() -> Self {
        Self::default()
    }

    /// Run `change` on the table at the current time, then tell the owners what it caused.
    fn change<T>(&self, change: impl FnOnce(&mut TaskTable, u64, &mut Vec<TaskEvent>) -> Result<T, TaskRefusal>) -> Result<T, TaskError> {
        let mut events = Vec::new();
        let result = {
            let mut table = self.table.lock().unwrap();
            let now = now_ms();
            table.expire(now);
            change(&mut table, now, &mut events)
        };
        dispatch(&self.subscribers, events);
        Ok(result?)
    }
}

#[async_trait]
impl TaskStore for InMemoryTaskStore {
    async fn create(&self, id: TaskId, owner: NodeId, settings: TaskSettings) -> Result<(), TaskError> {
        let (ttl, poll) = (millis(settings.ttl), millis(settings.poll_interval));
        self.change(|table, now, _| table.create(now, id, owner, 0, ttl, poll, settings.max_tasks))
    }

    async fn ask(&self, id: TaskId, requests: Vec<(String, Value)>) -> Result<(), TaskError> {
        let requests = super::json_texts(requests);
        self.change(|table, now, _| table.ask(now, &id, &requests))
    }

    async fn answer(&self, id: TaskId, responses: Vec<(String, Value)>) -> Result<Vec<String>, TaskError> {
        let responses = super::json_texts(responses);
        self.change(|table, now, events| table.answer(now, &id, &responses, events))
    }

    async fn cancel(&self, id: TaskId) -> Result<(), TaskError> {
        self.change(|table, now, events| table.cancel(now, &id, events))
    }

    async fn finish(&self, id: TaskId, outcome: TaskOutcome) -> Result<(), TaskError> {
        self.change(|table, now, _| table.finish(now, &id, &outcome))
    }

    async fn get(&self, id: TaskId) -> Result<TaskView, TaskError> {
        let mut table = self.table.lock().unwrap();
        table.expire(now_ms());
        match table.get(&id) {
            Lookup::Found(record) => Ok(TaskView { id, record: record.clone() }),
            Lookup::Expired => Err(TaskRefusal::Expired.into()),
            Lookup::NotFound => Err(TaskRefusal::NotFound.into()),
        }
    }

    fn subscribe(&self, id: TaskId) -> mpsc::UnboundedReceiver<TaskEvent> {
        let (tx, rx) = mpsc::unbounded_channel();
        self.subscribers.lock().unwrap().insert(id, tx);
        rx
    }
}

#[cfg(test)]
mod tests {
    use super::super::contract;
    use super::*;

    #[tokio::test]
    async fn the_in_memory_store_keeps_the_contract() {
        let store = InMemoryTaskStore::new();
        contract::run(&store, &store, 1).await;
    }
}
