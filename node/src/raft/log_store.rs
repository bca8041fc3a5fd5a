//! The durable Raft log, vote and committed index, in one redb file in the data directory.
//!
//! All writes go through one writer thread, in order. `append` does not wait for the disk: it
//! makes the entries readable from memory (so openraft replicates them to the followers while
//! the leader's own fsync runs) and queues them; the writer commits everything that queued up
//! meanwhile in one redb transaction with fsync (`Durability::Immediate`) and only then tells
//! openraft the entries are flushed. Vote, truncation and purge wait for their commit.
//!
//! The committed index is only remembered by `save_committed` and rides along with the next
//! write: openraft awaits `save_committed` before applying, so it must not wait for an fsync.
//!
//! Replication reads through `limited_get_log_entries`, the hook openraft builds each
//! AppendEntries request from; openraft itself bounds a request only by its number of entries
//! (`max_payload_entries`), so the store bounds it in bytes ([`LogStore::batch_budget`]).

use super::types::{Entry, LogId, TypeConfig, Vote, decode, encode, io_error};
use crate::peer::codec::encoded_len;
use openraft::storage::{IOFlushed, LogState, RaftLogReader, RaftLogStorage};
use openraft::{OptionalSend, entry::RaftEntry};
use redb::{Database, ReadableDatabase, ReadableTable, TableDefinition, WriteTransaction};
use std::collections::{BTreeMap, VecDeque};
use std::fmt::Debug;
use std::io;
use std::ops::{Bound, RangeBounds};
use std::path::Path;
use std::sync::{Arc, Mutex, mpsc};
use tokio::sync::oneshot;

const LOGS: TableDefinition<u64, &[u8]> = TableDefinition::new("logs");
const META: TableDefinition<&str, &[u8]> = TableDefinition::new("meta");
const VOTE: &str = "vote";
const COMMITTED: &str = "committed";
const LAST_PURGED: &str = "last_purged";

type WriteFn = Box<dyn FnOnce(&WriteTransaction) -> Result<(), redb::Error> + Send>;

/// One queued write for the writer thread.
enum Op {
    Append { entries: Vec<Entry>, flushed: IOFlushed<TypeConfig> },
    Other { write: WriteFn, done: oneshot::Sender<io::Result<()>> },
}

/// State shared by the store, its reader clones and the writer thread.
struct Shared {
    db: Database,
    /// Entries handed to `append` that the writer has not committed yet, readable meanwhile.
    unflushed: Mutex<BTreeMap<u64, Entry>>,
    /// The committed id `save_committed` was last given, until a write persists it.
    unsaved_committed: Mutex<Option<Option<LogId>>>,
    /// Held by readers, and exclusively by a truncation or purge until its commit: between
    /// dropping entries from memory and from disk, a reader would see a mix of both.
    removing: tokio::sync::RwLock<()>,
}

/// Owns the writer thread: when the last store handle goes, the queue closes and the thread is
/// joined, so the database file is closed before anyone may reopen it.
struct Writer {
    queue: Option<mpsc::Sender<Op>>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl Drop for Writer {
    fn drop(&mut self) {
        self.queue.take();
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

/// A handle on the log; clones share the database and the writer (the reader is a clone).
#[derive(Clone)]
pub struct LogStore {
    shared: Arc<Shared>,
    writer: Arc<Writer>,
    /// Bytes of encoded entries one replication batch may carry (see `limited_get_log_entries`).
    batch_bytes: usize,
}

impl LogStore {
    /// Open (or create) `raft-log.redb` in `dir` and start its writer thread.
    pub fn open(dir: &Path) -> io::Result<Self> {
        std::fs::create_dir_all(dir)?;
        let db = Database::create(dir.join("raft-log.redb")).map_err(io_error)?;
        let txn = db.begin_write().map_err(io_error)?;
        txn.open_table(LOGS).map_err(io_error)?;
        txn.open_table(META).map_err(io_error)?;
        txn.commit().map_err(io_error)?;
        let shared =
            Arc::new(Shared { db, unflushed: Mutex::default(), unsaved_committed: Mutex::default(), removing: Default::default() });
        let (queue, ops) = mpsc::channel();
        let thread = std::thread::Builder::new().name("raft-log-writer".into()).spawn({
            let shared = shared.clone();
            move || write_loop(&shared, &ops)
        })?;
        Ok(LogStore { shared, writer: Arc::new(Writer { queue: Some(queue), thread: Some(thread) }), batch_bytes: usize::MAX })
    }

    /// Bound every replication batch read from this store (and its readers) to `bytes` of
    /// encoded entries; unbounded unless set.
    pub fn batch_budget(mut self, bytes: usize) -> Self {
        self.batch_bytes = bytes;
        self
    }

    fn enqueue(&self, op: Op) -> io::Result<()> {
        let queue = self.writer.queue.as_ref().expect("queue lives as long as the store");
        queue.send(op).map_err(|_| io::Error::other("raft log writer stopped"))
    }

    /// Queue a write behind everything queued before it and wait for its fsync.
    async fn write(&self, write: impl FnOnce(&WriteTransaction) -> Result<(), redb::Error> + Send + 'static) -> io::Result<()> {
        let (done, committed) = oneshot::channel();
        self.enqueue(Op::Other { write: Box::new(write), done })?;
        committed.await.map_err(|_| io::Error::other("raft log writer stopped"))?
    }

    fn read_meta<T: serde::de::DeserializeOwned>(&self, key: &str) -> io::Result<Option<T>> {
        let txn = self.shared.db.begin_read().map_err(io_error)?;
        let table = txn.open_table(META).map_err(io_error)?;
        match table.get(key).map_err(io_error)? {
            Some(bytes) => Ok(Some(decode(bytes.value()).map_err(io_error)?)),
            None => Ok(None),
        }
    }
}

/// The writer thread: take whatever queued up, commit it as one transaction, report, repeat.
fn write_loop(shared: &Shared, ops: &mpsc::Receiver<Op>) {
    while let Ok(first) = ops.recv() {
        let committed = shared.unsaved_committed.lock().unwrap().take();
        let mut flushes = Vec::new();
        let mut dones = Vec::new();
        let mut appended: Vec<LogId> = Vec::new();
        let mut outcome: Result<redb::WriteTransaction, redb::Error> = shared.db.begin_write().map_err(redb::Error::from);
        for op in std::iter::once(first).chain(ops.try_iter()) {
            let step = match op {
                Op::Append { entries, flushed } => {
                    flushes.push(flushed);
                    appended.extend(entries.iter().map(|e| e.log_id()));
                    Box::new(move |txn: &WriteTransaction| {
                        let mut table = txn.open_table(LOGS)?;
                        for entry in &entries {
                            table.insert(entry.index(), encode(entry).as_slice())?;
                        }
                        Ok(())
                    }) as WriteFn
                }
                Op::Other { write, done } => {
                    dones.push(done);
                    write
                }
            };
            // After a failure the rest of the batch is only reported, not written.
            outcome = outcome.and_then(|txn| step(&txn).map(|_| txn));
        }
        let result = outcome.and_then(|txn| {
            if let Some(committed) = &committed {
                txn.open_table(META)?.insert(COMMITTED, encode(committed).as_slice())?;
            }
            txn.commit().map_err(redb::Error::from)
        });
        match &result {
            // Durable now: readers find them on disk. An index re-appended since (after a
            // truncation) holds another log id and stays.
            Ok(()) => {
                let mut unflushed = shared.unflushed.lock().unwrap();
                for id in &appended {
                    if unflushed.get(&id.index()).is_some_and(|e| e.log_id() == *id) {
                        unflushed.remove(&id.index());
                    }
                }
            }
            // Not persisted: keep the committed id for the next write unless a newer one came.
            Err(_) => {
                if let Some(committed) = committed {
                    shared.unsaved_committed.lock().unwrap().get_or_insert(committed);
                }
            }
        }
        let report = || result.as_ref().map(|_| ()).map_err(|e| io::Error::other(e.to_string()));
        for flushed in flushes {
            flushed.io_completed(report());
        }
        for done in dones {
            let _ = done.send(report());
        }
    }
}

fn bound(b: Bound<&u64>) -> Bound<u64> {
    match b {
        Bound::Included(&i) => Bound::Included(i),
        Bound::Excluded(&i) => Bound::Excluded(i),
        Bound::Unbounded => Bound::Unbounded,
    }
}

impl RaftLogReader<TypeConfig> for LogStore {
    async fn try_get_log_entries<RB: RangeBounds<u64> + Clone + Debug + OptionalSend>(&mut self, range: RB) -> io::Result<Vec<Entry>> {
        let range = (bound(range.start_bound()), bound(range.end_bound()));
        let _not_removing = self.shared.removing.read().await;
        // Memory first: an entry the writer commits meanwhile is then found on disk.
        let mut entries: BTreeMap<u64, Entry> = self.shared.unflushed.lock().unwrap().range(range).map(|(i, e)| (*i, e.clone())).collect();
        let txn = self.shared.db.begin_read().map_err(io_error)?;
        let table = txn.open_table(LOGS).map_err(io_error)?;
        for item in table.range::<u64>(range).map_err(io_error)? {
            let (index, bytes) = item.map_err(io_error)?;
            if let std::collections::btree_map::Entry::Vacant(slot) = entries.entry(index.value()) {
                slot.insert(decode(bytes.value()).map_err(io_error)?);
            }
        }
        Ok(entries.into_values().collect())
    }

    /// The entries of `[start, end)` that fit in one batch: it ends before the entry that would
    /// take it past the byte budget, and always holds the first one (openraft then asks for
    /// the rest). Without this, a follower 300 large entries behind is sent them in one frame,
    /// over the peer frame limit, again and again.
    async fn limited_get_log_entries(&mut self, start: u64, end: u64) -> io::Result<Vec<Entry>> {
        let budget = self.batch_bytes;
        let _not_removing = self.shared.removing.read().await;
        // Memory first, as in `try_get_log_entries`. The entries still in memory are the
        // newest, after those only on disk, so no more of them than one batch holds is needed.
        let mut memory: VecDeque<(u64, Entry, usize)> = VecDeque::new();
        {
            let unflushed = self.shared.unflushed.lock().unwrap();
            let mut taken = 0usize;
            for (index, entry) in unflushed.range(start..end) {
                if taken >= budget {
                    break;
                }
                let size = encoded_len(entry);
                taken = taken.saturating_add(size);
                memory.push_back((*index, entry.clone(), size));
            }
        }
        let txn = self.shared.db.begin_read().map_err(io_error)?;
        let table = txn.open_table(LOGS).map_err(io_error)?;
        let mut disk = table.range::<u64>(start..end).map_err(io_error)?;
        let mut next_on_disk = disk.next().transpose().map_err(io_error)?;
        let mut batch = Vec::new();
        let mut bytes = 0usize;
        loop {
            let disk_index = next_on_disk.as_ref().map(|(index, _)| index.value());
            let memory_index = memory.front().map(|(index, ..)| *index);
            let (index, size) = match (memory_index, disk_index) {
                (None, None) => break,
                (Some(m), None) => (m, memory.front().expect("peeked").2),
                (Some(m), Some(d)) if m <= d => (m, memory.front().expect("peeked").2),
                (_, Some(d)) => (d, next_on_disk.as_ref().expect("peeked").1.value().len()),
            };
            if !batch.is_empty() && bytes.saturating_add(size) > budget {
                break;
            }
            bytes = bytes.saturating_add(size);
            if memory_index == Some(index) {
                batch.push(memory.pop_front().expect("peeked").1);
            } else {
                batch.push(decode(next_on_disk.as_ref().expect("peeked").1.value()).map_err(io_error)?);
            }
            // The disk's copy of an entry taken from memory is the same entry.
            if disk_index == Some(index) {
                next_on_disk = disk.next().transpose().map_err(io_error)?;
            }
        }
        Ok(batch)
    }

    async fn read_vote(&mut self) -> io::Result<Option<Vote>> {
        self.read_meta(VOTE)
    }
}

impl RaftLogStorage<TypeConfig> for LogStore {
    type LogReader = LogStore;

    async fn get_log_state(&mut self) -> io::Result<LogState<TypeConfig>> {
        let last_purged: Option<LogId> = self.read_meta(LAST_PURGED)?;
        if let Some((_, entry)) = self.shared.unflushed.lock().unwrap().last_key_value() {
            return Ok(LogState { last_purged_log_id: last_purged, last_log_id: Some(entry.log_id()) });
        }
        let txn = self.shared.db.begin_read().map_err(io_error)?;
        let table = txn.open_table(LOGS).map_err(io_error)?;
        let last = match table.last().map_err(io_error)? {
            Some((_, bytes)) => Some(decode::<Entry>(bytes.value()).map_err(io_error)?.log_id()),
            None => last_purged,
        };
        Ok(LogState { last_purged_log_id: last_purged, last_log_id: last })
    }

    async fn get_log_reader(&mut self) -> Self::LogReader {
        self.clone()
    }

    async fn save_vote(&mut self, vote: &Vote) -> io::Result<()> {
        let bytes = encode(vote);
        self.write(move |txn| {
            txn.open_table(META)?.insert(VOTE, bytes.as_slice())?;
            Ok(())
        })
        .await
    }

    /// Not written on its own: it rides along with the next durable write. A committed index
    /// that is stale after a crash only means fewer entries re-applied at start-up; it is never
    /// ahead of the truth.
    async fn save_committed(&mut self, committed: Option<LogId>) -> io::Result<()> {
        *self.shared.unsaved_committed.lock().unwrap() = Some(committed);
        Ok(())
    }

    async fn read_committed(&mut self) -> io::Result<Option<LogId>> {
        if let Some(unsaved) = *self.shared.unsaved_committed.lock().unwrap() {
            return Ok(unsaved);
        }
        Ok(self.read_meta::<Option<LogId>>(COMMITTED)?.flatten())
    }

    async fn append<I>(&mut self, entries: I, flushed: IOFlushed<TypeConfig>) -> io::Result<()>
    where
        I: IntoIterator<Item = Entry> + OptionalSend,
        I::IntoIter: OptionalSend,
    {
        let entries: Vec<Entry> = entries.into_iter().collect();
        {
            let mut unflushed = self.shared.unflushed.lock().unwrap();
            for entry in &entries {
                unflushed.insert(entry.index(), entry.clone());
            }
        }
        // Readable now; `flushed` fires from the writer once they are on disk.
        self.enqueue(Op::Append { entries, flushed })
    }

    async fn truncate_after(&mut self, last_log_id: Option<LogId>) -> io::Result<()> {
        let from = last_log_id.map(|id| id.index() + 1).unwrap_or(0);
        let _removing = self.shared.removing.write().await;
        self.shared.unflushed.lock().unwrap().retain(|index, _| *index < from);
        self.write(move |txn| {
            txn.open_table(LOGS)?.retain_in(from.., |_, _| false)?;
            Ok(())
        })
        .await
    }

    async fn purge(&mut self, log_id: LogId) -> io::Result<()> {
        let upto = log_id.index();
        let _removing = self.shared.removing.write().await;
        self.shared.unflushed.lock().unwrap().retain(|index, _| *index > upto);
        let bytes = encode(&log_id);
        self.write(move |txn| {
            txn.open_table(META)?.insert(LAST_PURGED, bytes.as_slice())?;
            txn.open_table(LOGS)?.retain_in(..=upto, |_, _| false)?;
            Ok(())
        })
        .await
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use openraft::testing::{blank_ent, log_id};
    use openraft::type_config::TypeConfigExt;

    async fn append_flushed(store: &mut LogStore, entries: Vec<Entry>) {
        let (tx, rx) = TypeConfig::oneshot();
        store.append(entries, IOFlushed::signal(tx)).await.unwrap();
        rx.await.unwrap().unwrap();
    }

    fn terms(entries: &[Entry]) -> Vec<(u64, u64)> {
        entries.iter().map(|e| (e.index(), e.log_id().leader_id.term)).collect()
    }

    #[tokio::test]
    async fn the_committed_index_is_persisted_by_the_next_write_not_on_its_own() {
        let dir = tempfile::tempdir().unwrap();
        let mut store = LogStore::open(dir.path()).unwrap();
        append_flushed(&mut store, vec![blank_ent::<TypeConfig>(1, 0, 1)]).await;
        store.save_committed(Some(log_id::<TypeConfig>(1, 0, 1))).await.unwrap();
        assert_eq!(store.read_committed().await.unwrap(), Some(log_id::<TypeConfig>(1, 0, 1)), "remembered at once");
        drop(store);
        let mut store = LogStore::open(dir.path()).unwrap();
        assert_eq!(store.read_committed().await.unwrap(), None, "no write carried it to disk");

        store.save_committed(Some(log_id::<TypeConfig>(1, 0, 1))).await.unwrap();
        append_flushed(&mut store, vec![blank_ent::<TypeConfig>(1, 0, 2)]).await;
        drop(store);
        let mut store = LogStore::open(dir.path()).unwrap();
        assert_eq!(store.read_committed().await.unwrap(), Some(log_id::<TypeConfig>(1, 0, 1)));
        assert_eq!(terms(&store.try_get_log_entries(0..).await.unwrap()), vec![(1, 1), (2, 1)]);
    }

    /// An entry of about `bytes` bytes once encoded.
    fn sized_entry(index: u64, bytes: usize) -> Entry {
        use crate::raft::state_machine::{Command, Request};
        let command = Command::SessionSubscribe {
            id: crate::session::SessionId("s".into()),
            uri: "u".repeat(bytes),
            subscribed: true,
            limits: crate::session::SubscriptionLimits { max_count: 100, max_bytes: usize::MAX },
        };
        Entry::new_normal(log_id::<TypeConfig>(1, 0, index), Request { now: 0, clock_agreed: true, write: None, command })
    }

    fn indexes(entries: &[Entry]) -> Vec<u64> {
        entries.iter().map(|e| e.index()).collect()
    }

    #[tokio::test]
    async fn a_replication_batch_ends_at_the_byte_budget_but_always_holds_one_entry() {
        let dir = tempfile::tempdir().unwrap();
        let mut store = LogStore::open(dir.path()).unwrap().batch_budget(10_000);
        let size = encoded_len(&sized_entry(1, 3_000));
        assert!((3_000..3_200).contains(&size), "{size}");
        append_flushed(&mut store, (1..=6).map(|i| sized_entry(i, 3_000)).collect()).await;
        assert_eq!(indexes(&store.limited_get_log_entries(1, 7).await.unwrap()), vec![1, 2, 3], "a fourth would pass 10,000 bytes");
        assert_eq!(indexes(&store.limited_get_log_entries(4, 7).await.unwrap()), vec![4, 5, 6]);
        assert_eq!(indexes(&store.limited_get_log_entries(2, 4).await.unwrap()), vec![2, 3], "the range still bounds it");
        assert!(store.limited_get_log_entries(3, 3).await.unwrap().is_empty());
        append_flushed(&mut store, vec![sized_entry(7, 20_000)]).await;
        assert_eq!(indexes(&store.limited_get_log_entries(6, 8).await.unwrap()), vec![6]);
        assert_eq!(indexes(&store.limited_get_log_entries(7, 8).await.unwrap()), vec![7], "one entry over the budget goes alone");
        // Entries not flushed yet (readable from memory, or from disk if the writer was quick)
        // batch the same way, after those on disk.
        let (tx, flushed) = TypeConfig::oneshot();
        store.append((8..=11).map(|i| sized_entry(i, 3_000)).collect::<Vec<_>>(), IOFlushed::signal(tx)).await.unwrap();
        assert_eq!(indexes(&store.limited_get_log_entries(8, 12).await.unwrap()), vec![8, 9, 10]);
        assert_eq!(indexes(&store.limited_get_log_entries(5, 12).await.unwrap()), vec![5, 6]);
        flushed.await.unwrap().unwrap();
        let all = store.limited_get_log_entries(8, 12).await.unwrap();
        assert_eq!(all, store.try_get_log_entries(8..11).await.unwrap(), "the same entries as an unlimited read");
        // Unbounded unless set: the whole range.
        let mut unbounded = LogStore::open(tempfile::tempdir().unwrap().path()).unwrap();
        append_flushed(&mut unbounded, (1..=6).map(|i| sized_entry(i, 3_000)).collect()).await;
        assert_eq!(unbounded.limited_get_log_entries(1, 7).await.unwrap().len(), 6);
    }

    #[tokio::test]
    async fn an_index_truncated_and_appended_again_keeps_the_new_entry() {
        let dir = tempfile::tempdir().unwrap();
        let mut store = LogStore::open(dir.path()).unwrap();
        append_flushed(&mut store, vec![blank_ent::<TypeConfig>(1, 0, 1)]).await;
        // Queued behind each other without waiting for the first flush.
        let (tx, first_flush) = TypeConfig::oneshot();
        store.append(vec![blank_ent::<TypeConfig>(1, 0, 2), blank_ent::<TypeConfig>(1, 0, 3)], IOFlushed::signal(tx)).await.unwrap();
        assert_eq!(terms(&store.try_get_log_entries(1..4).await.unwrap()), vec![(1, 1), (2, 1), (3, 1)], "readable before the flush");
        store.truncate_after(Some(log_id::<TypeConfig>(1, 0, 1))).await.unwrap();
        append_flushed(&mut store, vec![blank_ent::<TypeConfig>(2, 1, 2)]).await;
        first_flush.await.unwrap().unwrap();
        assert_eq!(terms(&store.try_get_log_entries(0..).await.unwrap()), vec![(1, 1), (2, 2)]);
        assert_eq!(store.get_log_state().await.unwrap().last_log_id, Some(log_id::<TypeConfig>(2, 1, 2)));
        drop(store);
        let mut store = LogStore::open(dir.path()).unwrap();
        assert_eq!(terms(&store.try_get_log_entries(0..).await.unwrap()), vec![(1, 1), (2, 2)], "the same after a restart");
    }
}
