//! The Raft routes of the peer port: votes, leadership hand-offs, appends, and the replication, snapshot and
//! forwarded-write streams, plus the leader's read index. Bodies are MessagePack; one that does
//! not decode is answered 400 and touches nothing. Authentication wraps every peer route
//! (see [`crate::peer::authenticated`]).

use super::messages::ReadIndexReply;
use super::types::{TypeConfig, decode, encode};
use super::{RaftNode, append_stream, forwarder, snapshot_stream};
use crate::peer::routes::{APPEND, APPEND_STREAM, APPLIED, CLOCK, PRE_VOTE, READ_INDEX, SNAPSHOT, TRANSFER_LEADER, VOTE, WRITE_STREAM};
use axum::Router;
use axum::body::Bytes;
use axum::extract::{Request, State};
use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::post;
use openraft::errors::RaftError;
use openraft::raft::{AppendEntriesRequest, TransferLeaderRequest, VoteRequest};
use std::sync::Arc;

/// The Raft routes of `node`.
pub fn router(node: Arc<RaftNode>) -> Router {
    Router::new()
        .route(APPEND, post(append))
        .route(APPEND_STREAM, post(append_stream))
        .route(VOTE, post(vote))
        .route(PRE_VOTE, post(pre_vote))
        .route(TRANSFER_LEADER, post(transfer_leader))
        .route(SNAPSHOT, post(snapshot))
        .route(WRITE_STREAM, post(write_stream))
        .route(READ_INDEX, post(read_index))
        .route(CLOCK, post(clock))
        .route(APPLIED, post(applied))
        .with_state(node)
}

type Node = State<Arc<RaftNode>>;

pub(crate) fn msgpack(value: &impl serde::Serialize) -> Response {
    ([(header::CONTENT_TYPE, "application/msgpack")], encode(value)).into_response()
}

/// Decode a MessagePack body or answer 400 (nothing is touched).
pub(crate) fn body<'a, T: serde::Deserialize<'a>>(bytes: &'a [u8], what: &str) -> Result<T, Response> {
    decode(bytes).map_err(|e| (StatusCode::BAD_REQUEST, format!("malformed {what}: {e}")).into_response())
}

async fn append(State(node): Node, bytes: Bytes) -> Response {
    let rpc: AppendEntriesRequest<TypeConfig> = match body(&bytes, "append-entries request") {
        Ok(rpc) => rpc,
        Err(r) => return r,
    };
    msgpack(&node.raft.append_entries(rpc).await)
}

/// Switch to a pipelined replication stream (see [`append_stream`]).
async fn append_stream(State(node): Node, request: Request) -> Response {
    let raft = node.raft.clone();
    crate::peer::stream::accept(&node.tasks, &node.metrics, request, append_stream::PROTOCOL, move |io| append_stream::serve(raft, io))
}

async fn vote(State(node): Node, bytes: Bytes) -> Response {
    let rpc: VoteRequest<TypeConfig> = match body(&bytes, "vote request") {
        Ok(rpc) => rpc,
        Err(r) => return r,
    };
    msgpack(&node.raft.vote(rpc).await)
}

async fn pre_vote(State(node): Node, bytes: Bytes) -> Response {
    let rpc: VoteRequest<TypeConfig> = match body(&bytes, "pre-vote request") {
        Ok(rpc) => rpc,
        Err(r) => return r,
    };
    msgpack(&node.raft.pre_vote(rpc).await)
}

async fn transfer_leader(State(node): Node, bytes: Bytes) -> Response {
    let rpc: TransferLeaderRequest<TypeConfig> = match body(&bytes, "transfer-leader request") {
        Ok(rpc) => rpc,
        Err(r) => return r,
    };
    msgpack(&node.raft.handle_transfer_leader(rpc).await.map_err(RaftError::<TypeConfig>::Fatal))
}

/// Switch to a stream carrying one snapshot in pieces (see [`snapshot_stream`]).
async fn snapshot(State(node): Node, request: Request) -> Response {
    let (raft, metrics) = (node.raft.clone(), node.metrics.clone());
    crate::peer::stream::accept(&node.tasks, &node.metrics, request, snapshot_stream::PROTOCOL, move |io| {
        snapshot_stream::serve(raft, metrics, io)
    })
}

/// Switch to a stream of forwarded writes (see [`forwarder`]).
async fn write_stream(State(node): Node, request: Request) -> Response {
    let leader = node.clone();
    crate::peer::stream::accept(&node.tasks, &node.metrics, request, forwarder::PROTOCOL, move |io| forwarder::serve(leader, io))
}

async fn read_index(State(node): Node) -> Response {
    let reply: ReadIndexReply = node.leader_read_index().await;
    msgpack(&reply)
}

/// This replica's wall clock, in milliseconds (see [`super::clock`]).
async fn clock() -> Response {
    msgpack(&crate::clock::now_ms())
}

/// Whether this replica has applied the index in the body, waiting for it up to the election
/// timeout (see [`RaftNode::applied_everywhere`]).
async fn applied(State(node): Node, bytes: Bytes) -> Response {
    let index: u64 = match body(&bytes, "log index") {
        Ok(index) => index,
        Err(r) => return r,
    };
    msgpack(&node.sm.applied_at_least(index, node.config.election_timeout).await)
}
