//! Server notifications not tied to a request (`list_changed`, `resources/updated`), fanned
//! out to the standalone streams of every replica, and what the server asks of the other
//! replicas.

use super::Outgoing;
use super::handle::Server;
use super::local::LocalSession;
use crate::protocol::jsonrpc::{Message, RequestId};
use crate::session::SessionId;
use serde_json::json;
use std::sync::Arc;

/// What the server asks of the other replicas, when there are any.
pub trait ClusterLink: Send + Sync {
    /// The client cancelled a request this node is not running: tell the replica that is.
    fn cancel_elsewhere(&self, session: &SessionId, request: &RequestId);
    /// A notification for standalone streams: the other replicas deliver it to theirs.
    fn notify_elsewhere(&self, notice: &Notice);
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

impl Server {
    /// Tell subscribed sessions that a resource changed (`notifications/resources/updated`),
    /// on every replica.
    pub fn notify_resource_updated(&self, uri: &str) {
        self.publish(Notice::ResourceUpdated { uri: uri.to_string() });
    }

    pub(super) fn notify_all(&self, method: &str) {
        self.publish(Notice::ListChanged { method: method.to_string() });
    }

    fn publish(&self, notice: Notice) {
        if let Some(cluster) = &self.inner.cluster {
            cluster.notify_elsewhere(&notice);
        }
        self.deliver_notice(notice);
    }

    /// Deliver a notice to the standalone streams attached to this node.
    pub fn deliver_notice(&self, notice: Notice) {
        let attached: Vec<(SessionId, Arc<LocalSession>)> = self.inner.local.with_notifier();
        if attached.is_empty() {
            return;
        }
        let server = self.clone();
        tokio::spawn(async move {
            for (id, local) in attached {
                let message = match &notice {
                    Notice::ListChanged { method } => Message::notification(method.clone(), json!({})),
                    Notice::ResourceUpdated { uri } => match server.inner.sessions.get(&id).await {
                        Ok(Some(record)) if record.subscriptions.contains(uri) => {
                            Message::notification("notifications/resources/updated", json!({"uri": uri}))
                        }
                        _ => continue,
                    },
                };
                notify(&local, message);
            }
        });
    }
}

fn notify(session: &LocalSession, message: Message) {
    if let Some(out) = session.notifier.lock().unwrap().as_ref() {
        let _ = out.send(Outgoing::Message(Box::new(message)));
    }
}
