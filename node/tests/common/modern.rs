//! A 2026-07-28 client for the tests: stateless requests with `_meta` and the headers that
//! repeat it.

use super::{ACCEPT_BOTH, messages_of};
use serde_json::{Value, json};
use std::collections::HashSet;
use std::sync::Mutex;
use switchboard_node::protocol::types::{CallToolResult, ElicitResult, LogLevel};
use switchboard_node::server::{ServerBuilder, ToolDef};

/// `flag` arguments of `ask_then_wait` calls whose handler was dropped (cancelled).
static DROPPED: Mutex<Option<HashSet<String>>> = Mutex::new(None);

/// Tools the 2026-07-28 tests call: two asks in one round, notifications after a resume, a
/// handler that takes its time after the answer, and one that waits until it is cancelled.
pub fn register_test_tools(builder: ServerBuilder) -> ServerBuilder {
    let go_schema = || json!({"type": "object", "properties": {"ok": {"type": "boolean"}}});
    builder
        .tool(
            ToolDef::new("ask_two", json!({"type": "object"}), |ctx, _| async move {
                let (name, color) = tokio::join!(
                    ctx.elicit_as("name", "Name?", name_schema("name")),
                    ctx.elicit_as("color", "Color?", name_schema("color"))
                );
                let (name, color) = (name?, color?);
                let field = |r: &ElicitResult, f: &str| {
                    r.content.as_ref().and_then(|c| c.get(f)).and_then(Value::as_str).unwrap_or("-").to_string()
                };
                Ok(CallToolResult::text(format!("{}/{}", field(&name, "name"), field(&color, "color"))))
            })
            .unwrap(),
        )
        .tool(
            ToolDef::new("ask_then_report", json!({"type": "object"}), move |ctx, _| async move {
                ctx.elicit_as("go", "Go?", go_schema()).await?;
                ctx.progress(1.0, Some(1.0), Some("resumed"));
                ctx.log(LogLevel::Info, None, json!("after the answer"));
                Ok(CallToolResult::text(format!("token={}", ctx.progress_token().unwrap_or(Value::Null))))
            })
            .unwrap(),
        )
        .tool(
            ToolDef::new("ask_then_sleep", json!({"type": "object"}), move |ctx, args| async move {
                ctx.elicit_as("go", "Go?", go_schema()).await?;
                tokio::time::sleep(std::time::Duration::from_millis(args["ms"].as_u64().unwrap_or(0))).await;
                Ok(CallToolResult::text("slept"))
            })
            .unwrap(),
        )
        .tool(
            ToolDef::new("progress_then_ask", json!({"type": "object"}), move |ctx, _| async move {
                ctx.progress(0.5, None, Some("about to ask"));
                ctx.elicit_as("go", "Go?", go_schema()).await?;
                Ok(CallToolResult::text("done"))
            })
            .unwrap(),
        )
        .tool(
            ToolDef::new("ask_then_wait", json!({"type": "object"}), move |ctx, args| async move {
                ctx.elicit_as("go", "Go?", go_schema()).await?;
                // A cancelled handler is dropped where it waits: the guard tells.
                struct RecordDrop(String);
                impl Drop for RecordDrop {
                    fn drop(&mut self) {
                        DROPPED.lock().unwrap().get_or_insert_default().insert(self.0.clone());
                    }
                }
                let _dropped = RecordDrop(args["flag"].as_str().unwrap_or_default().to_string());
                ctx.progress(0.5, None, Some("waiting for cancel"));
                std::future::pending::<()>().await;
                Ok(CallToolResult::text("never"))
            })
            .unwrap(),
        )
}

/// Whether the `ask_then_wait` call with this `flag` was dropped.
pub fn was_dropped(flag: &str) -> bool {
    DROPPED.lock().unwrap().as_ref().is_some_and(|d| d.contains(flag))
}

pub const V: &str = "2026-07-28";

/// A 2026-07-28 client: every request carries its version and capabilities in `_meta` and
/// the headers that repeat them.
pub struct Modern {
    pub http: reqwest::Client,
    pub url: String,
    pub capabilities: Value,
}

pub struct Answer {
    pub status: u16,
    /// The node that answered (`x-switchboard-node`).
    pub node: Option<u64>,
    /// Every message of the answer (notifications first, the response last).
    pub messages: Vec<Value>,
}

impl Answer {
    pub fn last(&self) -> &Value {
        self.messages.last().expect("an answer has a message")
    }
    pub fn result(&self) -> &Value {
        &self.last()["result"]
    }
    pub fn error_code(&self) -> Option<i64> {
        self.last()["error"]["code"].as_i64()
    }
    pub fn state(&self) -> String {
        self.result()["requestState"].as_str().expect("a requestState").to_string()
    }
}

impl Modern {
    pub fn new(url: &str) -> Self {
        Modern { http: reqwest::Client::new(), url: url.into(), capabilities: json!({"elicitation": {}, "sampling": {}, "roots": {}}) }
    }

    /// A client sharing `http`'s connections.
    pub fn with_client(http: reqwest::Client, url: &str) -> Self {
        Modern { http, ..Modern::new(url) }
    }

    pub fn with_capabilities(url: &str, capabilities: Value) -> Self {
        Modern { capabilities, ..Modern::new(url) }
    }

    /// POST `method` with `params` plus this client's `_meta` (and `meta_extra` in it), and read
    /// the answer.
    pub async fn send(&self, id: Value, method: &str, params: Value, meta_extra: Value) -> Answer {
        let res = self.request(id, method, params, meta_extra).send().await.unwrap();
        let status = res.status().as_u16();
        assert!(res.headers().get("mcp-session-id").is_none(), "a modern request never gets a session");
        let node = res.headers().get("x-switchboard-node").and_then(|v| v.to_str().ok()?.parse().ok());
        Answer { status, node, messages: messages_of(res).await }
    }

    /// A retry whose client gives up after `after` (closing the response): `Err` when it did.
    pub async fn retry_giving_up(
        &self,
        tool: &str,
        arguments: Value,
        state: &str,
        responses: Value,
        after: std::time::Duration,
    ) -> reqwest::Result<reqwest::Response> {
        let params = json!({"name": tool, "arguments": arguments, "requestState": state, "inputResponses": responses});
        self.request(json!("retry"), "tools/call", params, json!({})).timeout(after).send().await
    }

    /// The POST of a request: `params` plus this client's `_meta` (and `meta_extra` in it), and
    /// the headers that repeat them.
    pub fn request(&self, id: Value, method: &str, mut params: Value, meta_extra: Value) -> reqwest::RequestBuilder {
        let mut meta = json!({
            "io.modelcontextprotocol/protocolVersion": V,
            "io.modelcontextprotocol/clientCapabilities": self.capabilities,
            "io.modelcontextprotocol/clientInfo": {"name": "modern-test", "version": "1"},
        });
        for (k, v) in meta_extra.as_object().into_iter().flatten() {
            meta[k] = v.clone();
        }
        params["_meta"] = meta;
        let mut request = self
            .http
            .post(&self.url)
            .header("content-type", "application/json")
            .header("accept", ACCEPT_BOTH)
            .header("mcp-protocol-version", V)
            .header("mcp-method", method);
        if let Some(name) = params.get("name").or_else(|| params.get("uri")).or_else(|| params.get("taskId")).and_then(Value::as_str) {
            request = request.header("mcp-name", name);
        }
        let body = json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params});
        request.body(body.to_string())
    }

    pub async fn call(&self, id: i64, tool: &str, arguments: Value) -> Answer {
        self.send(json!(id), "tools/call", json!({"name": tool, "arguments": arguments}), json!({})).await
    }

    pub async fn retry(&self, id: i64, tool: &str, arguments: Value, state: &str, responses: Value) -> Answer {
        let params = json!({"name": tool, "arguments": arguments, "requestState": state, "inputResponses": responses});
        self.send(json!(id), "tools/call", params, json!({})).await
    }
}

pub fn text(answer: &Answer) -> String {
    answer.result()["content"][0]["text"].as_str().unwrap_or_default().to_string()
}

pub fn name_schema(field: &str) -> Value {
    json!({"type": "object", "properties": {field: {"type": "string"}}, "required": [field]})
}

pub fn accept(field: &str, value: &str) -> Value {
    json!({"action": "accept", "content": {field: value}})
}
