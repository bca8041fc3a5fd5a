//! The durable Raft log, vote and committed index, in one redb file in the data directory.
//!
//! Every write is a redb transaction committed with `Durability::Immediate` (fsync) before
//! openraft is told it is done. openraft hands `append` all entries that queued up while the
//! previous write was in flight, so concurrent client writes share one fsync.

use super::types::{Entry, LogId, TypeConfig, Vote, decode, encode, io_error};
use openraft::storage::{IOFlushed, LogState, RaftLogReader, RaftLogStorage};
use openraft::{OptionalSend, entry::RaftEntry};
use redb::{Database, ReadableDatabase, ReadableTable, TableDefinition};
use std::fmt::Debug;
use std::io;
use std::ops::{Bound, RangeBounds};
use std::path::Path;
use std::sync::Arc;

const LOGS: TableDefinition<u64, &[u8]> = TableDefinition::new("logs");
const META: TableDefinition<&str, &[u8]> = TableDefinition::new("meta");
const VOTE: &str = "vote";
const COMMITTED: &str = "committed";
const LAST_PURGED: &str = "last_purged";

/// A handle on the log; clones share the database (the reader is a clone).
#[derive(Clone)]
pub struct LogStore {
    db: Arc<Database>,
}

impl LogStore {
    /// Open (or create) `raft-log.redb` in `dir`.
    pub fn open(dir: &Path) -> io::Result<Self> {
        std::fs::create_dir_all(dir)?;
        let db = Database::create(dir.join("raft-log.redb")).map_err(io_error)?;
        let txn = db.begin_write().map_err(io_error)?;
        txn.open_table(LOGS).map_err(io_error)?;
        txn.open_table(META).map_err(io_error)?;
        txn.commit().map_err(io_error)?;
        Ok(LogStore { db: Arc::new(db) })
    }

    /// Run a blocking redb write off the async workers and commit it; `durable` fsyncs it.
    async fn write_with(
        &self,
        durable: bool,
        f: impl FnOnce(&redb::WriteTransaction) -> Result<(), redb::Error> + Send + 'static,
    ) -> io::Result<()> {
        let db = self.db.clone();
        tokio::task::spawn_blocking(move || {
            let mut txn = db.begin_write().map_err(io_error)?;
            if !durable {
                txn.set_durability(redb::Durability::None).map_err(io_error)?;
            }
            f(&txn).map_err(io_error)?;
            txn.commit().map_err(io_error)
        })
        .await
        .map_err(io_error)?
    }

    async fn write(&self, f: impl FnOnce(&redb::WriteTransaction) -> Result<(), redb::Error> + Send + 'static) -> io::Result<()> {
        self.write_with(true, f).await
    }

    fn read_meta<T: serde::de::DeserializeOwned>(&self, key: &str) -> io::Result<Option<T>> {
        let txn = self.db.begin_read().map_err(io_error)?;
        let table = txn.open_table(META).map_err(io_error)?;
        match table.get(key).map_err(io_error)? {
            Some(bytes) => Ok(Some(decode(bytes.value()).map_err(io_error)?)),
            None => Ok(None),
        }
    }

    async fn write_meta<T: serde::Serialize>(&self, key: &'static str, value: &T, durable: bool) -> io::Result<()> {
        let bytes = encode(value);
        self.write_with(durable, move |txn| {
            txn.open_table(META)?.insert(key, bytes.as_slice())?;
            Ok(())
        })
        .await
    }
}

impl RaftLogReader<TypeConfig> for LogStore {
    async fn try_get_log_entries<RB: RangeBounds<u64> + Clone + Debug + OptionalSend>(&mut self, range: RB) -> io::Result<Vec<Entry>> {
        let txn = self.db.begin_read().map_err(io_error)?;
        let table = txn.open_table(LOGS).map_err(io_error)?;
        let start = match range.start_bound() {
            Bound::Included(&i) => Bound::Included(i),
            Bound::Excluded(&i) => Bound::Excluded(i),
            Bound::Unbounded => Bound::Unbounded,
        };
        let end = match range.end_bound() {
            Bound::Included(&i) => Bound::Included(i),
            Bound::Excluded(&i) => Bound::Excluded(i),
            Bound::Unbounded => Bound::Unbounded,
        };
        let mut entries = Vec::new();
        for item in table.range::<u64>((start, end)).map_err(io_error)? {
            let (_, bytes) = item.map_err(io_error)?;
            entries.push(decode(bytes.value()).map_err(io_error)?);
        }
        Ok(entries)
    }

    async fn read_vote(&mut self) -> io::Result<Option<Vote>> {
        self.read_meta(VOTE)
    }
}

impl RaftLogStorage<TypeConfig> for LogStore {
    type LogReader = LogStore;

    async fn get_log_state(&mut self) -> io::Result<LogState<TypeConfig>> {
        let last_purged: Option<LogId> = self.read_meta(LAST_PURGED)?;
        let txn = self.db.begin_read().map_err(io_error)?;
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
        self.write_meta(VOTE, vote, true).await
    }

    /// Not fsynced on its own: it rides along with the next durable append. A committed index
    /// that is stale after a crash only means fewer entries re-applied at start-up; it is never
    /// ahead of the truth.
    async fn save_committed(&mut self, committed: Option<LogId>) -> io::Result<()> {
        self.write_meta(COMMITTED, &committed, false).await
    }

    async fn read_committed(&mut self) -> io::Result<Option<LogId>> {
        Ok(self.read_meta::<Option<LogId>>(COMMITTED)?.flatten())
    }

    async fn append<I>(&mut self, entries: I, callback: IOFlushed<TypeConfig>) -> io::Result<()>
    where
        I: IntoIterator<Item = Entry> + OptionalSend,
        I::IntoIter: OptionalSend,
    {
        let encoded: Vec<(u64, Vec<u8>)> = entries.into_iter().map(|e| (e.index(), encode(&e))).collect();
        let result = self
            .write(move |txn| {
                let mut table = txn.open_table(LOGS)?;
                for (index, bytes) in &encoded {
                    table.insert(*index, bytes.as_slice())?;
                }
                Ok(())
            })
            .await;
        // Committed with fsync: the entries are both readable and durable now.
        callback.io_completed(result.as_ref().map(|_| ()).map_err(|e| io::Error::new(e.kind(), e.to_string())));
        result
    }

    async fn truncate_after(&mut self, last_log_id: Option<LogId>) -> io::Result<()> {
        let from = last_log_id.map(|id| id.index() + 1).unwrap_or(0);
        self.write(move |txn| {
            txn.open_table(LOGS)?.retain_in(from.., |_, _| false)?;
            Ok(())
        })
        .await
    }

    async fn purge(&mut self, log_id: LogId) -> io::Result<()> {
        let upto = log_id.index();
        let bytes = encode(&log_id);
        self.write(move |txn| {
            txn.open_table(META)?.insert(LAST_PURGED, bytes.as_slice())?;
            txn.open_table(LOGS)?.retain_in(..=upto, |_, _| false)?;
            Ok(())
        })
        .await
    }
}
