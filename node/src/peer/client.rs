//! The client side of the peer port: one pooled HTTP client per node for Raft RPCs, forwarded
//! writes, admin calls and relayed streams, every request carrying the cluster secret.

use super::codec::{decode, encode};
use serde::Serialize;
use serde::de::DeserializeOwned;
use std::time::Duration;

/// openraft suggests the heartbeat interval as an RPC timeout, which a follower that fsyncs a
/// large batch can exceed; openraft does not enforce it, so peers allow at least this long.
pub const MIN_RPC_TIMEOUT: Duration = Duration::from_secs(2);

#[derive(Debug, thiserror::Error)]
pub enum PeerError {
    #[error("peer {addr} unreachable: {reason}")]
    Unreachable { addr: String, reason: String },
    #[error("peer {addr} answered HTTP {status}: {body}")]
    Status { addr: String, status: u16, body: String },
    #[error("peer {addr} sent an undecodable answer: {reason}")]
    Decode { addr: String, reason: String },
}

/// Pooled HTTP client for one node's peer traffic.
#[derive(Clone)]
pub struct PeerClient {
    http: reqwest::Client,
    secret: String,
    /// Sent as `KEY_HEADER` so a peer with another id-encryption key refuses loudly.
    key_fingerprint: Option<String>,
}

/// Header carrying the sender's id-encryption key fingerprint.
pub const KEY_HEADER: &str = "x-switchboard-key";

impl PeerClient {
    /// `source_ip` pins the local address of outgoing connections (multi-homed hosts).
    pub fn new(secret: String, source_ip: Option<std::net::IpAddr>, key_fingerprint: Option<String>) -> Self {
        let http = reqwest::Client::builder()
            .local_address(source_ip)
            .tcp_nodelay(true)
            .pool_idle_timeout(Duration::from_secs(60))
            .connect_timeout(Duration::from_secs(2))
            .build()
            .expect("HTTP client builds");
        PeerClient { http, secret, key_fingerprint }
    }

    fn authorize(&self, request: reqwest::RequestBuilder) -> reqwest::RequestBuilder {
        let request = request.bearer_auth(&self.secret);
        match &self.key_fingerprint {
            Some(fp) => request.header(KEY_HEADER, fp),
            None => request,
        }
    }

    async fn send(&self, request: reqwest::RequestBuilder, addr: &str) -> Result<Vec<u8>, PeerError> {
        let response =
            self.authorize(request).send().await.map_err(|e| PeerError::Unreachable { addr: addr.into(), reason: error_chain(&e) })?;
        let status = response.status();
        let body = response.bytes().await.map_err(|e| PeerError::Unreachable { addr: addr.into(), reason: error_chain(&e) })?;
        if !status.is_success() {
            return Err(PeerError::Status { addr: addr.into(), status: status.as_u16(), body: String::from_utf8_lossy(&body).into() });
        }
        Ok(body.to_vec())
    }

    /// POST a MessagePack body, decode a MessagePack answer.
    pub async fn rpc<Req: Serialize, Resp: DeserializeOwned>(
        &self,
        addr: &str,
        path: &str,
        body: &Req,
        timeout: Duration,
    ) -> Result<Resp, PeerError> {
        let request = self
            .http
            .post(format!("http://{addr}{path}"))
            .timeout(timeout)
            .header("content-type", "application/msgpack")
            .body(encode(body));
        let bytes = self.send(request, addr).await?;
        decode(&bytes).map_err(|e| PeerError::Decode { addr: addr.into(), reason: e.to_string() })
    }

    /// POST a MessagePack body and hand back the streaming response (for relayed SSE).
    pub async fn stream<Req: Serialize>(&self, addr: &str, path: &str, body: &Req) -> Result<reqwest::Response, PeerError> {
        self.authorize(self.http.post(format!("http://{addr}{path}")))
            .body(encode(body))
            .send()
            .await
            .map_err(|e| PeerError::Unreachable { addr: addr.into(), reason: error_chain(&e) })
    }

    /// Switch a connection to `protocol` with an HTTP upgrade (refused like any peer request
    /// without the secret) and hand back the raw byte stream.
    pub async fn upgrade(&self, addr: &str, path: &str, protocol: &str) -> Result<reqwest::Upgraded, PeerError> {
        let unreachable = |reason: String| PeerError::Unreachable { addr: addr.into(), reason };
        let request = self
            .authorize(self.http.post(format!("http://{addr}{path}")))
            .header(reqwest::header::CONNECTION, "upgrade")
            .header(reqwest::header::UPGRADE, protocol);
        let response = tokio::time::timeout(MIN_RPC_TIMEOUT, request.send())
            .await
            .map_err(|_| unreachable(format!("no upgrade answer within {MIN_RPC_TIMEOUT:?}")))?
            .map_err(|e| unreachable(error_chain(&e)))?;
        if response.status() != reqwest::StatusCode::SWITCHING_PROTOCOLS {
            let status = response.status().as_u16();
            let body = response.text().await.unwrap_or_default();
            return Err(PeerError::Status { addr: addr.into(), status, body });
        }
        response.upgrade().await.map_err(|e| unreachable(error_chain(&e)))
    }

    /// POST pre-encoded bytes, ignoring the answer's body.
    pub async fn post_bytes(&self, addr: &str, path: &str, body: Vec<u8>) -> Result<(), PeerError> {
        let request = self.http.post(format!("http://{addr}{path}")).timeout(Duration::from_secs(5)).body(body);
        self.send(request, addr).await.map(|_| ())
    }

    /// Admin API: POST JSON (or GET when `body` is `None`), JSON answer.
    pub async fn admin<Resp: DeserializeOwned>(&self, addr: &str, path: &str, body: Option<&serde_json::Value>) -> Result<Resp, PeerError> {
        let url = format!("http://{addr}{path}");
        let request = match body {
            Some(body) => self.http.post(url).json(body),
            None => self.http.get(url),
        }
        .timeout(Duration::from_secs(30));
        let bytes = self.send(request, addr).await?;
        serde_json::from_slice(&bytes).map_err(|e| PeerError::Decode { addr: addr.into(), reason: e.to_string() })
    }
}

fn error_chain(e: &dyn std::error::Error) -> String {
    let mut text = e.to_string();
    let mut source = e.source();
    while let Some(s) = source {
        text.push_str(": ");
        text.push_str(&s.to_string());
        source = s.source();
    }
    text
}
