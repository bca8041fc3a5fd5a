//! The durable Raft log, vote and committed index: an append-only write-ahead log of
//! checksummed records in segment files (`raft-log/*.wal` in the data directory), with the
//! live part of the log (what the last snapshot does not cover; openraft purges the rest) kept
//! in memory, so reads never touch the disk.
//!
//! A record is `[payload length: u32 LE][CRC-32 of the payload: u32 LE][payload]`, the payload
//! a MessagePack [`Record`]: an entry, the vote, the committed id, a truncation or a purge. On
//! start-up the segments are replayed in order; the first record of the last segment that is
//! cut short or fails its checksum (a write torn by a crash) ends the log, and the file is cut
//! back to the last whole record. Such a record was never acknowledged: acknowledgement waits
//! for the `fdatasync` that follows the write. A bad record anywhere else is corruption, and
//! the node refuses to start rather than guess.
//!
//! All writes go through one writer thread, in order. `append` does not wait for the disk: the
//! entries are readable at once (so openraft replicates them to the followers while the
//! leader's own write runs) and queued; the writer writes everything that queued up meanwhile
//! with one `write` and one `fdatasync` (group commit) and only then tells openraft the entries
//! are flushed. Vote, truncation and purge wait for their flush.
//!
//! The committed index is only remembered by `save_committed` and rides along with the next
//! write: openraft awaits `save_committed` before applying, so it must not wait for a flush.
//!
//! A segment grows to [`SEGMENT_BYTES`]; the next one starts with a [`Record::Header`] holding
//! the vote, committed id and last purged id, so older segments matter only for their entries,
//! and are deleted (oldest first) once a purge covers every entry in them.
//!
//! The active segment is kept zero-filled ahead of its last record ([`PREALLOCATE_BYTES`] at a
//! time) and records are written over the zeros: a `fdatasync` after a write that changes the
//! file's size must also write the inode, one more device write per flush. Measured on this
//! project's VM (ext4, 300-byte records): 61-72 -> 46-55 µs of CPU and 0.14 -> 0.10 ms per
//! flush. A zero record header ends the log: what follows is unwritten preallocation, and a
//! clean shutdown or a segment's close trims it. The zeros are written, not `fallocate`d or
//! left a hole, so no flush ever changes the block map either.
//!
//! This replaced a redb B-tree, whose copy-on-write commit per batch cost several times the
//! write itself; a data directory still holding `raft-log.redb` is migrated on first start.
//!
//! Replication reads through `limited_get_log_entries`, the hook openraft builds each
//! AppendEntries request from; openraft itself bounds a request only by its number of entries
//! (`max_payload_entries`), so the store bounds it in bytes ([`LogStore::batch_budget`]).

use super::thread_priority;
use super::types::{Entry, LogId, TypeConfig, Vote, decode, io_error};
use crate::peer::codec::encode_into;
use crate::peer::codec::encoded_len;
use openraft::storage::{IOFlushed, LogState, RaftLogReader, RaftLogStorage};
use openraft::{OptionalSend, entry::RaftEntry};
use serde::{Deserialize, Serialize};
use std::collections::VecDeque;
use std::fmt::Debug;
use std::fs::{File, OpenOptions};
use std::io::{self, Read, Write};
use std::ops::{Bound, RangeBounds};
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, mpsc};
use tokio::sync::oneshot;

/// The directory of the segments, in the data directory.
const LOG_DIR: &str = "raft-log";
/// A segment is closed and the next one started once it holds this much.
pub const SEGMENT_BYTES: u64 = 64 * 1024 * 1024;
/// The active segment is zero-filled this far ahead of its last record (or a segment's size,
/// if smaller).
pub const PREALLOCATE_BYTES: u64 = 1024 * 1024;
/// The most one record may hold: more is a corrupt length, not a record.
const MAX_RECORD_BYTES: u32 = 1 << 30;
const RECORD_HEADER_BYTES: usize = 8;

/// One record of the write-ahead log, as read back.
#[derive(Debug, Deserialize)]
enum Record {
    Entry(Entry),
    Vote(Vote),
    Committed(Option<LogId>),
    /// Entries from this index on are gone.
    TruncateFrom(u64),
    Purged(LogId),
    /// The first record of every segment: all but the entries.
    Header {
        vote: Option<Vote>,
        committed: Option<LogId>,
        last_purged: Option<LogId>,
    },
}

/// A record as written (borrowing, so an entry is encoded without a copy); the same variant
/// names as [`Record`].
#[derive(Serialize)]
enum RecordOut<'a> {
    Entry(&'a Entry),
    Vote(&'a Vote),
    Committed(&'a Option<LogId>),
    TruncateFrom(u64),
    Purged(&'a LogId),
    Header { vote: &'a Option<Vote>, committed: &'a Option<LogId>, last_purged: &'a Option<LogId> },
}

/// The live entries, in index order. A Raft log has no holes, so they sit in a deque indexed
/// from the first one's index: a B-tree of 240-byte entries held about twice their size, and
/// walked (and split) on every append.
#[derive(Debug, Default)]
struct LiveEntries {
    /// The index of `entries[0]`.
    first: u64,
    entries: VecDeque<Entry>,
}

impl LiveEntries {
    /// The index the next entry in order has.
    fn next_index(&self) -> u64 {
        self.first + self.entries.len() as u64
    }

    /// `entry` replaces the one at its index and whatever followed (openraft truncates first;
    /// a replay relies on it).
    fn append(&mut self, entry: Entry) {
        let index = entry.index();
        if index < self.first || index > self.next_index() || self.entries.is_empty() {
            // Nothing before it stays: it starts the log, or replaces all of it. openraft makes
            // no holes, so an index past the end only comes after a purge emptied the log.
            debug_assert!(index <= self.next_index() || self.entries.is_empty(), "a hole in the Raft log at {index}");
            self.entries.clear();
            self.first = index;
        } else {
            self.entries.truncate((index - self.first) as usize);
        }
        self.entries.push_back(entry);
    }

    /// Drop the entries from index `from` on.
    fn truncate_from(&mut self, from: u64) {
        self.entries.truncate(from.saturating_sub(self.first) as usize);
    }

    /// Remove the entries up to index `upto`, inclusive, and return them: a purge after a
    /// snapshot is a hundred thousand entries, and freeing them took 30-110 ms, which must not
    /// happen under the log's lock. What stays (the entries kept after the snapshot) is moved.
    fn purge_upto(&mut self, upto: u64) -> VecDeque<Entry> {
        let gone = (upto + 1).saturating_sub(self.first).min(self.entries.len() as u64);
        let kept = self.entries.split_off(gone as usize);
        self.first = if kept.is_empty() { upto + 1 } else { self.first + gone };
        std::mem::replace(&mut self.entries, kept)
    }

    /// The entries whose indexes are in `range`.
    fn range(&self, range: impl RangeBounds<u64>) -> impl Iterator<Item = &Entry> {
        let position = |index: u64| index.saturating_sub(self.first).min(self.entries.len() as u64) as usize;
        let start = match range.start_bound() {
            Bound::Included(&i) => position(i),
            Bound::Excluded(&i) => position(i.saturating_add(1)),
            Bound::Unbounded => 0,
        };
        let end = match range.end_bound() {
            Bound::Included(&i) => position(i.saturating_add(1)),
            Bound::Excluded(&i) => position(i),
            Bound::Unbounded => self.entries.len(),
        };
        self.entries.range(start..end.max(start))
    }

    fn iter(&self) -> impl Iterator<Item = &Entry> {
        self.entries.iter()
    }

    fn last(&self) -> Option<&Entry> {
        self.entries.back()
    }

    fn len(&self) -> usize {
        self.entries.len()
    }
}

/// What the log holds: in memory, the same as on disk once the queued writes are flushed.
#[derive(Debug, Default)]
struct LogContents {
    entries: LiveEntries,
    vote: Option<Vote>,
    committed: Option<LogId>,
    last_purged: Option<LogId>,
}

impl LogContents {
    fn append(&mut self, entry: Entry) {
        self.entries.append(entry);
    }

    fn truncate_from(&mut self, from: u64) {
        self.entries.truncate_from(from);
    }

    fn purge(&mut self, upto: LogId) -> VecDeque<Entry> {
        self.last_purged = Some(upto);
        self.entries.purge_upto(upto.index())
    }

    fn replay(&mut self, record: Record) {
        match record {
            Record::Entry(entry) => self.append(entry),
            Record::Vote(vote) => self.vote = Some(vote),
            Record::Committed(committed) => self.committed = committed,
            Record::TruncateFrom(from) => self.truncate_from(from),
            Record::Purged(upto) => drop(self.purge(upto)),
            Record::Header { vote, committed, last_purged } => {
                self.vote = vote;
                self.committed = committed;
                if let Some(upto) = last_purged {
                    drop(self.purge(upto));
                }
            }
        }
    }
}

/// One queued write for the writer thread.
enum Op {
    /// Entries already framed as records (encoded by `append`, so the entries themselves move
    /// into the live log uncopied), and the last one's index.
    Append {
        records: Vec<u8>,
        last_index: Option<u64>,
        flushed: IOFlushed<TypeConfig>,
    },
    Vote {
        vote: Vote,
        done: oneshot::Sender<io::Result<()>>,
    },
    TruncateFrom {
        from: u64,
        done: oneshot::Sender<io::Result<()>>,
    },
    Purge {
        upto: LogId,
        done: oneshot::Sender<io::Result<()>>,
    },
}

/// State shared by the store, its reader clones and the writer thread.
struct Shared {
    log: Mutex<LogContents>,
    /// The committed id `save_committed` was last given, until a write persists it.
    unsaved_committed: Mutex<Option<Option<LogId>>>,
}

/// Owns the writer thread: when the last store handle goes, the queue closes and the thread is
/// joined, so the segment files are closed before anyone may reopen them.
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

/// A handle on the log; clones share the memory and the writer (the reader is a clone).
#[derive(Clone)]
pub struct LogStore {
    shared: Arc<Shared>,
    writer: Arc<Writer>,
    /// Bytes of encoded entries one replication batch may carry (see `limited_get_log_entries`).
    batch_bytes: usize,
}

impl LogStore {
    /// Open (or create) the log in `dir` (migrating a redb log found there) and start its
    /// writer thread.
    pub fn open(dir: &Path) -> io::Result<Self> {
        Self::open_with_segments_of(dir, SEGMENT_BYTES)
    }

    /// [`open`](Self::open), starting a new segment once one holds `segment_bytes` (tests use
    /// small segments).
    pub fn open_with_segments_of(dir: &Path, segment_bytes: u64) -> io::Result<Self> {
        let log_dir = dir.join(LOG_DIR);
        std::fs::create_dir_all(&log_dir)?;
        let mut segments = Segments::list(&log_dir, segment_bytes)?;
        let legacy = dir.join(legacy::FILE);
        if segments.files.is_empty() && legacy.exists() {
            let state = legacy::read(&legacy)?;
            segments.start_next(&state)?;
            segments.write_batch(&encode_entries(state.entries.iter()), state.entries.last().map(|e| e.index()))?;
            std::fs::remove_file(&legacy)?;
            sync_dir(dir)?;
            tracing::info!(entries = state.entries.len(), "Raft log migrated from redb to the segmented log");
        }
        let state = segments.replay()?;
        if segments.files.is_empty() {
            segments.start_next(&state)?;
        }
        let shared = Arc::new(Shared { log: Mutex::new(state), unsaved_committed: Mutex::default() });
        let (queue, ops) = mpsc::channel();
        let thread = std::thread::Builder::new().name("raft-log-writer".into()).spawn({
            let shared = shared.clone();
            move || write_loop(&shared, segments, &ops)
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

    /// Queue a write behind everything queued before it and wait for its flush.
    async fn write(&self, op: impl FnOnce(oneshot::Sender<io::Result<()>>) -> Op) -> io::Result<()> {
        let (done, flushed) = oneshot::channel();
        self.enqueue(op(done))?;
        flushed.await.map_err(|_| io::Error::other("raft log writer stopped"))?
    }
}

impl LogStore {
    /// A read-only view of the live entries, for replaying them into a snapshot.
    pub fn entries(&self) -> LogEntries {
        LogEntries { shared: self.shared.clone() }
    }
}

/// A read-only view of a log's live entries. It holds no writer: a view that outlives the
/// store never keeps the log's files open.
#[derive(Clone)]
pub struct LogEntries {
    shared: Arc<Shared>,
}

impl LogEntries {
    /// Copies of the entries from index `from` through `to`, at most `max` of them (the lock
    /// is held only for that many), or `None` if the log does not hold the one at `from`.
    pub fn copy(&self, from: u64, to: u64, max: usize) -> Option<Vec<Entry>> {
        let log = self.shared.log.lock().unwrap();
        let entries: Vec<Entry> = log.entries.range(from..=to).take(max).cloned().collect();
        (entries.first().map(|e| e.index()) == Some(from)).then_some(entries)
    }

    /// The first entry's index if nothing was ever purged (the log then holds every entry).
    pub fn unpurged_start(&self) -> Option<u64> {
        let log = self.shared.log.lock().unwrap();
        log.last_purged.is_none().then_some(log.entries.first)
    }
}

/// Encode a record into `out`, framed.
/// Encoded in place, the header written once the payload's length and checksum are known.
fn frame(out: &mut Vec<u8>, record: &RecordOut<'_>) {
    let header = out.len();
    out.extend_from_slice(&[0; RECORD_HEADER_BYTES]);
    encode_into(out, record);
    let payload = &out[header + RECORD_HEADER_BYTES..];
    let (len, crc) = ((payload.len() as u32).to_le_bytes(), crc32fast::hash(payload).to_le_bytes());
    out[header..header + 4].copy_from_slice(&len);
    out[header + 4..header + RECORD_HEADER_BYTES].copy_from_slice(&crc);
}

fn encode_entries<'a>(entries: impl Iterator<Item = &'a Entry>) -> Vec<u8> {
    // Most entries are a few hundred bytes: one allocation for a small batch.
    let mut out = Vec::with_capacity(512);
    for entry in entries {
        frame(&mut out, &RecordOut::Entry(entry));
    }
    out
}

fn sync_dir(dir: &Path) -> io::Result<()> {
    File::open(dir)?.sync_all()
}

/// One segment file: its sequence number and the highest entry index written to it.
struct SegmentFile {
    seq: u64,
    last_index: Option<u64>,
}

/// The segment files, the last one open for appending. Owned by the writer thread.
struct Segments {
    dir: PathBuf,
    segment_bytes: u64,
    files: Vec<SegmentFile>,
    active: Option<File>,
    /// Where the active segment's records end: the next write goes here.
    active_len: u64,
    /// The active segment's size: zeros from `active_len` up to it.
    active_end: u64,
}

impl Segments {
    fn path(&self, seq: u64) -> PathBuf {
        self.dir.join(format!("{seq:016x}.wal"))
    }

    fn list(dir: &Path, segment_bytes: u64) -> io::Result<Segments> {
        let mut seqs: Vec<u64> = std::fs::read_dir(dir)?
            .filter_map(|e| e.ok())
            .filter_map(|e| e.file_name().to_str()?.strip_suffix(".wal").and_then(|s| u64::from_str_radix(s, 16).ok()))
            .collect();
        seqs.sort_unstable();
        let files = seqs.into_iter().map(|seq| SegmentFile { seq, last_index: None }).collect();
        Ok(Segments { dir: dir.to_path_buf(), segment_bytes, files, active: None, active_len: 0, active_end: 0 })
    }

    /// Read every segment in order into a log state; cut a torn tail off the last one and open
    /// it for appending.
    fn replay(&mut self) -> io::Result<LogContents> {
        let mut state = LogContents::default();
        let count = self.files.len();
        for i in 0..count {
            let path = self.path(self.files[i].seq);
            let mut bytes = Vec::new();
            File::open(&path)?.read_to_end(&mut bytes)?;
            let mut at = 0usize;
            let mut last_index = None;
            let last = i + 1 == count;
            while at < bytes.len() {
                if last && unwritten(&bytes[at..]) {
                    break;
                }
                match read_record(&bytes[at..]) {
                    Ok((record, used)) => {
                        if let Record::Entry(entry) = &record {
                            last_index = Some(entry.index());
                        }
                        state.replay(record);
                        at += used;
                    }
                    Err(BadRecord::Unknown(e)) => {
                        return Err(io::Error::new(
                            io::ErrorKind::InvalidData,
                            format!(
                                "Raft log segment {} holds a record this version cannot read at offset {at} ({e}): written by a newer version of switchboard? Run that version (nothing was changed)",
                                path.display()
                            ),
                        ));
                    }
                    Err(BadRecord::Torn(why)) if last => {
                        tracing::warn!(segment = %path.display(), offset = at, dropped = bytes.len() - at, why, "torn record at the end of the Raft log dropped (a write cut short by a crash; never acknowledged)");
                        let file = OpenOptions::new().write(true).open(&path)?;
                        file.set_len(at as u64)?;
                        file.sync_all()?;
                        bytes.truncate(at);
                        break;
                    }
                    Err(BadRecord::Torn(why)) => {
                        return Err(io::Error::new(
                            io::ErrorKind::InvalidData,
                            format!("Raft log segment {} is corrupt at offset {at}: {why}", path.display()),
                        ));
                    }
                }
            }
            self.files[i].last_index = last_index;
            if last {
                self.active_len = at as u64;
                self.active_end = bytes.len() as u64;
                self.active = Some(OpenOptions::new().write(true).open(&path)?);
            }
        }
        Ok(state)
    }

    /// Close the active segment and start the next, headed by `state`'s vote, committed and
    /// last purged ids.
    fn start_next(&mut self, state: &LogContents) -> io::Result<()> {
        // A closed segment ends at its last record: only the last one may hold a zero tail,
        // so the trim is durable before the next segment exists.
        self.trim_active()?;
        let seq = self.files.last().map_or(1, |f| f.seq + 1);
        let path = self.path(seq);
        let file = OpenOptions::new().create_new(true).write(true).open(&path)?;
        let mut header = Vec::new();
        frame(&mut header, &RecordOut::Header { vote: &state.vote, committed: &state.committed, last_purged: &state.last_purged });
        (&file).write_all(&header)?;
        file.sync_data()?;
        sync_dir(&self.dir)?;
        self.files.push(SegmentFile { seq, last_index: None });
        self.active = Some(file);
        self.active_len = header.len() as u64;
        self.active_end = self.active_len;
        Ok(())
    }

    /// Cut the active segment's preallocated zeros off (a segment's close, a clean shutdown).
    fn trim_active(&mut self) -> io::Result<()> {
        let Some(file) = &self.active else { return Ok(()) };
        if self.active_end > self.active_len {
            file.set_len(self.active_len)?;
            file.sync_all()?;
            self.active_end = self.active_len;
        }
        Ok(())
    }

    /// Write `bytes` (whole records) after the active segment's last record and flush them
    /// to the disk; first zero-fill ahead if they would pass the preallocated end.
    fn write_batch(&mut self, bytes: &[u8], last_index: Option<u64>) -> io::Result<()> {
        let file = self.active.as_ref().expect("a segment is open");
        let end = self.active_len + bytes.len() as u64;
        let mut written = Ok(());
        let mut new_end = self.active_end;
        if end > self.active_end {
            // Extended in the same flush as the records: one inode write per chunk, not per flush.
            new_end = end + PREALLOCATE_BYTES.min(self.segment_bytes);
            written = write_zeros(file, end, new_end);
        }
        let written = written.and_then(|()| file.write_all_at(bytes, self.active_len)).and_then(|()| file.sync_data());
        if let Err(e) = written {
            // Cut back to the last whole record, so what follows is not written after garbage.
            let _ = file.set_len(self.active_len);
            self.active_end = self.active_len;
            return Err(e);
        }
        self.active_end = new_end;
        self.active_len = end;
        let active = self.files.last_mut().expect("a segment is open");
        active.last_index = last_index.or(active.last_index);
        Ok(())
    }

    /// Take out, to be deleted, the oldest closed segments while every entry in them is purged (only a prefix:
    /// a later segment's truncation may refer to an earlier one's entries).
    fn take_purged(&mut self, upto: u64) -> Vec<PathBuf> {
        let mut paths = Vec::new();
        while self.files.len() > 1 && self.files[0].last_index.is_none_or(|last| last <= upto) {
            let seq = self.files.remove(0).seq;
            paths.push(self.path(seq));
        }
        paths
    }
}

/// Whether `rest` of the last segment is its preallocated zeros: a record's length is never
/// zero (its payload holds at least the record's kind), so a zero header starts them.
fn unwritten(rest: &[u8]) -> bool {
    rest.starts_with(&[0; 4]) && rest.iter().all(|b| *b == 0)
}

/// Write zeros over `from..to` of `file`.
fn write_zeros(file: &File, from: u64, to: u64) -> io::Result<()> {
    static ZEROS: [u8; 64 * 1024] = [0; 64 * 1024];
    let mut at = from;
    while at < to {
        let n = (to - at).min(ZEROS.len() as u64) as usize;
        file.write_all_at(&ZEROS[..n], at)?;
        at += n as u64;
    }
    Ok(())
}

/// Why no record could be read where one starts.
enum BadRecord {
    /// Cut short, or failing its checksum: a write torn by a crash (at the end of the log).
    Torn(&'static str),
    /// Whole and checksummed, but not a record this version knows: written by a newer version
    /// (a new kind of entry), never torn. Cutting it off would drop committed entries.
    Unknown(rmp_serde::decode::Error),
}

/// One record from the start of `bytes`, and the bytes it used; or why there is none.
fn read_record(bytes: &[u8]) -> Result<(Record, usize), BadRecord> {
    if bytes.len() < RECORD_HEADER_BYTES {
        return Err(BadRecord::Torn("cut short in its header"));
    }
    let len = u32::from_le_bytes(bytes[0..4].try_into().expect("4 bytes"));
    let crc = u32::from_le_bytes(bytes[4..8].try_into().expect("4 bytes"));
    // Zeros pass the checksum (an empty payload's is zero): no record is empty.
    if len == 0 || len > MAX_RECORD_BYTES {
        return Err(BadRecord::Torn("impossible length"));
    }
    let end = RECORD_HEADER_BYTES + len as usize;
    let payload = bytes.get(RECORD_HEADER_BYTES..end).ok_or(BadRecord::Torn("cut short in its payload"))?;
    if crc32fast::hash(payload) != crc {
        return Err(BadRecord::Torn("checksum mismatch"));
    }
    let record = decode(payload).map_err(BadRecord::Unknown)?;
    Ok((record, end))
}

/// The writer thread: take whatever queued up, write it with one flush, report, repeat.
fn write_loop(shared: &Shared, mut segments: Segments, ops: &mpsc::Receiver<Op>) {
    // Woken by a queued write or a finished flush, the writer preempted the worker running on
    // a shared core. Waiting for its turn, a lone node's workers were switched out 0.12 times a
    // round trip at 64 clients instead of 0.32-0.35, and the writer flushed half as often (more
    // writes queue meanwhile); 3 nodes made 6 % more round trips at 8 % less CPU each.
    thread_priority::wait_for_turn();
    // The vote and ids the disk holds once the current batch is flushed (the next segment's
    // header); the entries are not needed for it.
    let mut on_disk = {
        let log = shared.log.lock().unwrap();
        LogContents { entries: LiveEntries::default(), vote: log.vote, committed: log.committed, last_purged: log.last_purged }
    };
    let mut batch = Vec::new();
    let mut deleting: Option<std::thread::JoinHandle<()>> = None;
    while let Ok(first) = ops.recv() {
        batch.clear();
        let mut flushes = Vec::new();
        let mut dones = Vec::new();
        let mut last_index = None;
        let mut purged = None;
        for op in std::iter::once(first).chain(ops.try_iter()) {
            match op {
                Op::Append { records, last_index: last, flushed } => {
                    batch.extend_from_slice(&records);
                    last_index = last.or(last_index);
                    flushes.push(flushed);
                }
                Op::Vote { vote, done } => {
                    frame(&mut batch, &RecordOut::Vote(&vote));
                    on_disk.vote = Some(vote);
                    dones.push(done);
                }
                Op::TruncateFrom { from, done } => {
                    frame(&mut batch, &RecordOut::TruncateFrom(from));
                    dones.push(done);
                }
                Op::Purge { upto, done } => {
                    frame(&mut batch, &RecordOut::Purged(&upto));
                    on_disk.last_purged = Some(upto);
                    purged = Some(upto.index());
                    dones.push(done);
                }
            }
        }
        let committed = shared.unsaved_committed.lock().unwrap().take();
        if let Some(committed) = &committed {
            frame(&mut batch, &RecordOut::Committed(committed));
            on_disk.committed = *committed;
        }
        let mut result = Ok(());
        if segments.active_len >= segments.segment_bytes {
            result = segments.start_next(&on_disk);
        }
        result = result.and_then(|()| segments.write_batch(&batch, last_index));
        if let (Ok(()), Some(upto)) = (&result, purged) {
            let paths = segments.take_purged(upto);
            if !paths.is_empty() {
                // Unlinking a full segment took 100-160 ms, which every append queued behind
                // when it was done here; one deletion at a time, joined before the writer ends.
                if let Some(previous) = deleting.take() {
                    let _ = previous.join();
                }
                deleting = std::thread::Builder::new()
                    .name("raft-log-delete".into())
                    .spawn({
                        let paths = paths.clone();
                        move || delete_segments(&paths)
                    })
                    .map_err(|_| delete_segments(&paths))
                    .ok();
            }
        }
        if result.is_err()
            && let Some(committed) = committed
        {
            // Not persisted: keep the committed id for the next write unless a newer one came.
            shared.unsaved_committed.lock().unwrap().get_or_insert(committed);
        }
        let report = || result.as_ref().map(|_| ()).map_err(|e| io::Error::new(e.kind(), e.to_string()));
        for flushed in flushes {
            flushed.io_completed(report());
        }
        for done in dones {
            let _ = done.send(report());
        }
    }
    if let Err(e) = segments.trim_active() {
        tracing::warn!(error = %e, "the Raft log's preallocated tail was not trimmed at shutdown (harmless: it reads as the log's end)");
    }
    if let Some(deleting) = deleting {
        let _ = deleting.join();
    }
}

/// Delete purged segment files. A file left by an error (or a crash before this) holds only
/// purged entries: the purge itself is durable, and the file goes at the next purge.
fn delete_segments(paths: &[PathBuf]) {
    for path in paths {
        if let Err(e) = std::fs::remove_file(path) {
            tracing::warn!(error = %e, path = %path.display(), "purged Raft log segment not deleted");
        }
    }
}

impl RaftLogReader<TypeConfig> for LogStore {
    async fn try_get_log_entries<RB: RangeBounds<u64> + Clone + Debug + OptionalSend>(&mut self, range: RB) -> io::Result<Vec<Entry>> {
        let range = (range.start_bound().cloned(), range.end_bound().cloned());
        Ok(self.shared.log.lock().unwrap().entries.range(range).cloned().collect())
    }

    /// The entries of `[start, end)` that fit in one batch: it ends before the entry that would
    /// take it past the byte budget, and always holds the first one (openraft then asks for
    /// the rest). Without this, a follower 300 large entries behind is sent them in one frame,
    /// over the peer frame limit, again and again.
    async fn limited_get_log_entries(&mut self, start: u64, end: u64) -> io::Result<Vec<Entry>> {
        let budget = self.batch_bytes;
        let log = self.shared.log.lock().unwrap();
        let mut batch = Vec::new();
        let mut bytes = 0usize;
        for entry in log.entries.range(start..end) {
            let size = if budget == usize::MAX { 0 } else { encoded_len(entry) };
            if !batch.is_empty() && bytes.saturating_add(size) > budget {
                break;
            }
            bytes = bytes.saturating_add(size);
            batch.push(entry.clone());
        }
        Ok(batch)
    }

    async fn read_vote(&mut self) -> io::Result<Option<Vote>> {
        Ok(self.shared.log.lock().unwrap().vote)
    }
}

impl RaftLogStorage<TypeConfig> for LogStore {
    type LogReader = LogStore;

    async fn get_log_state(&mut self) -> io::Result<LogState<TypeConfig>> {
        let log = self.shared.log.lock().unwrap();
        let last = log.entries.last().map(|e| e.log_id()).or(log.last_purged);
        Ok(LogState { last_purged_log_id: log.last_purged, last_log_id: last })
    }

    async fn get_log_reader(&mut self) -> Self::LogReader {
        self.clone()
    }

    async fn save_vote(&mut self, vote: &Vote) -> io::Result<()> {
        self.shared.log.lock().unwrap().vote = Some(*vote);
        let vote = *vote;
        self.write(|done| Op::Vote { vote, done }).await
    }

    /// Not written on its own: it rides along with the next durable write. A committed index
    /// that is stale after a crash only means fewer entries re-applied at start-up; it is never
    /// ahead of the truth.
    async fn save_committed(&mut self, committed: Option<LogId>) -> io::Result<()> {
        self.shared.log.lock().unwrap().committed = committed;
        *self.shared.unsaved_committed.lock().unwrap() = Some(committed);
        Ok(())
    }

    async fn read_committed(&mut self) -> io::Result<Option<LogId>> {
        Ok(self.shared.log.lock().unwrap().committed)
    }

    async fn append<I>(&mut self, entries: I, flushed: IOFlushed<TypeConfig>) -> io::Result<()>
    where
        I: IntoIterator<Item = Entry> + OptionalSend,
        I::IntoIter: OptionalSend,
    {
        let entries: Vec<Entry> = entries.into_iter().collect();
        let last_index = entries.last().map(|e| e.index());
        let records = encode_entries(entries.iter());
        {
            let mut log = self.shared.log.lock().unwrap();
            for entry in entries {
                log.append(entry);
            }
        }
        // Readable now; `flushed` fires from the writer once they are on disk.
        self.enqueue(Op::Append { records, last_index, flushed })
    }

    async fn truncate_after(&mut self, last_log_id: Option<LogId>) -> io::Result<()> {
        let from = last_log_id.map(|id| id.index() + 1).unwrap_or(0);
        self.shared.log.lock().unwrap().truncate_from(from);
        self.write(|done| Op::TruncateFrom { from, done }).await
    }

    async fn purge(&mut self, upto: LogId) -> io::Result<()> {
        let purged = self.shared.log.lock().unwrap().purge(upto);
        if purged.len() > 1_000 {
            tokio::task::spawn_blocking(move || drop(purged));
        }
        self.write(|done| Op::Purge { upto, done }).await
    }
}

/// The redb log of earlier versions, read once to migrate it.
mod legacy {
    use super::{Entry, LogContents, decode, io_error};
    use openraft::entry::RaftEntry;
    use redb::{Database, ReadableDatabase, ReadableTable, TableDefinition};
    use std::io;
    use std::path::Path;

    pub const FILE: &str = "raft-log.redb";
    pub const LOGS: TableDefinition<u64, &[u8]> = TableDefinition::new("logs");
    pub const META: TableDefinition<&str, &[u8]> = TableDefinition::new("meta");

    /// Everything the redb log at `path` holds.
    pub fn read(path: &Path) -> io::Result<LogContents> {
        let db = Database::open(path).map_err(io_error)?;
        let txn = db.begin_read().map_err(io_error)?;
        let mut state = LogContents::default();
        let meta = txn.open_table(META).map_err(io_error)?;
        let get = |key: &str| -> io::Result<Option<Vec<u8>>> { Ok(meta.get(key).map_err(io_error)?.map(|v| v.value().to_vec())) };
        if let Some(bytes) = get("vote")? {
            state.vote = Some(decode(&bytes).map_err(io_error)?);
        }
        if let Some(bytes) = get("committed")? {
            state.committed = decode(&bytes).map_err(io_error)?;
        }
        if let Some(bytes) = get("last_purged")? {
            state.last_purged = Some(decode(&bytes).map_err(io_error)?);
        }
        for item in txn.open_table(LOGS).map_err(io_error)?.iter().map_err(io_error)? {
            let (index, bytes) = item.map_err(io_error)?;
            let entry: Entry = decode(bytes.value()).map_err(io_error)?;
            debug_assert_eq!(entry.index(), index.value());
            state.append(entry);
        }
        Ok(state)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::peer::codec::encode;
    use openraft::testing::{blank_ent, log_id};
    use openraft::type_config::TypeConfigExt;

    async fn append_flushed(store: &mut LogStore, entries: Vec<Entry>) {
        let (tx, rx) = TypeConfig::oneshot();
        store.append(entries, IOFlushed::signal(tx)).await.unwrap();
        rx.await.unwrap().unwrap();
    }

    fn index_terms<'a>(entries: impl Iterator<Item = &'a Entry>) -> Vec<(u64, u64)> {
        entries.map(|e| (e.index(), e.log_id().leader_id.term)).collect()
    }

    #[test]
    fn live_entries_replace_truncate_purge_and_read_ranges_by_index() {
        let mut live = LiveEntries::default();
        for i in 1..=5 {
            live.append(blank_ent::<TypeConfig>(1, 0, i));
        }
        assert_eq!(index_terms(live.iter()), [(1, 1), (2, 1), (3, 1), (4, 1), (5, 1)]);
        // An entry replaces the one at its index and everything after it.
        live.append(blank_ent::<TypeConfig>(2, 0, 3));
        assert_eq!(index_terms(live.iter()), [(1, 1), (2, 1), (3, 2)]);
        assert_eq!(index_terms(live.range(2..)), [(2, 1), (3, 2)]);
        assert_eq!(index_terms(live.range(..=1)), [(1, 1)]);
        assert_eq!(index_terms(live.range(3..10)), [(3, 2)]);
        assert!(live.range(4..9).next().is_none() && live.range(0..1).next().is_none());
        live.truncate_from(3);
        assert_eq!(live.last().map(|e| e.index()), Some(2));
        live.truncate_from(9);
        assert_eq!(live.len(), 2, "truncating past the end changes nothing");
        assert_eq!(index_terms(live.purge_upto(1).iter()), [(1, 1)], "the purged entries, to be dropped off the lock");
        assert_eq!(index_terms(live.iter()), [(2, 1)]);
        assert_eq!(index_terms(live.range(0..=2)), [(2, 1)]);
        // A purge past the end (a snapshot installed ahead of the log) empties it; the log
        // goes on after the snapshot.
        live.purge_upto(10);
        assert_eq!(live.len(), 0);
        assert_eq!(live.next_index(), 11);
        live.append(blank_ent::<TypeConfig>(3, 0, 11));
        assert_eq!(index_terms(live.range(11..12)), [(11, 3)]);
        // Replacing from before the first live entry replaces them all.
        live.append(blank_ent::<TypeConfig>(4, 0, 12));
        live.append(blank_ent::<TypeConfig>(5, 0, 11));
        assert_eq!(index_terms(live.iter()), [(11, 5)]);
    }

    fn terms(entries: &[Entry]) -> Vec<(u64, u64)> {
        entries.iter().map(|e| (e.index(), e.log_id().leader_id.term)).collect()
    }

    fn segment_files(dir: &Path) -> Vec<PathBuf> {
        let mut files: Vec<PathBuf> = std::fs::read_dir(dir.join(LOG_DIR)).unwrap().map(|e| e.unwrap().path()).collect();
        files.sort();
        files
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
        // Entries not flushed yet batch the same way.
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

    fn file_len(path: &Path) -> u64 {
        std::fs::metadata(path).unwrap().len()
    }

    /// The writer waits for its turn rather than preempting a worker (`thread_priority`). Tests
    /// run in parallel, so other stores' writers may be starting; this store's has flushed, so
    /// it is past the switch.
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    #[tokio::test]
    async fn the_writer_thread_is_batch_scheduled() {
        use crate::raft::thread_priority::tests::{BATCH, policy};
        let dir = tempfile::tempdir().unwrap();
        let mut store = LogStore::open(dir.path()).unwrap();
        append_flushed(&mut store, vec![sized_entry(1, 100)]).await;
        let writers: Vec<u64> = std::fs::read_dir("/proc/thread-self/../")
            .unwrap()
            .filter_map(|task| {
                let task = task.ok()?.path();
                let writer = std::fs::read_to_string(task.join("comm")).ok()?.trim() == "raft-log-writer";
                // A thread of another test may end meanwhile: its files are gone.
                writer.then(|| std::fs::read_to_string(task.join("stat")).ok()).flatten().map(|stat| policy(&stat))
            })
            .collect();
        assert!(writers.contains(&BATCH), "a writer thread under SCHED_BATCH among {writers:?}");
    }

    /// Records are written over zeros laid ahead of them, so a flush does not change the file's
    /// size; a clean shutdown trims the zeros, and a reopened log writes over them again.
    #[tokio::test]
    async fn the_active_segment_is_preallocated_and_trimmed_at_shutdown() {
        let dir = tempfile::tempdir().unwrap();
        let mut store = LogStore::open(dir.path()).unwrap();
        append_flushed(&mut store, (1..=3).map(|i| sized_entry(i, 100)).collect()).await;
        let segment = segment_files(dir.path()).pop().unwrap();
        let open_len = file_len(&segment);
        assert!(open_len > PREALLOCATE_BYTES, "zero-filled ahead while open: {open_len} bytes");
        append_flushed(&mut store, vec![sized_entry(4, 100)]).await;
        assert_eq!(file_len(&segment), open_len, "written over the zeros, the size unchanged");
        drop(store);
        let records = file_len(&segment);
        assert!(records < 10_000, "trimmed to its records at shutdown: {records} bytes");
        assert!(!std::fs::read(&segment).unwrap().ends_with(&[0; 8]));
        let mut store = LogStore::open(dir.path()).unwrap();
        append_flushed(&mut store, vec![sized_entry(5, 100)]).await;
        assert!(file_len(&segment) > PREALLOCATE_BYTES, "preallocated again after a restart");
        drop(store);
        let mut store = LogStore::open(dir.path()).unwrap();
        assert_eq!(indexes(&store.try_get_log_entries(0..).await.unwrap()), vec![1, 2, 3, 4, 5]);
    }

    /// A log in `dir` with `vote` and entries 1 to `entries`, shut down: its last segment.
    async fn closed_log(dir: &Path, vote: Vote, entries: u64) -> PathBuf {
        let mut store = LogStore::open(dir).unwrap();
        store.save_vote(&vote).await.unwrap();
        append_flushed(&mut store, (1..=entries).map(|i| sized_entry(i, 100)).collect()).await;
        drop(store);
        segment_files(dir).pop().unwrap()
    }

    /// A crash (no shutdown) leaves the zeros after the last record: they end the log without
    /// a torn-record cut, and the next write goes where they start.
    #[tokio::test]
    async fn zeros_left_by_a_crash_end_the_log_and_are_written_over() {
        let dir = tempfile::tempdir().unwrap();
        let segment = closed_log(dir.path(), Vote::new(2, 1), 3).await;
        let records = file_len(&segment);
        OpenOptions::new().append(true).open(&segment).unwrap().write_all(&[0; 4096]).unwrap();
        let mut store = LogStore::open(dir.path()).unwrap();
        assert_eq!(file_len(&segment), records + 4096, "the zeros are kept as preallocation, not cut as a torn record");
        assert_eq!(indexes(&store.try_get_log_entries(0..).await.unwrap()), vec![1, 2, 3]);
        append_flushed(&mut store, vec![sized_entry(4, 100)]).await;
        drop(store);
        let mut store = LogStore::open(dir.path()).unwrap();
        assert_eq!(indexes(&store.try_get_log_entries(0..).await.unwrap()), vec![1, 2, 3, 4]);
        assert_eq!(store.read_vote().await.unwrap(), Some(Vote::new(2, 1)));
        // Zeros with something written after them are not preallocation: a torn write, cut off.
        drop(store);
        let records = file_len(&segment);
        let mut tail = vec![0; 100];
        tail.push(7);
        OpenOptions::new().append(true).open(&segment).unwrap().write_all(&tail).unwrap();
        let mut store = LogStore::open(dir.path()).unwrap();
        assert_eq!(file_len(&segment), records, "cut back to the last whole record");
        assert_eq!(indexes(&store.try_get_log_entries(0..).await.unwrap()), vec![1, 2, 3, 4]);
    }

    /// A crash mid-write leaves part of a record at the end of the last segment: it is dropped
    /// (cut off the file), every whole record before it is kept, and writing goes on after it.
    #[tokio::test]
    async fn a_torn_tail_is_dropped_and_every_flushed_entry_kept() {
        let dir = tempfile::tempdir().unwrap();
        let segment = closed_log(dir.path(), Vote::new(3, 1), 5).await;
        let whole = std::fs::metadata(&segment).unwrap().len();
        for torn in [
            // Half a header, half a payload, a payload with a flipped bit.
            vec![9u8, 0, 0],
            {
                let mut half = Vec::new();
                frame(&mut half, &RecordOut::Entry(&sized_entry(6, 100)));
                half.truncate(half.len() / 2);
                half
            },
            {
                let mut flipped = Vec::new();
                frame(&mut flipped, &RecordOut::Entry(&sized_entry(6, 100)));
                let last = flipped.len() - 1;
                flipped[last] ^= 1;
                flipped
            },
        ] {
            OpenOptions::new().append(true).open(&segment).unwrap().write_all(&torn).unwrap();
            let mut store = LogStore::open(dir.path()).unwrap();
            assert_eq!(std::fs::metadata(&segment).unwrap().len(), whole, "cut back to the last whole record");
            assert_eq!(indexes(&store.try_get_log_entries(0..).await.unwrap()), vec![1, 2, 3, 4, 5]);
            assert_eq!(store.read_vote().await.unwrap(), Some(Vote::new(3, 1)));
        }
        // And appends go on after the cut.
        let mut store = LogStore::open(dir.path()).unwrap();
        append_flushed(&mut store, vec![sized_entry(6, 100)]).await;
        drop(store);
        let mut store = LogStore::open(dir.path()).unwrap();
        assert_eq!(indexes(&store.try_get_log_entries(0..).await.unwrap()), vec![1, 2, 3, 4, 5, 6]);
    }

    /// A whole record this version cannot decode (a kind of entry a newer version writes, as
    /// after a rollback) is not a torn write: the log is refused as it is, not cut there.
    #[tokio::test]
    async fn a_whole_record_of_a_newer_version_is_refused_not_cut_off() {
        let dir = tempfile::tempdir().unwrap();
        let segment = closed_log(dir.path(), Vote::new(3, 1), 5).await;
        let payload = crate::peer::codec::encode(&serde_json::json!({"RecordOfTheFuture": [1, 2, 3]}));
        let mut record = (payload.len() as u32).to_le_bytes().to_vec();
        record.extend_from_slice(&crc32fast::hash(&payload).to_le_bytes());
        record.extend_from_slice(&payload);
        OpenOptions::new().append(true).open(&segment).unwrap().write_all(&record).unwrap();
        let grown = std::fs::metadata(&segment).unwrap().len();
        for _ in 0..2 {
            let error = LogStore::open(dir.path()).err().expect("refused");
            assert!(error.to_string().contains("cannot read"), "{error}");
            assert_eq!(std::fs::metadata(&segment).unwrap().len(), grown, "nothing cut");
        }
    }

    #[tokio::test]
    async fn a_bad_record_before_the_last_segment_is_corruption_and_refused() {
        let dir = tempfile::tempdir().unwrap();
        let mut store = LogStore::open_with_segments_of(dir.path(), 1_000).unwrap();
        for i in 1..=6 {
            append_flushed(&mut store, vec![sized_entry(i, 400)]).await;
        }
        drop(store);
        let files = segment_files(dir.path());
        assert!(files.len() >= 3, "{files:?}");
        let mut bytes = std::fs::read(&files[0]).unwrap();
        let last = bytes.len() - 1;
        bytes[last] ^= 1;
        std::fs::write(&files[0], bytes).unwrap();
        let err = LogStore::open(dir.path()).err().expect("refused");
        assert_eq!(err.kind(), io::ErrorKind::InvalidData);
        assert!(err.to_string().contains("is corrupt at offset"), "{err}");
    }

    /// Segments roll over at their size; a new one starts with the vote and ids, so once a
    /// purge covers the entries of the oldest ones, they are deleted and nothing is lost.
    #[tokio::test]
    async fn purged_segments_are_deleted_and_the_rest_survives_a_restart() {
        let dir = tempfile::tempdir().unwrap();
        let mut store = LogStore::open_with_segments_of(dir.path(), 1_000).unwrap();
        store.save_vote(&Vote::new(2, 1)).await.unwrap();
        for i in 1..=10 {
            append_flushed(&mut store, vec![sized_entry(i, 400)]).await;
        }
        store.save_committed(Some(log_id::<TypeConfig>(1, 0, 9))).await.unwrap();
        let before = segment_files(dir.path()).len();
        assert!(before >= 4, "{before} segments");
        store.purge(log_id::<TypeConfig>(1, 0, 7)).await.unwrap();
        assert_eq!(indexes(&store.try_get_log_entries(0..).await.unwrap()), vec![8, 9, 10]);
        // The files go in a thread of their own, which the store's last handle joins.
        drop(store);
        let after = segment_files(dir.path()).len();
        assert!(after < before && after >= 2, "{before} -> {after} segments");
        let mut store = LogStore::open_with_segments_of(dir.path(), 1_000).unwrap();
        assert_eq!(indexes(&store.try_get_log_entries(0..).await.unwrap()), vec![8, 9, 10]);
        let state = store.get_log_state().await.unwrap();
        assert_eq!(state.last_purged_log_id, Some(log_id::<TypeConfig>(1, 0, 7)));
        assert_eq!(state.last_log_id, Some(log_id::<TypeConfig>(1, 0, 10)));
        assert_eq!(store.read_vote().await.unwrap(), Some(Vote::new(2, 1)));
        assert_eq!(store.read_committed().await.unwrap(), Some(log_id::<TypeConfig>(1, 0, 9)));
    }

    /// A data directory of an earlier version (a redb log) is migrated on first start: vote,
    /// ids and entries carried over, the redb file removed.
    #[tokio::test]
    async fn a_redb_log_of_an_earlier_version_is_migrated() {
        let dir = tempfile::tempdir().unwrap();
        {
            let db = redb::Database::create(dir.path().join(legacy::FILE)).unwrap();
            let txn = db.begin_write().unwrap();
            {
                let mut meta = txn.open_table(legacy::META).unwrap();
                meta.insert("vote", encode(&Vote::new(4, 2)).as_slice()).unwrap();
                meta.insert("committed", encode(&Some(log_id::<TypeConfig>(1, 0, 3))).as_slice()).unwrap();
                meta.insert("last_purged", encode(&log_id::<TypeConfig>(1, 0, 1)).as_slice()).unwrap();
                let mut logs = txn.open_table(legacy::LOGS).unwrap();
                for i in 2..=4 {
                    logs.insert(i, encode(&sized_entry(i, 10)).as_slice()).unwrap();
                }
            }
            txn.commit().unwrap();
        }
        let mut store = LogStore::open(dir.path()).unwrap();
        assert!(!dir.path().join(legacy::FILE).exists(), "migrated, then removed");
        assert_eq!(indexes(&store.try_get_log_entries(0..).await.unwrap()), vec![2, 3, 4]);
        assert_eq!(store.read_vote().await.unwrap(), Some(Vote::new(4, 2)));
        assert_eq!(store.read_committed().await.unwrap(), Some(log_id::<TypeConfig>(1, 0, 3)));
        assert_eq!(store.get_log_state().await.unwrap().last_purged_log_id, Some(log_id::<TypeConfig>(1, 0, 1)));
        drop(store);
        let mut store = LogStore::open(dir.path()).unwrap();
        assert_eq!(indexes(&store.try_get_log_entries(0..).await.unwrap()), vec![2, 3, 4], "and read back from the new log");
    }
}
