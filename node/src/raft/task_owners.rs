//! Tasks whose owner is gone fail. A task's handler runs on one node; if that node dies (or is
//! cut off) the task would stay `working` forever. The leader watches every member's last
//! acknowledgement (openraft's heartbeat metrics, as in the cluster status) and, once a member
//! that owns live tasks has been silent for the configured time, commits `TaskOwnerLost`: every
//! replica marks those tasks `failed`. A restarted member fails the tasks of its earlier run
//! itself (`RaftTasks::fail_earlier_runs`).

use super::RaftNode;
use super::state_machine::{Command, Response};
use crate::mailbox::NodeId;
use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

impl RaftNode {
    /// Every second: on the leader, fail the live tasks of members silent for `after`; on every
    /// node, publish the count of tasks by status.
    pub fn watch_task_owners(self: &Arc<Self>, after: Duration) {
        let node = Arc::downgrade(self);
        let task = tokio::spawn(async move {
            // Members the leader has no acknowledgement from at all, since when it noticed.
            let mut unheard: HashMap<NodeId, Instant> = HashMap::new();
            let mut tick = tokio::time::interval(Duration::from_secs(1));
            loop {
                tick.tick().await;
                let Some(node) = node.upgrade() else { return };
                node.metrics.set_tasks(&node.sm.read(|sm| sm.tasks.count_by_status()));
                if !node.is_leader() {
                    unheard.clear();
                    continue;
                }
                let status = node.status();
                for &member in status.members.keys().filter(|id| **id != node.id) {
                    let silent = match status.last_contact_ms.get(&member) {
                        Some(ms) => {
                            unheard.remove(&member);
                            Duration::from_millis(*ms)
                        }
                        None => unheard.entry(member).or_insert_with(Instant::now).elapsed(),
                    };
                    if silent < after || node.sm.read(|sm| sm.tasks.live_on(member)) == 0 {
                        continue;
                    }
                    match node.propose(Command::TaskOwnerLost { node: member, survivor: None }).await {
                        Ok((Response::TasksFailed(failed), _)) if failed > 0 => {
                            tracing::warn!(
                                node = member,
                                failed,
                                silent_ms = silent.as_millis() as u64,
                                "task owner silent; its tasks failed"
                            );
                            node.metrics.tasks_owner_lost(failed);
                        }
                        Ok(_) => {}
                        Err(e) => tracing::debug!(node = member, error = %e, "failing a silent owner's tasks not committed yet"),
                    }
                }
            }
        });
        self.tasks.track(task);
    }
}
