//! The client's answers to server-to-client requests: opened, checked and delivered through
//! the mailbox, wherever the waiting handler runs.

use super::handle::Server;
use crate::mailbox::{Addressee, DeliverOutcome, MailboxError};
use crate::protocol::jsonrpc::Message;
use crate::session::SessionRecord;

/// What became of a client's answer. Only [`AnswerOutcome::Unavailable`] is the server's
/// fault; [`AnswerOutcome::TooLarge`] is the client's to fix; the others are final and the
/// client is not told which (the spec has the server accept any response).
#[derive(Debug)]
pub enum AnswerOutcome {
    /// Committed: it reaches the waiting handler while its owner lives.
    Delivered,
    /// Not ours, forged, late, a duplicate, or for a finished request: dropped and counted.
    Dropped(&'static str),
    /// The delivery could not be committed (no quorum, write timeout): nothing was stored, and
    /// the same answer sent again may still be delivered.
    Unavailable(MailboxError),
    /// Larger than the cluster replicates (`--max-entry-bytes`): refused before it was
    /// proposed, nothing stored; the handler still waits, and a smaller answer to the same
    /// request may still be delivered.
    TooLarge { size: usize, limit: usize },
}

impl Server {
    /// Deliver the client's answer to a server-to-client request, whichever node waits for it.
    pub async fn handle_client_response(&self, session: &SessionRecord, message: Message) -> AnswerOutcome {
        let metrics = &self.inner.rendezvous.metrics;
        let id = match &message {
            Message::Response { id, .. } | Message::Error { id: Some(id), .. } => id.clone(),
            _ => {
                metrics.orphan("no_id");
                return AnswerOutcome::Dropped("no_id");
            }
        };
        let (key, sealed_with, addressee) = match self.inner.rendezvous.sealer.open_request(&id, session.id.as_str()) {
            // Kept for the owner should it reach the store before the create (early delivery).
            Ok(sealed) => (sealed.key, sealed.sealed_with, Addressee { owner: sealed.owner, deadline_ms: sealed.deadline_ms }),
            Err(e) => {
                tracing::debug!(session = %session.id, reason = e.label(), "client answer refused: {e}");
                metrics.orphan(e.label());
                return AnswerOutcome::Dropped(e.label());
            }
        };
        // Under the key that sealed the id, which its owner also bound the mailbox with.
        let tag = self.inner.rendezvous.sealer.session_tag_with(sealed_with, session.id.as_str());
        match self.inner.rendezvous.mailbox.deliver(&key, tag, Some(addressee), message.into_value()).await {
            Ok(DeliverOutcome::Delivered) => {
                tracing::debug!(%key, session = %session.id, node = self.node_id(), "client answer delivered");
                metrics.answer_delivered();
                AnswerOutcome::Delivered
            }
            Ok(outcome) => {
                tracing::debug!(%key, session = %session.id, outcome = outcome.label(), "client answer dropped");
                metrics.orphan(outcome.label());
                AnswerOutcome::Dropped(outcome.label())
            }
            Err(MailboxError::TooLarge { size, limit }) => {
                tracing::debug!(%key, session = %session.id, size, limit, "client answer refused: too large to replicate");
                AnswerOutcome::TooLarge { size, limit }
            }
            Err(e) => {
                tracing::warn!(%key, error = %e, "client answer not committed; the client is told to retry");
                metrics.orphan("unavailable");
                AnswerOutcome::Unavailable(e)
            }
        }
    }
}
