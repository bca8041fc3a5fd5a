//! openraft's state-machine adapter around the pure [`StateMachine`]: applies entries, wakes the
//! waiters parked on this node, builds and installs snapshots (written atomically to disk).
//!
//! The current snapshot is the one in the data directory: its bytes are not kept in memory
//! (under load a snapshot is megabytes, and it is read only to send it to a follower that fell
//! behind the log).
//!
//! A snapshot is built off the lock, without a second copy of the state kept for it: the
//! snapshot on disk is read back and the log entries applied since are replayed onto it (the
//! log holds them: openraft purges only up to the latest snapshot). Under load the state is
//! hundreds of thousands of records; copying them under the lock stalled every write for tens
//! of milliseconds, and a standing copy doubled the state's memory and the cost of each apply.

use super::log_store::LogEntries;
use super::state_machine::{MailboxState, Response, StateMachine, Wake, snapshot as state_snapshot};
use super::thread_priority;
use super::types::{LogId, Snapshot, SnapshotBlob, SnapshotMeta, StoredMembership, TypeConfig, decode, io_error};
use crate::mailbox::{MailboxKey, WaitOutcome};
use crate::mcp_tasks::{self, TaskEvent, TaskId};
use crate::peer::codec::write_encoded;
use futures::{Stream, TryStreamExt};
use openraft::storage::{EntryResponder, RaftSnapshotBuilder, RaftStateMachine};
use openraft::{EntryPayload, OptionalSend};
use std::collections::HashMap;
use std::io::{self, Write};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use tokio::sync::{mpsc, oneshot, watch};

const SNAPSHOT_FILE: &str = "snapshot.bin";
/// A snapshot file is written and flushed this much at a time.
const SYNC_PIECE_BYTES: usize = 1 << 20;
/// A build copies this many log entries at a time (the log's lock is held for each copy).
const REPLAY_CHUNK: usize = 1_024;

struct Inner {
    sm: StateMachine,
    last_applied: Option<LogId>,
    last_membership: StoredMembership,
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
    /// Its size, for the metrics (which must not wait for a write to end).
    on_disk_bytes: Arc<AtomicUsize>,
    /// The last applied log index, for waiting on local application without polling.
    applied: Arc<watch::Sender<u64>>,
    /// The tasks this node runs, told of their answers and cancellation as they are applied.
    task_owners: Arc<Mutex<HashMap<TaskId, mpsc::UnboundedSender<TaskEvent>>>>,
    /// The log whose entries a build replays onto the snapshot on disk.
    log: LogEntries,
    dir: PathBuf,
    /// Writes applied since this store opened, and how many of them the last snapshot build
    /// started from (a batch entry counts each of its writes).
    writes_applied: Arc<AtomicU64>,
    writes_at_build: Arc<AtomicU64>,
}

/// What a build starts from: the state at the snapshot on disk with the log replayed onto it.
enum Replayed {
    /// The state at the index asked for, and how many entries were replayed to reach it.
    State(Box<StateMachine>, usize),
    /// The snapshot on disk is already at (or, installed meanwhile, past) that index.
    OnDisk(Snapshot),
    /// The log does not hold the entries after the snapshot on disk.
    Missing,
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
fn wake_all(mut waiters: Vec<oneshot::Sender<WaitOutcome>>, outcome: WaitOutcome) {
    // Usually one waiter: it gets the outcome itself, not a copy of the answer.
    let Some(last) = waiters.pop() else { return };
    for waiter in waiters {
        let _ = waiter.send(outcome.clone());
    }
    let _ = last.send(outcome);
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
    /// Open the state machine of `dir`, restoring the last snapshot written there; snapshots
    /// are built by replaying `log` onto it.
    pub fn open(dir: &Path, log: LogEntries) -> io::Result<Self> {
        std::fs::create_dir_all(dir)?;
        let mut inner = Inner {
            sm: StateMachine::default(),
            last_applied: None,
            last_membership: StoredMembership::default(),
            waiters: HashMap::new(),
        };
        let (mut on_disk, mut on_disk_bytes) = (None, 0);
        match std::fs::read(dir.join(SNAPSHOT_FILE)) {
            Ok(bytes) => {
                let SnapshotBlob { meta, data, .. } = decode(&bytes).map_err(io_error)?;
                inner.sm = state_snapshot::decode(&data).map_err(io_error)?;
                inner.last_applied = meta.last_log_id;
                inner.last_membership = meta.last_membership.clone();
                (on_disk, on_disk_bytes) = (meta.last_log_id, bytes.len());
            }
            Err(e) if e.kind() == io::ErrorKind::NotFound => {}
            Err(e) => return Err(e),
        }
        let applied = Arc::new(watch::channel(inner.last_applied.map(|id| id.index).unwrap_or(0)).0);
        let on_disk = Arc::new(Mutex::new(on_disk));
        let on_disk_bytes = Arc::new(AtomicUsize::new(on_disk_bytes));
        Ok(StateMachineStore {
            inner: Arc::new(Mutex::new(inner)),
            on_disk,
            on_disk_bytes,
            applied,
            task_owners: Default::default(),
            log,
            dir: dir.to_path_buf(),
            writes_applied: Arc::default(),
            writes_at_build: Arc::default(),
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

    /// Writes applied since the last snapshot was built (from its start) or installed; since
    /// opening, if none was.
    pub fn writes_since_snapshot(&self) -> u64 {
        self.writes_applied.load(Ordering::Relaxed).saturating_sub(self.writes_at_build.load(Ordering::Relaxed))
    }

    /// The writes applied so far are in a snapshot: count the next one's from here.
    fn snapshot_taken(&self) {
        self.writes_at_build.store(self.writes_applied.load(Ordering::Relaxed), Ordering::Relaxed);
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
        match inner.sm.state_of(key).map(settled) {
            None => Watch::Settled(WaitOutcome::NotFound),
            Some(Some(outcome)) => Watch::Settled(outcome),
            Some(None) => {
                let (sender, receiver) = oneshot::channel();
                // Sized for one: a mailbox has one waiter, its owner's call (a `Vec`'s
                // first push would make room for four).
                inner.waiters.entry(key.clone()).or_insert_with(|| Vec::with_capacity(1)).push(sender);
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

    /// The current snapshot's size on disk (0 before the first).
    pub fn snapshot_bytes(&self) -> usize {
        self.on_disk_bytes.load(Ordering::Relaxed)
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
        let mut file = io::BufWriter::new(SyncedPieces { file: std::fs::File::create(&tmp)?, unsynced: 0, written: 0 });
        // Encoded into the file as it is made: the data is not copied into a buffer of its own.
        write_encoded(&mut file, &SnapshotBlob { vote: None, meta: meta.clone(), data: data.into() })?;
        let SyncedPieces { file, written, .. } = file.into_inner().map_err(|e| e.into_error())?;
        file.sync_all()?;
        std::fs::rename(&tmp, self.dir.join(SNAPSHOT_FILE))?;
        std::fs::File::open(&self.dir)?.sync_all()?;
        *on_disk = meta.last_log_id;
        self.on_disk_bytes.store(written, Ordering::Relaxed);
        Ok(())
    }

    /// What a snapshot built now describes: the last applied entry and membership.
    fn build_meta(&self) -> SnapshotMeta {
        let inner = self.lock();
        SnapshotMeta { last_log_id: inner.last_applied, last_membership: inner.last_membership.clone() }
    }

    /// The snapshot at `meta`'s index, written to disk (blocking), and how many log entries were
    /// replayed to build it (`None`: none needed, or the live state was copied).
    fn build(&self, meta: SnapshotMeta) -> io::Result<(Snapshot, Option<usize>)> {
        let (meta, state, replayed) = match self.replay_onto_snapshot(&meta)? {
            Replayed::State(state, replayed) => (meta, state, Some(replayed)),
            Replayed::OnDisk(snapshot) => return Ok((snapshot, None)),
            Replayed::Missing => {
                // Not in normal operation (the log keeps every entry after the latest
                // snapshot); the copy stalls writes while it is made, but is never wrong.
                tracing::warn!(
                    index = meta.last_log_id.map(|id| id.index),
                    "snapshot built from a copy: the log lacks entries after the last one"
                );
                let inner = self.lock();
                let meta = SnapshotMeta { last_log_id: inner.last_applied, last_membership: inner.last_membership.clone() };
                (meta, Box::new(inner.sm.clone()), None)
            }
        };
        let data = state_snapshot::encode(&state);
        drop(state);
        self.write_snapshot_file(&meta, &data)?;
        Ok((Snapshot { meta, snapshot: data }, replayed))
    }

    /// The state at `meta`'s index: the snapshot on disk with the log entries after it applied.
    fn replay_onto_snapshot(&self, meta: &SnapshotMeta) -> io::Result<Replayed> {
        let target = meta.last_log_id.map(|id| id.index);
        let (mut state, mut next) = match self.read_snapshot_file()? {
            Some(on_disk) if on_disk.meta.last_log_id.map(|id| id.index) >= target => return Ok(Replayed::OnDisk(on_disk)),
            Some(on_disk) => {
                let state = state_snapshot::decode(&on_disk.snapshot).map_err(io_error)?;
                (Box::new(state), on_disk.meta.last_log_id.map_or(0, |id| id.index + 1))
            }
            None => match self.log.unpurged_start() {
                Some(first) => (Box::default(), first),
                None => return Ok(Replayed::Missing),
            },
        };
        let Some(target) = target else { return Ok(Replayed::State(state, 0)) };
        let mut replayed = 0;
        while next <= target {
            let Some(entries) = self.log.copy(next, target, REPLAY_CHUNK) else { return Ok(Replayed::Missing) };
            for entry in entries {
                if let EntryPayload::Normal(request) = &entry.payload {
                    state.apply(request);
                }
                next = entry.log_id.index + 1;
                replayed += 1;
            }
        }
        Ok(Replayed::State(state, replayed))
    }

    /// The snapshot on disk, if there is one.
    fn read_snapshot_file(&self) -> io::Result<Option<Snapshot>> {
        // No lock: a write renames a whole file over the old one, so this reads one or the other.
        match std::fs::read(self.dir.join(SNAPSHOT_FILE)) {
            Ok(bytes) => {
                let (meta, snapshot) = SnapshotBlob::split_file(bytes).map_err(io_error)?;
                Ok(Some(Snapshot { meta, snapshot }))
            }
            Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(None),
            Err(e) => Err(e),
        }
    }
}

/// A file written a piece at a time, each flushed to disk before the next is written: the log's
/// fdatasync, which may have to wait for whatever the file system must write before it, never
/// waits for a whole snapshot at once.
struct SyncedPieces {
    file: std::fs::File,
    /// Written since the last flush.
    unsynced: usize,
    written: usize,
}

impl Write for SyncedPieces {
    fn write(&mut self, bytes: &[u8]) -> io::Result<usize> {
        let piece = bytes.len().min(SYNC_PIECE_BYTES - self.unsynced);
        let n = self.file.write(&bytes[..piece])?;
        (self.unsynced, self.written) = (self.unsynced + n, self.written + n);
        if self.unsynced == SYNC_PIECE_BYTES {
            self.file.sync_data()?;
            self.unsynced = 0;
        }
        Ok(n)
    }

    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

impl RaftSnapshotBuilder<TypeConfig> for StateMachineStore {
    type SnapshotData = Vec<u8>;

    async fn build_snapshot(&mut self) -> io::Result<Snapshot> {
        let started = std::time::Instant::now();
        self.snapshot_taken();
        let meta = self.build_meta();
        let this = self.clone();
        let (done, built) = oneshot::channel();
        // A thread of its own, at the lowest CPU priority: a build is half a second of CPU or
        // more under load, on every replica at about the same index, and at normal priority it
        // took those cores from the requests (round trips of 200-320 ms while builds ran, under
        // 80 ms without them). It runs to its end even if this future is dropped.
        std::thread::Builder::new().name("snapshot-build".into()).spawn(move || {
            thread_priority::run_last();
            let _ = done.send(this.build(meta));
        })?;
        let (snapshot, replayed) = built.await.map_err(|_| io::Error::other("the snapshot build thread panicked"))??;
        tracing::info!(
            index = snapshot.meta.last_log_id.map(|id| id.index),
            bytes = snapshot.snapshot.len(),
            total_ms = started.elapsed().as_secs_f64() * 1e3,
            replayed_entries = replayed,
            "snapshot built"
        );
        // openraft keeps only the meta of a snapshot it had built; the data is on disk.
        Ok(snapshot)
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
                        self.writes_applied.fetch_add(request.command.writes() as u64, Ordering::Relaxed);
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
        let sm = state_snapshot::decode(&snapshot).map_err(io_error)?;
        let this = self.clone();
        let m = meta.clone();
        tokio::task::spawn_blocking(move || this.write_snapshot_file(&m, &snapshot)).await.map_err(io_error)??;
        let mut inner = self.lock();
        inner.sm = sm;
        inner.last_applied = meta.last_log_id;
        inner.last_membership = meta.last_membership.clone();
        self.snapshot_taken();
        self.applied.send_replace(meta.last_log_id.map(|id| id.index).unwrap_or(0));
        // Waiters whose mailbox arrived settled in the snapshot wake now.
        let keys: Vec<MailboxKey> = inner.waiters.keys().cloned().collect();
        for key in keys {
            let outcome = match inner.sm.state_of(&key) {
                None => Some(WaitOutcome::NotFound),
                Some(state) => settled(state),
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
        let this = self.clone();
        tokio::task::spawn_blocking(move || this.read_snapshot_file()).await.map_err(io_error)?
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::raft::log_store::LogStore;
    use crate::raft::state_machine::{Command, Request, WriteId};
    use crate::raft::types::Entry;
    use openraft::storage::{IOFlushed, RaftLogStorage};
    use openraft::testing::log_id;
    use openraft::type_config::TypeConfigExt;

    /// The state machine of `dir`, with the log there (which nothing is appended to).
    fn open(dir: &Path) -> StateMachineStore {
        StateMachineStore::open(dir, LogStore::open(dir).unwrap().entries()).unwrap()
    }

    fn meta(index: u64) -> SnapshotMeta {
        SnapshotMeta { last_log_id: Some(log_id::<TypeConfig>(1, 0, index)), last_membership: StoredMembership::default() }
    }

    #[tokio::test]
    async fn an_older_snapshot_never_lands_over_a_newer_one() {
        let dir = tempfile::tempdir().unwrap();
        let store = open(dir.path());
        let data = state_snapshot::encode(&StateMachine::default());
        // As when a build that started earlier finishes after an install.
        store.write_snapshot_file(&meta(10), &data).unwrap();
        store.write_snapshot_file(&meta(5), &data).unwrap();
        let mut current = store.clone();
        assert_eq!(current.get_current_snapshot().await.unwrap().unwrap().meta, meta(10));
        let mut reopened = open(dir.path());
        assert_eq!(reopened.applied_state().await.unwrap().0, meta(10).last_log_id);
    }

    /// Mailbox creates at log indexes `from..to`.
    fn creates(from: u64, to: u64) -> Vec<Entry> {
        (from..to)
            .map(|i| {
                let command =
                    Command::MailboxCreate { key: MailboxKey::from_bits(i.into()), session: Default::default(), owner: 1, ttl_ms: 60_000 };
                let request = Request { now: 1_000 + i, clock_agreed: true, write: Some(WriteId { origin: 1, serial: i }), command };
                Entry { log_id: log_id::<TypeConfig>(1, 0, i), payload: EntryPayload::Normal(request) }
            })
            .collect()
    }

    /// Apply `entries` through openraft's interface.
    async fn apply(store: &mut StateMachineStore, entries: Vec<Entry>) {
        store.apply(futures::stream::iter(entries.into_iter().map(|e| Ok((e, None))).collect::<Vec<_>>())).await.unwrap();
    }

    /// Append `entries` to `log` and apply them, as openraft does once they are committed.
    async fn append_and_apply(log: &mut LogStore, store: &mut StateMachineStore, entries: Vec<Entry>) {
        let (tx, rx) = TypeConfig::oneshot();
        log.append(entries.clone(), IOFlushed::signal(tx)).await.unwrap();
        rx.await.unwrap().unwrap();
        apply(store, entries).await;
    }

    /// The state machine and log of `dir`.
    fn open_with_log(dir: &Path) -> (StateMachineStore, LogStore) {
        let log = LogStore::open(dir).unwrap();
        (StateMachineStore::open(dir, log.entries()).unwrap(), log)
    }

    #[tokio::test]
    async fn a_snapshot_is_the_last_one_with_the_log_since_replayed_onto_it() {
        let dir = tempfile::tempdir().unwrap();
        let (mut store, mut log) = open_with_log(dir.path());
        append_and_apply(&mut log, &mut store, creates(1, 200)).await;
        let at_199 = store.read(StateMachine::clone);
        let (snapshot, replayed) = store.build(store.build_meta()).unwrap();
        assert_eq!((snapshot.meta.last_log_id.map(|id| id.index), replayed), (Some(199), Some(199)), "the whole log, no snapshot before");
        assert_eq!(state_snapshot::decode(&snapshot.snapshot).unwrap(), at_199);

        append_and_apply(&mut log, &mut store, creates(200, 300)).await;
        let at_299 = store.read(StateMachine::clone);
        let (snapshot, replayed) = store.build(store.build_meta()).unwrap();
        assert_eq!((snapshot.meta.last_log_id.map(|id| id.index), replayed), (Some(299), Some(100)), "only the entries since the last one");
        assert_eq!(state_snapshot::decode(&snapshot.snapshot).unwrap(), at_299);
        assert_eq!(store.get_current_snapshot().await.unwrap().unwrap().meta, snapshot.meta);

        // Built again at the same index: the one on disk, nothing replayed.
        let (again, replayed) = store.build(store.build_meta()).unwrap();
        assert_eq!((again.meta, again.snapshot, replayed), (snapshot.meta, snapshot.snapshot, None));
        drop((store, log));
        let reopened = open(dir.path());
        assert_eq!(reopened.read(StateMachine::clone), at_299, "a restart starts from it");
    }

    #[tokio::test]
    async fn without_the_entries_in_the_log_a_snapshot_is_a_copy_of_the_live_state() {
        let dir = tempfile::tempdir().unwrap();
        let mut store = open(dir.path());
        apply(&mut store, creates(1, 50)).await;
        let live = store.read(StateMachine::clone);
        let snapshot = store.build_snapshot().await.unwrap();
        assert_eq!(snapshot.meta.last_log_id.map(|id| id.index), Some(49));
        assert_eq!(state_snapshot::decode(&snapshot.snapshot).unwrap(), live);
    }

    #[tokio::test]
    async fn a_build_behind_a_snapshot_installed_meanwhile_returns_the_installed_one() {
        let dir = tempfile::tempdir().unwrap();
        let (mut store, mut log) = open_with_log(dir.path());
        append_and_apply(&mut log, &mut store, creates(1, 60)).await;
        let behind = store.build_meta();
        // Another history, installed before the build reads the snapshot on disk.
        let leader_dir = tempfile::tempdir().unwrap();
        let (mut leader, mut leader_log) = open_with_log(leader_dir.path());
        append_and_apply(&mut leader_log, &mut leader, creates(1, 500)).await;
        let installed = leader.build_snapshot().await.unwrap();
        store.install_snapshot(&installed.meta, installed.snapshot.clone()).await.unwrap();
        let (built, replayed) = store.build(behind).unwrap();
        assert_eq!((built.meta, built.snapshot, replayed), (installed.meta, installed.snapshot, None));
        assert_eq!(store.read(|sm| sm.sizes().pending), 499);
    }

    #[tokio::test]
    async fn writes_towards_the_next_snapshot_count_from_the_last_one_built_or_installed() {
        let dir = tempfile::tempdir().unwrap();
        let (mut store, mut log) = open_with_log(dir.path());
        append_and_apply(&mut log, &mut store, creates(1, 41)).await;
        assert_eq!(store.writes_since_snapshot(), 40);
        store.build_snapshot().await.unwrap();
        append_and_apply(&mut log, &mut store, creates(41, 51)).await;
        assert_eq!(store.writes_since_snapshot(), 10, "counted from the build");

        let leader_dir = tempfile::tempdir().unwrap();
        let (mut leader, mut leader_log) = open_with_log(leader_dir.path());
        append_and_apply(&mut leader_log, &mut leader, creates(1, 100)).await;
        let installed = leader.build_snapshot().await.unwrap();
        store.install_snapshot(&installed.meta, installed.snapshot).await.unwrap();
        assert_eq!(store.writes_since_snapshot(), 0, "an installed snapshot holds every write before it");
    }

    #[tokio::test]
    async fn a_snapshot_larger_than_one_flushed_piece_reads_back_whole() {
        let dir = tempfile::tempdir().unwrap();
        let mut store = open(dir.path());
        assert!(store.get_current_snapshot().await.unwrap().is_none());
        let data: Vec<u8> = (0..(2 * SYNC_PIECE_BYTES + 123)).map(|i| (i % 251) as u8).collect();
        store.write_snapshot_file(&meta(7), &data).unwrap();
        let current = store.get_current_snapshot().await.unwrap().unwrap();
        assert_eq!((current.meta, current.snapshot), (meta(7), data.clone()));
        // Written as it is encoded, in the format a whole encoding has (older files read too).
        let whole = crate::raft::types::encode(&SnapshotBlob { vote: None, meta: meta(7), data: data.as_slice().into() });
        assert_eq!(std::fs::read(dir.path().join(SNAPSHOT_FILE)).unwrap(), whole);
        assert_eq!(store.snapshot_bytes(), whole.len());
    }
}
