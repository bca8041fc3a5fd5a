//! The context a handler runs with: progress, logging, cancellation, and server-to-client
//! requests (`elicit`, `sample`) correlated through the mailbox.
//!
//! Handlers never see how the answer arrives (same node, another node through Raft, or a future
//! multi-round-trip transport); they await a typed result.

use super::correlation;
use super::local::LocalSession;
use super::outbound::{Outbound, Outgoing};
use super::rendezvous::Rendezvous;
use super::schema::validation_errors;
use crate::mailbox::{MailboxError, MailboxKey, WaitOutcome};
use crate::protocol::jsonrpc::{ErrorObject, Message, RequestId};
use crate::protocol::types::{
    CreateMessageParams, CreateMessageResult, ElicitAction, ElicitResult, LogLevel, ProtocolVersion, RequestKind,
};
use crate::session::SessionRecord;
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
    /// This node's entry of the session (its log level, set here ahead of the record).
    pub(super) local: Arc<LocalSession>,
    pub(super) session: Arc<SessionRecord>,
    pub(super) request_id: RequestId,
    pub(super) progress_token: Option<Value>,
    pub(super) out: Outbound,
    pub(super) cancel: CancellationToken,
}

impl RequestContext {
    pub(super) fn new(scope: RequestScope) -> Self {
        RequestContext { scope: Arc::new(scope) }
    }
    pub(crate) fn out(&self) -> &Outbound {
        &self.scope.out
    }
    pub fn session(&self) -> &SessionRecord {
        &self.scope.session
    }
    pub fn request_id(&self) -> &RequestId {
        &self.scope.request_id
    }
    /// The `_meta.progressToken` of the request, if the client asked for progress.
    pub fn progress_token(&self) -> Option<&Value> {
        self.scope.progress_token.as_ref()
    }
    /// Resolves when the client cancels this request.
    pub async fn cancelled(&self) {
        self.scope.cancel.cancelled().await
    }
    pub fn is_cancelled(&self) -> bool {
        self.scope.cancel.is_cancelled()
    }

    fn send(&self, msg: Message) -> Result<(), ClientRequestError> {
        self.scope.out.send(Outgoing::Message(Box::new(msg))).map_err(|_| ClientRequestError::ClientGone)
    }

    /// Send `notifications/progress` if the client asked for progress on this request.
    pub fn progress(&self, progress: f64, total: Option<f64>, message: Option<&str>) {
        let Some(token) = &self.scope.progress_token else { return };
        let mut params = json!({"progressToken": token, "progress": progress});
        if let Some(total) = total {
            params["total"] = json!(total);
        }
        if let Some(message) = message {
            params["message"] = json!(message);
        }
        let _ = self.send(Message::notification("notifications/progress", params));
    }

    /// Send `notifications/message` if `level` is at or above the session's level.
    pub fn log(&self, level: LogLevel, logger: Option<&str>, data: Value) {
        if level < self.scope.local.log_level(&self.scope.session) {
            return;
        }
        let mut params = json!({"level": level, "data": data});
        if let Some(logger) = logger {
            params["logger"] = json!(logger);
        }
        let _ = self.send(Message::notification("notifications/message", params));
    }

    /// End the HTTP response carrying this request's stream; the client reconnects with
    /// `Last-Event-ID` and receives what followed (SSE polling, SEP-1699).
    pub fn close_sse_stream(&self) {
        let _ = self.scope.out.send(Outgoing::Disconnect);
    }

    /// Ask the user to fill a form (`elicitation/create`, form mode). `requested_schema` must be a
    /// flat object of primitive fields. Accepted content is validated against it.
    pub async fn elicit(&self, message: impl Into<String>, requested_schema: Value) -> Result<ElicitResult, ClientRequestError> {
        if !self.scope.session.capabilities.elicitation_form() {
            return Err(ClientRequestError::CapabilityMissing("elicitation"));
        }
        check_flat_schema(&requested_schema)?;
        // Compile now to refuse a bad schema before asking, but don't hold the validator while
        // parked (it is most of a parked call's memory): rebuild it when an answer is accepted.
        // Parked, the schema itself is kept as JSON text, a fraction of the size of a `Value`.
        jsonschema::validator_for(&requested_schema).map_err(|e| ClientRequestError::InvalidSchema(e.to_string()))?;
        let mut schema_text = requested_schema.to_string();
        schema_text.shrink_to_fit();
        // Built by moving the schema in (`json!` would copy it and keep the original alive).
        let mut params = Map::new();
        params.insert("message".into(), Value::String(message.into()));
        params.insert("requestedSchema".into(), requested_schema);
        if self.scope.session.protocol_version >= ProtocolVersion::V2025_11_25 {
            params.insert("mode".into(), json!("form"));
        }
        let answer = self.request(RequestKind::Elicitation, "elicitation/create", Value::Object(params)).await?;
        let result: ElicitResult = serde_json::from_value(answer).map_err(|e| ClientRequestError::MalformedAnswer(e.to_string()))?;
        if result.action == ElicitAction::Accept {
            let schema: Value = serde_json::from_str(&schema_text).expect("serialized JSON parses back");
            let validator = jsonschema::validator_for(&schema).map_err(|e| ClientRequestError::InvalidSchema(e.to_string()))?;
            let content = Value::Object(result.content.clone().unwrap_or_default());
            if let Some(errors) = validation_errors(&validator, &content) {
                return Err(ClientRequestError::InvalidContent(errors));
            }
        }
        Ok(result)
    }

    /// Send the user to a URL (`elicitation/create`, URL mode, 2025-11-25).
    pub async fn elicit_url(
        &self,
        message: impl Into<String>,
        url: &str,
        elicitation_id: &str,
    ) -> Result<ElicitResult, ClientRequestError> {
        if !self.scope.session.capabilities.elicitation_url() {
            return Err(ClientRequestError::CapabilityMissing("elicitation.url"));
        }
        let params = json!({"mode": "url", "message": message.into(), "url": url, "elicitationId": elicitation_id});
        let answer = self.request(RequestKind::Elicitation, "elicitation/create", params).await?;
        serde_json::from_value(answer).map_err(|e| ClientRequestError::MalformedAnswer(e.to_string()))
    }

    /// Tell the client an out-of-band (URL-mode) elicitation finished
    /// (`notifications/elicitation/complete`, 2025-11-25).
    pub fn elicitation_complete(&self, elicitation_id: &str) {
        let _ = self.send(Message::notification("notifications/elicitation/complete", json!({"elicitationId": elicitation_id})));
    }

    /// Ask the client's LLM for a completion (`sampling/createMessage`).
    pub async fn sample(&self, params: CreateMessageParams) -> Result<CreateMessageResult, ClientRequestError> {
        if !self.scope.session.capabilities.sampling() {
            return Err(ClientRequestError::CapabilityMissing("sampling"));
        }
        if params.tools.is_some() && !self.scope.session.capabilities.sampling_tools() {
            return Err(ClientRequestError::CapabilityMissing("sampling.tools"));
        }
        let params = serde_json::to_value(params).expect("params serialize");
        let answer = self.request(RequestKind::Sampling, "sampling/createMessage", params).await?;
        serde_json::from_value(answer).map_err(|e| ClientRequestError::MalformedAnswer(e.to_string()))
    }

    /// Create the mailbox, then send the request, then park. Returns the `result` member.
    async fn request(&self, kind: RequestKind, method: &str, params: Value) -> Result<Value, ClientRequestError> {
        let server = &self.scope.rendezvous;
        let timeout = server.timeout(kind);
        let key = MailboxKey::random();
        let ttl = timeout + MAILBOX_GRACE;
        let tag = server.sealer.session_tag(self.scope.session.id.as_str());
        server.mailbox.create(&key, tag, server.node_id, ttl).await?;
        let sealed = correlation::SealedRequest {
            key: key.clone(),
            owner: server.node_id,
            deadline_ms: crate::clock::now_ms() + ttl.as_millis() as u64,
        };
        let id = server.sealer.seal_request(&sealed, self.scope.session.id.as_str());
        tracing::info!(%key, %kind, session = %self.scope.session.id, "server-to-client request sent; parked");
        if let Err(e) = self.send(Message::request(id.clone(), method, params)) {
            server.mailbox.delete(&key).await?;
            return Err(e);
        }
        let started = Instant::now();
        let outcome = tokio::select! {
            outcome = server.mailbox.wait(&key, timeout) => outcome?,
            _ = self.scope.cancel.cancelled() => {
                server.mailbox.delete(&key).await?;
                return Err(ClientRequestError::Cancelled);
            }
        };
        server.metrics.observe_wait(kind, started.elapsed());
        match outcome {
            WaitOutcome::Delivered(answer) => {
                tracing::info!(%key, %kind, waited_ms = started.elapsed().as_millis() as u64, "answer arrived; resuming");
                match Message::from_delivered(answer) {
                    Some(Message::Response { result, .. }) => {
                        server.metrics.outcome(kind, "delivered");
                        Ok(result)
                    }
                    Some(Message::Error { error, .. }) => {
                        server.metrics.outcome(kind, "client_error");
                        Err(ClientRequestError::ClientError { kind, error })
                    }
                    _ => Err(ClientRequestError::MalformedAnswer("not a JSON-RPC response".into())),
                }
            }
            WaitOutcome::TimedOut | WaitOutcome::Expired => {
                server.metrics.outcome(kind, "timeout");
                let reason = format!("{kind} timed out after {timeout:?}");
                let _ = self.send(Message::notification("notifications/cancelled", json!({"requestId": id, "reason": reason})));
                server.mailbox.delete(&key).await?;
                Err(ClientRequestError::Timeout { kind, after: timeout })
            }
            WaitOutcome::Deleted | WaitOutcome::NotFound => Err(ClientRequestError::Cancelled),
        }
    }
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
