//! Multi-round-trip requests (2026-07-28) by park-and-relay.
//!
//! A modern client cannot be sent a request; a handler that needs the user (or the client's LLM,
//! or its roots) makes the client call again. Other servers run the handler again from the top
//! with the answers (every tool a replayable state machine). Here the handler keeps running:
//!
//! 1. On the node that got the call (the owner), the handler runs until it can go no further
//!    without input. The driver commits a mailbox for the client's answers and answers
//!    `input_required` with every outstanding input request and a sealed `requestState`
//!    naming the owner, the mailbox, the deadline, the asked keys and a digest of the call.
//!    The handler stays parked on the mailbox.
//! 2. The retry may reach any replica. It opens the state (altered, expired, or belonging to
//!    another call: refused), checks the answers' shapes and delivers them through Raft
//!    (single use: a second delivery is refused).
//! 3. The owner wakes, hands the answers to the asks they name, and runs the handler to its
//!    next boundary: another `input_required` (with a fresh state) or the result. That outcome,
//!    with the notifications the handler sent meanwhile, goes to the retry's replica over the
//!    peer port (which waits for it there), or in memory when the retry reached the owner.
//!
//! Why the answers go through Raft and the outcome does not: an answer must reach the handler
//! whichever replica took it, exactly once, and a committed answer survives the replica that
//! took it; an outcome only matters to the one replica waiting for it, while the owner lives
//! (its handler is gone with it anyway). So a round costs two commits, as a 2025 round trip.
//! Notifications travel with the outcome rather than live: they are few and short-lived.
//! Closing the retry's stream cancels the handler on the owner (over the peer port); the
//! replica serving a retry asks the owner every few seconds whether the call still runs, so a
//! dead or cut-off owner is an error, not a hang. A client that never retries: the handler waits
//! out the elicitation or sampling timeout, then is dropped and counted (`abandoned`).

use super::TaskSupport;
use super::context::MAILBOX_GRACE;
use super::correlation::{SealedState, SealedWith, StateError};
use super::envelope::modern_error;
use super::handle::Server;
use super::outbound::OutboundSink;
use super::outbound::{Outbound, Outgoing};
use super::requests::NodePlace;
use super::round::{ModernCall, ModernClient, check_response};
use super::task_calls::extension_required;
use crate::clock::now_ms;
use crate::mailbox::{Addressee, DeliverOutcome, MailboxKey, SentMailbox, SessionTag, WaitOutcome};
use crate::protocol::jsonrpc::{ErrorObject, INTERNAL_ERROR, Message, RequestId, message_from_value};
use crate::protocol::types::{CapabilityFlags, LogLevel, RequestKind};
use futures::future::Either;
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value, json};
use sha2::{Digest, Sha256};
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio_util::sync::CancellationToken;

/// How long a replica serving a retry waits for the round's outcome: the handler's run from the
/// answers to its next boundary (or its result) must fit in it.
pub const OUTCOME_WINDOW: Duration = Duration::from_secs(600);
/// How long the last outcome of a call stays for the replica that asks for it, after the call
/// ended (the owner may finish before that replica's request arrives).
const OUTCOME_LINGER: Duration = Duration::from_secs(30);
/// How long an ended call's last outcome stays once a replica has fetched it: a fetch is not
/// proof of receipt (its reply may be lost on the way and the replica ask again; a fetch of an
/// earlier attempt whose answers were not taken may have come first), so it is not dropped at once.
const TAKEN_LINGER: Duration = Duration::from_secs(2);
/// How often the replica serving a retry asks the owner whether the call still runs.
const OWNER_CHECK_EVERY: Duration = Duration::from_secs(2);
/// Owner checks that may fail in a row before the owner is taken for gone.
const OWNER_CHECK_FAILURES: u32 = 3;
/// The pause before asking the owner for a round's outcome again after the link broke.
const OUTCOME_REFETCH_AFTER: Duration = Duration::from_millis(250);

/// SHA-256 of what identifies a call: the method, the tool or prompt name (or resource URI),
/// and the arguments (serde_json writes object keys sorted, so equal arguments digest equal).
pub(super) fn call_digest(method: &str, params: &Value) -> [u8; 32] {
    let name = params.get("name").or_else(|| params.get("uri")).and_then(Value::as_str).unwrap_or("");
    let arguments = params.get("arguments").filter(|a| !a.is_null()).cloned().unwrap_or_else(|| json!({}));
    let mut hash = Sha256::new();
    hash.update(method.as_bytes());
    hash.update([0]);
    hash.update(name.as_bytes());
    hash.update([0]);
    hash.update(arguments.to_string().as_bytes());
    hash.finalize().into()
}

/// A `tools/call`, `prompts/get` or `resources/read` to run: who asks, and where its answer goes.
pub(super) struct CallRequest {
    pub(super) client: ModernClient,
    pub(super) id: RequestId,
    /// One of `protocol::era::MRTR_METHODS`.
    pub(super) method: &'static str,
    pub(super) params: Value,
    pub(super) out: Outbound,
    /// The client closing the response.
    pub(super) cancel: CancellationToken,
}

/// What a retry delivers into a round's answers mailbox.
#[derive(Debug, Serialize, Deserialize)]
struct RoundAnswers {
    responses: Map<String, Value>,
    capabilities: CapabilityFlags,
    log_level: Option<LogLevel>,
    progress_token: Option<Value>,
}

/// The outcome of a round, for the retry that answered it: what the handler sent since, and the
/// message that ends the round (`input_required` again, the result, or an error).
#[derive(Debug, Serialize, Deserialize)]
struct RoundOutcome {
    notifications: Vec<Value>,
    last: Value,
}

/// Why a retry got no outcome.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum RetryError {
    /// Refused before anything was delivered (state, shapes): the call is untouched.
    #[error("{message}")]
    Refused { reason: &'static str, message: String },
    /// The cluster could not take the answers; nothing was consumed, the same retry may be sent again.
    #[error("the answers could not be delivered, send the retry again: {0}")]
    Unavailable(String),
    /// The replica running the call is gone, or the call ended without an outcome.
    #[error("{0}")]
    Lost(String),
}

impl RetryError {
    fn to_error_object(&self) -> ErrorObject {
        match self {
            RetryError::Refused { .. } => ErrorObject::invalid_params(self.to_string()),
            RetryError::Unavailable(_) | RetryError::Lost(_) => ErrorObject::new(INTERNAL_ERROR, self.to_string()),
        }
    }
}

impl Server {
    /// The tag binding a call's mailboxes to it (as a session's bind its requests'), under the
    /// key that sealed the call's state: the one its owner bound the mailbox with.
    fn call_tag(&self, call: u128, sealed_with: SealedWith) -> SessionTag {
        self.sealer().session_tag_with(sealed_with, &format!("mrtr:{call:032x}"))
    }

    /// Run a `tools/call`, `prompts/get` or `resources/read`: a fresh call here, or a retry
    /// that continues a call parked here or on another replica. A fresh call's future is the
    /// driver's own, not wrapped (a wrapper keeps the request again, in every parked call);
    /// a retry's is boxed.
    pub(super) fn run_call(self, call: CallRequest, place: NodePlace) -> impl Future<Output = ()> + Send + 'static {
        match call.params.get("requestState") {
            Some(Value::Null) | None => Either::Right(self.drive(call, place)),
            Some(_) => {
                drop(place);
                Either::Left(Box::pin(self.serve_retry(call)))
            }
        }
    }

    /// Answer a retry: relayed to the call's owner, or refused.
    async fn serve_retry(self, call: CallRequest) {
        let CallRequest { client, id, method, params, out, cancel } = call;
        let message = match params.get("requestState") {
            Some(Value::String(state)) => match self.relay_retry(&client, method, &params, state, &out, &cancel).await {
                Some(Ok(last)) => relabel(last, &id),
                Some(Err(e)) => {
                    tracing::debug!(error = %e, "retry refused");
                    Message::error(Some(id), e.to_error_object())
                }
                None => return,
            },
            _ => Message::error(Some(id), ErrorObject::invalid_params("requestState must be a string")),
        };
        let _ = out.send(Outgoing::Message(Box::new(message)));
    }

    /// Run a fresh call's handler here, round after round, until it ends.
    async fn drive(self, request: CallRequest, _place: NodePlace) {
        let CallRequest { client, id, method, mut params, out, cancel } = request;
        let prefilled = match params.as_object_mut().and_then(|p| p.remove("inputResponses")) {
            None | Some(Value::Null) => Map::new(),
            Some(Value::Object(answers)) => answers,
            Some(_) => {
                let error = ErrorObject::invalid_params("inputResponses must be an object");
                let _ = out.send(Outgoing::Message(Box::new(Message::error(Some(id), error))));
                return;
            }
        };
        let digest = call_digest(method, &params);
        let call_id: u128 = rand::random();
        let tag = self.call_tag(call_id, SealedWith::Current);
        // The Tasks extension: a tool that supports it, called by a client that declares it.
        let (support, started_by_handler) = if method == "tools/call" { self.task_support(&params) } else { (TaskSupport::None, false) };
        if support == TaskSupport::Required && !client.capabilities.tasks {
            let _ = out.send(Outgoing::Message(Box::new(Message::error(Some(id), extension_required()))));
            return;
        }
        let as_task = support != TaskSupport::None && client.capabilities.tasks;
        let call = Arc::new(ModernCall::new(client, prefilled, out, cancel.clone()));
        if as_task {
            call.allow_task();
        }
        let ctx = self.modern_context(call.clone(), &id, Outbound::from(call.clone()), &cancel);
        let outcomes = Registered::open(&self, call_id, &call);
        let mut handler = std::pin::pin!(std::future::IntoFuture::into_future(self.dispatch(ctx, method, params)));
        // Where the current round's outcome goes: the first request's stream (`None`), or the
        // replica serving the retry that answered round `n` (`Some(n)`).
        let mut answered: Option<u32> = None;
        let mut round = 0u32;
        let mut start_task_now = as_task && !started_by_handler;
        loop {
            if start_task_now || call.task_requested() {
                // Answered with the task once its record is committed; the handler goes on,
                // detached from the HTTP exchange, as the task.
                // Boxed, as the task's run below: rare paths a parked call makes no room for.
                match Box::pin(self.create_task()).await {
                    Ok((task, events, created)) => {
                        outcomes.end_round(
                            answered.take(),
                            &call,
                            Message::response(id.clone(), self.envelope(method, created, round > 0)),
                        );
                        call.became_task();
                        Box::pin(self.run_task(task, &call, handler.as_mut(), events, &cancel)).await;
                    }
                    Err(error) => outcomes.end_round(answered, &call, Message::error(Some(id.clone()), error)),
                }
                return;
            }
            start_task_now = false;
            tokio::select! {
                biased;
                _ = cancel.cancelled() => {
                    tracing::debug!(call = %format!("{call_id:032x}"), "call cancelled by the client");
                    return;
                }
                result = &mut handler => {
                    let message = match call.settle(result) {
                        Ok(result) => Message::response(id.clone(), self.envelope(method, result, round > 0)),
                        Err(error) => Message::error(Some(id.clone()), modern_error(error)),
                    };
                    self.metrics().mrtr_round(if message.is_response() { "complete" } else { "error" });
                    outcomes.end_round(answered, &call, message);
                    return;
                }
                _ = call.asked.notified() => {}
            }
            if call.task_requested() {
                continue;
            }
            // An answer the call cannot use (malformed, a capability missing) ends it now,
            // rather than after the client answered what else it asks.
            if let Some(error) = call.protocol_error() {
                self.metrics().mrtr_round("error");
                outcomes.end_round(answered, &call, Message::error(Some(id.clone()), modern_error(error)));
                return;
            }
            let asks = call.outstanding();
            if asks.is_empty() {
                continue;
            }
            round += 1;
            let timeout = asks.iter().map(|(_, kind, _)| self.inner.rendezvous.timeout(*kind)).max().expect("asks");
            let answers = MailboxKey::random();
            let owner = self.node_id();
            // The create's commit overlaps the client's turn, as for a 2025 request (see
            // `RequestContext::send_request`): a retry that reaches the store first is kept for
            // it. Should this call end before its answers come, the mailbox goes with it.
            let started = Instant::now();
            let mut mailbox = SentMailbox::propose(self.mailbox().clone(), answers.clone(), tag, owner, timeout + MAILBOX_GRACE).await;
            if let Some(e) = mailbox.failed_already() {
                tracing::warn!(error = %e, "multi-round-trip round not started: its mailbox could not be created");
                let error = ErrorObject::internal(format!("the server could not park this call for input: {e}"));
                outcomes.end_round(answered, &call, Message::error(Some(id.clone()), error));
                return;
            }
            let deadline_ms = now_ms() + timeout.as_millis() as u64;
            let state = SealedState {
                owner,
                call: call_id,
                round,
                answers: answers.clone(),
                deadline_ms,
                digest,
                asks: Vec::new(),
                sealed_with: SealedWith::Current,
            };
            // Built in a function of its own: nothing of it stays in this future while it parks.
            let input_required = self.input_required(method, &id, state, asks);
            self.metrics().mrtr_round("input_required");
            tracing::debug!(call = %format!("{call_id:032x}"), round, "input required; call parked");
            // Counted before the client can see it is parked.
            self.metrics().mrtr_parked(1);
            outcomes.end_round(answered.take(), &call, input_required);
            // The first request is answered; whatever the handler sends from now on goes back
            // with the outcome of the round a retry answers.
            call.buffer();
            let parked = async {
                mailbox.settled().await?;
                mailbox.wait(timeout.saturating_sub(started.elapsed())).await
            };
            let waited = tokio::select! {
                biased;
                _ = cancel.cancelled() => None,
                waited = parked => Some(waited),
            };
            self.metrics().mrtr_parked(-1);
            match waited {
                Some(Ok(WaitOutcome::Delivered(value))) => match serde_json::from_value::<RoundAnswers>(value) {
                    Ok(delivered) => {
                        call.set_client(ModernClient {
                            capabilities: delivered.capabilities,
                            log_level: delivered.log_level,
                            progress_token: delivered.progress_token,
                            ..call.client()
                        });
                        call.answer(delivered.responses);
                        // Keys the retry left out are asked again once the handler has taken
                        // the answers it got.
                        if !call.outstanding().is_empty() {
                            call.asked.notify_one();
                        }
                        answered = Some(round);
                    }
                    Err(e) => {
                        tracing::warn!(error = %e, "undecodable answers in a round's mailbox; call dropped");
                        return;
                    }
                },
                Some(Ok(other)) => {
                    self.metrics().mrtr_round("abandoned");
                    tracing::debug!(call = %format!("{call_id:032x}"), round, outcome = ?other, "no retry came in time; call dropped");
                    let _ = mailbox.delete().await;
                    return;
                }
                Some(Err(e)) => {
                    tracing::warn!(error = %e, "waiting for a retry failed; call dropped");
                    return;
                }
                None => {
                    let _ = mailbox.delete().await;
                    return;
                }
            }
        }
    }

    /// The `input_required` answer of a round: the outstanding asks, and the sealed state (with
    /// their keys and kinds).
    fn input_required(&self, method: &str, id: &RequestId, mut state: SealedState, asks: Vec<(String, RequestKind, Value)>) -> Message {
        let mut requests = Map::new();
        for (key, kind, request) in asks {
            state.asks.push((key.clone(), kind));
            requests.insert(key, request);
        }
        let mut result = Map::new();
        result.insert("resultType".into(), json!("input_required"));
        result.insert("inputRequests".into(), Value::Object(requests));
        result.insert("requestState".into(), Value::String(self.sealer().seal_state(&state)));
        Message::response(id.clone(), self.envelope(method, Value::Object(result), false))
    }

    /// Serve a retry here: check its state and answers, deliver them to the call's owner
    /// through the mailbox, and wait for the round's outcome. `None` when the client closed
    /// the retry's stream first (the call is cancelled on its owner).
    async fn relay_retry(
        &self,
        client: &ModernClient,
        method: &str,
        params: &Value,
        state: &str,
        out: &Outbound,
        cancel: &CancellationToken,
    ) -> Option<Result<Value, RetryError>> {
        let state = match self.open_retry(method, params, state) {
            Ok(state) => state,
            Err(e) => {
                if let RetryError::Refused { reason, .. } = &e {
                    self.metrics().mrtr_rejected(reason);
                }
                return Some(Err(e));
            }
        };
        let responses = match retry_answers(params, &state.asks) {
            Ok(responses) => responses,
            Err(e) => {
                self.metrics().mrtr_rejected("malformed");
                return Some(Err(e));
            }
        };
        let answers = RoundAnswers {
            responses,
            capabilities: client.capabilities,
            log_level: client.log_level,
            progress_token: client.progress_token.clone(),
        };
        let tag = self.call_tag(state.call, state.sealed_with);
        // The request for the outcome goes out while the answers are being committed: the owner
        // holds it until the round ends, so its trip is off the round trip's critical path.
        let addressee = Addressee { owner: state.owner, deadline_ms: state.deadline_ms };
        let deliver =
            self.mailbox().deliver(&state.answers, tag, Some(addressee), serde_json::to_value(answers).expect("answers serialize"));
        let fetch = self.await_outcome(&state);
        tokio::pin!(deliver, fetch);
        let mut fetched = None;
        let delivered = loop {
            tokio::select! {
                biased;
                delivered = &mut deliver => break delivered,
                outcome = &mut fetch, if fetched.is_none() => fetched = Some(outcome),
            }
        };
        let refused = |reason: &'static str, message: &str| {
            self.metrics().mrtr_rejected(reason);
            Some(Err(RetryError::Refused { reason, message: message.into() }))
        };
        match delivered {
            Ok(DeliverOutcome::Delivered) => self.metrics().mrtr_retry(state.owner == self.node_id()),
            Ok(DeliverOutcome::AlreadyDelivered) => return refused("consumed", "requestState was already used"),
            Ok(DeliverOutcome::Expired | DeliverOutcome::Deleted | DeliverOutcome::NotFound) => {
                return refused("expired", "requestState expired: the call it continues has ended; call again");
            }
            Ok(DeliverOutcome::WrongSession) => {
                return refused("tampered", "requestState is invalid (altered or not issued by this cluster)");
            }
            // The commit's reply was lost (a leader change, say) yet the round already ended with
            // these answers: they were delivered, and a resent retry would find them used.
            Err(_) if matches!(fetched, Some(Ok(_))) => self.metrics().mrtr_retry(state.owner == self.node_id()),
            Err(e) => return Some(Err(RetryError::Unavailable(e.to_string()))),
        }
        // From here the call runs again on its owner; a client leaving cancels it there.
        let mut on_leave = CancelOnLeave { server: self.clone(), owner: state.owner, call: state.call, armed: true };
        let outcome = match fetched {
            Some(outcome) => outcome,
            None => tokio::select! {
                biased;
                _ = cancel.cancelled() => return None,
                outcome = &mut fetch => outcome,
            },
        };
        on_leave.armed = false;
        let outcome = match outcome {
            Ok(outcome) => outcome,
            Err(e) => {
                self.metrics().mrtr_rejected("owner_lost");
                return Some(Err(e));
            }
        };
        for notification in outcome.notifications {
            if let Ok(message) = message_from_value(notification) {
                let _ = out.send(Outgoing::Message(Box::new(message)));
            }
        }
        Some(Ok(outcome.last))
    }

    /// Open a retry's state and check that it continues this very call.
    fn open_retry(&self, method: &str, params: &Value, state: &str) -> Result<SealedState, RetryError> {
        let state =
            self.sealer().open_state(state).map_err(|e: StateError| RetryError::Refused { reason: e.label(), message: e.to_string() })?;
        if state.digest != call_digest(method, params) {
            return Err(RetryError::Refused {
                reason: "wrong_call",
                message: "requestState belongs to another call (method, name or arguments differ)".into(),
            });
        }
        Ok(state)
    }

    /// Wait for the outcome of a round whose answers were delivered: from the owner's memory,
    /// or over the peer port; meanwhile check that the owner still runs the call.
    async fn await_outcome(&self, state: &SealedState) -> Result<RoundOutcome, RetryError> {
        let fetch = async {
            let text = if state.owner == self.node_id() {
                self.round_outcome(state.call, state.round, OUTCOME_WINDOW).await
            } else {
                match &self.inner.cluster {
                    // A broken link is not a lost owner (the owner holds the outcome): ask again
                    // until `watch_owner` says it is gone.
                    Some(cluster) => loop {
                        match cluster.round_outcome(state.owner, state.call, state.round).await {
                            Ok(text) => break text,
                            Err(e) => {
                                tracing::debug!(owner = state.owner, error = %e, "round outcome not fetched; asking again");
                                tokio::time::sleep(OUTCOME_REFETCH_AFTER).await;
                            }
                        }
                    },
                    None => None,
                }
            };
            match text {
                Some(text) => serde_json::from_str(&text).map_err(|e| RetryError::Lost(format!("the call's outcome is undecodable: {e}"))),
                None => Err(RetryError::Lost("the call ended without an outcome for this round; call again".into())),
            }
        };
        let watch_owner = async {
            let mut failures = 0;
            loop {
                tokio::time::sleep(OWNER_CHECK_EVERY).await;
                match self.call_runs(state.owner, state.call, false).await {
                    Ok(true) => failures = 0,
                    Ok(false) => failures = OWNER_CHECK_FAILURES,
                    Err(e) => {
                        failures += 1;
                        tracing::debug!(owner = state.owner, error = %e, "owner of a call not reached");
                    }
                }
                if failures >= OWNER_CHECK_FAILURES {
                    return;
                }
            }
        };
        tokio::select! {
            biased;
            outcome = fetch => outcome,
            () = watch_owner => Err(RetryError::Lost(format!("the replica running this call (node {}) is gone; call again", state.owner))),
        }
    }

    /// The outcome of round `round` of call `call`, which runs (or just ran) here: waited for up
    /// to `within`. `None` when no such call runs here, or it ended without one.
    pub async fn round_outcome(&self, call: u128, round: u32, within: Duration) -> Option<String> {
        let entry = self.inner.modern_calls.lock().unwrap().get(&call)?.clone();
        let outcome = tokio::time::timeout(within, entry.outcome.wait(round)).await.ok()??;
        // Fetched: a call that has ended leaves the registry soon rather than after the linger.
        if entry.ended.load(std::sync::atomic::Ordering::Acquire) {
            self.forget_call_after(call, TAKEN_LINGER);
        }
        Some(outcome.to_string())
    }

    /// The task support of the tool a `tools/call` names (none for an unknown tool, which the
    /// handler refuses), and whether its handler starts the task itself.
    fn task_support(&self, params: &Value) -> (TaskSupport, bool) {
        let name = params.get("name").and_then(Value::as_str).unwrap_or_default();
        let offerings = self.inner.offerings.read().unwrap();
        offerings.tools.iter().find(|t| t.name == name).map(|t| t.task_support_of()).unwrap_or((TaskSupport::None, false))
    }

    /// Whether the call runs on `owner` (here, or asked over the peer port), cancelling it first
    /// when `cancel`.
    async fn call_runs(&self, owner: u64, call: u128, cancel: bool) -> Result<bool, String> {
        if owner == self.node_id() {
            return Ok(self.modern_call(call, cancel));
        }
        match &self.inner.cluster {
            Some(cluster) => cluster.call_state(owner, call, cancel).await,
            None => Ok(false),
        }
    }

    /// Drop an ended call from the registry once `after` has passed (at once outside a runtime).
    fn forget_call_after(&self, call: u128, after: Duration) {
        if tokio::runtime::Handle::try_current().is_err() {
            self.inner.modern_calls.lock().unwrap().remove(&call);
            return;
        }
        let server = self.clone();
        tokio::spawn(async move {
            tokio::time::sleep(after).await;
            server.inner.modern_calls.lock().unwrap().remove(&call);
        });
    }

    /// The 2026-07-28 calls this node holds: running, or ended with an outcome not yet fetched
    /// (or fetched a moment ago).
    pub fn modern_calls_held(&self) -> usize {
        self.inner.modern_calls.lock().unwrap().len()
    }

    /// Whether the 2026-07-28 call `call` runs on this node (or just ended, its last outcome
    /// not fetched yet), cancelling it first when `cancel`.
    pub fn modern_call(&self, call: u128, cancel: bool) -> bool {
        let Some(entry) = self.inner.modern_calls.lock().unwrap().get(&call).cloned() else { return false };
        if cancel && !entry.cancel.is_cancelled() {
            tracing::debug!(call = %format!("{call:032x}"), "call cancelled: the client closed its retry");
            entry.cancel.cancel();
        }
        true
    }
}

/// A call's entry in this node's registry: how to cancel it, and where its round outcomes wait
/// for the replica serving each retry. Forgotten a while after the call ends (its last outcome
/// may not have been fetched yet).
struct Registered {
    server: Server,
    id: u128,
    call: Arc<ModernCall>,
    /// The last outcome went to a retry's replica, which may not have fetched it yet.
    outcome_pending: std::sync::atomic::AtomicBool,
}

impl Registered {
    fn open(server: &Server, id: u128, call: &Arc<ModernCall>) -> Self {
        server.inner.modern_calls.lock().unwrap().insert(id, call.clone());
        Registered { server: server.clone(), id, call: call.clone(), outcome_pending: Default::default() }
    }

    /// Send the message that ends a round: on the first request's stream (`answered` is
    /// `None`), or, with the notifications kept since the retry, to the replica serving the
    /// retry that answered round `answered`.
    fn end_round(&self, answered: Option<u32>, call: &ModernCall, last: Message) {
        let Some(round) = answered else {
            debug_assert!(call.is_streaming());
            let _ = call.send(Outgoing::Message(Box::new(last)));
            return;
        };
        let outcome = RoundOutcome { notifications: call.take().into_iter().map(Message::into_value).collect(), last: last.into_value() };
        let text: Arc<str> = serde_json::to_string(&outcome).expect("outcomes serialize").into();
        self.call.outcome.set(round, text);
        self.outcome_pending.store(true, std::sync::atomic::Ordering::Release);
    }
}

impl Drop for Registered {
    /// A call whose last outcome nobody waits for leaves the registry at once; one whose last
    /// outcome went to a retry's replica stays until that replica fetched it, or a while.
    fn drop(&mut self) {
        self.call.ended.store(true, std::sync::atomic::Ordering::Release);
        if !self.outcome_pending.load(std::sync::atomic::Ordering::Acquire) {
            self.server.inner.modern_calls.lock().unwrap().remove(&self.id);
            return;
        }
        let linger = if self.call.outcome.taken() { TAKEN_LINGER } else { OUTCOME_LINGER };
        self.server.forget_call_after(self.id, linger);
    }
}

/// Cancels the call on its owner when the retry serving it is dropped (the client closed it).
struct CancelOnLeave {
    server: Server,
    owner: u64,
    call: u128,
    armed: bool,
}

impl Drop for CancelOnLeave {
    fn drop(&mut self) {
        if !self.armed {
            return;
        }
        let (server, owner, call) = (self.server.clone(), self.owner, self.call);
        tokio::spawn(async move {
            if let Err(e) = server.call_runs(owner, call, true).await {
                tracing::debug!(owner, error = %e, "cancellation of a call not relayed to its owner");
            }
        });
    }
}

/// The retry's answers to the keys its round asked, each checked for the shape its kind takes;
/// answers to other keys are ignored.
fn retry_answers(params: &Value, asks: &[(String, RequestKind)]) -> Result<Map<String, Value>, RetryError> {
    let malformed = |message: String| RetryError::Refused { reason: "malformed", message };
    let given = match params.get("inputResponses") {
        None | Some(Value::Null) => return Ok(Map::new()),
        Some(Value::Object(given)) => given,
        Some(_) => return Err(malformed("inputResponses must be an object".into())),
    };
    let mut answers = Map::new();
    for (key, kind) in asks {
        if let Some(answer) = given.get(key) {
            check_response(*kind, answer).map_err(|why| malformed(format!("inputResponses[{key:?}] is malformed: {why}")))?;
            answers.insert(key.clone(), answer.clone());
        }
    }
    Ok(answers)
}

/// The owner's last message of a round, answered under the retry's own id.
fn relabel(last: Value, id: &RequestId) -> Message {
    match message_from_value(last) {
        Ok(Message::Response { result, .. }) => Message::response(id.clone(), result),
        Ok(Message::Error { error, .. }) => Message::error(Some(id.clone()), error),
        _ => Message::error(Some(id.clone()), ErrorObject::internal("the call's outcome is not a response")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_digest_names_the_call_whatever_the_order_of_arguments() {
        let a = json!({"name": "t", "arguments": {"x": 1, "y": {"b": 2, "a": 1}}, "requestState": "s1", "inputResponses": {}});
        let b: Value = serde_json::from_str(r#"{"arguments": {"y": {"a": 1, "b": 2}, "x": 1}, "name": "t"}"#).unwrap();
        assert_eq!(call_digest("tools/call", &a), call_digest("tools/call", &b));
        assert_ne!(call_digest("tools/call", &a), call_digest("prompts/get", &a));
        assert_ne!(call_digest("tools/call", &a), call_digest("tools/call", &json!({"name": "t", "arguments": {"x": 2}})));
        assert_eq!(call_digest("tools/call", &json!({"name": "t"})), call_digest("tools/call", &json!({"name": "t", "arguments": null})));
        // Argument key order: pinned, since the digest relies on serde_json sorting keys.
        assert_eq!(json!({"b": 1, "a": 2}).to_string(), r#"{"a":2,"b":1}"#);
    }

    #[test]
    fn retry_answers_keep_the_asked_keys_and_check_their_shapes() {
        let asks = vec![("name".to_string(), RequestKind::Elicitation), ("roots".to_string(), RequestKind::Roots)];
        let params = json!({"inputResponses": {"name": {"action": "accept", "content": {"n": "x"}}, "extra": 1}});
        let answers = retry_answers(&params, &asks).unwrap();
        assert_eq!(answers.keys().collect::<Vec<_>>(), vec!["name"]);
        assert!(retry_answers(&json!({"inputResponses": {"name": 12345}}), &asks).is_err());
        assert!(retry_answers(&json!({"inputResponses": [1]}), &asks).is_err());
        assert!(retry_answers(&json!({"inputResponses": null}), &asks).unwrap().is_empty());
    }
}
