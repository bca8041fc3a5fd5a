//! The context a handler runs with: progress, logging, cancellation, and server-to-client
//! requests (`elicit`, `sample`) correlated through the mailbox.
//!
//! Handlers never see how the answer arrives (on the session's stream and back through the
//! mailbox, on this node or another, or as the input response of a 2026-07-28 retry); they
//! await a typed result.

use super::correlation;
use super::link::Notice;
use super::local::LocalSession;
use super::outbound::{Outbound, Outgoing};
use super::rendezvous::Rendezvous;
use super::round::{AskError, ModernCall};
use super::schema::validation_errors;
use crate::mailbox::{MailboxError, MailboxKey, SentMailbox, WaitOutcome};
use crate::protocol::json_text::JsonText;
use crate::protocol::jsonrpc::{ErrorObject, MISSING_REQUIRED_CLIENT_CAPABILITY, Message, RequestId};
use crate::protocol::types::{
    CapabilityFlags, CreateMessageParams, CreateMessageResult, ElicitAction, ElicitResult, ListRootsResult, LogLevel, ProtocolVersion,
    RequestKind,
};
use crate::session::SessionRecord;
use futures::FutureExt;
use futures::future::Either;
use serde_json::{Map, Value, json};
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio_util::sync::CancellationToken;

/// Why a server-to-client request did not produce a usable answer.
#[derive(Debug, thiserror::Error)]
pub enum ClientRequestError {
    #[error("the client did not declare the {0} capability")]
    CapabilityMissing(&'static str),
    #[error("{kind} request timed out after {after:?} without an answer")]
    Timeout { kind: RequestKind, after: Duration },
    #[error("the client answered the {kind} request with error {}: {}", .error.code, .error.message)]
    ClientError { kind: RequestKind, error: ErrorObject },
    #[error("the client's answer is malformed: {0}")]
    MalformedAnswer(String),
    #[error("accepted elicitation content does not match the requested schema: {0}")]
    InvalidContent(String),
    #[error("the requested elicitation schema is not a flat object of primitive fields: {0}")]
    InvalidSchema(String),
    #[error("the request was cancelled")]
    Cancelled,
    #[error("the client's stream is closed")]
    ClientGone,
    #[error("the server replica running this call is shutting down before the answer came; call the tool again")]
    NodeStopping,
    #[error(transparent)]
    Mailbox(#[from] MailboxError),
}

/// Extra time a mailbox outlives its waiter's timeout, so the owner's own expiry (with its
/// `notifications/cancelled`) always comes first.
pub const MAILBOX_GRACE: Duration = Duration::from_secs(5);

/// What a handler runs with. One pointer: every layer between a request's task and its
/// handler keeps a context in its future, and those futures stay in memory while it parks.
#[derive(Clone)]
pub struct RequestContext {
    scope: Arc<RequestScope>,
}

pub(super) struct RequestScope {
    pub(super) rendezvous: Arc<Rendezvous>,
    pub(super) caller: Caller,
    pub(super) request_id: RequestId,
    pub(super) out: Outbound,
    pub(super) cancel: CancellationToken,
}

/// Who a request came from.
pub(super) enum Caller {
    /// A request in an initialized session (2025-11-25 and before).
    Session {
        /// This node's entry of the session (its log level, set here ahead of the record).
        local: Arc<LocalSession>,
        record: Arc<SessionRecord>,
        /// Boxed: most requests ask for no progress, and every running one holds this.
        progress_token: Option<Box<Value>>,
    },
    /// A stateless request (2026-07-28): what the client declared comes with each request.
    Modern(Arc<ModernCall>),
}

impl RequestContext {
    pub(super) fn new(scope: RequestScope) -> Self {
        RequestContext { scope: Arc::new(scope) }
    }
    pub(crate) fn out(&self) -> &Outbound {
        &self.scope.out
    }
    /// The session of a legacy request; `None` for a 2026-07-28 request, which has none.
    pub fn session(&self) -> Option<&SessionRecord> {
        match &self.scope.caller {
            Caller::Session { record, .. } => Some(record),
            Caller::Modern(_) => None,
        }
    }
    /// The protocol revision of the request.
    pub fn protocol_version(&self) -> ProtocolVersion {
        match &self.scope.caller {
            Caller::Session { record, .. } => record.protocol_version,
            Caller::Modern(call) => call.client().version,
        }
    }
    /// What the client can do: declared at `initialize`, or in this request's `_meta` (the
    /// latest retry's, in a multi-round-trip call).
    pub fn capabilities(&self) -> CapabilityFlags {
        match &self.scope.caller {
            Caller::Session { record, .. } => record.capabilities,
            Caller::Modern(call) => call.client().capabilities,
        }
    }
    pub fn request_id(&self) -> &RequestId {
        &self.scope.request_id
    }
    /// The `_meta.progressToken` of the request, if the client asked for progress (in a
    /// multi-round-trip call, the token of the retry being answered).
    pub fn progress_token(&self) -> Option<Value> {
        match &self.scope.caller {
            Caller::Session { progress_token, .. } => progress_token.as_deref().cloned(),
            Caller::Modern(call) => call.client().progress_token,
        }
    }
    /// Resolves when the client cancels this request. The token's own future, not an `async
    /// fn` around it (one more layer in every parked call's task).
    pub fn cancelled(&self) -> impl Future<Output = ()> + Send + '_ {
        self.scope.cancel.cancelled()
    }
    pub fn is_cancelled(&self) -> bool {
        self.scope.cancel.is_cancelled()
    }

    fn send(&self, msg: Message) -> Result<(), ClientRequestError> {
        self.scope.out.send(Outgoing::Message(Box::new(msg))).map_err(|_| ClientRequestError::ClientGone)
    }

    /// Send `notifications/progress` if the client asked for progress on this request.
    pub fn progress(&self, progress: f64, total: Option<f64>, message: Option<&str>) {
        let Some(token) = self.progress_token() else { return };
        let mut params = json!({"progressToken": token, "progress": progress});
        if let Some(total) = total {
            params["total"] = json!(total);
        }
        if let Some(message) = message {
            params["message"] = json!(message);
        }
        let _ = self.send(Message::notification("notifications/progress", params));
    }

    /// Send `notifications/message` if `level` is at or above the session's level (in the
    /// 2026-07-28 era: the request's `_meta` log level; without one, nothing is sent).
    pub fn log(&self, level: LogLevel, logger: Option<&str>, data: Value) {
        let threshold = match &self.scope.caller {
            Caller::Session { local, record, .. } => Some(local.log_level(record)),
            Caller::Modern(call) => call.client().log_level,
        };
        if threshold.is_none_or(|threshold| level < threshold) {
            return;
        }
        let mut params = json!({"level": level, "data": data});
        if let Some(logger) = logger {
            params["logger"] = json!(logger);
        }
        let _ = self.send(Message::notification("notifications/message", params));
    }

    /// Continue as a task (the Tasks extension): when this call may become one (a 2026-07-28
    /// client that declared the extension, a tool that supports it), the client is answered
    /// with the task now and the handler goes on detached; otherwise nothing happens. For tools
    /// marked `task_started_by_handler`, which ask what they need first.
    pub async fn start_task(&self) {
        if let Caller::Modern(call) = &self.scope.caller {
            call.start_task().await;
        }
    }

    /// Tell every client that listens, on every replica: a list changed
    /// (`notifications/tools/list_changed`, …) or a resource was updated. For what the server
    /// cannot see change by itself (a list computed from outside data).
    pub fn announce(&self, notice: Notice) {
        let _ = self.scope.rendezvous.announcements.send(notice);
    }

    /// End the HTTP response carrying this request's stream; the client reconnects with
    /// `Last-Event-ID` and receives what followed (SSE polling, SEP-1699). Nothing in the
    /// 2026-07-28 era, whose streams cannot be resumed.
    pub fn close_sse_stream(&self) {
        if matches!(self.scope.caller, Caller::Session { .. }) {
            let _ = self.scope.out.send(Outgoing::Disconnect);
        }
    }

    /// Fail with [`ClientRequestError::CapabilityMissing`] unless the client declared
    /// `capability` (`required` is how it is spelt in `requiredCapabilities`). In the
    /// 2026-07-28 era, a handler that gives up on it answers -32021.
    fn require(&self, declared: bool, capability: &'static str, required: Value) -> Result<(), ClientRequestError> {
        if declared {
            return Ok(());
        }
        if let Caller::Modern(call) = &self.scope.caller {
            let message = format!("Server requires the {capability} capability for this request");
            call.fail(ErrorObject::new(MISSING_REQUIRED_CLIENT_CAPABILITY, message).with_data(json!({"requiredCapabilities": required})));
        }
        Err(ClientRequestError::CapabilityMissing(capability))
    }

    /// Ask the user to fill a form (`elicitation/create`, form mode). `requested_schema` must be a
    /// flat object of primitive fields. Accepted content is validated against it.
    pub fn elicit(
        &self,
        message: impl Into<String>,
        requested_schema: Value,
    ) -> impl Future<Output = Result<ElicitResult, ClientRequestError>> + Send + '_ {
        self.elicit_keyed(None, message.into(), requested_schema)
    }

    /// [`elicit`](Self::elicit) under the input-request key `key` (2026-07-28 clients see it in
    /// `inputRequests` and answer under it; a legacy session never sees it).
    pub fn elicit_as<'a>(
        &'a self,
        key: &'a str,
        message: impl Into<String>,
        requested_schema: Value,
    ) -> impl Future<Output = Result<ElicitResult, ClientRequestError>> + Send + 'a {
        self.elicit_keyed(Some(key), message.into(), requested_schema)
    }

    /// Checked and started before its future (see [`ask`](Self::ask)): the future keeps the
    /// validator and the question, not the message and schema it was built from.
    fn elicit_keyed<'a>(
        &'a self,
        key: Option<&'a str>,
        message: String,
        requested_schema: Value,
    ) -> impl Future<Output = Result<ElicitResult, ClientRequestError>> + Send + 'a {
        match self.elicitation(key, message, requested_schema) {
            // A combinator, not an `async` block: that would keep the question twice (as
            // captured, and as awaited).
            Ok((validator, ask)) => Either::Left(ask.map(move |answer| self.elicit_result(answer?, &validator))),
            Err(refused) => Either::Right(Box::pin(std::future::ready(Err(refused)))),
        }
    }

    /// The client's answer to a form elicitation, checked against the requested schema.
    fn elicit_result(&self, answer: Value, validator: &jsonschema::Validator) -> Result<ElicitResult, ClientRequestError> {
        let result: ElicitResult = serde_json::from_value(answer).map_err(|e| ClientRequestError::MalformedAnswer(e.to_string()))?;
        if result.action == ElicitAction::Accept {
            let content = Value::Object(result.content.clone().unwrap_or_default());
            if let Some(errors) = validation_errors(validator, &content) {
                // A 2026-07-28 client sent it as a request parameter: invalid params.
                if let Caller::Modern(call) = &self.scope.caller {
                    call.fail(ErrorObject::invalid_params(format!(
                        "accepted elicitation content does not match the requested schema: {errors}"
                    )));
                }
                return Err(ClientRequestError::InvalidContent(errors));
            }
        }
        Ok(result)
    }

    /// The checks of a form elicitation, and its question on its way.
    #[allow(clippy::type_complexity)]
    fn elicitation<'a>(
        &'a self,
        key: Option<&'a str>,
        message: String,
        requested_schema: Value,
    ) -> Result<(Arc<jsonschema::Validator>, impl Future<Output = Result<Value, ClientRequestError>> + Send + 'a), ClientRequestError> {
        self.require(self.capabilities().elicitation_form, "elicitation", json!({"elicitation": {}}))?;
        check_flat_schema(&requested_schema)?;
        // Compiled before asking, to refuse a bad schema; shared with every call that asks with
        // the same schema, so a parked call holds no schema of its own.
        let validator = self.scope.rendezvous.schemas.validator(&requested_schema).map_err(ClientRequestError::InvalidSchema)?;
        // Built by moving the schema in (`json!` would copy it and keep the original alive).
        let mut params = Map::new();
        params.insert("message".into(), Value::String(message));
        params.insert("requestedSchema".into(), requested_schema);
        if self.protocol_version() >= ProtocolVersion::V2025_11_25 {
            params.insert("mode".into(), json!("form"));
        }
        Ok((validator, self.ask(key, RequestKind::Elicitation, "elicitation/create", Value::Object(params))))
    }

    /// Send the user to a URL (`elicitation/create`, URL mode, 2025-11-25). The 2026-07-28 wire
    /// has no elicitation id: it is sent to legacy sessions only.
    pub async fn elicit_url(
        &self,
        message: impl Into<String>,
        url: &str,
        elicitation_id: &str,
    ) -> Result<ElicitResult, ClientRequestError> {
        self.require(self.capabilities().elicitation_url, "elicitation.url", json!({"elicitation": {"url": {}}}))?;
        let mut params = json!({"mode": "url", "message": message.into(), "url": url});
        if self.session().is_some() {
            params["elicitationId"] = json!(elicitation_id);
        }
        let answer = self.ask(None, RequestKind::Elicitation, "elicitation/create", params).await?;
        serde_json::from_value(answer).map_err(|e| ClientRequestError::MalformedAnswer(e.to_string()))
    }

    /// Tell the client an out-of-band (URL-mode) elicitation finished
    /// (`notifications/elicitation/complete`, 2025-11-25; 2026-07-28 removed it).
    pub fn elicitation_complete(&self, elicitation_id: &str) {
        if self.session().is_some() {
            let _ = self.send(Message::notification("notifications/elicitation/complete", json!({"elicitationId": elicitation_id})));
        }
    }

    /// Ask the client's LLM for a completion (`sampling/createMessage`).
    pub fn sample(&self, params: CreateMessageParams) -> impl Future<Output = Result<CreateMessageResult, ClientRequestError>> + Send + '_ {
        self.sample_keyed(None, params)
    }

    /// [`sample`](Self::sample) under the input-request key `key` (see [`elicit_as`](Self::elicit_as)).
    pub fn sample_as<'a>(
        &'a self,
        key: &'a str,
        params: CreateMessageParams,
    ) -> impl Future<Output = Result<CreateMessageResult, ClientRequestError>> + Send + 'a {
        self.sample_keyed(Some(key), params)
    }

    /// Checked and started before its future (see [`ask`](Self::ask)).
    fn sample_keyed<'a>(
        &'a self,
        key: Option<&'a str>,
        params: CreateMessageParams,
    ) -> impl Future<Output = Result<CreateMessageResult, ClientRequestError>> + Send + 'a {
        match self.sampling(key, params) {
            // A combinator, as for an elicitation.
            Ok(ask) => Either::Left(
                ask.map(|answer| serde_json::from_value(answer?).map_err(|e| ClientRequestError::MalformedAnswer(e.to_string()))),
            ),
            Err(refused) => Either::Right(Box::pin(std::future::ready(Err(refused)))),
        }
    }

    /// The checks of a sampling request, and its question on its way.
    fn sampling<'a>(
        &'a self,
        key: Option<&'a str>,
        params: CreateMessageParams,
    ) -> Result<impl Future<Output = Result<Value, ClientRequestError>> + Send + 'a, ClientRequestError> {
        let capabilities = self.capabilities();
        self.require(capabilities.sampling, "sampling", json!({"sampling": {}}))?;
        if params.tools.is_some() {
            self.require(capabilities.sampling_tools, "sampling.tools", json!({"sampling": {"tools": {}}}))?;
        }
        let params = serde_json::to_value(params).expect("params serialize");
        Ok(self.ask(key, RequestKind::Sampling, "sampling/createMessage", params))
    }

    /// Ask the client for its roots (`roots/list`).
    pub async fn list_roots(&self) -> Result<ListRootsResult, ClientRequestError> {
        self.list_roots_keyed(None).await
    }

    /// [`list_roots`](Self::list_roots) under the input-request key `key` (see [`elicit_as`](Self::elicit_as)).
    pub async fn list_roots_as(&self, key: &str) -> Result<ListRootsResult, ClientRequestError> {
        self.list_roots_keyed(Some(key)).await
    }

    async fn list_roots_keyed(&self, key: Option<&str>) -> Result<ListRootsResult, ClientRequestError> {
        self.require(self.capabilities().roots, "roots", json!({"roots": {}}))?;
        let answer = self.ask(key, RequestKind::Roots, "roots/list", json!({})).await?;
        serde_json::from_value(answer).map_err(|e| ClientRequestError::MalformedAnswer(e.to_string()))
    }

    /// Put a question to the client and wait for its answer (the `result` member): a request
    /// on the session's stream (legacy), or an input request of this round (2026-07-28).
    ///
    /// Each step boxed and started here rather than in an `async fn`, whose future would keep
    /// the arguments (the question's params among them) and both paths' state while parked.
    fn ask<'a>(
        &'a self,
        key: Option<&'a str>,
        kind: RequestKind,
        method: &'a str,
        params: Value,
    ) -> impl Future<Output = Result<Value, ClientRequestError>> + Send + 'a {
        match &self.scope.caller {
            Caller::Session { record, .. } => {
                // Sent, then parked in a future of its own: the parked call keeps nothing of
                // the sending (its arguments, the create's first poll).
                let send = Box::pin(self.send_request(record, kind, method, params));
                Either::Left(async move {
                    let sent = send.await?;
                    Box::pin(self.await_answer(sent)).await
                })
            }
            Caller::Modern(call) => Either::Right(Box::pin(self.ask_in_round(call, key, kind, method, params))),
        }
    }

    /// Ask as part of a 2026-07-28 call's round: the request goes out with the round's
    /// `input_required`, the answer comes with the client's retry.
    async fn ask_in_round(
        &self,
        call: &ModernCall,
        key: Option<&str>,
        kind: RequestKind,
        method: &str,
        params: Value,
    ) -> Result<Value, ClientRequestError> {
        let key = key.map(str::to_owned).unwrap_or_else(|| call.generated_key(kind));
        let started = Instant::now();
        // Kept as text while parked: the `Value`s go before the wait (moved in, not copied by
        // `json!`, which would leave `params` in this future).
        let request = {
            let mut request = Map::new();
            request.insert("method".into(), Value::String(method.into()));
            request.insert("params".into(), params);
            JsonText::from(&Value::Object(request))
        };
        let answer = tokio::select! {
            answer = call.ask(key, kind, request) => answer,
            () = self.scope.rendezvous.stopping.cancelled() => return Err(ClientRequestError::NodeStopping),
        };
        self.scope.rendezvous.metrics.observe_wait(kind, started.elapsed());
        match answer {
            Ok(answer) => Ok(answer),
            Err(e @ AskError::Malformed { .. }) => {
                call.fail(ErrorObject::invalid_params(e.to_string()));
                Err(ClientRequestError::MalformedAnswer(e.to_string()))
            }
            Err(AskError::Abandoned) => Err(ClientRequestError::Cancelled),
        }
    }

    /// Send the request while its mailbox is being created. The create's commit overlaps the
    /// client's turn: an answer that reaches the store first is kept for it (early delivery),
    /// so only the answer's commit is on the round trip's critical path.
    async fn send_request(
        &self,
        session: &SessionRecord,
        kind: RequestKind,
        method: &str,
        params: Value,
    ) -> Result<SentRequest, ClientRequestError> {
        let server = &self.scope.rendezvous;
        let timeout = server.timeout(kind);
        let key = MailboxKey::random();
        let ttl = timeout + MAILBOX_GRACE;
        let tag = server.sealer.session_tag(session.id.as_str());
        let started = Instant::now();
        // Proposed before the request goes out, so an answer rarely overtakes it.
        let mut mailbox = SentMailbox::propose(server.mailbox.clone(), key.clone(), tag, server.node_id, ttl).await;
        let sealed = correlation::SealedRequest {
            key,
            owner: server.node_id,
            deadline_ms: crate::clock::now_ms() + ttl.as_millis() as u64,
            sealed_with: correlation::SealedWith::Current,
        };
        let id = server.sealer.seal_request(&sealed, session.id.as_str());
        tracing::debug!(key = %sealed.key, %kind, session = %session.id, "server-to-client request sent; parked");
        if let Err(e) = self.send(Message::request(id.clone(), method, params)) {
            mailbox.delete().await?;
            return Err(e);
        }
        Ok(SentRequest { mailbox, id, kind, timeout, started })
    }

    /// Park until the answer to a sent request arrives (the `result` member), it times out,
    /// the call is cancelled or the node stops. An `async move` block rather than an `async
    /// fn`: an `async fn` keeps its argument twice (as passed, and bound), in every parked call.
    #[allow(clippy::manual_async_fn)] // on purpose: see above
    fn await_answer<'a>(&'a self, mut sent: SentRequest) -> impl Future<Output = Result<Value, ClientRequestError>> + Send + 'a {
        async move {
            let server = &self.scope.rendezvous;
            // The create settles first, in a future of its own: a parked call's future holds
            // the wait alone.
            if let Some(given_up) = Box::pin(self.settle_create(&mut sent)).await {
                return given_up;
            }
            let outcome = tokio::select! {
                outcome = sent.mailbox.wait(sent.timeout.saturating_sub(sent.started.elapsed())) => outcome?,
                _ = self.scope.cancel.cancelled() => return Box::pin(self.give_up(&mut sent, ClientRequestError::Cancelled)).await,
                () = server.stopping.cancelled() => return Box::pin(self.give_up(&mut sent, ClientRequestError::NodeStopping)).await,
            };
            server.metrics.observe_wait(sent.kind, sent.started.elapsed());
            match outcome {
                WaitOutcome::Delivered(answer) => {
                    tracing::debug!(key = %sent.mailbox.key(), kind = %sent.kind, waited_ms = sent.started.elapsed().as_millis() as u64, "answer arrived; resuming");
                    match Message::from_delivered(answer) {
                        Some(Message::Response { result, .. }) => {
                            server.metrics.outcome(sent.kind, "delivered");
                            Ok(result)
                        }
                        Some(Message::Error { error, .. }) => {
                            server.metrics.outcome(sent.kind, "client_error");
                            Err(ClientRequestError::ClientError { kind: sent.kind, error })
                        }
                        _ => Err(ClientRequestError::MalformedAnswer("not a JSON-RPC response".into())),
                    }
                }
                WaitOutcome::TimedOut | WaitOutcome::Expired => {
                    server.metrics.outcome(sent.kind, "timeout");
                    let reason = format!("{} timed out after {:?}", sent.kind, sent.timeout);
                    let _ = self.send(Message::notification("notifications/cancelled", json!({"requestId": sent.id, "reason": reason})));
                    sent.mailbox.delete().await?;
                    Err(ClientRequestError::Timeout { kind: sent.kind, after: sent.timeout })
                }
                WaitOutcome::Deleted | WaitOutcome::NotFound => Err(ClientRequestError::Cancelled),
            }
        }
    }

    /// Wait for a sent request's create to settle. `Some` when the call ends here: the create
    /// failed (the client is told), or the call was cancelled or the node stops meanwhile.
    async fn settle_create(&self, sent: &mut SentRequest) -> Option<Result<Value, ClientRequestError>> {
        let settled = tokio::select! {
            settled = sent.mailbox.settled() => settled,
            _ = self.scope.cancel.cancelled() => return Some(self.give_up(sent, ClientRequestError::Cancelled).await),
            () = self.scope.rendezvous.stopping.cancelled() => return Some(self.give_up(sent, ClientRequestError::NodeStopping).await),
        };
        let e = settled.err()?;
        // Told, so it stops waiting for an answer no one will take.
        let reason = format!("the server could not park this {}: {e}", sent.kind);
        let _ = self.send(Message::notification("notifications/cancelled", json!({"requestId": sent.id, "reason": reason})));
        Some(Err(e.into()))
    }

    /// Give a sent request up (`why`: cancelled, or the node stops): the client is told when
    /// the node stops, and the mailbox is deleted once its create has settled, so a late
    /// answer is told the request is gone rather than parked for no one.
    async fn give_up(&self, sent: &mut SentRequest, why: ClientRequestError) -> Result<Value, ClientRequestError> {
        if matches!(why, ClientRequestError::NodeStopping) {
            let reason = "the server replica running this call is shutting down";
            let _ = self.send(Message::notification("notifications/cancelled", json!({"requestId": sent.id, "reason": reason})));
        }
        sent.mailbox.delete().await?;
        Err(why)
    }
}

/// A server-to-client request on the session's stream, its mailbox created or being created:
/// all its wait needs.
struct SentRequest {
    mailbox: SentMailbox,
    id: RequestId,
    kind: RequestKind,
    timeout: Duration,
    started: Instant,
}

impl Message {
    /// Read back a response that went through the mailbox as JSON.
    fn from_delivered(value: Value) -> Option<Message> {
        crate::protocol::jsonrpc::message_from_value(value).ok()
    }
}

/// The spec restricts form elicitation to a flat object whose properties are primitives
/// (string, number, integer, boolean; enums as string or arrays of string enums).
fn check_flat_schema(schema: &Value) -> Result<(), ClientRequestError> {
    let bad = |why: String| Err(ClientRequestError::InvalidSchema(why));
    if schema.get("type") != Some(&json!("object")) {
        return bad("type must be \"object\"".into());
    }
    let Some(props) = schema.get("properties").and_then(Value::as_object) else {
        return bad("properties must be an object".into());
    };
    for (name, prop) in props {
        match prop.get("type").and_then(Value::as_str) {
            Some("string" | "number" | "integer" | "boolean") => {}
            Some("array") if prop.pointer("/items/type") == Some(&json!("string")) || prop.pointer("/items/anyOf").is_some() => {}
            Some(other) => return bad(format!("property {name} has type {other}")),
            None if prop.get("oneOf").is_some() || prop.get("anyOf").is_some() => {}
            None => return bad(format!("property {name} has no type")),
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn flat_schema_rules() {
        let ok = json!({"type": "object", "properties": {
            "name": {"type": "string"}, "age": {"type": "integer", "minimum": 0},
            "ok": {"type": "boolean"}, "colors": {"type": "array", "items": {"type": "string", "enum": ["r", "g"]}}
        }});
        assert!(check_flat_schema(&ok).is_ok());
        let nested = json!({"type": "object", "properties": {"addr": {"type": "object", "properties": {}}}});
        assert!(matches!(check_flat_schema(&nested), Err(ClientRequestError::InvalidSchema(_))));
        assert!(check_flat_schema(&json!({"type": "string"})).is_err());
        assert!(check_flat_schema(&json!({"type": "object"})).is_err());
    }
}
