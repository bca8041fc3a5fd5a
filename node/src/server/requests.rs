//! A request's life on this node: spawned with its cancellation token, answered on its
//! [`Outbound`] unless the client cancelled it first; cancellation from the client, here or
//! relayed from the replica it reached.

use super::context::{RequestContext, RequestScope};
use super::handle::Server;
use super::outbound::{Outbound, Outgoing};
use crate::protocol::jsonrpc::{Message, RequestId};
use crate::session::{SessionId, SessionRecord};
use serde_json::{Value, json};
use std::sync::Arc;
use tokio_util::sync::CancellationToken;

impl Server {
    /// Start handling a request. Related messages and finally the response go to `out`; a
    /// cancelled request sends no response, and `out` is dropped either way.
    /// `session` is the store's shared record: the request (and a call parked for minutes)
    /// holds a pointer to it, not a copy.
    pub fn spawn_request(&self, session: Arc<SessionRecord>, id: RequestId, method: String, params: Option<Value>, out: Outbound) {
        let server = self.clone();
        let local = self.local(&session.id);
        let cancel = CancellationToken::new();
        local.running.lock().unwrap().insert(id.clone(), cancel.clone());
        let progress_token = params.as_ref().and_then(|p| p.pointer("/_meta/progressToken")).cloned();
        let ctx = RequestContext::new(RequestScope {
            rendezvous: self.inner.rendezvous.clone(),
            session,
            local: local.clone(),
            request_id: id.clone(),
            progress_token,
            out,
            cancel,
        });
        tokio::spawn(async move {
            // Biased: once the client cancelled, no response goes out even if the handler
            // finished in the same instant.
            let response = tokio::select! {
                biased;
                _ = ctx.cancelled() => None,
                r = server.dispatch(ctx.clone(), &method, params.unwrap_or_else(|| json!({}))) => Some(r),
            };
            local.running.lock().unwrap().remove(&id);
            match response {
                Some(Ok(result)) => {
                    let _ = ctx.out().send(Outgoing::Message(Box::new(Message::response(id, result))));
                }
                Some(Err(error)) => {
                    let _ = ctx.out().send(Outgoing::Message(Box::new(Message::error(Some(id), error))));
                }
                None => tracing::debug!(request = %id, "request cancelled by the client"),
            }
        });
    }

    /// Handle a notification from the client.
    pub fn handle_notification(&self, session: &SessionRecord, method: &str, params: Option<Value>) {
        if method == "notifications/cancelled" {
            let Some(id) = params.and_then(|p| p.get("requestId").cloned()).and_then(|v| serde_json::from_value::<RequestId>(v).ok())
            else {
                return;
            };
            if !self.cancel_local(&session.id, &id)
                && let Some(cluster) = &self.inner.cluster
            {
                cluster.cancel_elsewhere(&session.id, &id);
            }
        }
    }

    /// Cancel a request of `session` if it runs on this node; `true` when it did.
    pub fn cancel_local(&self, session: &SessionId, request: &RequestId) -> bool {
        let local = self.inner.local.get(session);
        let token = local.and_then(|l| l.running.lock().unwrap().get(request).cloned());
        match token {
            Some(token) => {
                tracing::info!(session = %session, request = %request, "request cancelled by the client");
                token.cancel();
                true
            }
            None => false,
        }
    }
}
