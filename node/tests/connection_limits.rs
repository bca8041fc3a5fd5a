//! Connection limits over real sockets: a header-read timeout (silent and trickling clients are
//! cut), an idle timeout for kept-alive connections between requests (never for a streaming
//! response), and a cap on open connections per port.

mod common;

use common::{RawClient, read_events};
use serde_json::json;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;
use switchboard_node::mailbox::InMemoryMailbox;
use switchboard_node::metrics::Metrics;
use switchboard_node::server::ServerConfig;
use switchboard_node::session::InMemorySessionStore;
use switchboard_node::transport::http::{self, ConnectionLimits, HttpConfig};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio::time::Instant;

struct Limited {
    addr: SocketAddr,
    metrics: Arc<Metrics>,
}

/// The MCP endpoint served with `limits`, counting into its own metrics as port `mcp`.
async fn serve(limits: ConnectionLimits, http: HttpConfig) -> Limited {
    let metrics = Arc::new(Metrics::new());
    let server = common::builder(ServerConfig::default())
        .metrics(metrics.clone())
        .build(Arc::new(InMemoryMailbox::new()), Arc::new(InMemorySessionStore::new(Duration::from_secs(3600))));
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(http::serve_limited(listener, http::router(server, http), std::future::pending(), "mcp", limits, metrics.clone()));
    Limited { addr, metrics }
}

fn limits(header_read_timeout_ms: u64, idle_timeout_ms: u64, max_connections: usize) -> ConnectionLimits {
    ConnectionLimits {
        header_read_timeout: Duration::from_millis(header_read_timeout_ms),
        idle_timeout: Duration::from_millis(idle_timeout_ms),
        max_connections,
    }
}

/// Read until the server closes the connection (EOF or reset); when that was. Panics if it
/// stays open for `within`.
async fn closed_within(tcp: &mut TcpStream, within: Duration) -> Instant {
    let deadline = Instant::now() + within;
    let mut buf = [0u8; 1024];
    loop {
        match tokio::time::timeout_at(deadline, tcp.read(&mut buf)).await {
            Err(_) => panic!("the connection was still open after {within:?}"),
            Ok(Ok(0) | Err(_)) => return Instant::now(),
            Ok(Ok(_)) => {}
        }
    }
}

/// A request the endpoint answers at once (406: no Accept header), on a kept-alive connection.
const QUICK_REQUEST: &[u8] = b"GET /mcp HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n";

/// Read one response with a Content-Length body; its status line.
async fn read_response(tcp: &mut TcpStream) -> String {
    let mut data = Vec::new();
    let mut buf = [0u8; 1024];
    loop {
        let n = tokio::time::timeout(Duration::from_secs(5), tcp.read(&mut buf)).await.expect("a response within 5 s").unwrap();
        assert!(n > 0, "closed before a whole response: {:?}", String::from_utf8_lossy(&data));
        data.extend_from_slice(&buf[..n]);
        let text = String::from_utf8_lossy(&data).to_string();
        if let Some(end) = text.find("\r\n\r\n") {
            let length: usize = text[..end]
                .lines()
                .find_map(|l| l.to_ascii_lowercase().strip_prefix("content-length:").map(|v| v.trim().parse().unwrap()))
                .expect("a content-length");
            if data.len() >= end + 4 + length {
                return text.lines().next().unwrap().to_string();
            }
        }
    }
}

#[tokio::test]
async fn silent_half_sent_and_trickled_heads_are_cut_at_the_header_timeout() {
    let srv = serve(limits(400, 60_000, 100), HttpConfig::default()).await;
    let connected = Instant::now();
    let mut silent = TcpStream::connect(srv.addr).await.unwrap();
    let mut half = TcpStream::connect(srv.addr).await.unwrap();
    half.write_all(b"GET /mcp HT").await.unwrap();
    let trickled = TcpStream::connect(srv.addr).await.unwrap();
    let (mut trickle_read, mut trickle_write) = trickled.into_split();
    // A byte every 50 ms: it never stops sending, and still never finishes its head.
    let trickler = tokio::spawn(async move {
        for byte in b"GET /mcp HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Slow: ".iter().cycle() {
            if trickle_write.write_all(&[*byte]).await.is_err() {
                return;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    });
    for (what, took) in [
        ("silent", closed_within(&mut silent, Duration::from_secs(5)).await),
        ("half a request line", closed_within(&mut half, Duration::from_secs(5)).await),
    ] {
        let took = took - connected;
        assert!(took >= Duration::from_millis(300), "{what}: cut after {took:?}, before the timeout");
    }
    let mut buf = [0u8; 16];
    let cut = tokio::time::timeout(Duration::from_secs(5), trickle_read.read(&mut buf))
        .await
        .expect("the trickler was still connected after 5 s");
    assert!(matches!(cut, Ok(0) | Err(_)), "{cut:?}");
    trickler.abort();
    assert_eq!(srv.metrics.connections_dropped_count("mcp", "header_read_timeout"), 3);
    // A client that sends its request in time is served.
    let mut prompt = TcpStream::connect(srv.addr).await.unwrap();
    prompt.write_all(QUICK_REQUEST).await.unwrap();
    assert_eq!(read_response(&mut prompt).await, "HTTP/1.1 406 Not Acceptable");
}

#[tokio::test]
async fn a_connection_over_the_cap_is_closed_at_once_and_counted() {
    let srv = serve(limits(60_000, 60_000, 2), HttpConfig::default()).await;
    let held: Vec<TcpStream> = vec![TcpStream::connect(srv.addr).await.unwrap(), TcpStream::connect(srv.addr).await.unwrap()];
    let deadline = Instant::now() + Duration::from_secs(5);
    while srv.metrics.connections_open("mcp") < 2 {
        assert!(Instant::now() < deadline, "the two connections were never counted open");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let connected = Instant::now();
    let mut third = TcpStream::connect(srv.addr).await.unwrap();
    let _ = third.write_all(QUICK_REQUEST).await;
    let took = closed_within(&mut third, Duration::from_secs(5)).await - connected;
    assert!(took < Duration::from_secs(2), "closed only after {took:?}");
    assert_eq!(srv.metrics.connections_dropped_count("mcp", "max_connections"), 1);

    // A slot freed is a slot usable.
    drop(held);
    while srv.metrics.connections_open("mcp") > 0 {
        assert!(Instant::now() < deadline, "closed connections still counted open");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let mut client = RawClient::new(&format!("http://{}/mcp", srv.addr));
    client.initialize().await;
}

#[tokio::test]
async fn a_kept_alive_connection_idles_until_the_idle_timeout_not_the_header_timeout() {
    // A short header timeout does not cut a connection waiting between requests...
    let srv = serve(limits(300, 60_000, 100), HttpConfig::default()).await;
    let mut tcp = TcpStream::connect(srv.addr).await.unwrap();
    tcp.write_all(QUICK_REQUEST).await.unwrap();
    assert_eq!(read_response(&mut tcp).await, "HTTP/1.1 406 Not Acceptable");
    let mut buf = [0u8; 64];
    assert!(
        tokio::time::timeout(Duration::from_millis(1200), tcp.read(&mut buf)).await.is_err(),
        "closed while idle, before the idle timeout"
    );
    tcp.write_all(QUICK_REQUEST).await.unwrap();
    assert_eq!(read_response(&mut tcp).await, "HTTP/1.1 406 Not Acceptable", "the kept-alive connection serves its next request");
    assert_eq!(srv.metrics.connections_dropped_count("mcp", "header_read_timeout"), 0);

    // ...and the idle timeout does.
    let srv = serve(limits(60_000, 300, 100), HttpConfig::default()).await;
    let mut tcp = TcpStream::connect(srv.addr).await.unwrap();
    tcp.write_all(QUICK_REQUEST).await.unwrap();
    assert_eq!(read_response(&mut tcp).await, "HTTP/1.1 406 Not Acceptable");
    let answered = Instant::now();
    let took = closed_within(&mut tcp, Duration::from_secs(5)).await - answered;
    assert!(took >= Duration::from_millis(200), "cut after {took:?}");
    assert_eq!(srv.metrics.connections_dropped_count("mcp", "idle_timeout"), 1);
}

#[tokio::test]
async fn an_sse_stream_is_never_cut_by_the_idle_or_header_timeout() {
    let http = HttpConfig { keep_alive: Duration::from_millis(100), ..Default::default() };
    let srv = serve(limits(200, 200, 100), http).await;
    let mut client = RawClient::new(&format!("http://{}/mcp", srv.addr));
    client.initialize().await;
    let mut stream = client.get().send().await.unwrap();
    assert_eq!(stream.status(), 200);
    read_events(&mut stream, 1, &mut String::new()).await;
    // The stream only carries keep-alive comments: it stays open through ten idle timeouts.
    let until = Instant::now() + Duration::from_millis(2000);
    let mut keep_alives = 0;
    while Instant::now() < until {
        let chunk = tokio::time::timeout(Duration::from_secs(2), stream.chunk()).await.expect("a keep-alive within 2 s").unwrap();
        assert!(chunk.is_some(), "the stream ended after {keep_alives} keep-alives");
        keep_alives += 1;
    }
    assert!(keep_alives >= 10, "{keep_alives}");
    assert_eq!(srv.metrics.connections_dropped_count("mcp", "idle_timeout"), 0);
    assert_eq!(srv.metrics.connections_dropped_count("mcp", "header_read_timeout"), 0);
    let reply = client.call(5, "ping", json!({})).await;
    assert_eq!(reply["result"], json!({}));
}

#[tokio::test]
async fn shutdown_closes_idle_connections_and_returns_once_they_are_gone() {
    let metrics = Arc::new(Metrics::new());
    let server = common::builder(ServerConfig::default())
        .metrics(metrics.clone())
        .build(Arc::new(InMemoryMailbox::new()), Arc::new(InMemorySessionStore::new(Duration::from_secs(3600))));
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let shutdown = async move {
        let _ = stopped.await;
    };
    let limits = limits(60_000, 60_000, 100);
    let served = tokio::spawn(http::serve_limited(listener, http::router(server, HttpConfig::default()), shutdown, "mcp", limits, metrics));
    let mut idle = TcpStream::connect(addr).await.unwrap();
    idle.write_all(QUICK_REQUEST).await.unwrap();
    assert_eq!(read_response(&mut idle).await, "HTTP/1.1 406 Not Acceptable");
    stop.send(()).unwrap();
    closed_within(&mut idle, Duration::from_secs(5)).await;
    tokio::time::timeout(Duration::from_secs(5), served).await.expect("serve returns once its connections are closed").unwrap().unwrap();
}
