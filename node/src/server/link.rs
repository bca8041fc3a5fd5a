//! What the server asks of the other replicas, and the notices it fans out to them.

use crate::mailbox::NodeId;
use crate::protocol::jsonrpc::RequestId;
use crate::session::SessionId;
use futures::future::BoxFuture;

/// What the server asks of the other replicas, when there are any.
pub trait ClusterLink: Send + Sync {
    /// The client cancelled a request this node is not running: tell the replica that is.
    fn cancel_elsewhere(&self, session: &SessionId, request: &RequestId);
    /// A notification for standalone streams: the other replicas deliver it to theirs.
    fn notify_elsewhere(&self, notice: &Notice);
    /// Ask `owner` whether the 2026-07-28 call `call` still runs there (`Ok(false)`: it does
    /// not), cancelling it first when `cancel`. `Err` when `owner` could not be asked.
    fn call_state(&self, owner: NodeId, call: u128, cancel: bool) -> BoxFuture<'static, Result<bool, String>>;
    /// Wait on `owner` for the outcome of round `round` of the 2026-07-28 call `call` (JSON
    /// text; `Ok(None)`: the call ended without one). `Err` when `owner` could not be asked.
    fn round_outcome(&self, owner: NodeId, call: u128, round: u32) -> BoxFuture<'static, Result<Option<String>, String>>;
}

/// A server notification not tied to a request, for every session's standalone stream
/// (whichever replica holds it).
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub enum Notice {
    /// `notifications/resources/updated`, for sessions subscribed to `uri`.
    ResourceUpdated { uri: String },
    /// A `notifications/*/list_changed`, for every session.
    ListChanged { method: String },
}
