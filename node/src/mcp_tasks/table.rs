//! The task records, as pure logic: created, asked, answered, cancelled, finished and expired
//! given the time, with no I/O. The in-memory store runs it on the wall clock; the Raft state
//! machine runs the very same code on log time, so every replica decides identically.

use super::{TaskEvent, TaskId, TaskOutcome, TaskRefusal, TaskStatus};
use crate::clock::Millis;
use crate::mailbox::NodeId;
use crate::protocol::json_text::JsonText;
use serde::{Deserialize, Serialize};
use std::collections::{BTreeMap, BTreeSet, HashMap};

/// How long an expired task is remembered, so a late `tasks/get` is told it expired rather
/// than that it never existed.
pub const EXPIRED_RETENTION_MS: Millis = 10 * 60 * 1000;

/// One task, as every replica keeps it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TaskRecord {
    /// The node running the task's handler.
    pub owner: NodeId,
    /// Which run of the owner's process created it (a restarted owner fails the tasks of its
    /// previous runs: their handlers are gone).
    pub incarnation: u64,
    pub status: TaskStatus,
    pub status_message: Option<String>,
    pub created_at: Millis,
    pub updated_at: Millis,
    pub ttl_ms: Millis,
    pub poll_ms: Millis,
    /// Input requests not answered yet, by key: `{method, params}`.
    pub input_requests: BTreeMap<String, JsonText>,
    /// Every key ever asked in this task: keys are never reused.
    pub used_keys: BTreeSet<String>,
    /// The tool's result (`completed`), or the JSON-RPC error (`failed`).
    pub result: Option<JsonText>,
    pub error: Option<JsonText>,
    pub cancel_requested: bool,
}

impl TaskRecord {
    pub fn expires_at(&self) -> Millis {
        self.created_at.saturating_add(self.ttl_ms)
    }
}

/// What a lookup found.
#[derive(Debug, Clone, PartialEq)]
pub enum Lookup<'a> {
    Found(&'a TaskRecord),
    /// It existed and expired.
    Expired,
    NotFound,
}

#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
pub struct TaskTable {
    /// Written in id order, so replicas at one log index write the same snapshot bytes.
    #[serde(serialize_with = "in_key_order")]
    tasks: HashMap<TaskId, TaskRecord>,
    by_expiry: BTreeSet<(Millis, TaskId)>,
    /// Expired tasks, by when they are forgotten.
    expired: BTreeMap<TaskId, Millis>,
    expired_by_time: BTreeSet<(Millis, TaskId)>,
}

fn in_key_order<S: serde::Serializer>(tasks: &HashMap<TaskId, TaskRecord>, serializer: S) -> Result<S::Ok, S::Error> {
    let mut sorted: Vec<_> = tasks.iter().collect();
    sorted.sort_unstable_by(|a, b| a.0.cmp(b.0));
    serializer.collect_map(sorted)
}

impl TaskTable {
    /// The table in a canonical order, for a digest of the replicated state.
    pub fn canonical(&self) -> impl serde::Serialize + '_ {
        let mut tasks: Vec<_> = self.tasks.iter().collect();
        tasks.sort_unstable_by(|a, b| a.0.cmp(b.0));
        (tasks, &self.by_expiry, &self.expired, &self.expired_by_time)
    }

    pub fn len(&self) -> usize {
        self.tasks.len()
    }

    pub fn is_empty(&self) -> bool {
        self.tasks.is_empty()
    }

    pub fn get(&self, id: &TaskId) -> Lookup<'_> {
        match self.tasks.get(id) {
            Some(task) => Lookup::Found(task),
            None if self.expired.contains_key(id) => Lookup::Expired,
            None => Lookup::NotFound,
        }
    }

    /// Live (not terminal) tasks `node` owns.
    pub fn live_on(&self, node: NodeId) -> usize {
        self.tasks.values().filter(|t| t.owner == node && !t.status.is_terminal()).count()
    }

    /// Live tasks `node` owns from another run than `incarnation`.
    pub fn live_of_earlier_runs(&self, node: NodeId, incarnation: u64) -> usize {
        self.tasks.values().filter(|t| t.owner == node && t.incarnation != incarnation && !t.status.is_terminal()).count()
    }

    /// Tasks by status, for metrics.
    pub fn count_by_status(&self) -> BTreeMap<TaskStatus, usize> {
        let mut counts = BTreeMap::new();
        for task in self.tasks.values() {
            *counts.entry(task.status).or_default() += 1;
        }
        counts
    }

    /// Forget what fell due at `now`: tasks past their TTL (remembered as expired for a while),
    /// and expired ones past that.
    pub fn expire(&mut self, now: Millis) {
        while let Some((at, id)) = self.by_expiry.first().copied() {
            if at > now {
                break;
            }
            self.by_expiry.pop_first();
            if self.tasks.remove(&id).is_some() {
                let forget_at = at.saturating_add(EXPIRED_RETENTION_MS);
                self.expired.insert(id, forget_at);
                self.expired_by_time.insert((forget_at, id));
            }
        }
        while let Some((at, id)) = self.expired_by_time.first().copied() {
            if at > now {
                break;
            }
            self.expired_by_time.pop_first();
            self.expired.remove(&id);
        }
    }

    #[allow(clippy::too_many_arguments)]
    pub fn create(
        &mut self,
        now: Millis,
        id: TaskId,
        owner: NodeId,
        incarnation: u64,
        ttl_ms: Millis,
        poll_ms: Millis,
        max_tasks: usize,
    ) -> Result<(), TaskRefusal> {
        if self.tasks.contains_key(&id) || self.expired.contains_key(&id) {
            return Err(TaskRefusal::Exists);
        }
        if self.tasks.len() >= max_tasks {
            return Err(TaskRefusal::TooMany(max_tasks));
        }
        let record = TaskRecord {
            owner,
            incarnation,
            status: TaskStatus::Working,
            status_message: None,
            created_at: now,
            updated_at: now,
            ttl_ms,
            poll_ms,
            input_requests: BTreeMap::new(),
            used_keys: BTreeSet::new(),
            result: None,
            error: None,
            cancel_requested: false,
        };
        self.by_expiry.insert((record.expires_at(), id));
        self.tasks.insert(id, record);
        Ok(())
    }

    fn live(&mut self, id: &TaskId) -> Result<&mut TaskRecord, TaskRefusal> {
        match self.tasks.get_mut(id) {
            Some(task) if task.status.is_terminal() => Err(TaskRefusal::Terminal(task.status)),
            Some(task) => Ok(task),
            None if self.expired.contains_key(id) => Err(TaskRefusal::Expired),
            None => Err(TaskRefusal::NotFound),
        }
    }

    /// The handler asks for input: the task is `input_required` until every key is answered.
    /// A key asked before in this task is refused (nothing changes).
    pub fn ask(&mut self, now: Millis, id: &TaskId, requests: &[(String, JsonText)]) -> Result<(), TaskRefusal> {
        let task = self.live(id)?;
        if let Some((key, _)) = requests.iter().find(|(key, _)| task.used_keys.contains(key)) {
            return Err(TaskRefusal::KeyReused(key.clone()));
        }
        for (key, request) in requests {
            task.used_keys.insert(key.clone());
            task.input_requests.insert(key.clone(), request.clone());
        }
        if !task.input_requests.is_empty() {
            task.status = TaskStatus::InputRequired;
        }
        task.updated_at = now;
        Ok(())
    }

    /// The client answers: keys outstanding now are taken (each wakes the owner), others are
    /// ignored. Back to `working` once nothing is outstanding. Returns the keys taken.
    pub fn answer(
        &mut self,
        now: Millis,
        id: &TaskId,
        responses: &[(String, JsonText)],
        events: &mut Vec<TaskEvent>,
    ) -> Result<Vec<String>, TaskRefusal> {
        let task = match self.live(id) {
            // Answers to a finished task are acknowledged and ignored.
            Err(TaskRefusal::Terminal(_)) => return Ok(Vec::new()),
            other => other?,
        };
        let mut taken = Vec::new();
        for (key, value) in responses {
            if task.input_requests.remove(key).is_some() {
                events.push(TaskEvent::Answered { id: *id, key: key.clone(), value: value.clone() });
                taken.push(key.clone());
            }
        }
        if !taken.is_empty() {
            task.updated_at = now;
            if task.input_requests.is_empty() {
                task.status = TaskStatus::Working;
            }
        }
        Ok(taken)
    }

    /// The client asks to stop: the owner is told; a finished task stays as it is.
    pub fn cancel(&mut self, now: Millis, id: &TaskId, events: &mut Vec<TaskEvent>) -> Result<(), TaskRefusal> {
        let task = match self.live(id) {
            Err(TaskRefusal::Terminal(_)) => return Ok(()),
            other => other?,
        };
        if !task.cancel_requested {
            task.cancel_requested = true;
            task.updated_at = now;
            events.push(TaskEvent::CancelRequested { id: *id });
        }
        Ok(())
    }

    /// The owner ends the task. A terminal status never changes: a second finish is refused.
    pub fn finish(&mut self, now: Millis, id: &TaskId, outcome: &TaskOutcome) -> Result<(), TaskRefusal> {
        let task = self.live(id)?;
        task.input_requests.clear();
        task.updated_at = now;
        match outcome {
            TaskOutcome::Completed(result) => {
                task.status = TaskStatus::Completed;
                task.result = Some(result.clone());
            }
            TaskOutcome::Failed(error) => {
                task.status = TaskStatus::Failed;
                task.error = Some(error.clone());
            }
            TaskOutcome::Cancelled => {
                task.status = TaskStatus::Cancelled;
                task.status_message = Some("cancelled by the client".into());
            }
        }
        Ok(())
    }

    /// The owner `node` is gone (or restarted as another incarnation than `survivor`): its live
    /// tasks fail. Returns how many.
    pub fn owner_lost(&mut self, now: Millis, node: NodeId, survivor: Option<u64>) -> usize {
        let mut failed = 0;
        for task in self.tasks.values_mut() {
            if task.owner == node && !task.status.is_terminal() && Some(task.incarnation) != survivor {
                task.status = TaskStatus::Failed;
                task.input_requests.clear();
                task.updated_at = now;
                let error = serde_json::json!({"code": -32603, "message": format!("task owner node {node} lost; the task's work is gone")});
                task.error = Some(JsonText::from(&error));
                failed += 1;
            }
        }
        failed
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn text(v: serde_json::Value) -> JsonText {
        JsonText::from(&v)
    }

    fn table_with(id: TaskId) -> TaskTable {
        let mut table = TaskTable::default();
        table.create(1_000, id, 1, 7, 60_000, 500, 10).unwrap();
        table
    }

    #[test]
    fn a_task_asks_is_answered_in_parts_and_finishes_once() {
        let id = TaskId::from_bits(9);
        let mut table = table_with(id);
        let mut events = Vec::new();
        table.ask(1_100, &id, &[("a".into(), text(json!({"method": "elicitation/create"}))), ("b".into(), text(json!({})))]).unwrap();
        let Lookup::Found(task) = table.get(&id) else { panic!() };
        assert_eq!(task.status, TaskStatus::InputRequired);
        // A partial answer (and a stranger key): one taken, still input_required.
        assert_eq!(
            table.answer(1_200, &id, &[("a".into(), text(json!(1))), ("zzz".into(), text(json!(2)))], &mut events).unwrap(),
            vec!["a"]
        );
        assert_eq!(events, vec![TaskEvent::Answered { id, key: "a".into(), value: text(json!(1)) }]);
        let Lookup::Found(task) = table.get(&id) else { panic!() };
        assert_eq!((task.status, task.input_requests.len()), (TaskStatus::InputRequired, 1));
        // Answered twice: the second is ignored.
        assert!(table.answer(1_250, &id, &[("a".into(), text(json!(3)))], &mut events).unwrap().is_empty());
        table.answer(1_300, &id, &[("b".into(), text(json!(2)))], &mut events).unwrap();
        let Lookup::Found(task) = table.get(&id) else { panic!() };
        assert_eq!(task.status, TaskStatus::Working);
        // Keys are never reused within a task.
        assert_eq!(table.ask(1_400, &id, &[("a".into(), text(json!({})))]), Err(TaskRefusal::KeyReused("a".into())));
        table.finish(1_500, &id, &TaskOutcome::Completed(text(json!({"content": []})))).unwrap();
        assert_eq!(table.finish(1_600, &id, &TaskOutcome::Cancelled), Err(TaskRefusal::Terminal(TaskStatus::Completed)));
        // Cancelling or answering a finished task is a no-op.
        let mut after = Vec::new();
        table.cancel(1_700, &id, &mut after).unwrap();
        assert!(table.answer(1_700, &id, &[("b".into(), text(json!(1)))], &mut after).unwrap().is_empty());
        assert!(after.is_empty());
        let Lookup::Found(task) = table.get(&id) else { panic!() };
        assert_eq!((task.status, task.updated_at), (TaskStatus::Completed, 1_500));
    }

    #[test]
    fn cancel_tells_the_owner_once_and_expiry_follows_the_ttl() {
        let id = TaskId::from_bits(1);
        let mut table = table_with(id);
        let mut events = Vec::new();
        table.cancel(2_000, &id, &mut events).unwrap();
        table.cancel(2_001, &id, &mut events).unwrap();
        assert_eq!(events, vec![TaskEvent::CancelRequested { id }]);
        table.expire(60_999);
        assert!(matches!(table.get(&id), Lookup::Found(_)));
        table.expire(61_000);
        assert_eq!(table.get(&id), Lookup::Expired);
        assert_eq!(table.create(61_000, id, 1, 7, 1, 1, 10), Err(TaskRefusal::Exists), "an expired id is not reused");
        table.expire(61_000 + EXPIRED_RETENTION_MS);
        assert_eq!(table.get(&TaskId::from_bits(1)), Lookup::NotFound);
        assert_eq!(table.get(&TaskId::from_bits(2)), Lookup::NotFound);
    }

    #[test]
    fn a_lost_owner_fails_its_live_tasks_and_a_limit_bounds_them() {
        let mut table = TaskTable::default();
        let (a, b, c) = (TaskId::from_bits(1), TaskId::from_bits(2), TaskId::from_bits(3));
        table.create(0, a, 1, 7, 10_000, 500, 3).unwrap();
        table.create(0, b, 1, 8, 10_000, 500, 3).unwrap();
        table.create(0, c, 2, 7, 10_000, 500, 3).unwrap();
        assert_eq!(table.create(0, TaskId::from_bits(4), 2, 7, 10_000, 500, 3), Err(TaskRefusal::TooMany(3)));
        // Node 1 restarted as incarnation 8: the task of incarnation 7 is failed, its own kept.
        assert_eq!(table.owner_lost(5, 1, Some(8)), 1);
        let Lookup::Found(task) = table.get(&a) else { panic!() };
        assert_eq!(task.status, TaskStatus::Failed);
        assert!(task.error.as_ref().unwrap().decode()["message"].as_str().unwrap().contains("node 1 lost"));
        assert_eq!(table.live_on(1), 1);
        assert_eq!((table.live_of_earlier_runs(1, 8), table.live_of_earlier_runs(2, 8)), (0, 1));
        assert_eq!(table.owner_lost(6, 2, None), 1);
        assert_eq!(table.live_on(2), 0);
    }
}
