//! A modern (2026-07-28) request as its handler sees it: the client's declarations from the
//! request's `_meta` (replaced by each retry's), and the input requests the handler asks.
//!
//! A modern client cannot be sent a request. A handler's `elicit`, `sample` or `list_roots`
//! registers an [`Ask`] instead and waits; when the handler can go no further, the driver
//! (`super::mrtr`) answers the client `input_required` with every outstanding ask, and hands
//! the answers of the client's retry to the asks they name. Asks registered during one poll
//! of the handler (`join!` of several) go out together in one round.

use super::outbound::{Outbound, OutboundSink, Outgoing, StreamClosed};
use crate::protocol::json_text::JsonText;
use crate::protocol::jsonrpc::{ErrorObject, Message};
use crate::protocol::types::{CapabilityFlags, LogLevel, ProtocolVersion, RequestKind};
use serde_json::{Map, Value};
use std::sync::Mutex;
use tokio::sync::{Notify, oneshot};
use tokio_util::sync::CancellationToken;

/// What the client declared in the `_meta` of the request the handler now answers (the first
/// call, then each retry).
#[derive(Debug, Clone, PartialEq)]
pub(super) struct ModernClient {
    pub(super) version: ProtocolVersion,
    pub(super) capabilities: CapabilityFlags,
    /// `notifications/message` at or above this level; `None`: none.
    pub(super) log_level: Option<LogLevel>,
    pub(super) progress_token: Option<Value>,
}

/// One input request the handler waits on.
pub(super) struct Ask {
    pub(super) key: String,
    pub(super) kind: RequestKind,
    /// `{method, params}`, as it goes into `inputRequests` (kept as text while parked: a
    /// fraction of the memory of a `Value`).
    pub(super) request: JsonText,
    reply: oneshot::Sender<Value>,
}

/// Why an ask got no answer.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub(super) enum AskError {
    #[error("the client's input response for {key:?} is malformed: {why}")]
    Malformed { key: String, why: String },
    #[error("the call ended before the client answered")]
    Abandoned,
}

#[derive(Default)]
struct RoundState {
    /// Answers the client sent before they were asked for (a fresh call with `inputResponses`).
    prefilled: Map<String, Value>,
    waiting: Vec<Ask>,
    /// Generated keys are `<kind>-<n>`, unique within the call.
    generated: u32,
}

/// A modern call on the node that runs its handler: what the client declared, what the handler
/// asks, where its messages go, how to cancel it, and its round outcomes. One allocation: a
/// parked call keeps little else.
pub(super) struct ModernCall {
    client: Mutex<ModernClient>,
    round: Mutex<RoundState>,
    /// Where the handler's messages go (see [`SinkTarget`]); the call is its own sink.
    target: Mutex<SinkTarget>,
    pub(super) cancel: CancellationToken,
    /// The latest round outcome, for the replica serving the retry that answered the round.
    pub(super) outcome: OutcomeCell,
    /// The driver is done (the registry may drop the call once its last outcome is fetched).
    pub(super) ended: std::sync::atomic::AtomicBool,
    /// Whether the call may become a task (the client declared the extension and the tool
    /// supports it), and the handler waiting for it to become one.
    task_allowed: std::sync::atomic::AtomicBool,
    task_start: Mutex<Option<oneshot::Sender<()>>>,
    /// Signalled when the handler registers an ask.
    pub(super) asked: Notify,
    /// A failure of the protocol (a capability the client lacks, a malformed answer) that
    /// answers the call with a JSON-RPC error when the handler gives up because of it.
    /// Boxed: rare, and every parked call carries the slot.
    protocol_error: Mutex<Option<Box<ErrorObject>>>,
}

impl ModernCall {
    pub(super) fn new(client: ModernClient, prefilled: Map<String, Value>, out: Outbound, cancel: CancellationToken) -> Self {
        ModernCall {
            client: Mutex::new(client),
            round: Mutex::new(RoundState { prefilled, ..Default::default() }),
            target: Mutex::new(SinkTarget::Stream(out)),
            cancel,
            outcome: OutcomeCell::default(),
            ended: Default::default(),
            task_allowed: Default::default(),
            task_start: Mutex::new(None),
            asked: Notify::new(),
            protocol_error: Mutex::new(None),
        }
    }

    pub(super) fn client(&self) -> ModernClient {
        self.client.lock().unwrap().clone()
    }

    /// A retry arrived: its `_meta` is what the handler answers to from now on.
    pub(super) fn set_client(&self, client: ModernClient) {
        *self.client.lock().unwrap() = client;
    }

    pub(super) fn allow_task(&self) {
        self.task_allowed.store(true, std::sync::atomic::Ordering::Relaxed);
    }

    /// The handler asks to continue as a task: wait until the driver made the call one (at once
    /// when it may not become one).
    pub(super) async fn start_task(&self) {
        if !self.task_allowed.load(std::sync::atomic::Ordering::Relaxed) {
            return;
        }
        let (tx, rx) = oneshot::channel();
        *self.task_start.lock().unwrap() = Some(tx);
        self.asked.notify_one();
        let _ = rx.await;
    }

    /// Whether the handler waits to become a task.
    pub(super) fn task_requested(&self) -> bool {
        self.task_start.lock().unwrap().is_some()
    }

    /// The call is a task now: the handler goes on (and asks nothing of the call's stream).
    pub(super) fn became_task(&self) {
        self.task_allowed.store(false, std::sync::atomic::Ordering::Relaxed);
        *self.target.lock().unwrap() = SinkTarget::Discard;
        if let Some(started) = self.task_start.lock().unwrap().take() {
            let _ = started.send(());
        }
    }

    pub(super) fn generated_key(&self, kind: RequestKind) -> String {
        let mut round = self.round.lock().unwrap();
        round.generated += 1;
        format!("{}-{}", kind.label(), round.generated)
    }

    /// Register an input request and wait for the client's answer to it (or take the one it
    /// sent ahead). The answer's shape is checked for its kind; its content is the caller's.
    pub(super) async fn ask(&self, key: String, kind: RequestKind, request: JsonText) -> Result<Value, AskError> {
        let receiver = {
            let mut round = self.round.lock().unwrap();
            if let Some(answer) = round.prefilled.remove(&key) {
                drop(round);
                check_response(kind, &answer).map_err(|why| AskError::Malformed { key, why })?;
                return Ok(answer);
            }
            let (reply, receiver) = oneshot::channel();
            // Most rounds ask one thing: no room for four.
            round.waiting.reserve_exact(1);
            round.waiting.push(Ask { key, kind, request, reply });
            receiver
        };
        self.asked.notify_one();
        receiver.await.map_err(|_| AskError::Abandoned)
    }

    /// The asks still waiting for an answer: `(key, kind, {method, params})`.
    pub(super) fn outstanding(&self) -> Vec<(String, RequestKind, Value)> {
        let round = self.round.lock().unwrap();
        round.waiting.iter().filter(|a| !a.reply.is_closed()).map(|a| (a.key.clone(), a.kind, a.request.decode())).collect()
    }

    /// Hand the client's answers to the asks they name (already shape-checked); answers to
    /// nothing outstanding are ignored. Returns how many asks were answered.
    pub(super) fn answer(&self, mut responses: Map<String, Value>) -> usize {
        let mut round = self.round.lock().unwrap();
        let waiting = std::mem::take(&mut round.waiting);
        let mut answered = 0;
        for ask in waiting {
            match responses.remove(&ask.key) {
                Some(answer) => {
                    answered += usize::from(ask.reply.send(answer).is_ok());
                }
                None if !ask.reply.is_closed() => round.waiting.push(ask),
                None => {}
            }
        }
        answered
    }

    /// Record why the protocol failed the call (the first reason stands).
    pub(super) fn fail(&self, error: ErrorObject) {
        self.protocol_error.lock().unwrap().get_or_insert_with(|| Box::new(error));
    }

    /// How the call ends, given what its handler returned: a protocol failure the handler gave
    /// up on (an error, or a tool result marked `isError`) answers as that JSON-RPC error.
    pub(super) fn settle(&self, result: Result<Value, ErrorObject>) -> Result<Value, ErrorObject> {
        match (result, self.protocol_error()) {
            (Err(_), Some(error)) => Err(error),
            (Ok(result), Some(error)) if result.get("isError") == Some(&Value::Bool(true)) => Err(error),
            (result, _) => result,
        }
    }

    pub(super) fn protocol_error(&self) -> Option<ErrorObject> {
        self.protocol_error.lock().unwrap().as_deref().cloned()
    }
}

/// The latest round outcome of a call (`(round, JSON text)`), for the replica serving the
/// retry that answered that round. A mutex and a `Notify` rather than a watch channel: one per
/// parked call, at a fraction of the memory.
#[derive(Default)]
pub(super) struct OutcomeCell {
    latest: Mutex<Option<(u32, std::sync::Arc<str>)>>,
    ready: Notify,
    /// The latest outcome was handed to the replica that waited for it.
    taken: std::sync::atomic::AtomicBool,
}

impl OutcomeCell {
    pub(super) fn set(&self, round: u32, outcome: std::sync::Arc<str>) {
        *self.latest.lock().unwrap() = Some((round, outcome));
        self.taken.store(false, std::sync::atomic::Ordering::Release);
        self.ready.notify_waiters();
    }

    pub(super) fn taken(&self) -> bool {
        self.taken.load(std::sync::atomic::Ordering::Acquire)
    }

    /// The outcome of `round`, once there is one of that round or a later one (then `None`).
    pub(super) async fn wait(&self, round: u32) -> Option<std::sync::Arc<str>> {
        loop {
            let notified = self.ready.notified();
            tokio::pin!(notified);
            // Registered before the look, so a `set` in between is not missed.
            notified.as_mut().enable();
            if let Some((r, outcome)) = self.latest.lock().unwrap().as_ref()
                && *r >= round
            {
                if *r == round {
                    self.taken.store(true, std::sync::atomic::Ordering::Release);
                    return Some(outcome.clone());
                }
                return None;
            }
            notified.await;
        }
    }
}

/// Whether `answer` has the shape of an answer to a `kind` request: an `ElicitResult`, a
/// `CreateMessageResult` or a `ListRootsResult`.
pub(super) fn check_response(kind: RequestKind, answer: &Value) -> Result<(), String> {
    let Some(fields) = answer.as_object() else { return Err(format!("expected an object, got {answer}")) };
    match kind {
        RequestKind::Elicitation => {
            match fields.get("action").and_then(Value::as_str) {
                Some("accept" | "decline" | "cancel") => {}
                _ => return Err("action must be \"accept\", \"decline\" or \"cancel\"".into()),
            }
            match fields.get("content") {
                None | Some(Value::Null | Value::Object(_)) => Ok(()),
                Some(_) => Err("content must be an object".into()),
            }
        }
        RequestKind::Sampling => {
            if !fields.get("role").is_some_and(Value::is_string) || !fields.get("content").is_some_and(|c| c.is_object() || c.is_array()) {
                return Err("a sampling result needs role and content".into());
            }
            Ok(())
        }
        RequestKind::Roots => match fields.get("roots").and_then(Value::as_array) {
            Some(roots) if roots.iter().all(|r| r.get("uri").is_some_and(Value::is_string)) => Ok(()),
            _ => Err("roots must be an array of objects with a uri".into()),
        },
    }
}

/// Where a modern call's messages go: the stream of the HTTP request it answers now, or, once
/// a retry answered through another replica is being served, a buffer that travels back to
/// that replica with the round's outcome.
enum SinkTarget {
    Stream(Outbound),
    Buffer(Vec<Message>),
    /// A task sends no notifications.
    Discard,
}

impl ModernCall {
    /// From now on keep what the handler sends (the first request's stream is complete).
    pub(super) fn buffer(&self) {
        *self.target.lock().unwrap() = SinkTarget::Buffer(Vec::new());
    }

    /// The messages kept since the last call.
    pub(super) fn take(&self) -> Vec<Message> {
        match &mut *self.target.lock().unwrap() {
            SinkTarget::Buffer(kept) => std::mem::take(kept),
            SinkTarget::Stream(_) | SinkTarget::Discard => Vec::new(),
        }
    }

    /// Whether messages still go straight to the first request's stream.
    pub(super) fn is_streaming(&self) -> bool {
        matches!(*self.target.lock().unwrap(), SinkTarget::Stream(_))
    }
}

impl OutboundSink for ModernCall {
    fn send(&self, outgoing: Outgoing) -> Result<(), StreamClosed> {
        match &mut *self.target.lock().unwrap() {
            SinkTarget::Stream(out) => out.send(outgoing),
            SinkTarget::Buffer(kept) => {
                if let Outgoing::Message(message) = outgoing {
                    kept.push(*message);
                }
                Ok(())
            }
            SinkTarget::Discard => Ok(()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn text(value: Value) -> JsonText {
        JsonText::from(&value)
    }

    fn call(prefilled: Value) -> ModernCall {
        let client = ModernClient {
            version: ProtocolVersion::V2026_07_28,
            capabilities: CapabilityFlags::default(),
            log_level: None,
            progress_token: None,
        };
        let (tx, _) = tokio::sync::mpsc::unbounded_channel();
        ModernCall::new(client, prefilled.as_object().cloned().unwrap_or_default(), Outbound::new(tx), CancellationToken::new())
    }

    #[tokio::test]
    async fn asks_wait_for_their_own_key_and_take_answers_sent_ahead() {
        let call = std::sync::Arc::new(call(json!({"ahead": {"action": "decline"}, "bad": {"action": "maybe"}})));
        assert_eq!(call.ask("ahead".into(), RequestKind::Elicitation, text(json!({}))).await, Ok(json!({"action": "decline"})));
        assert!(matches!(call.ask("bad".into(), RequestKind::Elicitation, text(json!({}))).await, Err(AskError::Malformed { .. })));
        let (a, b) = (call.clone(), call.clone());
        let first = tokio::spawn(async move { a.ask("one".into(), RequestKind::Roots, text(json!({"method": "roots/list"}))).await });
        let second = tokio::spawn(async move { b.ask("two".into(), RequestKind::Elicitation, text(json!({}))).await });
        while call.outstanding().len() < 2 {
            tokio::task::yield_now().await;
        }
        let keys: Vec<String> = call.outstanding().into_iter().map(|(k, _, _)| k).collect();
        assert!(keys.contains(&"one".to_string()) && keys.contains(&"two".to_string()));
        // A partial answer: the other ask stays outstanding; unknown keys are ignored.
        let answered = call.answer(json!({"one": {"roots": []}, "stranger": {}}).as_object().cloned().unwrap());
        assert_eq!(answered, 1);
        assert_eq!(first.await.unwrap(), Ok(json!({"roots": []})));
        assert_eq!(call.outstanding().len(), 1);
        assert_eq!(call.answer(json!({"two": {"action": "cancel"}}).as_object().cloned().unwrap()), 1);
        assert_eq!(second.await.unwrap(), Ok(json!({"action": "cancel"})));
        assert!(call.outstanding().is_empty());
    }

    #[test]
    fn response_shapes_per_kind() {
        assert!(check_response(RequestKind::Elicitation, &json!({"action": "accept", "content": {"a": 1}})).is_ok());
        assert!(check_response(RequestKind::Elicitation, &json!(12345)).is_err());
        assert!(check_response(RequestKind::Elicitation, &json!({"action": "accept", "content": 3})).is_err());
        assert!(check_response(RequestKind::Sampling, &json!({"role": "assistant", "content": {"type": "text", "text": "x"}})).is_ok());
        assert!(check_response(RequestKind::Sampling, &json!({"content": {}})).is_err());
        assert!(check_response(RequestKind::Roots, &json!({"roots": [{"uri": "file:///x"}]})).is_ok());
        assert!(check_response(RequestKind::Roots, &json!({"roots": [{}]})).is_err());
        assert!(check_response(RequestKind::Roots, &Value::Null).is_err());
    }
}
