//! The client's answers to server-to-client requests: opened, checked and delivered through
//! the mailbox, wherever the waiting handler runs.

use super::handle::Server;
use crate::mailbox::DeliverOutcome;
use crate::protocol::jsonrpc::Message;
use crate::session::SessionRecord;

impl Server {
    /// Deliver the client's answer to a server-to-client request. Answers that are not ours, or
    /// are late or duplicate, are dropped and counted; the client is never told.
    pub async fn handle_client_response(&self, session: &SessionRecord, message: Message) {
        let id = match &message {
            Message::Response { id, .. } | Message::Error { id: Some(id), .. } => id.clone(),
            _ => return self.inner.rendezvous.metrics.orphan("no_id"),
        };
        let key = match self.inner.rendezvous.sealer.open_request(&id, session.id.as_str(), crate::clock::now_ms()) {
            Ok(sealed) => sealed.key,
            Err(e) => {
                tracing::info!(session = %session.id, reason = e.label(), "client answer refused: {e}");
                return self.inner.rendezvous.metrics.orphan(e.label());
            }
        };
        match self.inner.rendezvous.mailbox.deliver(&key, message.to_value()).await {
            Ok(DeliverOutcome::Delivered) => {
                tracing::info!(%key, session = %session.id, node = self.node_id(), "client answer delivered");
                self.inner.rendezvous.metrics.answer_delivered();
            }
            Ok(outcome) => {
                tracing::info!(%key, session = %session.id, outcome = outcome.label(), "client answer dropped");
                self.inner.rendezvous.metrics.orphan(outcome.label());
            }
            Err(e) => {
                tracing::warn!(%key, error = %e, "client answer could not be delivered");
                self.inner.rendezvous.metrics.orphan("unavailable");
            }
        }
    }
}
