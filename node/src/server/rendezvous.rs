//! What a handler's server-to-client requests go through: the mailbox they park on, the key
//! their ids are sealed with, the timeouts, and the metrics of their waits. Shared by the server
//! and every request context (a parked call holds one pointer to it).

use super::correlation::IdSealer;
use super::link::Notice;
use super::schema::SchemaCache;
use crate::mailbox::{Mailbox, NodeId};
use crate::metrics::Metrics;
use crate::protocol::types::RequestKind;
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

pub(crate) struct Rendezvous {
    /// The node that owns the calls parked here (sealed into their ids).
    pub(crate) node_id: NodeId,
    pub(crate) mailbox: Arc<dyn Mailbox>,
    pub(crate) sealer: Arc<IdSealer>,
    pub(crate) metrics: Arc<Metrics>,
    pub(crate) elicitation_timeout: Duration,
    /// Elicitation schemas, compiled once for every call that asks with them.
    pub(crate) schemas: SchemaCache,
    pub(crate) sampling_timeout: Duration,
    /// Notices handlers announce (a list they changed); the server publishes them to every
    /// replica's streams.
    pub(crate) announcements: mpsc::UnboundedSender<Notice>,
    /// Cancelled when this node stops with calls still parked (see [`super::Server::drain`]):
    /// each ends with [`super::ClientRequestError::NodeStopping`] instead of waiting on.
    pub(crate) stopping: CancellationToken,
}

impl Rendezvous {
    pub(crate) fn timeout(&self, kind: RequestKind) -> Duration {
        match kind {
            RequestKind::Elicitation => self.elicitation_timeout,
            // Roots are answered by the client itself, like a sampling request by its LLM.
            RequestKind::Sampling | RequestKind::Roots => self.sampling_timeout,
        }
    }
}
