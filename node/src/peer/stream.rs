//! Long-lived peer connections: an HTTP upgrade on the peer port (the upgrade request carries
//! the cluster secret like every peer request), then length-prefixed MessagePack frames both
//! ways. Used where request/response HTTP would put a round of HTTP machinery on every Raft
//! write: log replication and forwarded writes (see `crate::raft::append_stream` and
//! `crate::raft::forwarder`).

use super::codec::encode;
use crate::metrics::Metrics;
use crate::tasks::TaskSet;
use axum::extract::Request;
use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response};
use futures::SinkExt;
use hyper_util::rt::TokioIo;
use serde::Serialize;
use std::future::Future;
use tokio::io::{AsyncRead, AsyncWrite, ReadHalf, WriteHalf};
use tokio_util::codec::{FramedRead, FramedWrite, LengthDelimitedCodec};

/// Frames above this are refused (the same bound as a peer request body).
pub const MAX_FRAME: usize = 256 * 1024 * 1024;

pub type Reader<IO> = FramedRead<ReadHalf<IO>, LengthDelimitedCodec>;
pub type Writer<IO> = FramedWrite<WriteHalf<IO>, LengthDelimitedCodec>;

/// The follower/leader side of an accepted stream.
pub type Accepted = TokioIo<hyper::upgrade::Upgraded>;

fn codec() -> LengthDelimitedCodec {
    LengthDelimitedCodec::builder().max_frame_length(MAX_FRAME).new_codec()
}

/// Split a connection into a frame reader and a frame writer.
pub fn framed<IO: AsyncRead + AsyncWrite>(io: IO) -> (Reader<IO>, Writer<IO>) {
    let (read, write) = tokio::io::split(io);
    (FramedRead::new(read, codec()), FramedWrite::new(write, codec()))
}

/// Encode `frame` and send it (see [`send_encoded`]).
pub async fn send<IO: AsyncWrite>(writer: &mut Writer<IO>, frame: &impl Serialize) -> std::io::Result<()> {
    send_encoded(writer, encode(frame)).await
}

/// Send an encoded frame. One over [`MAX_FRAME`] is not sent: the peer would refuse it, so the
/// error ends the stream, and it is logged at warn, since it means something outgrew the byte
/// limits meant to keep every frame under the cap (a stream failing quietly on every retry is
/// how a follower once stayed behind for good).
pub async fn send_encoded<IO: AsyncWrite>(writer: &mut Writer<IO>, frame: Vec<u8>) -> std::io::Result<()> {
    check_frame_len(frame.len(), MAX_FRAME)?;
    writer.send(bytes::Bytes::from(frame)).await
}

fn check_frame_len(len: usize, max: usize) -> std::io::Result<()> {
    if len <= max {
        return Ok(());
    }
    tracing::warn!(bytes = len, limit = max, "peer frame over the frame limit; not sent, closing the stream");
    Err(std::io::Error::new(std::io::ErrorKind::InvalidInput, format!("peer frame of {len} bytes is over the limit of {max}")))
}

/// Answer an upgrade request for `protocol` (101) and run `serve` on the connection once it is
/// switched; the task joins `tasks`, so a stopped member's streams end with it.
pub fn accept<F, Fut>(tasks: &TaskSet, metrics: &Metrics, mut request: Request, protocol: &'static str, serve: F) -> Response
where
    F: FnOnce(Accepted) -> Fut + Send + 'static,
    Fut: Future<Output = ()> + Send + 'static,
{
    let asked = request.headers().get(header::UPGRADE).and_then(|v| v.to_str().ok());
    if asked != Some(protocol) {
        return (StatusCode::BAD_REQUEST, format!("expected `Upgrade: {protocol}`")).into_response();
    }
    let upgrade = hyper::upgrade::on(&mut request);
    metrics.peer_stream_accepted(protocol);
    tasks.track(tokio::spawn(async move {
        match upgrade.await {
            Ok(upgraded) => serve(TokioIo::new(upgraded)).await,
            Err(e) => tracing::debug!(error = %e, protocol, "peer stream upgrade failed"),
        }
    }));
    (StatusCode::SWITCHING_PROTOCOLS, [(header::CONNECTION, "upgrade"), (header::UPGRADE, protocol)]).into_response()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_frame_over_the_limit_is_refused_with_a_clear_error() {
        assert!(check_frame_len(100, 100).is_ok());
        let err = check_frame_len(101, 100).unwrap_err();
        assert_eq!(err.kind(), std::io::ErrorKind::InvalidInput);
        assert_eq!(err.to_string(), "peer frame of 101 bytes is over the limit of 100");
    }
}
