//! The client side of the peer port: Raft RPCs, forwarded writes and admin calls over one pooled
//! HTTP client, every request carrying the cluster secret.

use super::state_machine::{Command, Response, WriteId};
use super::types::{TypeConfig, Vote, decode, encode};
use futures::future::BoxFuture;
use futures::stream::BoxStream;
use openraft::BasicNode;
use openraft::errors::{NetworkError, RPCError, RaftError, ReplicationClosed, StreamingError, Unreachable};
use openraft::network::{RPCOption, RaftNetworkFactory, v2::RaftNetworkV2};
use openraft::raft::{AppendEntriesRequest, AppendEntriesResponse, SnapshotResponse, StreamAppendResult, VoteRequest, VoteResponse};
use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};
use std::future::Future;
use std::time::Duration;

pub const APPEND: &str = "/raft/append";
pub const APPEND_STREAM: &str = "/raft/append-stream";
pub const VOTE: &str = "/raft/vote";
pub const SNAPSHOT: &str = "/raft/snapshot";
pub const WRITE_STREAM: &str = "/raft/write-stream";
pub const READ_INDEX: &str = "/raft/read-index";
pub const STATUS: &str = "/admin/status";
pub const LEARNERS: &str = "/admin/learners";
pub const PROMOTE: &str = "/admin/promote";
pub const REMOVE: &str = "/admin/remove";
pub const JOIN: &str = "/admin/join";
pub const RESUME: &str = "/mcp/resume";
pub const CANCEL: &str = "/mcp/cancel";
pub const NOTIFY: &str = "/mcp/notify";

/// A write a follower hands to the leader. The leader stamps the time.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct ForwardedWrite {
    pub write: WriteId,
    pub command: Command,
}

/// Why a node could not take a write or answer a read index.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, thiserror::Error)]
pub enum Refusal {
    #[error("not the leader (leader: {leader:?})")]
    NotLeader { leader: Option<(u64, String)> },
    #[error("{0}")]
    Unavailable(String),
}

pub type WriteReply = Result<(Response, u64), Refusal>;
pub type ReadIndexReply = Result<u64, Refusal>;

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

    pub async fn read_index(&self, addr: &str, timeout: Duration) -> Result<ReadIndexReply, PeerError> {
        self.rpc(addr, READ_INDEX, &(), timeout).await
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

/// Builds one connection per target for openraft.
#[derive(Clone)]
pub struct NetworkFactory {
    pub client: PeerClient,
    pub streams: super::append_stream::Pool,
}

pub struct Connection {
    client: PeerClient,
    streams: super::append_stream::Pool,
    addr: String,
}

impl RaftNetworkFactory<TypeConfig> for NetworkFactory {
    type Network = Connection;

    async fn new_client(&mut self, _target: u64, node: &BasicNode) -> Connection {
        Connection { client: self.client.clone(), streams: self.streams.clone(), addr: node.addr.clone() }
    }
}

impl Connection {
    async fn call<Req: Serialize, Resp: DeserializeOwned>(
        &self,
        path: &str,
        body: &Req,
        timeout: Duration,
    ) -> Result<Resp, RPCError<TypeConfig>> {
        let reply: Result<Resp, RaftError<TypeConfig>> = self.client.rpc(&self.addr, path, body, timeout).await.map_err(|e| match e {
            PeerError::Decode { .. } | PeerError::Status { .. } => RPCError::Network(NetworkError::new(&e)),
            PeerError::Unreachable { .. } => RPCError::Unreachable(Unreachable::new(&e)),
        })?;
        // The remote Raft is fatally stopped: as good as unreachable.
        reply.map_err(|e| RPCError::Unreachable(Unreachable::new(&e)))
    }
}

/// openraft suggests the heartbeat interval as the append timeout, which a follower that
/// fsyncs a large batch can exceed; openraft does not enforce it, so allow at least this long.
pub(super) const MIN_RPC_TIMEOUT: Duration = Duration::from_secs(2);

impl RaftNetworkV2<TypeConfig> for Connection {
    type SnapshotData = Vec<u8>;

    async fn append_entries(
        &mut self,
        rpc: AppendEntriesRequest<TypeConfig>,
        option: RPCOption,
    ) -> Result<AppendEntriesResponse<TypeConfig>, RPCError<TypeConfig>> {
        self.call(APPEND, &rpc, option.hard_ttl().max(MIN_RPC_TIMEOUT)).await
    }

    /// Pipelined: see [`super::append_stream`].
    fn stream_append<'s, S>(
        &'s mut self,
        input: S,
        _option: RPCOption,
    ) -> BoxFuture<'s, Result<BoxStream<'s, Result<StreamAppendResult<TypeConfig>, RPCError<TypeConfig>>>, RPCError<TypeConfig>>>
    where
        S: futures::Stream<Item = AppendEntriesRequest<TypeConfig>> + openraft::OptionalSend + Unpin + 'static,
    {
        super::append_stream::open(&self.client, &self.streams, &self.addr, input)
    }

    async fn vote(&mut self, rpc: VoteRequest<TypeConfig>, option: RPCOption) -> Result<VoteResponse<TypeConfig>, RPCError<TypeConfig>> {
        self.call(VOTE, &rpc, option.hard_ttl().max(MIN_RPC_TIMEOUT)).await
    }

    async fn full_snapshot(
        &mut self,
        vote: Vote,
        snapshot: super::types::Snapshot,
        cancel: impl Future<Output = ReplicationClosed> + openraft::OptionalSend + 'static,
        option: RPCOption,
    ) -> Result<SnapshotResponse<TypeConfig>, StreamingError<TypeConfig>> {
        let body = super::types::SnapshotBlob { vote: Some(vote), meta: snapshot.meta, data: snapshot.snapshot.into() };
        tokio::select! {
            closed = cancel => Err(StreamingError::Closed(closed)),
            reply = self.call(SNAPSHOT, &body, option.hard_ttl()) => Ok(reply?),
        }
    }
}
