//! Tasks that must end with their owner: a stopped member's streams and timers stop with it.

use std::sync::Mutex;
use tokio::task::JoinHandle;

/// Background tasks aborted together at shutdown.
#[derive(Default)]
pub struct TaskSet {
    tasks: Mutex<Vec<JoinHandle<()>>>,
}

impl TaskSet {
    /// Keep `task` until shutdown (finished tasks are dropped as new ones come).
    pub fn track(&self, task: JoinHandle<()>) {
        let mut tasks = self.tasks.lock().unwrap();
        tasks.retain(|t| !t.is_finished());
        tasks.push(task);
    }

    /// Abort every task still running.
    pub fn abort_all(&self) {
        for task in self.tasks.lock().unwrap().drain(..) {
            task.abort();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn abort_all_stops_tracked_tasks() {
        let set = TaskSet::default();
        let (tx, rx) = tokio::sync::oneshot::channel::<()>();
        set.track(tokio::spawn(async move {
            let _keep = tx;
            std::future::pending::<()>().await
        }));
        set.abort_all();
        // The task was aborted, so its sender is dropped without sending.
        assert!(rx.await.is_err());
    }
}
