//! 2026-07-28 requests: stateless, each carrying what the client declares in its `_meta`.
//! `server/discover`, the result envelope (`resultType`, server info, cache hints) and the
//! methods that need no round trip; `tools/call`, `prompts/get` and `resources/read` go
//! through the multi-round-trip driver in [`super::mrtr`].

use super::envelope::modern_error;
use super::handle::{Server, server_capabilities};
use super::mrtr::CallRequest;
use super::outbound::{Outbound, Outgoing};
use super::round::{ModernCall, ModernClient};
use crate::protocol::era::{self, MRTR_METHODS, ModernMeta};
use crate::protocol::jsonrpc::{ErrorObject, Message, RequestId};
use crate::protocol::types::{ProtocolVersion, TASKS_EXTENSION};
use serde_json::{Map, Value, json};
use std::sync::Arc;
use tokio_util::sync::CancellationToken;

impl ModernClient {
    pub(super) fn from_meta(meta: &ModernMeta) -> Self {
        ModernClient {
            version: meta.version,
            capabilities: meta.capabilities.flags(),
            log_level: meta.log_level,
            progress_token: meta.progress_token.clone(),
        }
    }
}

impl Server {
    /// Start a validated 2026-07-28 request. Related messages and finally the response go to
    /// `out`; `cancel` is the client closing the response (then nothing more is sent).
    ///
    /// Beyond the node's limit of running requests (parked calls count) it is answered with
    /// a -32000 error at once and nothing runs.
    pub fn spawn_modern(
        &self,
        meta: ModernMeta,
        id: RequestId,
        method: String,
        params: Option<Value>,
        out: Outbound,
        cancel: CancellationToken,
    ) {
        let place = match self.node_place() {
            Ok(place) => place,
            Err(refused) => {
                self.metrics().limit_refused(refused.label());
                let _ = out.send(Outgoing::Message(Box::new(Message::error(Some(id), refused.to_error_object()))));
                return;
            }
        };
        let params = params.unwrap_or_else(|| json!({}));
        if method == "tools/call"
            && let Err(error) = self.check_param_headers(&params, &meta.param_headers)
        {
            let _ = out.send(Outgoing::Message(Box::new(Message::error(Some(id), error))));
            return;
        }
        // All a call needs of the `_meta` is in `client`: nothing else of it goes into the task.
        let client = ModernClient::from_meta(&meta);
        drop(meta);
        if let Some(method) = MRTR_METHODS.iter().copied().find(|m| *m == method) {
            // The call's own future is the task (no wrapper around it): a parked call's memory.
            tokio::spawn(self.clone().run_call(CallRequest { client, id, method, params, out, cancel }, place));
            return;
        }
        let server = self.clone();
        tokio::spawn(async move {
            let reply = tokio::select! {
                biased;
                _ = cancel.cancelled() => return,
                reply = server.answer_plain(client, &id, &method, params, &out, &cancel) => reply,
            };
            drop(place);
            let message = match reply {
                Ok(result) => Message::response(id, server.envelope(&method, result, false)),
                Err(error) => Message::error(Some(id), modern_error(error)),
            };
            let _ = out.send(Outgoing::Message(Box::new(message)));
        });
    }

    /// The `Mcp-Param-*` headers of a `tools/call` against the arguments the tool annotates.
    fn check_param_headers(&self, params: &Value, sent: &[(String, String)]) -> Result<(), ErrorObject> {
        let name = params.get("name").and_then(Value::as_str).unwrap_or_default();
        let tool = self.inner.offerings.read().unwrap().tools.iter().find(|t| t.name == name).cloned();
        match tool {
            Some(tool) => era::check_param_headers(tool.header_params(), params.get("arguments"), sent),
            // An unknown tool is the handler's to refuse.
            None => Ok(()),
        }
    }

    async fn answer_plain(
        &self,
        client: ModernClient,
        id: &RequestId,
        method: &str,
        params: Value,
        out: &Outbound,
        cancel: &CancellationToken,
    ) -> Result<Value, ErrorObject> {
        if method == "server/discover" {
            return Ok(self.discover());
        }
        if method.starts_with("tasks/") {
            return self.answer_task_method(&client, method, &params).await;
        }
        let call = Arc::new(ModernCall::new(client, Map::new(), out.clone(), cancel.clone()));
        self.dispatch(self.modern_context(call, id, out.clone(), cancel), method, params).await
    }

    /// `server/discover`: the versions served, what the server offers, and who it is.
    fn discover(&self) -> Value {
        let mut capabilities = server_capabilities();
        // Extensions exist in the 2026-07-28 era only (not in `initialize`).
        capabilities["extensions"] = json!({TASKS_EXTENSION: {}});
        let mut result = json!({
            "supportedVersions": ProtocolVersion::SUPPORTED,
            "capabilities": capabilities,
        });
        if let Some(text) = &self.inner.instructions {
            result["instructions"] = json!(text);
        }
        result
    }
}
