//! openraft's network over the peer port: votes and single appends as MessagePack requests,
//! replication as pipelined streams ([`super::append_stream`]), snapshots in pieces over a
//! stream ([`super::snapshot_stream`]).

use super::types::{Snapshot, TypeConfig, Vote};
use super::{append_stream, snapshot_stream};
use crate::peer::routes::{APPEND, PRE_VOTE, TRANSFER_LEADER, VOTE};
use crate::peer::{MIN_RPC_TIMEOUT, PeerClient, PeerError};
use futures::future::BoxFuture;
use futures::stream::BoxStream;
use openraft::BasicNode;
use openraft::errors::{NetworkError, RPCError, RaftError, ReplicationClosed, StreamingError, Unreachable};
use openraft::network::{RPCOption, RaftNetworkFactory, v2::RaftNetworkV2};
use openraft::raft::{
    AppendEntriesRequest, AppendEntriesResponse, SnapshotResponse, StreamAppendResult, TransferLeaderRequest, TransferLeaderResponse,
    VoteRequest, VoteResponse,
};
use serde::Serialize;
use serde::de::DeserializeOwned;
use std::future::Future;
use std::time::Duration;

/// Builds one connection per target for openraft.
#[derive(Clone)]
pub struct NetworkFactory {
    pub client: PeerClient,
    pub streams: append_stream::Pool,
    /// Bytes of replication requests a follower may have unanswered.
    pub in_flight_bytes: usize,
    /// Largest piece a snapshot is sent in.
    pub snapshot_chunk_bytes: usize,
}

pub struct Connection {
    client: PeerClient,
    streams: append_stream::Pool,
    addr: String,
    in_flight_bytes: usize,
    snapshot_chunk_bytes: usize,
}

impl RaftNetworkFactory<TypeConfig> for NetworkFactory {
    type Network = Connection;

    async fn new_client(&mut self, _target: u64, node: &BasicNode) -> Connection {
        Connection {
            client: self.client.clone(),
            streams: self.streams.clone(),
            addr: node.addr.clone(),
            in_flight_bytes: self.in_flight_bytes,
            snapshot_chunk_bytes: self.snapshot_chunk_bytes,
        }
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
        append_stream::open(&self.client, &self.streams, &self.addr, self.in_flight_bytes, input)
    }

    async fn vote(&mut self, rpc: VoteRequest<TypeConfig>, option: RPCOption) -> Result<VoteResponse<TypeConfig>, RPCError<TypeConfig>> {
        self.call(VOTE, &rpc, option.hard_ttl().max(MIN_RPC_TIMEOUT)).await
    }

    /// Without it openraft counts every peer as granting the Pre-Vote, which then protects nothing.
    async fn pre_vote(
        &mut self,
        rpc: VoteRequest<TypeConfig>,
        option: RPCOption,
    ) -> Result<VoteResponse<TypeConfig>, RPCError<TypeConfig>> {
        self.call(PRE_VOTE, &rpc, option.hard_ttl().max(MIN_RPC_TIMEOUT)).await
    }

    /// Without it a leader stepping down leaves its followers to wait out the election timeout.
    async fn transfer_leader(
        &mut self,
        rpc: TransferLeaderRequest<TypeConfig>,
        option: RPCOption,
    ) -> Result<TransferLeaderResponse<TypeConfig>, RPCError<TypeConfig>> {
        self.call(TRANSFER_LEADER, &rpc, option.hard_ttl().max(MIN_RPC_TIMEOUT)).await
    }

    async fn full_snapshot(
        &mut self,
        vote: Vote,
        snapshot: Snapshot,
        cancel: impl Future<Output = ReplicationClosed> + openraft::OptionalSend + 'static,
        option: RPCOption,
    ) -> Result<SnapshotResponse<TypeConfig>, StreamingError<TypeConfig>> {
        let within = option.hard_ttl().max(MIN_RPC_TIMEOUT);
        tokio::select! {
            closed = cancel => Err(StreamingError::Closed(closed)),
            reply = snapshot_stream::transmit(&self.client, &self.addr, vote, snapshot, self.snapshot_chunk_bytes, within) => reply,
        }
    }
}
