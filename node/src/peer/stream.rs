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

pub async fn send<IO: AsyncWrite>(writer: &mut Writer<IO>, frame: &impl Serialize) -> std::io::Result<()> {
    writer.send(bytes::Bytes::from(encode(frame))).await
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
