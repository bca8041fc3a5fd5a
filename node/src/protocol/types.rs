//! MCP message types for protocol versions 2026-07-28 (per-request `_meta`, no handshake),
//! 2025-11-25 and 2025-06-18 (and 2025-03-26 on input).
//!
//! Only the shapes the server builds or must read field-by-field are typed; open-ended parts
//! (schemas, `_meta`, client capability sub-objects) stay `serde_json::Value`.

use serde::{Deserialize, Serialize};
use serde_json::{Value, json};

/// The MCP revisions this server speaks. Ordered oldest first, so `version >= V2025_11_25`
/// reads "at least 2025-11-25". Written as the revision's date everywhere (headers, session
/// records).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub enum ProtocolVersion {
    #[serde(rename = "2025-03-26")]
    V2025_03_26,
    #[serde(rename = "2025-06-18")]
    V2025_06_18,
    #[serde(rename = "2025-11-25")]
    V2025_11_25,
    /// The first revision without `initialize`: every request carries its version and the
    /// client's capabilities in `_meta`, and the server is stateless between requests.
    #[serde(rename = "2026-07-28")]
    V2026_07_28,
}

impl ProtocolVersion {
    /// Offered when a client's `initialize` asks for a revision this server does not know:
    /// the newest revision that has a handshake.
    pub const LATEST: ProtocolVersion = ProtocolVersion::V2025_11_25;
    /// Every revision served, newest first (what `server/discover` and -32022 list).
    pub const SUPPORTED: [ProtocolVersion; 4] =
        [ProtocolVersion::V2026_07_28, ProtocolVersion::V2025_11_25, ProtocolVersion::V2025_06_18, ProtocolVersion::V2025_03_26];
    /// The revisions served statelessly, with per-request `_meta`.
    pub const MODERN: [ProtocolVersion; 1] = [ProtocolVersion::V2026_07_28];

    pub fn as_str(self) -> &'static str {
        match self {
            ProtocolVersion::V2025_03_26 => "2025-03-26",
            ProtocolVersion::V2025_06_18 => "2025-06-18",
            ProtocolVersion::V2025_11_25 => "2025-11-25",
            ProtocolVersion::V2026_07_28 => "2026-07-28",
        }
    }

    /// Whether this revision is served statelessly (no `initialize`, no session).
    pub fn is_modern(self) -> bool {
        Self::MODERN.contains(&self)
    }

    /// The revision named `text`, if this server speaks it.
    pub fn parse(text: &str) -> Option<ProtocolVersion> {
        Self::SUPPORTED.into_iter().find(|v| v.as_str() == text)
    }

    /// The revision answered to an `initialize` that asked for `requested`: never a modern
    /// one, which has no handshake.
    pub fn negotiate(requested: &str) -> ProtocolVersion {
        Self::parse(requested).filter(|v| !v.is_modern()).unwrap_or(Self::LATEST)
    }
}

impl std::fmt::Display for ProtocolVersion {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct Implementation {
    pub name: String,
    pub version: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub title: Option<String>,
}

/// The most of each `clientInfo` field (name, version, title) a session keeps: enough for any
/// real client's name, and a replicated record that no client can inflate.
pub const MAX_CLIENT_INFO_FIELD_BYTES: usize = 256;

impl Implementation {
    /// This implementation with each field cut to at most `max` bytes, at a char boundary.
    pub fn truncated(mut self, max: usize) -> Self {
        truncate_to(&mut self.name, max);
        truncate_to(&mut self.version, max);
        if let Some(title) = &mut self.title {
            truncate_to(title, max);
        }
        self
    }
}

/// Cut `text` to at most `max` bytes without splitting a character.
fn truncate_to(text: &mut String, max: usize) {
    if text.len() <= max {
        return;
    }
    let mut end = max;
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    text.truncate(end);
    *text = super::json_text::kept(std::mem::take(text));
}

#[derive(Debug, Clone, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct InitializeParams {
    pub protocol_version: String,
    #[serde(default)]
    pub capabilities: ClientCapabilities,
    pub client_info: Implementation,
}

/// The name of the MCP Tasks extension, in capabilities.
pub const TASKS_EXTENSION: &str = "io.modelcontextprotocol/tasks";

/// What the client said it can do, as it came in `initialize` (any JSON object). Only read once,
/// to derive the [`CapabilityFlags`] a session keeps.
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq)]
#[serde(transparent)]
pub struct ClientCapabilities(pub Value);

impl ClientCapabilities {
    fn get(&self, key: &str) -> Option<&Value> {
        self.0.get(key).filter(|v| !v.is_null())
    }
    /// Form-mode elicitation. An `elicitation: {}` object (2025-06-18 style) means form.
    pub fn elicitation_form(&self) -> bool {
        match self.get("elicitation") {
            Some(Value::Object(m)) => m.is_empty() || m.contains_key("form"),
            _ => false,
        }
    }
    pub fn elicitation_url(&self) -> bool {
        self.get("elicitation").and_then(|e| e.get("url")).is_some()
    }
    pub fn sampling(&self) -> bool {
        self.get("sampling").is_some()
    }
    pub fn sampling_tools(&self) -> bool {
        self.get("sampling").and_then(|s| s.get("tools")).is_some()
    }
    pub fn roots(&self) -> bool {
        self.get("roots").is_some()
    }
    /// Whether the client declared extension `name` (an object under `extensions`).
    pub fn extension(&self, name: &str) -> bool {
        self.get("extensions").and_then(|e| e.get(name)).is_some_and(Value::is_object)
    }
    pub fn roots_list_changed(&self) -> bool {
        self.get("roots").and_then(|r| r.get("listChanged")).and_then(Value::as_bool) == Some(true)
    }
    /// The answers to every question the server asks of a client's capabilities.
    pub fn flags(&self) -> CapabilityFlags {
        CapabilityFlags {
            elicitation_form: self.elicitation_form(),
            elicitation_url: self.elicitation_url(),
            sampling: self.sampling(),
            sampling_tools: self.sampling_tools(),
            roots: self.roots(),
            roots_list_changed: self.roots_list_changed(),
            tasks: self.extension(TASKS_EXTENSION),
        }
    }
}

/// The client capabilities the server acts on: all a session record keeps of the client's
/// `capabilities` object (whatever else a client declares is never read, so it is neither
/// stored nor replicated). Encoded as one byte, a bit per flag, in the Raft log and snapshots.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(from = "u8", into = "u8")]
pub struct CapabilityFlags {
    /// Form-mode elicitation (`elicitation: {}` or `elicitation.form`).
    pub elicitation_form: bool,
    /// URL-mode elicitation (`elicitation.url`, 2025-11-25).
    pub elicitation_url: bool,
    /// `sampling/createMessage`.
    pub sampling: bool,
    /// Tools in sampling requests (`sampling.tools`).
    pub sampling_tools: bool,
    /// `roots/list`.
    pub roots: bool,
    /// `notifications/roots/list_changed` (`roots.listChanged: true`).
    pub roots_list_changed: bool,
    /// The Tasks extension (`extensions["io.modelcontextprotocol/tasks"]`, 2026-07-28 only).
    pub tasks: bool,
}

impl CapabilityFlags {
    /// Bit of each flag in the encoded byte, in field order.
    const BITS: [fn(&CapabilityFlags) -> bool; 7] = [
        |f| f.elicitation_form,
        |f| f.elicitation_url,
        |f| f.sampling,
        |f| f.sampling_tools,
        |f| f.roots,
        |f| f.roots_list_changed,
        |f| f.tasks,
    ];
}

impl From<CapabilityFlags> for u8 {
    fn from(flags: CapabilityFlags) -> u8 {
        CapabilityFlags::BITS.iter().enumerate().fold(0, |byte, (bit, is_set)| byte | (u8::from(is_set(&flags)) << bit))
    }
}

impl From<u8> for CapabilityFlags {
    /// Bits this version does not know are ignored.
    fn from(byte: u8) -> CapabilityFlags {
        let bit = |n: u8| byte & (1 << n) != 0;
        CapabilityFlags {
            elicitation_form: bit(0),
            elicitation_url: bit(1),
            sampling: bit(2),
            sampling_tools: bit(3),
            roots: bit(4),
            roots_list_changed: bit(5),
            tasks: bit(6),
        }
    }
}

/// RFC 5424 levels, as MCP names them, least severe first (so `Ord` compares severity).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize, Default)]
#[serde(rename_all = "lowercase")]
pub enum LogLevel {
    Debug,
    #[default]
    Info,
    Notice,
    Warning,
    Error,
    Critical,
    Alert,
    Emergency,
}

/// One piece of content in a tool result, prompt message or sampling message.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum Content {
    Text {
        text: String,
    },
    Image {
        data: String,
        #[serde(rename = "mimeType")]
        mime_type: String,
    },
    Audio {
        data: String,
        #[serde(rename = "mimeType")]
        mime_type: String,
    },
    Resource {
        resource: ResourceContents,
    },
    ResourceLink {
        uri: String,
        name: String,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        description: Option<String>,
        #[serde(rename = "mimeType", default, skip_serializing_if = "Option::is_none")]
        mime_type: Option<String>,
    },
}

impl Content {
    pub fn text(text: impl Into<String>) -> Self {
        Content::Text { text: text.into() }
    }
}

/// The contents of one resource: text or base64 blob.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct ResourceContents {
    pub uri: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mime_type: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub text: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub blob: Option<String>,
}

impl ResourceContents {
    pub fn text(uri: impl Into<String>, mime_type: impl Into<String>, text: impl Into<String>) -> Self {
        ResourceContents { uri: uri.into(), mime_type: Some(mime_type.into()), text: Some(text.into()), blob: None }
    }
    pub fn blob(uri: impl Into<String>, mime_type: impl Into<String>, base64: impl Into<String>) -> Self {
        ResourceContents { uri: uri.into(), mime_type: Some(mime_type.into()), text: None, blob: Some(base64.into()) }
    }
}

/// The result of `tools/call`.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Default)]
#[serde(rename_all = "camelCase")]
pub struct CallToolResult {
    pub content: Vec<Content>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub structured_content: Option<Value>,
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub is_error: bool,
}

impl CallToolResult {
    pub fn text(text: impl Into<String>) -> Self {
        CallToolResult { content: vec![Content::text(text)], ..Default::default() }
    }
    pub fn content(content: Vec<Content>) -> Self {
        CallToolResult { content, ..Default::default() }
    }
    /// A tool-level failure the model should see (not a protocol error).
    pub fn error(text: impl Into<String>) -> Self {
        CallToolResult { content: vec![Content::text(text)], structured_content: None, is_error: true }
    }
    /// Structured output, with its JSON text as content for clients that predate it.
    pub fn structured(value: Value) -> Self {
        CallToolResult { content: vec![Content::text(value.to_string())], structured_content: Some(value), is_error: false }
    }
}

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct PromptArgument {
    pub name: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub description: Option<String>,
    #[serde(default)]
    pub required: bool,
}

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(rename_all = "lowercase")]
pub enum Role {
    User,
    Assistant,
}

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct PromptMessage {
    pub role: Role,
    pub content: Content,
}

impl PromptMessage {
    pub fn user(content: Content) -> Self {
        PromptMessage { role: Role::User, content }
    }
    pub fn assistant(content: Content) -> Self {
        PromptMessage { role: Role::Assistant, content }
    }
}

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Default)]
#[serde(rename_all = "camelCase")]
pub struct GetPromptResult {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub description: Option<String>,
    pub messages: Vec<PromptMessage>,
}

/// The action a user took on an elicitation.
#[derive(Debug, Clone, Copy, Serialize, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "lowercase")]
pub enum ElicitAction {
    Accept,
    Decline,
    Cancel,
}

/// The client's answer to `elicitation/create`.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct ElicitResult {
    pub action: ElicitAction,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub content: Option<serde_json::Map<String, Value>>,
}

/// A message for `sampling/createMessage`.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct SamplingMessage {
    pub role: Role,
    pub content: Value,
}

impl SamplingMessage {
    pub fn user_text(text: impl Into<String>) -> Self {
        SamplingMessage { role: Role::User, content: json!({"type": "text", "text": text.into()}) }
    }
}

/// Parameters of `sampling/createMessage`.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct CreateMessageParams {
    pub messages: Vec<SamplingMessage>,
    pub max_tokens: u32,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub system_prompt: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub model_preferences: Option<Value>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub temperature: Option<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tools: Option<Vec<Value>>,
}

impl CreateMessageParams {
    pub fn prompt(text: impl Into<String>, max_tokens: u32) -> Self {
        CreateMessageParams {
            messages: vec![SamplingMessage::user_text(text)],
            max_tokens,
            system_prompt: None,
            model_preferences: None,
            temperature: None,
            tools: None,
        }
    }
}

/// The client's answer to `sampling/createMessage`.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct CreateMessageResult {
    pub role: Role,
    pub content: Value,
    #[serde(default)]
    pub model: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stop_reason: Option<String>,
}

impl CreateMessageResult {
    /// The text of the reply, when it is a single text block.
    pub fn text(&self) -> Option<&str> {
        self.content.get("text").and_then(Value::as_str)
    }
}

/// A root the client exposes (`roots/list`).
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct Root {
    pub uri: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
}

/// The client's answer to `roots/list`.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct ListRootsResult {
    pub roots: Vec<Root>,
}

/// Which kind of server-to-client request; each has its own timeout.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RequestKind {
    Elicitation,
    Sampling,
    /// `roots/list`.
    Roots,
}

impl RequestKind {
    pub fn label(self) -> &'static str {
        match self {
            RequestKind::Elicitation => "elicitation",
            RequestKind::Sampling => "sampling",
            RequestKind::Roots => "roots",
        }
    }
}

impl std::fmt::Display for RequestKind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.label())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn version_negotiation_echoes_known_and_offers_latest_otherwise() {
        assert_eq!(ProtocolVersion::negotiate("2025-06-18"), ProtocolVersion::V2025_06_18);
        assert_eq!(ProtocolVersion::negotiate("2025-03-26"), ProtocolVersion::V2025_03_26);
        assert_eq!(ProtocolVersion::negotiate("1999-01-01"), ProtocolVersion::LATEST);
        // 2026-07-28 has no handshake: an `initialize` asking for it gets the latest that has.
        assert_eq!(ProtocolVersion::negotiate("2026-07-28"), ProtocolVersion::LATEST);
        assert!(ProtocolVersion::V2026_07_28.is_modern() && !ProtocolVersion::LATEST.is_modern());
    }

    #[test]
    fn versions_are_ordered_by_date_and_written_as_dates() {
        for v in ProtocolVersion::SUPPORTED {
            assert_eq!(ProtocolVersion::parse(v.as_str()), Some(v));
            assert_eq!(serde_json::to_value(v).unwrap(), json!(v.as_str()));
            assert_eq!(serde_json::from_value::<ProtocolVersion>(json!(v.as_str())).unwrap(), v);
        }
        let mut sorted = ProtocolVersion::SUPPORTED;
        sorted.sort();
        assert!(sorted.windows(2).all(|w| w[0].as_str() < w[1].as_str()), "Ord follows the dates");
        assert_eq!(ProtocolVersion::parse("2024-11-05"), None);
    }

    #[test]
    fn capability_questions() {
        let caps = ClientCapabilities(json!({"elicitation": {}, "sampling": {"tools": {}}}));
        assert!(caps.elicitation_form() && !caps.elicitation_url() && caps.sampling() && caps.sampling_tools());
        let caps = ClientCapabilities(json!({"elicitation": {"url": {}}}));
        assert!(!caps.elicitation_form() && caps.elicitation_url() && !caps.sampling());
        assert!(!ClientCapabilities::default().elicitation_form());
        let caps = ClientCapabilities(json!({"roots": {"listChanged": true}}));
        assert!(caps.roots() && caps.roots_list_changed());
        let caps = ClientCapabilities(json!({"roots": {}}));
        assert!(caps.roots() && !caps.roots_list_changed());
    }

    #[test]
    fn capability_flags_are_one_byte_and_round_trip() {
        let caps = ClientCapabilities(json!({"elicitation": {"form": {}, "url": {}}, "sampling": {}, "roots": {"listChanged": true},
            "experimental": {"huge": "x".repeat(10_000)}, "extensions": {"io.modelcontextprotocol/tasks": {}}}));
        let flags = caps.flags();
        assert_eq!(
            flags,
            CapabilityFlags {
                elicitation_form: true,
                elicitation_url: true,
                sampling: true,
                sampling_tools: false,
                roots: true,
                roots_list_changed: true,
                tasks: true
            }
        );
        assert!(!ClientCapabilities(json!({"extensions": {"io.modelcontextprotocol/tasks": true}})).flags().tasks, "an object, not a flag");
        let encoded = rmp_serde::to_vec_named(&flags).unwrap();
        assert_eq!(encoded.len(), 1, "a positive fixint");
        assert_eq!(rmp_serde::from_slice::<CapabilityFlags>(&encoded).unwrap(), flags);
        for byte in 0..128u8 {
            assert_eq!(u8::from(CapabilityFlags::from(byte)), byte);
        }
        assert_eq!(CapabilityFlags::from(0x80), CapabilityFlags::default(), "unknown bits are ignored");
    }

    #[test]
    fn client_info_is_cut_at_char_boundaries() {
        let info = Implementation { name: "é".repeat(200), version: "1".into(), title: Some("t".repeat(1000)) };
        let cut = info.truncated(MAX_CLIENT_INFO_FIELD_BYTES);
        assert_eq!(cut.name, "é".repeat(128), "400 bytes of two-byte chars cut to 256");
        assert_eq!(cut.version, "1");
        assert_eq!(cut.title.unwrap().len(), MAX_CLIENT_INFO_FIELD_BYTES);
        let odd = Implementation { name: format!("a{}", "é".repeat(200)), version: String::new(), title: None }.truncated(256);
        assert_eq!(odd.name.len(), 255, "never splits a character");
    }

    #[test]
    fn log_levels_order_by_severity() {
        assert!(LogLevel::Debug < LogLevel::Info && LogLevel::Error < LogLevel::Emergency);
        assert_eq!(serde_json::to_value(LogLevel::Warning).unwrap(), json!("warning"));
    }

    #[test]
    fn content_serializes_with_type_tags() {
        let v = serde_json::to_value(Content::Image { data: "AA==".into(), mime_type: "image/png".into() }).unwrap();
        assert_eq!(v, json!({"type": "image", "data": "AA==", "mimeType": "image/png"}));
        let v = serde_json::to_value(CallToolResult::error("boom")).unwrap();
        assert_eq!(v["isError"], json!(true));
        assert!(serde_json::to_value(CallToolResult::text("ok")).unwrap().get("isError").is_none());
    }
}
