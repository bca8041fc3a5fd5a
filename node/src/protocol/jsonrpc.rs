//! JSON-RPC 2.0 framing: one message per body or line, with the error codes the spec assigns.
//!
//! Parsing is done by hand over `serde_json::Value` rather than with `#[serde(untagged)]` so that
//! every malformed shape maps to the precise error code (and, where one can be recovered, the id
//! of the request that was wrong).

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value, json};
use std::fmt;

pub const PARSE_ERROR: i64 = -32700;
pub const INVALID_REQUEST: i64 = -32600;
pub const METHOD_NOT_FOUND: i64 = -32601;
pub const INVALID_PARAMS: i64 = -32602;
pub const INTERNAL_ERROR: i64 = -32603;
/// MCP: a resource that does not exist.
pub const RESOURCE_NOT_FOUND: i64 = -32002;
/// MCP (2025-11-25): the tool needs a URL-mode elicitation to complete first.
pub const URL_ELICITATION_REQUIRED: i64 = -32042;
/// MCP 2026-07-28: a header disagrees with the body (`MCP-Protocol-Version`, `Mcp-Method`,
/// `Mcp-Name`), or one the request needs is missing.
pub const HEADER_MISMATCH: i64 = -32020;
/// MCP 2026-07-28: the request needs a client capability its `_meta` did not declare;
/// `data.requiredCapabilities` names it.
pub const MISSING_REQUIRED_CLIENT_CAPABILITY: i64 = -32021;
/// MCP 2026-07-28: a protocol version this server does not serve statelessly;
/// `data: {supported, requested}`.
pub const UNSUPPORTED_PROTOCOL_VERSION: i64 = -32022;
/// Server error range: a configured limit refused the request (nothing ran, nothing was
/// stored); `data` names it: `{"limit": "requests_per_session", "max": 64}`.
pub const LIMIT_REACHED: i64 = -32000;

/// Maximum depth of nested arrays/objects accepted in one message. Deeper documents are refused
/// before they are materialised, so a hostile body can't exhaust the stack.
pub const MAX_NESTING: usize = 64;

/// A JSON-RPC request id. MCP forbids `null`; numbers are integers.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(untagged)]
pub enum RequestId {
    Number(i64),
    String(String),
}

impl fmt::Display for RequestId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            RequestId::Number(n) => write!(f, "{n}"),
            RequestId::String(s) => write!(f, "{s:?}"),
        }
    }
}

impl RequestId {
    fn from_value(v: &Value) -> Option<RequestId> {
        match v {
            Value::String(s) => Some(RequestId::String(s.clone())),
            Value::Number(n) => n.as_i64().map(RequestId::Number),
            _ => None,
        }
    }
}

/// The error member of a JSON-RPC error response.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ErrorObject {
    pub code: i64,
    pub message: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub data: Option<Value>,
}

impl ErrorObject {
    pub fn new(code: i64, message: impl Into<String>) -> Self {
        ErrorObject { code, message: message.into(), data: None }
    }
    pub fn with_data(mut self, data: Value) -> Self {
        self.data = Some(data);
        self
    }
    pub fn invalid_params(message: impl Into<String>) -> Self {
        Self::new(INVALID_PARAMS, message)
    }
    pub fn method_not_found(method: &str) -> Self {
        Self::new(METHOD_NOT_FOUND, format!("method not found: {method}"))
    }
    pub fn internal(message: impl Into<String>) -> Self {
        Self::new(INTERNAL_ERROR, message)
    }
}

/// One JSON-RPC message, in either direction.
#[derive(Debug, Clone, PartialEq)]
pub enum Message {
    Request { id: RequestId, method: String, params: Option<Value> },
    Notification { method: String, params: Option<Value> },
    Response { id: RequestId, result: Value },
    Error { id: Option<RequestId>, error: ErrorObject },
}

impl Message {
    pub fn request(id: RequestId, method: impl Into<String>, params: Value) -> Self {
        Message::Request { id, method: method.into(), params: Some(params) }
    }
    pub fn notification(method: impl Into<String>, params: Value) -> Self {
        Message::Notification { method: method.into(), params: Some(params) }
    }
    pub fn response(id: RequestId, result: Value) -> Self {
        Message::Response { id, result }
    }
    pub fn error(id: Option<RequestId>, error: ErrorObject) -> Self {
        Message::Error { id, error }
    }

    /// True for the messages that end a request (a result or an error).
    pub fn is_response(&self) -> bool {
        matches!(self, Message::Response { .. } | Message::Error { .. })
    }

    /// The message as a JSON value, taking its members (no copy of the params or result).
    pub fn into_value(self) -> Value {
        let mut obj = Map::new();
        obj.insert("jsonrpc".into(), json!("2.0"));
        match self {
            Message::Request { id, method, params } => {
                obj.insert("id".into(), json!(id));
                obj.insert("method".into(), Value::String(method));
                if let Some(p) = params {
                    obj.insert("params".into(), p);
                }
            }
            Message::Notification { method, params } => {
                obj.insert("method".into(), Value::String(method));
                if let Some(p) = params {
                    obj.insert("params".into(), p);
                }
            }
            Message::Response { id, result } => {
                obj.insert("id".into(), json!(id));
                obj.insert("result".into(), result);
            }
            Message::Error { id, error } => {
                obj.insert("id".into(), json!(id));
                obj.insert("error".into(), json!(error));
            }
        }
        Value::Object(obj)
    }

    pub fn to_value(&self) -> Value {
        serde_json::to_value(self).expect("a message serializes")
    }

    /// The message's wire text, written straight from its members (building a [`Value`]
    /// first copied the params or result on every message sent).
    pub fn to_json(&self) -> String {
        serde_json::to_string(self).expect("a message serializes")
    }
}

impl Serialize for Message {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        use serde::ser::SerializeMap;
        let mut map = serializer.serialize_map(None)?;
        map.serialize_entry("jsonrpc", "2.0")?;
        match self {
            Message::Request { id, method, params } => {
                map.serialize_entry("id", id)?;
                map.serialize_entry("method", method)?;
                if let Some(p) = params {
                    map.serialize_entry("params", p)?;
                }
            }
            Message::Notification { method, params } => {
                map.serialize_entry("method", method)?;
                if let Some(p) = params {
                    map.serialize_entry("params", p)?;
                }
            }
            Message::Response { id, result } => {
                map.serialize_entry("id", id)?;
                map.serialize_entry("result", result)?;
            }
            Message::Error { id, error } => {
                map.serialize_entry("id", id)?;
                map.serialize_entry("error", error)?;
            }
        }
        map.end()
    }
}

/// Why a body could not be read as one JSON-RPC message. Carries the error response to send.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[error("{}: {}", .error.code, .error.message)]
pub struct FramingError {
    /// The id, when the message was well-formed enough to have one.
    pub id: Option<RequestId>,
    pub error: ErrorObject,
}

impl FramingError {
    fn parse(message: impl Into<String>) -> Self {
        FramingError { id: None, error: ErrorObject::new(PARSE_ERROR, message) }
    }
    fn invalid(id: Option<RequestId>, message: impl Into<String>) -> Self {
        FramingError { id, error: ErrorObject::new(INVALID_REQUEST, message) }
    }
    pub fn to_message(&self) -> Message {
        Message::error(self.id.clone(), self.error.clone())
    }
}

/// Depth of the deepest array/object in `bytes`, stopping early once past `limit`.
/// A cheap byte scan that skips string contents, run before the real parse.
fn nesting_exceeds(bytes: &[u8], limit: usize) -> bool {
    let (mut depth, mut in_string, mut escaped) = (0usize, false, false);
    for &b in bytes {
        if in_string {
            match (escaped, b) {
                (true, _) => escaped = false,
                (false, b'\\') => escaped = true,
                (false, b'"') => in_string = false,
                _ => {}
            }
            continue;
        }
        match b {
            b'"' => in_string = true,
            b'[' | b'{' => {
                depth += 1;
                if depth > limit {
                    return true;
                }
            }
            b']' | b'}' => depth = depth.saturating_sub(1),
            _ => {}
        }
    }
    false
}

/// Parse one JSON-RPC message from a body or line.
pub fn parse_message(bytes: &[u8]) -> Result<Message, FramingError> {
    if nesting_exceeds(bytes, MAX_NESTING) {
        return Err(FramingError::parse(format!("JSON nested deeper than {MAX_NESTING} levels")));
    }
    let value: Value = serde_json::from_slice(bytes).map_err(|e| FramingError::parse(format!("invalid JSON: {e}")))?;
    message_from_value(value)
}

/// Classify an already-parsed JSON value as a JSON-RPC message.
pub fn message_from_value(value: Value) -> Result<Message, FramingError> {
    let mut obj = match value {
        Value::Object(obj) => obj,
        Value::Array(_) => {
            return Err(FramingError::invalid(None, "batch requests are not supported; send one message per body"));
        }
        _ => return Err(FramingError::invalid(None, "a JSON-RPC message must be an object")),
    };
    // Recover the id first so errors about the rest of the shape can name it.
    let raw_id = obj.remove("id");
    let id = match &raw_id {
        None => None,
        Some(v) => match RequestId::from_value(v) {
            Some(id) => Some(id),
            None if v.is_null() && obj.contains_key("error") => None,
            None => return Err(FramingError::invalid(None, "id must be a string or an integer")),
        },
    };
    if obj.get("jsonrpc") != Some(&json!("2.0")) {
        return Err(FramingError::invalid(id, "jsonrpc must be \"2.0\""));
    }
    let params = match obj.remove("params") {
        None => None,
        Some(p @ Value::Object(_)) => Some(p),
        Some(_) => return Err(FramingError::invalid(id, "params must be an object")),
    };
    if let Some(method) = obj.remove("method") {
        let Value::String(method) = method else {
            return Err(FramingError::invalid(id, "method must be a string"));
        };
        if obj.contains_key("result") || obj.contains_key("error") {
            return Err(FramingError::invalid(id, "a request can't carry result or error"));
        }
        return Ok(match id {
            Some(id) => Message::Request { id, method, params },
            None => Message::Notification { method, params },
        });
    }
    match (obj.remove("result"), obj.remove("error")) {
        (Some(result), None) => match id {
            Some(id) => Ok(Message::Response { id, result }),
            None => Err(FramingError::invalid(None, "a response needs an id")),
        },
        (None, Some(error)) => {
            let error: ErrorObject =
                serde_json::from_value(error).map_err(|e| FramingError::invalid(id.clone(), format!("malformed error object: {e}")))?;
            Ok(Message::Error { id, error })
        }
        (Some(_), Some(_)) => Err(FramingError::invalid(id, "a response can't carry both result and error")),
        (None, None) => Err(FramingError::invalid(id, "missing method")),
    }
}

/// Whether `value` encodes to more than `limit` bytes of JSON. Counts without building the
/// text, and stops at the limit (a 4 MB value costs no more than a `limit`-sized one).
pub fn encodes_longer_than(value: &Value, limit: usize) -> bool {
    struct Budget(usize);
    impl std::io::Write for Budget {
        fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
            self.0 = self.0.checked_sub(buf.len()).ok_or_else(|| std::io::Error::other("over the limit"))?;
            Ok(buf.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }
    serde_json::to_writer(Budget(limit), value).is_err()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn code(bytes: &str) -> i64 {
        parse_message(bytes.as_bytes()).unwrap_err().error.code
    }

    #[test]
    fn classifies_every_shape() {
        assert!(matches!(
            parse_message(br#"{"jsonrpc":"2.0","id":1,"method":"ping"}"#).unwrap(),
            Message::Request { id: RequestId::Number(1), .. }
        ));
        assert!(matches!(
            parse_message(br#"{"jsonrpc":"2.0","method":"notifications/initialized"}"#).unwrap(),
            Message::Notification { .. }
        ));
        assert!(matches!(
            parse_message(br#"{"jsonrpc":"2.0","id":"a","result":{}}"#).unwrap(),
            Message::Response { id: RequestId::String(_), .. }
        ));
        assert!(matches!(
            parse_message(br#"{"jsonrpc":"2.0","id":"a","error":{"code":-1,"message":"no"}}"#).unwrap(),
            Message::Error { .. }
        ));
    }

    #[test]
    fn malformed_shapes_get_precise_codes() {
        assert_eq!(code("{not json"), PARSE_ERROR);
        assert_eq!(code("[]"), INVALID_REQUEST);
        assert_eq!(code(r#"[{"jsonrpc":"2.0","id":1,"method":"ping"}]"#), INVALID_REQUEST);
        assert_eq!(code(r#""text""#), INVALID_REQUEST);
        assert_eq!(code(r#"{"jsonrpc":"1.0","id":1,"method":"ping"}"#), INVALID_REQUEST);
        assert_eq!(code(r#"{"jsonrpc":"2.0","id":1}"#), INVALID_REQUEST);
        assert_eq!(code(r#"{"jsonrpc":"2.0","id":1.5,"method":"ping"}"#), INVALID_REQUEST);
        assert_eq!(code(r#"{"jsonrpc":"2.0","id":{},"method":"ping"}"#), INVALID_REQUEST);
        assert_eq!(code(r#"{"jsonrpc":"2.0","id":null,"method":"ping"}"#), INVALID_REQUEST);
        assert_eq!(code(r#"{"jsonrpc":"2.0","id":1,"method":7}"#), INVALID_REQUEST);
        assert_eq!(code(r#"{"jsonrpc":"2.0","id":1,"method":"x","params":[1]}"#), INVALID_REQUEST);
    }

    #[test]
    fn invalid_request_keeps_the_id() {
        let err = parse_message(br#"{"jsonrpc":"1.0","id":"k","method":"ping"}"#).unwrap_err();
        assert_eq!(err.id, Some(RequestId::String("k".into())));
    }

    #[test]
    fn deep_nesting_is_refused_before_parsing() {
        let deep = format!("{}{}", "[".repeat(MAX_NESTING + 1), "]".repeat(MAX_NESTING + 1));
        assert_eq!(code(&deep), PARSE_ERROR);
        // Brackets inside strings don't count.
        let body = format!(r#"{{"jsonrpc":"2.0","id":1,"method":"ping","params":{{"s":"{}"}}}}"#, "[".repeat(500));
        assert!(parse_message(body.as_bytes()).is_ok());
    }

    #[test]
    fn round_trips_through_json() {
        let msg = Message::request(RequestId::String("x".into()), "ping", json!({}));
        assert_eq!(parse_message(msg.to_json().as_bytes()).unwrap(), msg);
        let err = Message::error(None, ErrorObject::new(PARSE_ERROR, "bad"));
        assert_eq!(err.to_value()["id"], Value::Null);
    }

    #[test]
    fn every_kind_of_message_has_one_json_form_however_it_is_written() {
        let messages = [
            Message::request(RequestId::Number(7), "elicitation/create", json!({"message": "ok?", "n": [1, 2]})),
            Message::Request { id: RequestId::String("r".into()), method: "ping".into(), params: None },
            Message::notification("notifications/progress", json!({"progress": 1})),
            Message::Notification { method: "notifications/initialized".into(), params: None },
            Message::response(RequestId::String("a".into()), json!({"action": "accept", "content": {"x": true}})),
            Message::error(Some(RequestId::Number(1)), ErrorObject::invalid_params("bad").with_data(json!({"limit": 3}))),
            Message::error(None, ErrorObject::new(PARSE_ERROR, "bad")),
        ];
        for msg in messages {
            let text: Value = serde_json::from_str(&msg.to_json()).unwrap();
            assert_eq!(text["jsonrpc"], "2.0");
            assert_eq!(msg.to_value(), text, "{msg:?}");
            assert_eq!(msg.clone().into_value(), text, "{msg:?}");
            assert_eq!(parse_message(msg.to_json().as_bytes()).unwrap(), msg);
        }
    }

    #[test]
    fn encoded_length_is_compared_with_the_limit() {
        let value = json!({"a": "x".repeat(100)});
        let len = value.to_string().len();
        assert!(!encodes_longer_than(&value, len));
        assert!(encodes_longer_than(&value, len - 1));
        assert!(!encodes_longer_than(&Value::Null, 4));
    }
}
