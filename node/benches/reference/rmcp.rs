//! The reference a single memory-store node is measured against (issue 14): rmcp 3.11's
//! stateful Streamable HTTP server, in a process of its own, with one tool that does what
//! switchboard's stock `confirm` does — ask the client a form elicitation (`{confirm: boolean}`)
//! and return `{"action", "answer"}` as structured content. Sockets get TCP_NODELAY, as
//! switchboard's do.

use rmcp::RoleServer;
use rmcp::ServerHandler;
use rmcp::model::{
    CallToolRequestParams, CallToolResponse, CallToolResult, ElicitRequestParams, ElicitationAction, ErrorData, ListToolsResult,
    PaginatedRequestParams, ServerCapabilities, ServerConfig, Tool,
};
use rmcp::service::RequestContext;
use rmcp::transport::streamable_http_server::session::local::LocalSessionManager;
use rmcp::transport::streamable_http_server::{StreamableHttpServerConfig, StreamableHttpService};
use serde_json::{Value, json};
use std::sync::Arc;

/// The `confirm` tool's server.
#[derive(Clone)]
struct Confirm;

fn from_json<T: serde::de::DeserializeOwned>(value: Value) -> T {
    serde_json::from_value(value).expect("an rmcp model type from its wire form")
}

impl ServerHandler for Confirm {
    fn get_info(&self) -> ServerConfig {
        ServerConfig::new(ServerCapabilities::builder().enable_tools().build())
    }

    async fn list_tools(&self, _: Option<PaginatedRequestParams>, _: RequestContext<RoleServer>) -> Result<ListToolsResult, ErrorData> {
        let confirm: Tool = from_json(json!({
            "name": "confirm",
            "description": "Ask the user to confirm an action (elicitation).",
            "inputSchema": {"type": "object", "properties": {"action": {"type": "string"}}, "required": ["action"]}
        }));
        Ok(ListToolsResult { tools: vec![confirm], ..Default::default() })
    }

    async fn call_tool(&self, request: CallToolRequestParams, context: RequestContext<RoleServer>) -> Result<CallToolResponse, ErrorData> {
        if request.name != "confirm" {
            return Err(ErrorData::invalid_params(format!("unknown tool {}", request.name), None));
        }
        let action = request.arguments.as_ref().and_then(|a| a.get("action")).and_then(Value::as_str).unwrap_or_default().to_string();
        let ask: ElicitRequestParams = from_json(json!({
            "mode": "form",
            "message": format!("Please confirm: {action}"),
            "requestedSchema": {
                "type": "object",
                "properties": {"confirm": {"type": "boolean", "title": "Confirm", "description": "Go ahead with the action above?"}},
                "required": ["confirm"]
            }
        }));
        let answer = context.peer.create_elicitation(ask).await.map_err(|e| ErrorData::internal_error(e.to_string(), None))?;
        let text = match answer.action {
            ElicitationAction::Accept if answer.content.as_ref().and_then(|c| c.get("confirm")) == Some(&json!(true)) => "confirmed",
            ElicitationAction::Accept => "not confirmed",
            ElicitationAction::Decline => "declined",
            ElicitationAction::Cancel => "cancelled",
            _ => "unknown action",
        };
        let result: CallToolResult = from_json(json!({
            "content": [{"type": "text", "text": text}],
            "structuredContent": {"action": action, "answer": text}
        }));
        Ok(CallToolResponse::Complete(result))
    }
}

/// Serve `/mcp` on `listen` until the process is killed.
pub fn serve(listen: &str) {
    let runtime = tokio::runtime::Builder::new_multi_thread().enable_all().build().expect("runtime");
    runtime.block_on(async {
        use axum::serve::ListenerExt;
        let service =
            StreamableHttpService::new(|| Ok(Confirm), Arc::new(LocalSessionManager::default()), StreamableHttpServerConfig::default());
        let router = axum::Router::new().nest_service("/mcp", service);
        let listener = tokio::net::TcpListener::bind(listen).await.expect("reference server port").tap_io(|tcp| {
            let _ = tcp.set_nodelay(true);
        });
        axum::serve(listener, router).await.expect("reference server");
    });
}
