//! Serving a router on a TCP listener with every connection bounded: how long a client may take
//! to send a request's headers, how long a kept-alive connection may sit idle between requests,
//! and how many connections one port holds at once. Each port of a node (MCP, peer, metrics) is
//! served this way; the peer port is reachable before a request is authenticated, so without
//! these a client could hold it (or any port) with silent or trickling connections forever.
//!
//! A connection is in one of three phases:
//!
//! - **reading a head**: from the accept, or from the first byte of a later request on a
//!   kept-alive connection, until the request reaches the router; bounded by
//!   [`ConnectionLimits::header_read_timeout`];
//! - **busy**: a request is being handled or its response body is still being written (an SSE
//!   stream stays busy for as long as it lasts); never cut;
//! - **idle**: the last response is written and no byte of the next request has come; bounded by
//!   [`ConnectionLimits::idle_timeout`].
//!
//! A connection upgraded to another protocol (the peer port's replication and forwarded-write
//! streams) leaves HTTP and these limits behind, but keeps its slot under
//! [`ConnectionLimits::max_connections`] until it closes.

use crate::metrics::Metrics;
use axum::Router;
use axum::body::Bytes;
use hyper::body::Incoming;
use hyper_util::rt::TokioIo;
use std::convert::Infallible;
use std::future::Future;
use std::io;
use std::net::SocketAddr;
use std::pin::{Pin, pin};
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll, ready};
use std::time::Duration;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{Notify, OwnedSemaphorePermit, Semaphore, watch};
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;
use tower_service::Service;

/// Bounds on the connections of one port.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConnectionLimits {
    /// Longest a client may take to send a request's headers, counted from the accept or from
    /// the first byte of a later request; the connection is closed after it.
    pub header_read_timeout: Duration,
    /// Longest a kept-alive connection may wait for its next request once the last response is
    /// written (never while a response, such as an SSE stream, is still going out).
    pub idle_timeout: Duration,
    /// Most connections the port holds at once; a connection beyond it is closed as soon as it
    /// is accepted.
    pub max_connections: usize,
}

impl Default for ConnectionLimits {
    fn default() -> Self {
        ConnectionLimits { header_read_timeout: Duration::from_secs(10), idle_timeout: Duration::from_secs(120), max_connections: 10_000 }
    }
}

/// Which limit closed a connection: the `limit` label of `switchboard_connections_dropped_total`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Limit {
    MaxConnections,
    HeaderReadTimeout,
    IdleTimeout,
}

impl Limit {
    pub fn label(self) -> &'static str {
        match self {
            Limit::MaxConnections => "max_connections",
            Limit::HeaderReadTimeout => "header_read_timeout",
            Limit::IdleTimeout => "idle_timeout",
        }
    }
}

/// Serve `router` on `listener` with the default [`ConnectionLimits`], counting into a metrics
/// registry of its own (tests, examples); a node uses [`serve_limited`].
pub async fn serve(listener: TcpListener, router: Router, shutdown: impl Future<Output = ()> + Send + 'static) -> io::Result<()> {
    serve_limited(listener, router, shutdown, "http", ConnectionLimits::default(), Arc::new(Metrics::new())).await
}

/// Serve `router` on `listener` (HTTP/1.1, upgrades included) until `shutdown` resolves, then
/// stop accepting, let the connections finish their requests and return once they are closed.
/// Accepted sockets get TCP_NODELAY (small SSE writes must not wait for ACKs) and keepalive
/// probes (a peer or client that vanished without closing its long-lived connection is noticed
/// within about half a minute). What `limits` refuses or closes is counted in `metrics` under
/// `port`.
pub async fn serve_limited(
    listener: TcpListener,
    router: Router,
    shutdown: impl Future<Output = ()> + Send + 'static,
    port: &'static str,
    limits: ConnectionLimits,
    metrics: Arc<Metrics>,
) -> io::Result<()> {
    let slots = Arc::new(Semaphore::new(limits.max_connections.clamp(1, Semaphore::MAX_PERMITS)));
    // Cancelled at shutdown: the connections finish their requests and close. Each holds a
    // receiver of `open`, whose `closed` resolves once every one of them is gone.
    let stopping = CancellationToken::new();
    let (open, held) = watch::channel(());
    let mut shutdown = pin!(shutdown);
    loop {
        let (tcp, remote) = tokio::select! {
            accepted = accept(&listener) => match accepted {
                Ok(accepted) => accepted,
                Err(e) => {
                    accept_failed(e).await;
                    continue;
                }
            },
            () = &mut shutdown => break,
        };
        let Ok(slot) = slots.clone().try_acquire_owned() else {
            tracing::debug!(port, %remote, max = limits.max_connections, "connection refused: too many open");
            metrics.connection_dropped(port, Limit::MaxConnections.label());
            drop(tcp);
            continue;
        };
        let connection = Connection { limits: limits.clone(), port, metrics: metrics.clone(), remote, phase: Arc::default() };
        tokio::spawn(connection.run(tcp, slot, router.clone(), stopping.clone(), held.clone()));
    }
    stopping.cancel();
    drop(held);
    drop(listener);
    open.closed().await;
    Ok(())
}

/// Accept one connection and tune its socket (see [`serve_limited`]).
async fn accept(listener: &TcpListener) -> io::Result<(TcpStream, SocketAddr)> {
    let (tcp, remote) = listener.accept().await?;
    let keepalive = socket2::TcpKeepalive::new().with_time(Duration::from_secs(15)).with_interval(Duration::from_secs(5)).with_retries(3);
    let _ = tcp.set_nodelay(true);
    let _ = socket2::SockRef::from(&tcp).set_tcp_keepalive(&keepalive);
    Ok((tcp, remote))
}

/// An accept error that is not the client's doing (such as running out of file descriptors)
/// is worth a pause before the next accept, or the loop would spin.
async fn accept_failed(e: io::Error) {
    if matches!(e.kind(), io::ErrorKind::ConnectionRefused | io::ErrorKind::ConnectionAborted | io::ErrorKind::ConnectionReset) {
        return;
    }
    tracing::error!(error = %e, "accept failed; retrying in 1 s");
    tokio::time::sleep(Duration::from_secs(1)).await;
}

/// Where a connection is, for its timeouts (see the module docs).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Phase {
    /// Waiting for a request's headers since then.
    Head(Instant),
    /// This many requests in flight (handled, or their response still being written).
    Busy(usize),
    /// The last response went out then; no byte of the next request yet.
    Idle(Instant),
}

/// A connection's phase, moved by its reads and its requests, watched by its task.
struct PhaseCell {
    phase: Mutex<Phase>,
    /// Told whenever the phase changes, so the task sets its timer anew.
    changed: Notify,
}

impl Default for PhaseCell {
    fn default() -> Self {
        PhaseCell { phase: Mutex::new(Phase::Head(Instant::now())), changed: Notify::new() }
    }
}

impl PhaseCell {
    fn set(&self, phase: Phase) {
        *self.phase.lock().unwrap() = phase;
        self.changed.notify_one();
    }

    /// Bytes came in: an idle connection starts reading its next request's head.
    fn read_some(&self) {
        let idle = matches!(*self.phase.lock().unwrap(), Phase::Idle(_));
        if idle {
            self.set(Phase::Head(Instant::now()));
        }
    }

    /// A request reached the router; busy until the returned guard (moved into the response
    /// body) is dropped.
    fn request_started(self: &Arc<Self>) -> InFlight {
        let mut phase = self.phase.lock().unwrap();
        *phase = match *phase {
            Phase::Busy(n) => Phase::Busy(n + 1),
            Phase::Head(_) | Phase::Idle(_) => Phase::Busy(1),
        };
        drop(phase);
        self.changed.notify_one();
        InFlight(self.clone())
    }

    /// When the current phase runs out, and which limit it is.
    fn deadline(&self, limits: &ConnectionLimits) -> Option<(Instant, Limit)> {
        match *self.phase.lock().unwrap() {
            Phase::Head(since) => Some((since + limits.header_read_timeout, Limit::HeaderReadTimeout)),
            Phase::Idle(since) => Some((since + limits.idle_timeout, Limit::IdleTimeout)),
            Phase::Busy(_) => None,
        }
    }
}

/// A request in flight on a connection; dropped once its response body is written (or the
/// connection is gone).
struct InFlight(Arc<PhaseCell>);

impl Drop for InFlight {
    fn drop(&mut self) {
        let mut phase = self.0.phase.lock().unwrap();
        *phase = match *phase {
            Phase::Busy(n) if n > 1 => Phase::Busy(n - 1),
            _ => Phase::Idle(Instant::now()),
        };
        drop(phase);
        self.0.changed.notify_one();
    }
}

/// A response body that keeps its request in flight until hyper has written (and dropped) it.
struct Tracked {
    body: axum::body::Body,
    _in_flight: InFlight,
}

impl http_body::Body for Tracked {
    type Data = Bytes;
    type Error = axum::Error;

    fn poll_frame(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Result<http_body::Frame<Bytes>, axum::Error>>> {
        Pin::new(&mut self.get_mut().body).poll_frame(cx)
    }

    fn is_end_stream(&self) -> bool {
        self.body.is_end_stream()
    }

    fn size_hint(&self) -> http_body::SizeHint {
        self.body.size_hint()
    }
}

/// The socket of a connection: reports reads to the connection's phase, and holds the
/// connection's slot (and its place in the open-connections gauge) for as long as the socket
/// lives, after an upgrade too.
struct Socket {
    tcp: TcpStream,
    phase: Arc<PhaseCell>,
    _slot: OwnedSemaphorePermit,
    metrics: Arc<Metrics>,
    port: &'static str,
}

impl Drop for Socket {
    fn drop(&mut self) {
        self.metrics.connection_closed(self.port);
    }
}

impl AsyncRead for Socket {
    fn poll_read(self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &mut ReadBuf<'_>) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        let before = buf.filled().len();
        ready!(Pin::new(&mut this.tcp).poll_read(cx, buf))?;
        if buf.filled().len() > before {
            this.phase.read_some();
        }
        Poll::Ready(Ok(()))
    }
}

impl AsyncWrite for Socket {
    fn poll_write(self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &[u8]) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.get_mut().tcp).poll_write(cx, buf)
    }

    fn poll_write_vectored(self: Pin<&mut Self>, cx: &mut Context<'_>, bufs: &[io::IoSlice<'_>]) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.get_mut().tcp).poll_write_vectored(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        self.tcp.is_write_vectored()
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().tcp).poll_flush(cx)
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().tcp).poll_shutdown(cx)
    }
}

/// One accepted connection and what bounds it.
struct Connection {
    limits: ConnectionLimits,
    port: &'static str,
    metrics: Arc<Metrics>,
    remote: SocketAddr,
    phase: Arc<PhaseCell>,
}

impl Connection {
    /// Serve HTTP/1.1 on `tcp` until the client closes, a limit closes it, it is upgraded, or
    /// (once `stopping` is cancelled) its requests are done. `_held` tells `serve_limited` the
    /// connection is still open.
    async fn run(
        self,
        tcp: TcpStream,
        slot: OwnedSemaphorePermit,
        router: Router,
        stopping: CancellationToken,
        _held: watch::Receiver<()>,
    ) {
        self.metrics.connection_opened(self.port);
        let socket = Socket { tcp, phase: self.phase.clone(), _slot: slot, metrics: self.metrics.clone(), port: self.port };
        let phase = self.phase.clone();
        let service = hyper::service::service_fn(move |request: hyper::Request<Incoming>| {
            let in_flight = phase.request_started();
            let mut router = router.clone();
            async move {
                let response = router.call(request).await.unwrap_or_else(|never: Infallible| match never {});
                Ok::<_, Infallible>(response.map(|body| Tracked { body, _in_flight: in_flight }))
            }
        });
        let connection = hyper::server::conn::http1::Builder::new().serve_connection(TokioIo::new(socket), service).with_upgrades();
        let mut connection = pin!(connection);
        let mut draining = false;
        loop {
            // Taken before the deadline is read: a change after the read wakes the select.
            let changed = self.phase.changed.notified();
            let deadline = self.phase.deadline(&self.limits);
            let timer = async {
                match deadline {
                    Some((at, _)) => tokio::time::sleep_until(at).await,
                    None => std::future::pending().await,
                }
            };
            tokio::select! {
                served = connection.as_mut() => {
                    if let Err(e) = served {
                        tracing::debug!(port = self.port, remote = %self.remote, error = %e, "connection ended with an error");
                    }
                    return;
                }
                () = changed => {}
                () = timer => {
                    // The phase may have moved on just as the timer fired; only a deadline still
                    // due closes the connection.
                    if let Some((at, limit)) = self.phase.deadline(&self.limits)
                        && at <= Instant::now()
                    {
                        tracing::debug!(port = self.port, remote = %self.remote, limit = limit.label(), "connection closed by a limit");
                        self.metrics.connection_dropped(self.port, limit.label());
                        return;
                    }
                }
                () = stopping.cancelled(), if !draining => {
                    connection.as_mut().graceful_shutdown();
                    draining = true;
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn accepted_connections_get_nodelay_and_keepalive() {
        // The accept `serve_limited` uses, not a socket tuned by hand.
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let _client = TcpStream::connect(listener.local_addr().unwrap()).await.unwrap();
        let (accepted, _) = accept(&listener).await.unwrap();
        let socket = socket2::SockRef::from(&accepted);
        assert!(accepted.nodelay().unwrap());
        assert!(socket.keepalive().unwrap());
        assert_eq!(socket.tcp_keepalive_time().unwrap(), Duration::from_secs(15));
    }

    #[test]
    fn a_connection_reads_heads_is_busy_while_answering_and_idles_after() {
        let limits =
            ConnectionLimits { header_read_timeout: Duration::from_secs(10), idle_timeout: Duration::from_secs(120), max_connections: 1 };
        let kind = |cell: &PhaseCell| cell.deadline(&limits).map(|(_, limit)| limit);
        let cell = Arc::new(PhaseCell::default());
        let (accepted, _) = cell.deadline(&limits).unwrap();
        assert_eq!(kind(&cell), Some(Limit::HeaderReadTimeout), "a new connection must send its head in time");
        let first = cell.request_started();
        let second = cell.request_started();
        assert_eq!(kind(&cell), None, "no limit while a response is in flight");
        drop(first);
        assert_eq!(kind(&cell), None);
        drop(second);
        let (idle_until, limit) = cell.deadline(&limits).unwrap();
        assert_eq!(limit, Limit::IdleTimeout);
        assert!(idle_until >= accepted + Duration::from_secs(110));
        cell.read_some();
        let (head_until, limit) = cell.deadline(&limits).unwrap();
        assert_eq!(limit, Limit::HeaderReadTimeout, "the next head has begun");
        cell.read_some();
        assert_eq!(cell.deadline(&limits), Some((head_until, Limit::HeaderReadTimeout)), "more bytes do not extend it");
    }
}
