//! openraft's state-machine adapter around the pure [`StateMachine`]: applies entries, wakes the
//! waiters parked on this node, builds and installs snapshots (written atomically to disk).

use super::state_machine::{MailboxState, Response, StateMachine, Wake};
use super::types::{LogId, Snapshot, SnapshotBlob, SnapshotMeta, StoredMembership, TypeConfig, decode, encode, io_error};
use crate::mailbox::{MailboxKey, WaitOutcome};
use crate::mcp_tasks::{self, TaskEvent, TaskId};
use futures::{Stream, TryStreamExt};
use openraft::storage::{EntryResponder, RaftSnapshotBuilder, RaftStateMachine};
use openraft::{EntryPayload, OptionalSend};
use std::collections::HashMap;
use std::io::{self, Write};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, MutexGuard};
use tokio::sync::{mpsc, oneshot, watch};

const SNAPSHOT_FILE: &str = "snapshot.bin";

struct Inner {
    sm: StateMachine,
    last_applied: Option<LogId>,
    last_membership: StoredMembership,
    current_snapshot: Option<(SnapshotMeta, Vec<u8>)>,
    /// Handlers parked on this node, by mailbox (one, nearly always). A oneshot each, not a
    /// watch channel: one is held per parked call, and a watch channel is four times the size.
    waiters: HashMap<MailboxKey, Vec<oneshot::Sender<WaitOutcome>>>,
}

/// A cheap handle; openraft owns one clone, the node keeps another for local reads.
#[derive(Clone)]
pub struct StateMachineStore {
    inner: Arc<Mutex<Inner>>,
    /// The log id of the snapshot on disk; held while one is written. openraft may build a
    /// snapshot while installing another: the older must not land over the newer.
    on_disk: Arc<Mutex<Option<LogId>>>,
    /// The last applied log index, for waiting on local application without polling.
    applied: Arc<watch::Sender<u64>>,
    /// The tasks this node runs, told of their answers and cancellation as they are applied.
    task_owners: Arc<Mutex<HashMap<TaskId, mpsc::UnboundedSender<TaskEvent>>>>,
    dir: PathBuf,
}

/// What `watch` found: a settled outcome, or a receiver that yields one.
pub enum Watch {
    Settled(WaitOutcome),
    Parked(oneshot::Receiver<WaitOutcome>),
}

fn settled(state: &MailboxState) -> Option<WaitOutcome> {
    match state {
        // An early answer waits for the create, which delivers it (a wake) when applied.
        MailboxState::Pending | MailboxState::Early(_) => None,
        MailboxState::Delivered(value) => Some(WaitOutcome::Delivered(value.decode())),
        // The value went to the owner's wait already; a second wait finds nothing to take.
        MailboxState::Taken => Some(WaitOutcome::Deleted),
        MailboxState::Expired => Some(WaitOutcome::Expired),
        MailboxState::Deleted => Some(WaitOutcome::Deleted),
    }
}

/// Hand `outcome` to every waiter of a mailbox.
fn wake_all(waiters: Vec<oneshot::Sender<WaitOutcome>>, outcome: WaitOutcome) {
    for waiter in waiters {
        let _ = waiter.send(outcome.clone());
    }
}

/// The mailbox a wake-up is for and what its waiter gets; `None` for a task's.
fn wake_outcome(wake: &Wake) -> Option<(&MailboxKey, WaitOutcome)> {
    match wake {
        Wake::Delivered(key, value) => Some((key, WaitOutcome::Delivered(value.decode()))),
        Wake::Expired(key) => Some((key, WaitOutcome::Expired)),
        Wake::Deleted(key) => Some((key, WaitOutcome::Deleted)),
        Wake::Task(_) => None,
    }
}

impl StateMachineStore {
    /// Open the state machine of `dir`, restoring the last snapshot written there.
    pub fn open(dir: &Path) -> io::Result<Self> {
        std::fs::create_dir_all(dir)?;
        let mut inner = Inner {
            sm: StateMachine::default(),
            last_applied: None,
            last_membership: StoredMembership::default(),
            current_snapshot: None,
            waiters: HashMap::new(),
        };
        match std::fs::read(dir.join(SNAPSHOT_FILE)) {
            Ok(bytes) => {
                let SnapshotBlob { meta, data, .. } = decode(&bytes).map_err(io_error)?;
                let data = data.into_owned();
                inner.sm = decode(&data).map_err(io_error)?;
                inner.last_applied = meta.last_log_id;
                inner.last_membership = meta.last_membership.clone();
                inner.current_snapshot = Some((meta, data));
            }
            Err(e) if e.kind() == io::ErrorKind::NotFound => {}
            Err(e) => return Err(e),
        }
        let applied = Arc::new(watch::channel(inner.last_applied.map(|id| id.index).unwrap_or(0)).0);
        let on_disk = Arc::new(Mutex::new(inner.current_snapshot.as_ref().and_then(|(meta, _)| meta.last_log_id)));
        Ok(StateMachineStore {
            inner: Arc::new(Mutex::new(inner)),
            on_disk,
            applied,
            task_owners: Default::default(),
            dir: dir.to_path_buf(),
        })
    }

    fn lock(&self) -> MutexGuard<'_, Inner> {
        self.inner.lock().expect("state machine lock poisoned")
    }

    /// Read the replicated state.
    pub fn read<T>(&self, f: impl FnOnce(&StateMachine) -> T) -> T {
        f(&self.lock().sm)
    }

    /// The last applied index and the digest of the state at that index, read together.
    pub fn digest(&self) -> (u64, String) {
        let inner = self.lock();
        (inner.last_applied.map_or(0, |id| id.index), inner.sm.digest())
    }

    /// Whether this replica has applied `index`.
    pub fn has_applied(&self, index: u64) -> bool {
        *self.applied.borrow() >= index
    }

    /// Resolve once this replica has applied `index` (or `timeout` passes: `false`).
    pub async fn applied_at_least(&self, index: u64, timeout: std::time::Duration) -> bool {
        let mut rx = self.applied.subscribe();
        tokio::time::timeout(timeout, rx.wait_for(|applied| *applied >= index)).await.is_ok_and(|r| r.is_ok())
    }

    /// The mailbox's outcome if settled; otherwise park a waiter (registered under the same lock
    /// that `apply` takes, so no wake-up can slip between the check and the registration).
    pub fn watch(&self, key: &MailboxKey) -> Watch {
        let mut inner = self.lock();
        match inner.sm.mailbox(key).map(|m| settled(&m.state)) {
            None => Watch::Settled(WaitOutcome::NotFound),
            Some(Some(outcome)) => Watch::Settled(outcome),
            Some(None) => {
                let (sender, receiver) = oneshot::channel();
                inner.waiters.entry(key.clone()).or_default().push(sender);
                Watch::Parked(receiver)
            }
        }
    }

    /// Forget the waiter slot of `key` if nobody waits on it any more.
    pub fn unpark(&self, key: &MailboxKey) {
        let mut inner = self.lock();
        if let Some(waiters) = inner.waiters.get_mut(key) {
            waiters.retain(|waiter| !waiter.is_closed());
            if waiters.is_empty() {
                inner.waiters.remove(key);
            }
        }
    }

    /// Hear the answers and cancellation of task `id`, which this node runs.
    pub fn own_task(&self, id: TaskId) -> mpsc::UnboundedReceiver<TaskEvent> {
        let (tx, rx) = mpsc::unbounded_channel();
        self.task_owners.lock().unwrap().insert(id, tx);
        rx
    }

    pub fn parked(&self) -> usize {
        self.lock().waiters.len()
    }

    fn write_snapshot_file(&self, meta: &SnapshotMeta, data: &[u8]) -> io::Result<()> {
        let mut on_disk = self.on_disk.lock().unwrap();
        if on_disk.is_some() && meta.last_log_id <= *on_disk {
            return Ok(()); // a newer snapshot is already there
        }
        // Write beside, fsync, rename over: a crash leaves the old or the new snapshot, never half.
        let tmp = self.dir.join(format!("{SNAPSHOT_FILE}.tmp"));
        let mut file = std::fs::File::create(&tmp)?;
        file.write_all(&encode(&SnapshotBlob { vote: None, meta: meta.clone(), data: data.into() }))?;
        file.sync_all()?;
        std::fs::rename(&tmp, self.dir.join(SNAPSHOT_FILE))?;
        std::fs::File::open(&self.dir)?.sync_all()?;
        *on_disk = meta.last_log_id;
        Ok(())
    }

    /// Remember `snapshot` as the current one unless a newer one is already current.
    fn keep_newest(inner: &mut Inner, meta: &SnapshotMeta, snapshot: &[u8]) {
        if inner.current_snapshot.as_ref().is_none_or(|(current, _)| current.last_log_id <= meta.last_log_id) {
            inner.current_snapshot = Some((meta.clone(), snapshot.to_vec()));
        }
    }
}

impl RaftSnapshotBuilder<TypeConfig> for StateMachineStore {
    type SnapshotData = Vec<u8>;

    async fn build_snapshot(&mut self) -> io::Result<Snapshot> {
        // Copied under the lock, encoded off it: a copy takes a fraction of the encoding's time,
        // and writes stall on the lock only for the copy.
        let (meta, state) = {
            let inner = self.lock();
            let meta = SnapshotMeta { last_log_id: inner.last_applied, last_membership: inner.last_membership.clone() };
            (meta, inner.sm.clone())
        };
        let this = self.clone();
        let m = meta.clone();
        // The state can be large: the file is written from this buffer, which comes back.
        let data = tokio::task::spawn_blocking(move || {
            let data = encode(&state);
            drop(state);
            this.write_snapshot_file(&m, &data).map(|_| data)
        })
        .await
        .map_err(io_error)??;
        Self::keep_newest(&mut self.lock(), &meta, &data);
        Ok(Snapshot { meta, snapshot: data })
    }
}

impl RaftStateMachine<TypeConfig> for StateMachineStore {
    type SnapshotData = Vec<u8>;
    type SnapshotBuilder = Self;

    async fn applied_state(&mut self) -> io::Result<(Option<LogId>, StoredMembership)> {
        let inner = self.lock();
        Ok((inner.last_applied, inner.last_membership.clone()))
    }

    async fn apply<Strm>(&mut self, mut entries: Strm) -> io::Result<()>
    where
        Strm: Stream<Item = io::Result<EntryResponder<TypeConfig>>> + Unpin + OptionalSend,
    {
        while let Some((entry, responder)) = entries.try_next().await? {
            let response = {
                let mut inner = self.lock();
                inner.last_applied = Some(entry.log_id);
                match entry.payload {
                    EntryPayload::Blank => Response::Done,
                    EntryPayload::Membership(membership) => {
                        inner.last_membership = StoredMembership::new(Some(entry.log_id), membership);
                        Response::Done
                    }
                    EntryPayload::Normal(request) => {
                        let (response, wakes) = inner.sm.apply(&request);
                        let mut task_events = Vec::new();
                        for wake in wakes {
                            if let Wake::Task(event) = wake {
                                task_events.push(event);
                            } else if let Some((key, outcome)) = wake_outcome(&wake)
                                && let Some(waiters) = inner.waiters.remove(key)
                            {
                                wake_all(waiters, outcome);
                            }
                        }
                        mcp_tasks::dispatch(&self.task_owners, task_events);
                        response
                    }
                }
            };
            self.applied.send_replace(entry.log_id.index);
            if let Some(responder) = responder {
                responder.send(response);
            }
        }
        Ok(())
    }

    async fn get_snapshot_builder(&mut self) -> Self::SnapshotBuilder {
        self.clone()
    }

    async fn install_snapshot(&mut self, meta: &SnapshotMeta, snapshot: Vec<u8>) -> io::Result<()> {
        let sm: StateMachine = decode(&snapshot).map_err(io_error)?;
        let this = self.clone();
        let m = meta.clone();
        let snapshot =
            tokio::task::spawn_blocking(move || this.write_snapshot_file(&m, &snapshot).map(|_| snapshot)).await.map_err(io_error)??;
        let mut inner = self.lock();
        inner.sm = sm;
        inner.last_applied = meta.last_log_id;
        inner.last_membership = meta.last_membership.clone();
        Self::keep_newest(&mut inner, meta, &snapshot);
        self.applied.send_replace(meta.last_log_id.map(|id| id.index).unwrap_or(0));
        // Waiters whose mailbox arrived settled in the snapshot wake now.
        let keys: Vec<MailboxKey> = inner.waiters.keys().cloned().collect();
        for key in keys {
            let outcome = match inner.sm.mailbox(&key) {
                None => Some(WaitOutcome::NotFound),
                Some(m) => settled(&m.state),
            };
            if let Some(outcome) = outcome
                && let Some(waiters) = inner.waiters.remove(&key)
            {
                wake_all(waiters, outcome);
            }
        }
        Ok(())
    }

    async fn get_current_snapshot(&mut self) -> io::Result<Option<Snapshot>> {
        Ok(self.lock().current_snapshot.clone().map(|(meta, snapshot)| Snapshot { meta, snapshot }))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use openraft::testing::log_id;

    fn meta(index: u64) -> SnapshotMeta {
        SnapshotMeta { last_log_id: Some(log_id::<TypeConfig>(1, 0, index)), last_membership: StoredMembership::default() }
    }

    #[tokio::test]
    async fn an_older_snapshot_never_lands_over_a_newer_one() {
        let dir = tempfile::tempdir().unwrap();
        let store = StateMachineStore::open(dir.path()).unwrap();
        let data = encode(&StateMachine::default());
        // As when a build that started earlier finishes after an install.
        store.write_snapshot_file(&meta(10), &data).unwrap();
        store.write_snapshot_file(&meta(5), &data).unwrap();
        StateMachineStore::keep_newest(&mut store.lock(), &meta(10), &data);
        StateMachineStore::keep_newest(&mut store.lock(), &meta(5), &data);
        assert_eq!(store.lock().current_snapshot.as_ref().unwrap().0, meta(10));
        let mut reopened = StateMachineStore::open(dir.path()).unwrap();
        assert_eq!(reopened.applied_state().await.unwrap().0, meta(10).last_log_id);
    }
}
