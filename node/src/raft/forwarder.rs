//! Carries the writes a follower forwards to the leader over one long-lived peer stream
//! ([`crate::peer::stream`]) per leader. Concurrent writes share a frame (and, on the leader, one
//! Raft batch and fsync); each frame is answered, by id, once its writes have committed. With at
//! most `MAX_IN_FLIGHT` frames unanswered, a lone write goes out at once and a burst queues into
//! the next frame. A frame holds at most `MAX_BATCH` writes and, past its first write, no more
//! than the batch byte budget: a burst of large writes must not make a frame over the peer
//! frame limit, which would fail every write in it on each retry.

use super::messages::{ForwardedWrite, WriteReply};
use super::state_machine::{Command, WriteId};
use super::types::decode;
use crate::peer::codec::encoded_len;
use crate::peer::routes::WRITE_STREAM;
use crate::peer::stream::{Accepted, Reader, Writer, framed, send};
use crate::peer::{MIN_RPC_TIMEOUT, PeerClient, PeerError};
use futures::StreamExt;
use serde::{Deserialize, Serialize};
use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use tokio::sync::{OwnedSemaphorePermit, Semaphore, mpsc, oneshot};

/// The `Upgrade` protocol name on the peer port.
pub const PROTOCOL: &str = "switchboard-raft-write";

const MAX_IN_FLIGHT: usize = 2;
const MAX_BATCH: usize = 512;

#[derive(Debug, Serialize, Deserialize)]
struct Batch {
    id: u64,
    writes: Vec<ForwardedWrite>,
}

#[derive(Debug, Serialize, Deserialize)]
struct Replies {
    id: u64,
    replies: Vec<WriteReply>,
}

type ReplyTo = oneshot::Sender<Result<WriteReply, PeerError>>;

struct Pending {
    addr: String,
    write: ForwardedWrite,
    /// Encoded size of `write`.
    size: usize,
    reply: ReplyTo,
}

/// A frame sent and not answered yet: who waits for each write, its in-flight slot, and when
/// it went out.
type Unanswered = (Vec<ReplyTo>, Option<OwnedSemaphorePermit>, Instant);

/// Frames sent on a stream and not answered yet; `None` once the stream is gone, so nothing
/// is registered on a dead stream after its waiters were failed.
type Waiting = Arc<Mutex<Option<HashMap<u64, Unanswered>>>>;

fn fail(replies: Vec<ReplyTo>, addr: &str, reason: &str) {
    for reply in replies {
        let _ = reply.send(Err(PeerError::Unreachable { addr: addr.into(), reason: reason.into() }));
    }
}

/// One stream to a leader.
struct Link {
    addr: String,
    writer: Writer<reqwest::Upgraded>,
    waiting: Waiting,
    reader: tokio::task::JoinHandle<()>,
}

impl Drop for Link {
    fn drop(&mut self) {
        self.reader.abort();
        if let Some(waiting) = self.waiting.lock().unwrap().take() {
            for (_, (replies, ..)) in waiting {
                fail(replies, &self.addr, "write stream closed");
            }
        }
    }
}

impl Link {
    async fn open(client: &PeerClient, addr: &str, answer_within: Duration) -> Result<Link, PeerError> {
        let (reader, writer) = framed(client.upgrade(addr, WRITE_STREAM, PROTOCOL).await?);
        let waiting: Waiting = Arc::new(Mutex::new(Some(HashMap::new())));
        let reader = tokio::spawn(read_replies(reader, waiting.clone(), addr.to_string(), answer_within));
        Ok(Link { addr: addr.to_string(), writer, waiting, reader })
    }

    /// Register the batch's waiters and send it; on failure they have been answered with the error.
    async fn send(
        &mut self,
        id: u64,
        writes: Vec<ForwardedWrite>,
        replies: Vec<ReplyTo>,
        slot: Option<OwnedSemaphorePermit>,
    ) -> Result<(), ()> {
        match self.waiting.lock().unwrap().as_mut() {
            Some(waiting) => waiting.insert(id, (replies, slot, Instant::now())),
            None => {
                fail(replies, &self.addr, "write stream closed");
                return Err(());
            }
        };
        match tokio::time::timeout(MIN_RPC_TIMEOUT, send(&mut self.writer, &Batch { id, writes })).await {
            Ok(Ok(())) => Ok(()),
            _ => Err(()), // dropping the link fails every waiter
        }
    }
}

/// Hand each answer to its writers. A frame unanswered for `answer_within` ends the stream
/// (failing its writers, who retry): a leader that vanished without closing the connection, or
/// lost its quorum, must not hold the in-flight slots.
async fn read_replies(mut reader: Reader<reqwest::Upgraded>, waiting: Waiting, addr: String, answer_within: Duration) {
    let reason = loop {
        let next = match tokio::time::timeout(answer_within / 4, reader.next()).await {
            Ok(next) => next,
            Err(_) => {
                let oldest = waiting.lock().unwrap().as_ref().and_then(|w| w.values().map(|(.., sent)| *sent).min());
                if oldest.is_some_and(|sent| sent.elapsed() >= answer_within) {
                    break format!("no answer from the leader within {answer_within:?}");
                }
                continue;
            }
        };
        let replies = match next {
            Some(Ok(bytes)) => match decode::<Replies>(&bytes) {
                Ok(replies) => replies,
                Err(e) => break format!("undecodable write replies: {e}"),
            },
            Some(Err(e)) => break e.to_string(),
            None => break "the leader closed the write stream".to_string(),
        };
        let Some((senders, ..)) = waiting.lock().unwrap().as_mut().and_then(|w| w.remove(&replies.id)) else { continue };
        if senders.len() != replies.replies.len() {
            let reason = format!("{} replies for {} writes", replies.replies.len(), senders.len());
            fail(senders, &addr, &reason);
            continue;
        }
        for (sender, reply) in senders.into_iter().zip(replies.replies) {
            let _ = sender.send(Ok(reply));
        }
    };
    if let Some(waiting) = waiting.lock().unwrap().take() {
        for (_, (senders, ..)) in waiting {
            fail(senders, &addr, &reason);
        }
    }
}

#[derive(Clone)]
pub struct Forwarder {
    tx: mpsc::UnboundedSender<Pending>,
}

impl Forwarder {
    /// Start the batching task; it ends when the last `Forwarder` clone is dropped. A leader
    /// must answer a frame within `answer_within`; a frame carries about `batch_bytes` of
    /// writes at most.
    pub fn start(client: PeerClient, answer_within: Duration, batch_bytes: usize) -> Forwarder {
        let (tx, mut rx) = mpsc::unbounded_channel::<Pending>();
        tokio::spawn(async move {
            let mut links: HashMap<String, Link> = HashMap::new();
            let mut next_id = 0u64;
            let slots = Arc::new(Semaphore::new(MAX_IN_FLIGHT));
            // A write taken from the queue that did not fit in the last batch: the next one's first.
            let mut carried: Option<Pending> = None;
            loop {
                let first = match carried.take() {
                    Some(p) => p,
                    None => match rx.recv().await {
                        Some(p) => p,
                        None => return,
                    },
                };
                let Ok(slot) = slots.clone().acquire_owned().await else { return };
                // A batch spans leaders only around a leader change; the extra frames go unslotted.
                let mut slot = Some(slot);
                let batch;
                (batch, carried) = take_batch(first, &mut rx, MAX_BATCH, batch_bytes);
                let mut by_leader: HashMap<String, (Vec<ForwardedWrite>, Vec<ReplyTo>)> = HashMap::new();
                for p in batch {
                    if p.reply.is_closed() {
                        continue; // its caller gave up: it must not commit after being reported failed
                    }
                    let (writes, replies) = by_leader.entry(p.addr).or_default();
                    writes.push(p.write);
                    replies.push(p.reply);
                }
                for (addr, (writes, replies)) in by_leader {
                    if links.get(&addr).is_some_and(|link| link.reader.is_finished()) {
                        links.remove(&addr);
                    }
                    let link = match links.entry(addr.clone()) {
                        std::collections::hash_map::Entry::Occupied(link) => link.into_mut(),
                        std::collections::hash_map::Entry::Vacant(slot) => match Link::open(&client, &addr, answer_within).await {
                            Ok(link) => slot.insert(link),
                            Err(e) => {
                                fail(replies, &addr, &e.to_string());
                                continue;
                            }
                        },
                    };
                    next_id += 1;
                    if link.send(next_id, writes, replies, slot.take()).await.is_err() {
                        links.remove(&addr);
                    }
                }
            }
        });
        Forwarder { tx }
    }

    /// Forward one write to the leader at `addr`, waiting at most `timeout` for its outcome.
    pub async fn forward(&self, addr: String, write: ForwardedWrite, timeout: Duration) -> Result<WriteReply, PeerError> {
        let (reply, rx) = oneshot::channel();
        let unreachable = |reason: &str| PeerError::Unreachable { addr: addr.clone(), reason: reason.into() };
        let size = encoded_len(&write);
        if self.tx.send(Pending { addr: addr.clone(), write, size, reply }).is_err() {
            return Err(unreachable("forwarder stopped"));
        }
        match tokio::time::timeout(timeout, rx).await {
            Ok(Ok(result)) => result,
            Ok(Err(_)) => Err(unreachable("forwarder dropped the write")),
            Err(_) => Err(unreachable("timed out waiting for the leader")),
        }
    }
}

/// `first` and what else is queued, up to `max_writes` writes and, past the first, `max_bytes`;
/// also the write taken from the queue that did not fit, if any.
fn take_batch<P: HasSize>(first: P, rx: &mut mpsc::UnboundedReceiver<P>, max_writes: usize, max_bytes: usize) -> (Vec<P>, Option<P>) {
    let mut bytes = first.size();
    let mut batch = vec![first];
    while batch.len() < max_writes {
        let Ok(next) = rx.try_recv() else { break };
        if bytes.saturating_add(next.size()) > max_bytes {
            return (batch, Some(next));
        }
        bytes += next.size();
        batch.push(next);
    }
    (batch, None)
}

/// What a queued write weighs in a frame.
trait HasSize {
    fn size(&self) -> usize;
}

impl HasSize for Pending {
    fn size(&self) -> usize {
        self.size
    }
}

/// What the leader side needs of its node: proposing a write as leader.
pub trait LeaderWrite: Send + Sync + 'static {
    fn write_as_leader(&self, write: Option<WriteId>, command: Command) -> impl Future<Output = WriteReply> + Send;
}

/// Leader side: propose each batch as it arrives (batches in flight concurrently, each batch's
/// writes together, so openraft commits them in one go) and answer it when they are done.
pub async fn serve<L: LeaderWrite>(node: Arc<L>, io: Accepted) {
    let (mut reader, mut writer) = framed(io);
    let (done, mut answers) = mpsc::unbounded_channel::<Replies>();
    let reading = async move {
        while let Some(frame) = reader.next().await {
            let batch = match frame.map(|bytes| decode::<Batch>(&bytes)) {
                Ok(Ok(batch)) => batch,
                Ok(Err(e)) => return tracing::warn!(error = %e, "malformed forwarded-write frame; closing the stream"),
                Err(e) => return tracing::debug!(error = %e, "write stream read failed"),
            };
            let (node, done) = (node.clone(), done.clone());
            tokio::spawn(async move {
                let writes = batch.writes.into_iter().map(|w| node.write_as_leader(Some(w.write), w.command));
                let replies = futures::future::join_all(writes).await;
                let _ = done.send(Replies { id: batch.id, replies });
            });
        }
    };
    let writing = async move {
        while let Some(replies) = answers.recv().await {
            if send(&mut writer, &replies).await.is_err() {
                return;
            }
        }
    };
    tokio::select! {
        _ = reading => {}
        _ = writing => {}
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    impl HasSize for usize {
        fn size(&self) -> usize {
            *self
        }
    }

    #[test]
    fn a_burst_of_large_writes_is_split_into_frames_within_the_byte_budget() {
        let (tx, mut rx) = mpsc::unbounded_channel::<usize>();
        for size in [400, 300, 200, 500, 100, 100] {
            tx.send(size).unwrap();
        }
        let first = rx.try_recv().unwrap();
        let (batch, carried) = take_batch(first, &mut rx, 100, 1000);
        assert_eq!((batch, carried), (vec![400, 300, 200], Some(500)), "500 more would pass 1000 bytes");
        let (batch, carried) = take_batch(carried.unwrap(), &mut rx, 100, 1000);
        assert_eq!((batch, carried), (vec![500, 100, 100], None));
        // One write over the budget goes alone; the count bound still holds.
        tx.send(10).unwrap();
        assert_eq!(take_batch(5000, &mut rx, 100, 1000), (vec![5000], Some(10)));
        for _ in 0..5 {
            tx.send(1).unwrap();
        }
        assert_eq!(take_batch(1, &mut rx, 3, 1000), (vec![1, 1, 1], None));
        assert_eq!(rx.len(), 3);
    }
}
