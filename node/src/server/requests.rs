//! A request's life on this node: spawned with its cancellation token, answered on its
//! [`Outbound`] unless the client cancelled it first; cancellation from the client, here or
//! relayed from the replica it reached.

use super::context::{Caller, RequestContext, RequestScope};
use super::dispatch::Dispatched;
use super::handle::Server;
use super::local::LocalSession;
use super::outbound::{Outbound, Outgoing};
use super::round::ModernCall;
use crate::protocol::jsonrpc::{ErrorObject, LIMIT_REACHED, Message, RequestId};
use crate::session::{SessionId, SessionRecord};
use serde_json::{Value, json};
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};
use tokio_util::sync::CancellationToken;

/// How often a drain looks whether the running requests have ended.
const DRAIN_POLL: Duration = Duration::from_millis(20);
/// How long the calls a drain ended get to send their error responses.
const DRAIN_FLUSH: Duration = Duration::from_secs(2);

/// A running request's places under the session's and the node's limits, given back when the
/// request's task ends (this is dropped with it, however it ends).
struct Admitted {
    server: Server,
    local: Arc<LocalSession>,
}

impl Drop for Admitted {
    fn drop(&mut self) {
        self.local.in_flight.fetch_sub(1, Ordering::AcqRel);
        self.server.inner.in_flight.fetch_sub(1, Ordering::AcqRel);
    }
}

/// Send a request's answer on its outbound.
fn respond(ctx: &RequestContext, id: RequestId, answer: Result<Value, ErrorObject>) {
    let message = match answer {
        Ok(result) => Message::response(id, result),
        Err(error) => Message::error(Some(id), error),
    };
    let _ = ctx.out().send(Outgoing::Message(Box::new(message)));
}

/// A place among the node's running requests, given back when the request ends.
pub(super) struct NodePlace(Server);

impl Drop for NodePlace {
    fn drop(&mut self) {
        self.0.inner.in_flight.fetch_sub(1, Ordering::AcqRel);
    }
}

/// Take a place in `counter` if fewer than `max` are taken.
fn take_place(counter: &AtomicUsize, max: usize) -> bool {
    counter.fetch_update(Ordering::AcqRel, Ordering::Acquire, |n| (n < max).then_some(n + 1)).is_ok()
}

/// Why a request was not started.
#[derive(Debug, Clone, Copy, thiserror::Error)]
pub(super) enum Refused {
    #[error("this session has {0} requests running on this node, its limit (--max-requests-per-session); retry when one ends")]
    Session(usize),
    #[error("this node runs {0} requests, its limit (--max-requests-per-node); retry later")]
    Node(usize),
}

impl Refused {
    pub(super) fn label(self) -> &'static str {
        match self {
            Refused::Session(_) => "requests_per_session",
            Refused::Node(_) => "requests_per_node",
        }
    }

    pub(super) fn to_error_object(self) -> ErrorObject {
        let max = match self {
            Refused::Session(max) | Refused::Node(max) => max,
        };
        ErrorObject::new(LIMIT_REACHED, self.to_string()).with_data(json!({"limit": self.label(), "max": max}))
    }
}

impl Server {
    /// Start handling a request. Related messages and finally the response go to `out`; a
    /// cancelled request sends no response, and `out` is dropped either way.
    /// `session` is the store's shared record: the request (and a call parked for minutes)
    /// holds a pointer to it, not a copy.
    ///
    /// Beyond the session's or the node's limit of running requests (parked calls count), the
    /// request is answered with a -32000 error at once and nothing runs.
    pub fn spawn_request(&self, session: Arc<SessionRecord>, id: RequestId, method: String, params: Option<Value>, out: Outbound) {
        let local = self.local(&session.id);
        let admitted = match self.admit(&local) {
            Ok(admitted) => admitted,
            Err(refused) => {
                self.metrics().limit_refused(refused.label());
                tracing::debug!(session = %session.id, request = %id, %method, limit = refused.label(), "request refused: {refused}");
                let _ = out.send(Outgoing::Message(Box::new(Message::error(Some(id), refused.to_error_object()))));
                return;
            }
        };
        let cancel = CancellationToken::new();
        let progress_token = params.as_ref().and_then(|p| p.pointer("/_meta/progressToken")).cloned().map(Box::new);
        let ctx = RequestContext::new(RequestScope {
            rendezvous: self.inner.rendezvous.clone(),
            caller: Caller::Session { local: local.clone(), record: session, progress_token },
            request_id: id.clone(),
            out,
            cancel: cancel.clone(),
        });
        let work = match self.dispatch(ctx.clone(), &method, params.unwrap_or_else(|| json!({}))) {
            Dispatched::Ready(answer) => {
                drop(admitted);
                return respond(&ctx, id, answer);
            }
            Dispatched::Running(work) => work,
        };
        local.running.lock().unwrap().insert(id, cancel);
        // The task keeps the handler's future and what it answers with, nothing of the request
        // (its id is the context's): small enough for tokio's 256-byte task cell, not 384.
        let task = async move {
            // Biased: once the client cancelled, no response goes out even if the handler
            // finished in the same instant.
            let answer = tokio::select! {
                biased;
                () = ctx.cancelled() => None,
                answer = work => Some(answer),
            };
            let id = ctx.request_id();
            admitted.local.running.lock().unwrap().remove(id);
            // Its places are free before the client can see the response (if the task is
            // dropped instead, with the runtime, they go with it).
            drop(admitted);
            match answer {
                Some(answer) => respond(&ctx, id.clone(), answer),
                None => tracing::debug!(request = %id, "request cancelled by the client"),
            }
        };
        tokio::spawn(task);
    }

    /// A place for one more request of `local`'s session, within both limits.
    fn admit(&self, local: &Arc<LocalSession>) -> Result<Admitted, Refused> {
        let config = &self.inner.config;
        if !take_place(&local.in_flight, config.max_requests_per_session) {
            return Err(Refused::Session(config.max_requests_per_session));
        }
        if !take_place(&self.inner.in_flight, config.max_requests_per_node) {
            local.in_flight.fetch_sub(1, Ordering::AcqRel);
            return Err(Refused::Node(config.max_requests_per_node));
        }
        Ok(Admitted { server: self.clone(), local: local.clone() })
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
                tracing::debug!(session = %session, request = %request, "request cancelled by the client");
                token.cancel();
                true
            }
            None => false,
        }
    }
}

impl Server {
    /// Requests running on this node, parked ones included.
    pub fn running_requests(&self) -> usize {
        self.inner.in_flight.load(Ordering::Acquire)
    }

    /// Let the running requests end before this node stops: wait up to `grace` for them (new
    /// ones are still taken meanwhile: the load balancer needs a moment to notice this replica
    /// is not ready), then end every call still parked with
    /// [`ClientRequestError::NodeStopping`](super::ClientRequestError::NodeStopping) (its
    /// client gets that error, not a hang) and give their responses a moment to go out.
    /// Returns how many requests were still running at the end of `grace`.
    pub async fn drain(&self, grace: Duration) -> usize {
        let deadline = Instant::now() + grace;
        while self.running_requests() > 0 && Instant::now() < deadline {
            tokio::time::sleep(DRAIN_POLL).await;
        }
        let left = self.running_requests();
        if left > 0 {
            tracing::warn!(left, grace_ms = grace.as_millis() as u64, "calls still running when the drain ran out; ending them");
            self.inner.rendezvous.stopping.cancel();
            let flushed = Instant::now() + DRAIN_FLUSH;
            while self.running_requests() > 0 && Instant::now() < flushed {
                tokio::time::sleep(DRAIN_POLL).await;
            }
        }
        left
    }

    pub(super) fn node_place(&self) -> Result<NodePlace, Refused> {
        let max = self.inner.config.max_requests_per_node;
        let taken = self.inner.in_flight.fetch_update(Ordering::AcqRel, Ordering::Acquire, |n| (n < max).then_some(n + 1));
        taken.map(|_| NodePlace(self.clone())).map_err(|_| Refused::Node(max))
    }

    /// A context for a modern request whose messages go to `out`.
    pub(super) fn modern_context(
        &self,
        call: Arc<ModernCall>,
        id: &RequestId,
        out: Outbound,
        cancel: &CancellationToken,
    ) -> RequestContext {
        RequestContext::new(RequestScope {
            rendezvous: self.inner.rendezvous.clone(),
            caller: Caller::Modern(call),
            request_id: id.clone(),
            out,
            cancel: cancel.clone(),
        })
    }
}
