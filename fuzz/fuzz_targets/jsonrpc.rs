//! The JSON-RPC parser every MCP request body goes through, and the 2026-07-28 era rules
//! applied to what it parsed: no input panics, and a parsed message survives a round trip.
#![no_main]

use libfuzzer_sys::fuzz_target;
use switchboard_node::protocol::era::{self, ModernHeaders};
use switchboard_node::protocol::jsonrpc::parse_message;

fuzz_target!(|data: &[u8]| {
    let Ok(message) = parse_message(data) else { return };
    let again = parse_message(message.to_json().as_bytes()).expect("a message it printed parses again");
    assert_eq!(again.to_json(), message.to_json());
    let text = String::from_utf8_lossy(data);
    let header = text.get(..text.len().min(12));
    let _ = era::classify(header, &message);
    let value = message.to_value();
    let method = value.get("method").and_then(|m| m.as_str()).unwrap_or_default();
    let headers = ModernHeaders { protocol_version: header, method: Some(method), name: header, ..ModernHeaders::default() };
    let _ = era::validate(&headers, method, value.get("params"));
    let _ = era::decode_header_value(&text);
});
