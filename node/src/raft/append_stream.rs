//! Pipelined log replication: openraft's `stream_append` over a long-lived connection per
//! follower ([`crate::peer::stream`]), so the leader sends the next batch (or a new commit index)
//! without waiting for the previous answer. openraft opens a stream per replication session and
//! per heartbeat, so a connection carries sessions one after another: the leader ends each with `End`, the follower answers
//! `End` after the session's last result, and the connection goes back to a pool. Results come
//! back in request order; the follower answers each once its log is flushed.
//!
//! Each request is bounded in bytes by the log store's batch budget, and the bytes sent and not
//! yet answered by a bounded window: a follower far behind is fed as fast as it flushes, not
//! handed the whole backlog to hold in memory and write in one transaction.

use super::Raft;
use super::types::{TypeConfig, decode, encode};
use crate::peer::routes::APPEND_STREAM;
use crate::peer::stream::{Reader, Writer, framed, send, send_encoded};
use crate::peer::{MIN_RPC_TIMEOUT, PeerClient, PeerError};
use futures::future::BoxFuture;
use futures::stream::BoxStream;
use futures::{FutureExt, StreamExt};
use openraft::errors::{Fatal, NetworkError, RPCError, Unreachable};
use openraft::raft::{AppendEntriesRequest, StreamAppendResult};
use serde::{Deserialize, Serialize};
use std::collections::{HashMap, VecDeque};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use tokio::io::{AsyncRead, AsyncWrite, AsyncWriteExt};

/// The `Upgrade` protocol name on the peer port.
pub const PROTOCOL: &str = "switchboard-raft-append";

/// Idle connections kept per follower.
const POOLED_PER_PEER: usize = 4;

#[derive(Debug, Serialize, Deserialize)]
enum ToFollower {
    Append(AppendEntriesRequest<TypeConfig>),
    /// No more requests in this session.
    End,
}

#[derive(Debug, Serialize, Deserialize)]
enum ToLeader {
    Result(Result<StreamAppendResult<TypeConfig>, Fatal<TypeConfig>>),
    /// Every result of the session has been sent.
    End,
}

/// Follower side: run the sessions the leader sends over `io` until it closes the connection,
/// a frame is malformed, or Raft stops.
pub async fn serve(raft: Raft, io: impl AsyncRead + AsyncWrite + Send + 'static) {
    let (mut reader, mut writer) = framed(io);
    loop {
        let (requests, input) = tokio::sync::mpsc::channel::<AppendEntriesRequest<TypeConfig>>(64);
        let mut requests = Some(requests);
        let mut results = std::pin::pin!(raft.stream_append(tokio_stream_of(input)));
        let mut results_open = true;
        // A request Raft has no room for yet. Reading stops until it is taken, but results keep
        // flowing out meanwhile: waiting for room while not writing results could stall both.
        let mut held: Option<AppendEntriesRequest<TypeConfig>> = None;
        // Feed requests in and results out until the leader ended the session and every
        // result is out. After a conflict or a higher vote openraft ends the results early;
        // the rest of the session's requests are read and dropped.
        while requests.is_some() || results_open {
            let room_for_held = held.is_some().then(|| requests.clone()).flatten();
            tokio::select! {
                room = async move { room_for_held?.reserve_owned().await.ok() }, if held.is_some() => {
                    let request = held.take().expect("held");
                    if let Some(room) = room {
                        room.send(request);
                    }
                }
                frame = reader.next(), if requests.is_some() && held.is_none() => {
                    let frame = match frame.map(|f| f.map(|bytes| decode::<ToFollower>(&bytes))) {
                        Some(Ok(Ok(frame))) => frame,
                        Some(Ok(Err(e))) => return tracing::warn!(error = %e, "malformed replication frame; closing the stream"),
                        Some(Err(e)) => return tracing::debug!(error = %e, "replication stream read failed"),
                        None => return, // the leader closed the connection
                    };
                    match frame {
                        ToFollower::Append(request) => {
                            // Sent, or Raft ended this session's results early (dropped), or held.
                            if let Err(tokio::sync::mpsc::error::TrySendError::Full(request)) = requests.as_ref().expect("open").try_send(request) {
                                held = Some(request);
                            }
                        }
                        ToFollower::End => requests = None,
                    }
                }
                result = results.next(), if results_open => match result {
                    Some(result) => {
                        if send(&mut writer, &ToLeader::Result(result)).await.is_err() {
                            return;
                        }
                    }
                    None => results_open = false,
                },
            }
        }
        if send(&mut writer, &ToLeader::End).await.is_err() {
            return;
        }
    }
}

fn tokio_stream_of<T: Send + 'static>(mut rx: tokio::sync::mpsc::Receiver<T>) -> impl futures::Stream<Item = T> + Send + 'static {
    futures::stream::poll_fn(move |cx| rx.poll_recv(cx))
}

type Upgraded = reqwest::Upgraded;

type Connection = (Reader<Upgraded>, Writer<Upgraded>);

/// Idle replication connections by follower address.
#[derive(Clone, Default)]
pub struct Pool {
    idle: Arc<Mutex<HashMap<String, Vec<Connection>>>>,
}

impl Pool {
    /// An idle connection that is still open. One the follower closed meanwhile (it restarted)
    /// has its end of stream waiting to be read: it is dropped rather than failing a session.
    fn take(&self, addr: &str) -> Option<Connection> {
        let mut idle = self.idle.lock().unwrap();
        let slot = idle.get_mut(addr)?;
        while let Some((mut reader, writer)) = slot.pop() {
            if reader.next().now_or_never().is_none() {
                return Some((reader, writer));
            }
        }
        None
    }

    fn put(&self, addr: &str, connection: Connection) {
        let mut idle = self.idle.lock().unwrap();
        let slot = idle.entry(addr.to_string()).or_default();
        if slot.len() < POOLED_PER_PEER {
            slot.push(connection);
        }
    }
}

/// Aborts the request writer when openraft drops the result stream mid-session.
struct AbortOnDrop(Option<tokio::task::JoinHandle<Option<Writer<Upgraded>>>>);

impl Drop for AbortOnDrop {
    fn drop(&mut self) {
        if let Some(task) = self.0.take() {
            task.abort();
        }
    }
}

type Results<'s> = BoxStream<'s, Result<StreamAppendResult<TypeConfig>, RPCError<TypeConfig>>>;

/// The bytes of requests sent and not answered yet, bounded: the sender takes room for a frame
/// before sending it, and each result gives back the room of the oldest frame (results come
/// in request order). A frame larger than the whole window takes all of it.
struct Window {
    room: tokio::sync::Semaphore,
    taken: Mutex<VecDeque<u32>>,
    bytes: u32,
}

impl Window {
    fn new(bytes: usize) -> Window {
        let bytes = u32::try_from(bytes).unwrap_or(u32::MAX).max(1);
        Window { room: tokio::sync::Semaphore::new(bytes as usize), taken: Mutex::default(), bytes }
    }

    async fn take(&self, frame_len: usize) {
        let permits = u32::try_from(frame_len).unwrap_or(u32::MAX).clamp(1, self.bytes);
        if let Ok(room) = self.room.acquire_many(permits).await {
            room.forget();
        }
        self.taken.lock().unwrap().push_back(permits);
    }

    fn answered(&self) {
        if let Some(permits) = self.taken.lock().unwrap().pop_front() {
            self.room.add_permits(permits as usize);
        }
    }
}

/// Leader side: run one session to `addr` over a pooled or new connection, with at most
/// `in_flight_bytes` of requests unanswered.
pub fn open<'s, S>(
    client: &'s PeerClient,
    pool: &'s Pool,
    addr: &'s str,
    in_flight_bytes: usize,
    requests: S,
) -> BoxFuture<'s, Result<Results<'s>, RPCError<TypeConfig>>>
where
    S: futures::Stream<Item = AppendEntriesRequest<TypeConfig>> + Send + Unpin + 'static,
{
    Box::pin(async move {
        let (reader, writer) = match pool.take(addr) {
            Some(connection) => connection,
            None => {
                let io = client.upgrade(addr, APPEND_STREAM, PROTOCOL).await.map_err(|e| RPCError::Unreachable(Unreachable::new(&e)))?;
                framed(io)
            }
        };
        // Frames sent whose answer (a result, or `End` for `End`) has not come back.
        let unanswered = Arc::new(AtomicUsize::new(0));
        let window = Arc::new(Window::new(in_flight_bytes));
        let sender = AbortOnDrop(Some(tokio::spawn(send_requests(requests, writer, unanswered.clone(), window.clone()))));
        let session = Session { reader, sender, unanswered, window, pool: pool.clone(), addr: addr.to_string() };
        let results = futures::stream::unfold(Some(session), |session| async move {
            let mut session = session?;
            let failed =
                |reason: String| RPCError::Network(NetworkError::new(&PeerError::Unreachable { addr: session.addr.clone(), reason }));
            let frame = loop {
                match tokio::time::timeout(MIN_RPC_TIMEOUT, session.reader.next()).await {
                    // An idle session (openraft waits for new entries) is not a silent follower.
                    Err(_) if session.unanswered.load(Ordering::Acquire) == 0 => continue,
                    Err(_) => break Err(format!("no append result within {MIN_RPC_TIMEOUT:?}")),
                    Ok(None) => break Err("the follower closed the replication stream".to_string()),
                    Ok(Some(Err(e))) => break Err(e.to_string()),
                    Ok(Some(Ok(bytes))) => break decode::<ToLeader>(&bytes).map_err(|e| format!("undecodable append result: {e}")),
                }
            };
            match frame {
                Ok(ToLeader::Result(Ok(result))) => {
                    session.unanswered.fetch_sub(1, Ordering::AcqRel);
                    session.window.answered();
                    Some((Ok(result), Some(session)))
                }
                // The follower's Raft stopped: as good as unreachable.
                Ok(ToLeader::Result(Err(fatal))) => Some((Err(RPCError::Unreachable(Unreachable::new(&fatal))), None)),
                Ok(ToLeader::End) => {
                    session.finish().await;
                    None
                }
                Err(reason) => Some((Err(failed(reason)), None)),
            }
        });
        Ok(results.boxed())
    })
}

struct Session {
    reader: Reader<Upgraded>,
    sender: AbortOnDrop,
    unanswered: Arc<AtomicUsize>,
    window: Arc<Window>,
    pool: Pool,
    addr: String,
}

impl Session {
    /// The session ended cleanly: the connection can carry the next one.
    async fn finish(mut self) {
        if let Some(task) = self.sender.0.take()
            && let Ok(Some(writer)) = task.await
        {
            self.pool.put(&self.addr, (self.reader, writer));
        }
    }
}

/// Write the session's requests, each once the window has room for it, then `End`; hands the
/// writer back for reuse.
async fn send_requests<S>(
    mut requests: S,
    mut writer: Writer<Upgraded>,
    unanswered: Arc<AtomicUsize>,
    window: Arc<Window>,
) -> Option<Writer<Upgraded>>
where
    S: futures::Stream<Item = AppendEntriesRequest<TypeConfig>> + Unpin,
{
    while let Some(request) = requests.next().await {
        let frame = encode(&ToFollower::Append(request));
        window.take(frame.len()).await;
        unanswered.fetch_add(1, Ordering::AcqRel);
        if let Err(e) = send_encoded(&mut writer, frame).await {
            tracing::debug!(error = %e, "replication stream write failed");
            let _ = writer.get_mut().shutdown().await;
            return None;
        }
    }
    unanswered.fetch_add(1, Ordering::AcqRel);
    send(&mut writer, &ToFollower::End).await.ok().map(|_| writer)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[tokio::test]
    async fn the_window_holds_a_frame_back_until_an_older_one_is_answered() {
        let window = Window::new(100);
        window.take(40).await;
        window.take(40).await;
        let third = tokio::time::timeout(Duration::from_millis(50), window.take(40)).await;
        assert!(third.is_err(), "120 bytes would be unanswered");
        window.answered();
        tokio::time::timeout(Duration::from_millis(50), window.take(40)).await.expect("room again");
        // A frame larger than the window waits for all of it, then goes alone.
        window.answered();
        window.answered();
        tokio::time::timeout(Duration::from_millis(50), window.take(1000)).await.expect("an empty window takes any frame");
        assert!(tokio::time::timeout(Duration::from_millis(50), window.take(1)).await.is_err());
    }
}
