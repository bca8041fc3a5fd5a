//! Which era a request belongs to, and the checks a modern (2026-07-28) request must pass
//! before anything runs. Pure: the transport hands in header values and the parsed body.
//!
//! Since 2026-07-28 a request carries its protocol version and the client's capabilities in
//! `params._meta`, with the version (and the method, and the tool, prompt or resource it names)
//! repeated in headers so that proxies can route without reading bodies. Older clients run an
//! `initialize` handshake and name a session instead. One endpoint serves both: the era is
//! decided per request, never remembered.

use super::jsonrpc::{ErrorObject, HEADER_MISMATCH, INVALID_PARAMS, METHOD_NOT_FOUND, Message, UNSUPPORTED_PROTOCOL_VERSION};
use super::types::{ClientCapabilities, Implementation, LogLevel, ProtocolVersion};
use base64::Engine;
use serde_json::{Value, json};

/// `_meta` key of the protocol version a modern request speaks.
pub const META_PROTOCOL_VERSION: &str = "io.modelcontextprotocol/protocolVersion";
/// `_meta` key of the client's capabilities, sent with every modern request.
pub const META_CLIENT_CAPABILITIES: &str = "io.modelcontextprotocol/clientCapabilities";
/// `_meta` key of the client's name and version (optional).
pub const META_CLIENT_INFO: &str = "io.modelcontextprotocol/clientInfo";
/// `_meta` key of the log level a request wants `notifications/message` at; without it, none.
pub const META_LOG_LEVEL: &str = "io.modelcontextprotocol/logLevel";
/// `_meta` key of the server's name and version on every modern result.
pub const META_SERVER_INFO: &str = "io.modelcontextprotocol/serverInfo";
/// `_meta` key tagging every notification of a `subscriptions/listen` stream.
pub const META_SUBSCRIPTION_ID: &str = "io.modelcontextprotocol/subscriptionId";

/// Revisions that have an `initialize` handshake. A header naming one of them (or none at all)
/// keeps a request on the legacy path.
const HANDSHAKE_VERSIONS: [&str; 4] = ["2025-11-25", "2025-06-18", "2025-03-26", "2024-11-05"];

/// Methods a modern request may call. Everything else, including what 2026-07-28 removed
/// (`initialize`, `ping`, `logging/setLevel`, `resources/subscribe`, `resources/unsubscribe`),
/// is 404 with -32601.
pub const MODERN_METHODS: [&str; 13] = [
    "server/discover",
    "subscriptions/listen",
    "tools/list",
    "tools/call",
    "prompts/list",
    "prompts/get",
    "resources/list",
    "resources/templates/list",
    "resources/read",
    "completion/complete",
    // The Tasks extension (a request that does not declare it gets -32021).
    "tasks/get",
    "tasks/update",
    "tasks/cancel",
];

/// The methods that may answer `input_required` (multi-round-trip requests).
pub const MRTR_METHODS: [&str; 3] = ["tools/call", "prompts/get", "resources/read"];

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Era {
    /// `initialize` handshake and sessions (2025-11-25 and before).
    Legacy,
    /// Per-request `_meta`, no session (2026-07-28).
    Modern,
}

/// The era of a POSTed message: modern when its `_meta` names a protocol version, or when the
/// `MCP-Protocol-Version` header names anything but a handshake-era revision. Responses of the
/// client (answers to server-to-client requests) exist only in the legacy era.
pub fn classify(header_version: Option<&str>, message: &Message) -> Era {
    let params = match message {
        Message::Request { params, .. } | Message::Notification { params, .. } => params.as_ref(),
        Message::Response { .. } | Message::Error { .. } => return Era::Legacy,
    };
    if meta(params).is_some_and(|m| m.contains_key(META_PROTOCOL_VERSION)) {
        return Era::Modern;
    }
    match header_version {
        Some(v) if !HANDSHAKE_VERSIONS.contains(&v.trim()) => Era::Modern,
        _ => Era::Legacy,
    }
}

/// The era of a GET or DELETE: modern only by its header (it has no body). A modern client
/// has no use for either: 405.
pub fn classify_header(header_version: Option<&str>) -> Era {
    match header_version {
        Some(v) if !HANDSHAKE_VERSIONS.contains(&v.trim()) => Era::Modern,
        _ => Era::Legacy,
    }
}

fn meta(params: Option<&Value>) -> Option<&serde_json::Map<String, Value>> {
    params?.get("_meta")?.as_object()
}

/// The headers of a modern request, as text (a value that is not visible ASCII is passed as
/// `Some("")`, which matches nothing).
#[derive(Debug, Clone, Default)]
pub struct ModernHeaders<'a> {
    pub protocol_version: Option<&'a str>,
    pub method: Option<&'a str>,
    pub name: Option<&'a str>,
    /// `Mcp-Param-{Name}` headers: `(Name, value)`.
    pub params: Vec<(&'a str, &'a str)>,
}

/// What the server takes from a modern request's `_meta`.
#[derive(Debug, Clone, PartialEq)]
pub struct ModernMeta {
    pub version: ProtocolVersion,
    pub capabilities: ClientCapabilities,
    pub client_info: Option<Implementation>,
    /// `notifications/message` at or above this level; `None`: none at all.
    pub log_level: Option<LogLevel>,
    pub progress_token: Option<Value>,
    /// The `Mcp-Param-{Name}` headers it came with, checked against the tool's annotated
    /// arguments once the tool is known ([`check_param_headers`]).
    pub param_headers: Vec<(String, String)>,
}

/// A modern request refused before it ran: the HTTP status and the JSON-RPC error (sent with
/// the request's own id).
#[derive(Debug, Clone, PartialEq)]
pub struct Rejection {
    pub status: u16,
    pub error: ErrorObject,
}

impl Rejection {
    fn new(status: u16, code: i64, message: impl Into<String>) -> Self {
        Rejection { status, error: ErrorObject::new(code, message) }
    }
    fn mismatch(message: impl Into<String>) -> Self {
        Self::new(400, HEADER_MISMATCH, message)
    }
}

/// The body value `Mcp-Name` must repeat for `method`, and where it is: `params.name`,
/// `params.uri` or `params.taskId`.
fn named_param(method: &str) -> Option<&'static str> {
    match method {
        "tools/call" | "prompts/get" => Some("name"),
        "resources/read" => Some("uri"),
        "tasks/get" | "tasks/update" | "tasks/cancel" => Some("taskId"),
        _ => None,
    }
}

/// A header value as the client meant it: surrounding spaces and tabs trimmed, and a
/// `=?base64?…?=` value (how non-ASCII names travel) decoded. `None` when it does not decode.
pub fn decode_header_value(raw: &str) -> Option<String> {
    let value = raw.trim_matches([' ', '\t']);
    match value.strip_prefix("=?base64?").and_then(|v| v.strip_suffix("?=")) {
        Some(encoded) => {
            let bytes = base64::engine::general_purpose::STANDARD.decode(encoded).ok()?;
            String::from_utf8(bytes).ok()
        }
        None => Some(value.to_string()),
    }
}

/// Check a modern request in the order the specification (and its conformance suite) tests:
/// header presence, `_meta` shape, header agreement, version, method, log level.
pub fn validate(headers: &ModernHeaders, method: &str, params: Option<&Value>) -> Result<ModernMeta, Rejection> {
    let meta = meta(params);
    let meta_version = meta.and_then(|m| m.get(META_PROTOCOL_VERSION));
    let Some(header_version) = headers.protocol_version.map(str::trim) else {
        return Err(Rejection::mismatch("Header mismatch: MCP-Protocol-Version header is required with _meta protocolVersion"));
    };
    let Some(meta) = meta else {
        return Err(Rejection::new(
            400,
            INVALID_PARAMS,
            "params._meta is required: it carries the protocol version and client capabilities",
        ));
    };
    let Some(meta_version) = meta_version.and_then(Value::as_str) else {
        return Err(Rejection::new(400, INVALID_PARAMS, format!("params._meta[\"{META_PROTOCOL_VERSION}\"] must be a string")));
    };
    let capabilities = match meta.get(META_CLIENT_CAPABILITIES) {
        Some(caps @ Value::Object(_)) => ClientCapabilities(caps.clone()),
        _ => {
            return Err(Rejection::new(400, INVALID_PARAMS, format!("params._meta[\"{META_CLIENT_CAPABILITIES}\"] must be an object")));
        }
    };
    if header_version != meta_version {
        return Err(Rejection::mismatch(format!(
            "Header mismatch: MCP-Protocol-Version header value '{header_version}' does not match body value '{meta_version}'"
        )));
    }
    match headers.method.map(str::trim) {
        None => return Err(Rejection::mismatch("Header mismatch: Mcp-Method header is required")),
        Some(m) if m != method => {
            return Err(Rejection::mismatch(format!(
                "Header mismatch: Mcp-Method header value '{m}' does not match body value '{method}'"
            )));
        }
        Some(_) => {}
    }
    if let Some(key) = named_param(method) {
        let body = params.and_then(|p| p.get(key)).and_then(Value::as_str);
        match (headers.name.map(decode_header_value), body) {
            (None, _) => return Err(Rejection::mismatch(format!("Header mismatch: Mcp-Name header is required for {method}"))),
            (Some(None), _) => return Err(Rejection::mismatch("Header mismatch: Mcp-Name header value is not valid =?base64?…?=")),
            (Some(Some(name)), Some(body)) if name == body => {}
            (Some(Some(name)), body) => {
                return Err(Rejection::mismatch(format!(
                    "Header mismatch: Mcp-Name header value '{name}' does not match body value '{}'",
                    body.unwrap_or("")
                )));
            }
        }
    }
    let version = match ProtocolVersion::parse(meta_version).filter(|v| v.is_modern()) {
        Some(v) => v,
        None => {
            let supported: Vec<&str> = ProtocolVersion::SUPPORTED.iter().map(|v| v.as_str()).collect();
            let error = ErrorObject::new(UNSUPPORTED_PROTOCOL_VERSION, "Unsupported protocol version")
                .with_data(json!({"supported": supported, "requested": meta_version}));
            return Err(Rejection { status: 400, error });
        }
    };
    if !MODERN_METHODS.contains(&method) {
        return Err(Rejection { status: 404, error: ErrorObject::method_not_found(method) });
    }
    let log_level =
        match meta.get(META_LOG_LEVEL) {
            None | Some(Value::Null) => None,
            Some(level) => Some(serde_json::from_value(level.clone()).map_err(|_| {
                Rejection::new(400, INVALID_PARAMS, format!("params._meta[\"{META_LOG_LEVEL}\"] is not a log level: {level}"))
            })?),
        };
    let client_info = meta.get(META_CLIENT_INFO).and_then(|v| serde_json::from_value::<Implementation>(v.clone()).ok());
    let param_headers = headers.params.iter().map(|(name, value)| (name.to_string(), value.to_string())).collect();
    Ok(ModernMeta { version, capabilities, client_info, log_level, progress_token: meta.get("progressToken").cloned(), param_headers })
}

/// SEP-2243: every argument a tool annotates with `x-mcp-header` must be mirrored, equal, in
/// its `Mcp-Param-{Name}` header (decoded like `Mcp-Name`), so that a proxy routing on the
/// header routes on the truth. `declared` is the tool's `(argument, header)` list, `sent` the
/// request's headers.
pub fn check_param_headers(declared: &[(String, String)], arguments: Option<&Value>, sent: &[(String, String)]) -> Result<(), ErrorObject> {
    for (argument, header) in declared {
        let body = match arguments.and_then(|a| a.get(argument)) {
            None | Some(Value::Null) => None,
            Some(Value::String(text)) => Some(text.clone()),
            Some(other) => Some(other.to_string()),
        };
        let raw = sent.iter().find(|(name, _)| name.eq_ignore_ascii_case(header)).map(|(_, value)| value.as_str());
        let mismatch = |why: String| Err(ErrorObject::new(HEADER_MISMATCH, format!("Header mismatch: Mcp-Param-{header} {why}")));
        match (raw.map(decode_header_value), body) {
            (None, None) => {}
            (None, Some(_)) => return mismatch(format!("header is required: argument {argument} is set")),
            (Some(None), _) => return mismatch("header value is not valid =?base64?…?=".into()),
            (Some(Some(value)), Some(body)) if value == body => {}
            (Some(Some(value)), body) => {
                return mismatch(format!("header value '{value}' does not match body value '{}'", body.unwrap_or_default()));
            }
        }
    }
    Ok(())
}

/// 404 is the status of an unknown method; every other rejection is 400.
pub fn status_of(error: &ErrorObject) -> u16 {
    if error.code == METHOD_NOT_FOUND { 404 } else { 400 }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::protocol::jsonrpc::{MISSING_REQUIRED_CLIENT_CAPABILITY, RequestId};

    fn request(method: &str, params: Value) -> Message {
        Message::Request { id: RequestId::Number(1), method: method.into(), params: Some(params) }
    }

    fn modern_meta(version: &str) -> Value {
        json!({META_PROTOCOL_VERSION: version, META_CLIENT_CAPABILITIES: {}})
    }

    #[test]
    fn era_is_decided_by_meta_or_a_non_handshake_header() {
        let with_meta = request("tools/list", json!({"_meta": modern_meta("2026-07-28")}));
        let plain = request("tools/list", json!({}));
        let answer = Message::response(RequestId::Number(1), json!({}));
        let table: [(Option<&str>, &Message, Era); 10] = [
            (None, &plain, Era::Legacy),
            (Some("2025-11-25"), &plain, Era::Legacy),
            (Some("2025-06-18"), &plain, Era::Legacy),
            (Some("2024-11-05"), &plain, Era::Legacy),
            (Some("2026-07-28"), &plain, Era::Modern),
            (Some("v999"), &plain, Era::Modern),
            (None, &with_meta, Era::Modern),
            (Some("2025-11-25"), &with_meta, Era::Modern),
            (Some("2026-07-28"), &answer, Era::Legacy),
            (Some(" 2025-11-25 "), &plain, Era::Legacy),
        ];
        for (header, message, era) in table {
            assert_eq!(classify(header, message), era, "header {header:?}, {}", message.to_json());
        }
        assert_eq!(classify_header(Some("2026-07-28")), Era::Modern);
        assert_eq!(classify_header(None), Era::Legacy);
    }

    /// The validation table: header × `_meta` × method × `Mcp-Method`/`Mcp-Name`.
    #[test]
    fn modern_validation_follows_the_specified_order() {
        let v = "2026-07-28";
        let ok_call = json!({"name": "echo", "_meta": modern_meta(v)});
        let h = |version: Option<&'static str>, method: Option<&'static str>, name: Option<&'static str>| ModernHeaders {
            protocol_version: version,
            method,
            name,
            params: Vec::new(),
        };
        #[rustfmt::skip]
        /// Headers, method, params, and the refusal expected (`None`: accepted).
        type Row<'a> = (ModernHeaders<'a>, &'a str, Value, Option<(u16, i64)>);
        let table: Vec<Row> = vec![
            // Accepted, with the name plain, padded, or base64-encoded.
            (h(Some(v), Some("tools/call"), Some("echo")), "tools/call", ok_call.clone(), None),
            (h(Some(v), Some("tools/call"), Some("  echo\t")), "tools/call", ok_call.clone(), None),
            (h(Some(v), Some("tools/call"), Some("=?base64?ZWNobw==?=")), "tools/call", ok_call.clone(), None),
            (h(Some(v), Some("tools/list"), None), "tools/list", json!({"_meta": modern_meta(v)}), None),
            // 1. `_meta` names a version but the header is missing.
            (h(None, Some("tools/call"), Some("echo")), "tools/call", ok_call.clone(), Some((400, HEADER_MISMATCH))),
            // 2. `_meta` missing, or without version or capabilities.
            (h(Some(v), Some("server/discover"), None), "server/discover", json!({}), Some((400, INVALID_PARAMS))),
            (
                h(Some(v), Some("server/discover"), None),
                "server/discover",
                json!({"_meta": {META_CLIENT_CAPABILITIES: {}}}),
                Some((400, INVALID_PARAMS)),
            ),
            (
                h(Some(v), Some("server/discover"), None),
                "server/discover",
                json!({"_meta": {META_PROTOCOL_VERSION: v}}),
                Some((400, INVALID_PARAMS)),
            ),
            (
                h(Some(v), Some("server/discover"), None),
                "server/discover",
                json!({"_meta": {META_PROTOCOL_VERSION: v, META_CLIENT_CAPABILITIES: []}}),
                Some((400, INVALID_PARAMS)),
            ),
            // 3. Header and `_meta` disagree: a mismatch even when `_meta` names an unknown version.
            (h(Some(v), Some("tools/list"), None), "tools/list", json!({"_meta": modern_meta("v999.0.0")}), Some((400, HEADER_MISMATCH))),
            // 4. Mcp-Method / Mcp-Name missing or wrong or undecodable.
            (h(Some(v), None, None), "tools/list", json!({"_meta": modern_meta(v)}), Some((400, HEADER_MISMATCH))),
            (h(Some(v), Some("tasks/get"), Some("echo")), "tools/call", ok_call.clone(), Some((400, HEADER_MISMATCH))),
            (h(Some(v), Some("tools/call"), None), "tools/call", ok_call.clone(), Some((400, HEADER_MISMATCH))),
            (h(Some(v), Some("tools/call"), Some("other")), "tools/call", ok_call.clone(), Some((400, HEADER_MISMATCH))),
            (h(Some(v), Some("tools/call"), Some("=?base64?!!?=")), "tools/call", ok_call.clone(), Some((400, HEADER_MISMATCH))),
            // 5. A version not served statelessly, handshake-era ones included.
            (
                h(Some("v999.0.0"), Some("tools/list"), None),
                "tools/list",
                json!({"_meta": modern_meta("v999.0.0")}),
                Some((400, UNSUPPORTED_PROTOCOL_VERSION)),
            ),
            (
                h(Some("2025-11-25"), Some("tools/list"), None),
                "tools/list",
                json!({"_meta": modern_meta("2025-11-25")}),
                Some((400, UNSUPPORTED_PROTOCOL_VERSION)),
            ),
            // 6. Removed and unknown methods.
            (h(Some(v), Some("initialize"), None), "initialize", json!({"_meta": modern_meta(v)}), Some((404, METHOD_NOT_FOUND))),
            (h(Some(v), Some("ping"), None), "ping", json!({"_meta": modern_meta(v)}), Some((404, METHOD_NOT_FOUND))),
            (
                h(Some(v), Some("resources/subscribe"), None),
                "resources/subscribe",
                json!({"_meta": modern_meta(v)}),
                Some((404, METHOD_NOT_FOUND)),
            ),
            (h(Some(v), Some("unknown/method"), None), "unknown/method", json!({"_meta": modern_meta(v)}), Some((404, METHOD_NOT_FOUND))),
            // 7. A log level that is none.
            (
                h(Some(v), Some("tools/list"), None),
                "tools/list",
                json!({"_meta": {META_PROTOCOL_VERSION: v, META_CLIENT_CAPABILITIES: {}, META_LOG_LEVEL: "loud"}}),
                Some((400, INVALID_PARAMS)),
            ),
        ];
        for (headers, method, params, expected) in table {
            let got = validate(&headers, method, Some(&params)).map(drop).map_err(|r| (r.status, r.error.code));
            assert_eq!(got.err(), expected, "{headers:?} {method} {params}");
        }
    }

    #[test]
    fn mirrored_arguments_must_match_their_headers() {
        let declared = vec![("region".to_string(), "Region".to_string())];
        let args = json!({"region": "Hello"});
        let sent = |v: &str| vec![("region".to_string(), v.to_string())];
        assert!(check_param_headers(&declared, Some(&args), &sent("=?base64?SGVsbG8=?=")).is_ok());
        assert!(check_param_headers(&declared, Some(&args), &sent("Hello")).is_ok());
        assert!(check_param_headers(&declared, Some(&json!({"region": "SGVsbG8="})), &sent("SGVsbG8=")).is_ok(), "no prefix: literal");
        for bad in ["=?base64?SGVsbG8?=", "=?base64?SGVs!!!bG8=?=", "Other"] {
            let refused = check_param_headers(&declared, Some(&args), &sent(bad)).unwrap_err();
            assert_eq!(refused.code, HEADER_MISMATCH, "{bad}");
        }
        assert!(check_param_headers(&declared, Some(&args), &[]).is_err(), "missing header");
        assert!(check_param_headers(&declared, Some(&json!({})), &[]).is_ok(), "neither");
        assert!(check_param_headers(&[], Some(&args), &sent("anything")).is_ok(), "not annotated: not checked");
    }

    #[test]
    fn unsupported_version_lists_what_is_served() {
        let headers = ModernHeaders { protocol_version: Some("1900-01-01"), method: Some("tools/list"), ..Default::default() };
        let rejection = validate(&headers, "tools/list", Some(&json!({"_meta": modern_meta("1900-01-01")}))).unwrap_err();
        let data = rejection.error.data.unwrap();
        assert_eq!(data["requested"], "1900-01-01");
        assert_eq!(data["supported"][0], "2026-07-28");
        assert!(data["supported"].as_array().unwrap().contains(&json!("2025-11-25")));
    }

    #[test]
    fn meta_fields_are_read() {
        let headers = ModernHeaders { protocol_version: Some("2026-07-28"), method: Some("tools/list"), ..Default::default() };
        let params = json!({"_meta": {
            META_PROTOCOL_VERSION: "2026-07-28",
            META_CLIENT_CAPABILITIES: {"sampling": {}},
            META_CLIENT_INFO: {"name": "c", "version": "1"},
            META_LOG_LEVEL: "warning",
            "progressToken": 7
        }});
        let meta = validate(&headers, "tools/list", Some(&params)).unwrap();
        assert!(meta.capabilities.sampling() && !meta.capabilities.elicitation_form());
        assert_eq!(meta.client_info.unwrap().name, "c");
        assert_eq!(meta.log_level, Some(LogLevel::Warning));
        assert_eq!(meta.progress_token, Some(json!(7)));
        // clientInfo is optional.
        let params = json!({"_meta": modern_meta("2026-07-28")});
        assert_eq!(validate(&headers, "tools/list", Some(&params)).unwrap().client_info, None);
        assert_eq!(status_of(&ErrorObject::new(MISSING_REQUIRED_CLIENT_CAPABILITY, "x")), 400);
    }
}
