//! Snapshots to a follower over a peer stream ([`crate::peer::stream`]), in pieces. A snapshot
//! holds the whole state machine, which can outgrow one peer frame or request body
//! ([`crate::peer::stream::MAX_FRAME`]); sent whole, it would then fail on every attempt and
//! the follower would never catch up.
//!
//! The leader sends `Begin` (its vote, the snapshot's meta and size in bytes), the data in
//! `Chunk`s of at most `snapshot_chunk_bytes`, and `End`. The follower assembles them and
//! refuses a stream that is malformed, truncated, longer than announced or whose data does not
//! decode, before Raft sees any of it (so nothing changes); otherwise it installs the snapshot.
//! Either way it answers once, with the outcome, and the connection closes.

use super::Raft;
use super::state_machine::snapshot as state_snapshot;
use super::types::{Snapshot, SnapshotMeta, TypeConfig, Vote, blob, decode};
use crate::metrics::Metrics;
use crate::peer::routes::SNAPSHOT;
use crate::peer::stream::{Reader, framed, send};
use crate::peer::{PeerClient, PeerError};
use futures::StreamExt;
use openraft::errors::{NetworkError, StreamingError, Unreachable};
use openraft::raft::SnapshotResponse;
use serde::{Deserialize, Serialize};
use std::borrow::Cow;
use std::sync::Arc;
use std::time::Duration;
use tokio::io::{AsyncRead, AsyncWrite};

/// The `Upgrade` protocol name on the peer port.
pub const PROTOCOL: &str = "switchboard-raft-snapshot";

/// How long the follower waits for the leader's next frame.
const FRAME_TIMEOUT: Duration = Duration::from_secs(10);

/// Memory reserved up front for the announced size, at most: the rest grows as data arrives,
/// so a size announced but never sent costs nothing.
const PREALLOCATE_AT_MOST: usize = 64 * 1024 * 1024;

/// A frame from the leader.
#[derive(Debug, Serialize, Deserialize)]
pub enum ToFollower<'a> {
    Begin {
        vote: Vote,
        meta: SnapshotMeta,
        /// Bytes of snapshot data the chunks carry in all.
        size: u64,
    },
    Chunk(#[serde(borrow, with = "blob")] Cow<'a, [u8]>),
    End,
}

/// Why a follower did not install a snapshot it was sent.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, thiserror::Error)]
pub enum SnapshotRefused {
    /// The stream was malformed, truncated, or its data does not decode; nothing changed.
    #[error("snapshot stream refused: {0}")]
    Invalid(String),
    #[error("the follower's Raft stopped: {0}")]
    Stopped(String),
}

/// The follower's one answer.
pub type SnapshotReply = Result<SnapshotResponse<TypeConfig>, SnapshotRefused>;

/// Follower side: receive one snapshot over `io`, install it if it is whole, and answer.
pub async fn serve(raft: Raft, metrics: Arc<Metrics>, io: impl AsyncRead + AsyncWrite + Send + 'static) {
    let (mut reader, mut writer) = framed(io);
    let reply: SnapshotReply = match receive(&mut reader, FRAME_TIMEOUT, || metrics.snapshot_chunk_received()).await {
        Ok((vote, snapshot)) => raft.install_full_snapshot(vote, snapshot).await.map_err(|e| SnapshotRefused::Stopped(e.to_string())),
        Err(refused) => {
            tracing::warn!(error = %refused, "snapshot from the leader refused; nothing installed");
            Err(refused)
        }
    };
    if let Err(e) = send(&mut writer, &reply).await {
        tracing::debug!(error = %e, "snapshot answer not sent");
    }
}

async fn next_frame<IO: AsyncRead>(reader: &mut Reader<IO>, within: Duration) -> Result<bytes::BytesMut, SnapshotRefused> {
    match tokio::time::timeout(within, reader.next()).await {
        Ok(Some(Ok(frame))) => Ok(frame),
        Ok(Some(Err(e))) => Err(SnapshotRefused::Invalid(format!("unreadable frame: {e}"))),
        Ok(None) => Err(SnapshotRefused::Invalid("the stream ended before the snapshot did".into())),
        Err(_) => Err(SnapshotRefused::Invalid(format!("no frame within {within:?}"))),
    }
}

/// Read one whole snapshot: `Begin`, its chunks, `End`, each frame within `within`. Calls
/// `on_chunk` for every chunk taken.
pub(crate) async fn receive<IO: AsyncRead>(
    reader: &mut Reader<IO>,
    within: Duration,
    mut on_chunk: impl FnMut(),
) -> Result<(Vote, Snapshot), SnapshotRefused> {
    let invalid = |reason: String| SnapshotRefused::Invalid(reason);
    let begin = next_frame(reader, within).await?;
    let (vote, meta, size) = match decode::<ToFollower>(&begin) {
        Ok(ToFollower::Begin { vote, meta, size }) => (vote, meta, size),
        Ok(_) => return Err(invalid("the stream did not start with Begin".into())),
        Err(e) => return Err(invalid(format!("malformed frame: {e}"))),
    };
    let size = usize::try_from(size).map_err(|_| invalid(format!("announced size {size} does not fit in memory")))?;
    let mut data = Vec::with_capacity(size.min(PREALLOCATE_AT_MOST));
    loop {
        let frame = next_frame(reader, within).await?;
        match decode::<ToFollower>(&frame) {
            Ok(ToFollower::Chunk(chunk)) => {
                if data.len().saturating_add(chunk.len()) > size {
                    return Err(invalid(format!("more data than the {size} bytes announced")));
                }
                data.extend_from_slice(&chunk);
                on_chunk();
            }
            Ok(ToFollower::End) => break,
            Ok(ToFollower::Begin { .. }) => return Err(invalid("Begin twice".into())),
            Err(e) => return Err(invalid(format!("malformed frame: {e}"))),
        }
    }
    if data.len() != size {
        return Err(invalid(format!("{} of the {size} bytes announced", data.len())));
    }
    // Raft must never be handed a state it cannot load.
    if let Err(e) = state_snapshot::decode(&data) {
        return Err(invalid(format!("malformed snapshot data: {e}")));
    }
    Ok((vote, Snapshot { meta, snapshot: data }))
}

/// Leader side: send `snapshot` to the follower at `addr` in pieces of at most `chunk_bytes`
/// and return its answer. Each frame, and the answer after the last, must go through within
/// `within`, so a large snapshot has the time it needs while a silent follower does not hold
/// the transfer.
pub async fn transmit(
    client: &PeerClient,
    addr: &str,
    vote: Vote,
    snapshot: Snapshot,
    chunk_bytes: usize,
    within: Duration,
) -> Result<SnapshotResponse<TypeConfig>, StreamingError<TypeConfig>> {
    let failed = |reason: String| PeerError::Unreachable { addr: addr.into(), reason };
    let network = |reason: String| StreamingError::Network(NetworkError::new(&failed(reason)));
    let io = client.upgrade(addr, SNAPSHOT, PROTOCOL).await.map_err(|e| StreamingError::Unreachable(Unreachable::new(&e)))?;
    let (mut reader, mut writer) = framed(io);
    let Snapshot { meta, snapshot: data } = snapshot;
    let begin = ToFollower::Begin { vote, meta, size: data.len() as u64 };
    let chunks = data.chunks(chunk_bytes.max(1)).map(|chunk| ToFollower::Chunk(Cow::Borrowed(chunk)));
    for frame in std::iter::once(begin).chain(chunks).chain(std::iter::once(ToFollower::End)) {
        match tokio::time::timeout(within, send(&mut writer, &frame)).await {
            Ok(Ok(())) => {}
            Ok(Err(e)) => return Err(network(format!("snapshot stream write failed: {e}"))),
            Err(_) => return Err(network(format!("snapshot frame not taken within {within:?}"))),
        }
    }
    let answer = match tokio::time::timeout(within, reader.next()).await {
        Ok(Some(Ok(answer))) => answer,
        Ok(Some(Err(e))) => return Err(network(format!("snapshot answer unreadable: {e}"))),
        Ok(None) => return Err(network("the follower closed the snapshot stream without answering".into())),
        Err(_) => return Err(network(format!("no snapshot answer within {within:?}"))),
    };
    match decode::<SnapshotReply>(&answer) {
        Ok(Ok(response)) => Ok(response),
        // As good as unreachable.
        Ok(Err(SnapshotRefused::Stopped(reason))) => Err(StreamingError::Unreachable(Unreachable::new(&failed(reason)))),
        Ok(Err(refused)) => Err(network(refused.to_string())),
        Err(e) => Err(network(format!("undecodable snapshot answer: {e}"))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::peer::stream::Writer;
    use crate::raft::state_machine::StateMachine;
    use tokio::io::{AsyncWriteExt, DuplexStream};

    fn state() -> Vec<u8> {
        state_snapshot::encode(&StateMachine::default())
    }

    fn begin(size: usize) -> ToFollower<'static> {
        ToFollower::Begin { vote: Vote::new_committed(3, 1), meta: SnapshotMeta::default(), size: size as u64 }
    }

    fn chunk(data: &[u8]) -> ToFollower<'_> {
        ToFollower::Chunk(Cow::Borrowed(data))
    }

    /// What `receive` makes of `frames`, sent whole and then the end of the stream, and how
    /// many chunks it took.
    async fn received(frames: Vec<ToFollower<'_>>) -> (Result<(Vote, Snapshot), SnapshotRefused>, usize) {
        let (leader, follower) = tokio::io::duplex(1 << 20);
        let (mut reader, _writer): (Reader<DuplexStream>, Writer<DuplexStream>) = framed(follower);
        let (_leader_reader, mut leader_writer) = framed(leader);
        for frame in &frames {
            send(&mut leader_writer, frame).await.unwrap();
        }
        leader_writer.get_mut().shutdown().await.unwrap();
        let mut chunks = 0;
        let result = receive(&mut reader, Duration::from_secs(5), || chunks += 1).await;
        (result, chunks)
    }

    fn refused(result: Result<(Vote, Snapshot), SnapshotRefused>) -> String {
        match result {
            Err(SnapshotRefused::Invalid(reason)) => reason,
            other => panic!("expected a refusal, got {other:?}"),
        }
    }

    #[tokio::test]
    async fn a_whole_snapshot_is_assembled_from_its_chunks() {
        let data = state();
        let mut frames = vec![begin(data.len())];
        frames.extend(data.chunks(3).map(chunk));
        frames.push(ToFollower::End);
        let (result, chunks) = received(frames).await;
        let (vote, snapshot) = result.unwrap();
        assert_eq!((vote, snapshot.snapshot), (Vote::new_committed(3, 1), data.clone()));
        assert_eq!(chunks, data.len().div_ceil(3));
    }

    #[tokio::test]
    async fn a_truncated_or_inconsistent_stream_is_refused() {
        let data = state();
        let (half, rest) = data.split_at(data.len() / 2);
        let cases = [
            (vec![begin(data.len()), chunk(half)], "ended before"),
            (vec![begin(data.len()), chunk(half), ToFollower::End], "bytes announced"),
            (vec![begin(half.len()), chunk(half), chunk(rest), ToFollower::End], "more data than"),
            (vec![chunk(half), ToFollower::End], "did not start with Begin"),
            (vec![begin(data.len()), begin(data.len())], "Begin twice"),
            (vec![begin(3), chunk(b"\xc1\x00\xff"), ToFollower::End], "malformed snapshot data"),
            (vec![], "ended before"),
        ];
        for (frames, expected) in cases {
            let reason = refused(received(frames).await.0);
            assert!(reason.contains(expected), "{reason:?} should say {expected:?}");
        }
    }

    #[tokio::test]
    async fn a_frame_that_is_not_messagepack_is_refused() {
        let (leader, follower) = tokio::io::duplex(1024);
        let (mut reader, _writer) = framed(follower);
        let (_r, mut leader_writer) = framed(leader);
        crate::peer::stream::send_encoded(&mut leader_writer, vec![0xc1, 0x00, 0xff]).await.unwrap();
        let reason = refused(receive(&mut reader, Duration::from_secs(5), || {}).await);
        assert!(reason.contains("malformed frame"), "{reason}");
    }

    #[tokio::test]
    async fn a_leader_that_goes_silent_is_given_up_on() {
        let (leader, follower) = tokio::io::duplex(1024);
        let (mut reader, _writer) = framed(follower);
        let (_r, mut leader_writer) = framed(leader);
        send(&mut leader_writer, &begin(10)).await.unwrap();
        let reason = refused(receive(&mut reader, Duration::from_millis(50), || {}).await);
        assert!(reason.contains("no frame within"), "{reason}");
    }
}
