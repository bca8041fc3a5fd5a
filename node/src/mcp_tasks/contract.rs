//! The contract every task store keeps, as one suite run against each backend: `owner` is the
//! store on the node that runs the tasks, `other` a store on another node (the same store for
//! a single process).

use super::{TaskError, TaskEvent, TaskId, TaskOutcome, TaskRefusal, TaskSettings, TaskStatus, TaskStore};
use crate::mailbox::NodeId;
use crate::protocol::json_text::JsonText;
use serde_json::json;
use std::time::Duration;

fn refused(result: Result<impl std::fmt::Debug, TaskError>) -> TaskRefusal {
    match result {
        Err(TaskError::Refused(refusal)) => refusal,
        other => panic!("expected a refusal, got {other:?}"),
    }
}

pub async fn run(owner: &impl TaskStore, other: &impl TaskStore, owner_id: NodeId) {
    let settings = TaskSettings::default();
    let id = TaskId::random();
    let mut events = owner.subscribe(id);
    owner.create(id, owner_id, settings).await.unwrap();
    // Found at once from the other node.
    let view = other.get(id).await.unwrap();
    assert_eq!((view.record.status, view.record.owner), (TaskStatus::Working, owner_id));
    assert_eq!(refused(other.get(TaskId::random()).await), TaskRefusal::NotFound);
    assert_eq!(refused(owner.create(id, owner_id, settings).await), TaskRefusal::Exists);

    // Input, answered in parts from the other node; the owner hears each answer.
    owner
        .ask(id, vec![("a".into(), json!({"method": "elicitation/create"})), ("b".into(), json!({"method": "roots/list"}))])
        .await
        .unwrap();
    let view = other.get(id).await.unwrap();
    assert_eq!(view.record.status, TaskStatus::InputRequired);
    assert_eq!(view.to_json()["inputRequests"]["b"]["method"], "roots/list");
    let taken = other.answer(id, vec![("a".into(), json!({"action": "accept"})), ("nope".into(), json!(1))]).await.unwrap();
    assert_eq!(taken, vec!["a"]);
    let heard = tokio::time::timeout(Duration::from_secs(5), events.recv()).await.unwrap().unwrap();
    assert_eq!(heard, TaskEvent::Answered { id, key: "a".into(), value: JsonText::from(&json!({"action": "accept"})) });
    assert_eq!(other.get(id).await.unwrap().record.status, TaskStatus::InputRequired);
    other.answer(id, vec![("b".into(), json!({"roots": []}))]).await.unwrap();
    assert!(matches!(tokio::time::timeout(Duration::from_secs(5), events.recv()).await.unwrap(), Some(TaskEvent::Answered { .. })));
    assert_eq!(other.get(id).await.unwrap().record.status, TaskStatus::Working);
    assert_eq!(refused(owner.ask(id, vec![("a".into(), json!({}))]).await), TaskRefusal::KeyReused("a".into()));

    // Cancel from the other node: the owner hears it, finishes, and the status never changes again.
    other.cancel(id).await.unwrap();
    assert_eq!(tokio::time::timeout(Duration::from_secs(5), events.recv()).await.unwrap(), Some(TaskEvent::CancelRequested { id }));
    owner.finish(id, TaskOutcome::Cancelled).await.unwrap();
    assert_eq!(other.get(id).await.unwrap().record.status, TaskStatus::Cancelled);
    assert!(matches!(refused(owner.finish(id, TaskOutcome::Completed(JsonText::from(&json!({})))).await), TaskRefusal::Terminal(_)));
    other.cancel(id).await.unwrap();
    assert!(other.answer(id, vec![("c".into(), json!(1))]).await.unwrap().is_empty());

    // A result, readable everywhere.
    let done = TaskId::random();
    owner.create(done, owner_id, settings).await.unwrap();
    owner.finish(done, TaskOutcome::Completed(JsonText::from(&json!({"content": [{"type": "text", "text": "ok"}]})))).await.unwrap();
    let view = other.get(done).await.unwrap();
    assert_eq!(view.to_json()["result"]["content"][0]["text"], "ok");
    assert_eq!(view.to_json()["status"], "completed");

    // The limit of tasks.
    let limited = TaskSettings { max_tasks: 0, ..settings };
    assert_eq!(refused(owner.create(TaskId::random(), owner_id, limited).await), TaskRefusal::TooMany(0));
}
