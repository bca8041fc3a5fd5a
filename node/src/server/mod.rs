//! The MCP server proper: what it offers (the registry), how it answers each method, and the
//! node-local state of sessions (running requests, subscriptions, the standalone stream).
//!
//! Transports hand it parsed messages and an [`Outbound`] per request; it never touches HTTP.

mod context;
pub mod correlation;
mod registry;

pub use context::{ClientRequestError, MAILBOX_GRACE, Outbound, OutboundSink, Outgoing, RequestContext, RequestKind, StreamClosed};
pub use registry::{
    Completer, HandlerResult, PromptDef, ResourceDef, ResourceMeta, SchemaError, ToolDef, ToolError, match_template, paginate, schema_for,
};

use crate::mailbox::{DeliverOutcome, Mailbox};
use crate::metrics::Metrics;
use crate::protocol::jsonrpc::{ErrorObject, Message, RESOURCE_NOT_FOUND, RequestId};
use crate::protocol::types::{CallToolResult, Implementation, InitializeParams, LogLevel, negotiate_version};
use crate::session::{SessionError, SessionId, SessionRecord, SessionStore};
use context::RequestScope;
use serde_json::{Map, Value, json};
use std::collections::HashMap;
use std::sync::{Arc, Mutex, RwLock};
use std::time::Duration;
use tokio_util::sync::CancellationToken;

/// Settings that shape behaviour rather than content.
#[derive(Debug, Clone)]
pub struct ServerConfig {
    pub node_id: u64,
    pub elicitation_timeout: Duration,
    pub sampling_timeout: Duration,
    /// Items per page of `*/list` results.
    pub page_size: usize,
}

impl Default for ServerConfig {
    fn default() -> Self {
        ServerConfig {
            node_id: 0,
            elicitation_timeout: Duration::from_secs(300),
            sampling_timeout: Duration::from_secs(600),
            page_size: 100,
        }
    }
}

/// What the server asks of the other replicas, when there are any.
pub trait ClusterLink: Send + Sync {
    /// The client cancelled a request this node is not running: tell the replica that is.
    fn cancel_elsewhere(&self, session: &SessionId, request: &RequestId);
    /// A notification for standalone streams: the other replicas deliver it to theirs.
    fn notify_elsewhere(&self, notice: &Notice);
}

/// A server notification not tied to a request, for every session's standalone stream
/// (whichever replica holds it).
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub enum Notice {
    /// `notifications/resources/updated`, for sessions subscribed to `uri`.
    ResourceUpdated { uri: String },
    /// A `notifications/*/list_changed`, for every session.
    ListChanged { method: String },
}

/// State of one session that only this node has.
#[derive(Default)]
struct LocalSession {
    running: Mutex<HashMap<RequestId, CancellationToken>>,
    /// The record the requests running here share, so a parked call holds a pointer rather
    /// than its own copy.
    record: Mutex<Option<Arc<SessionRecord>>>,
    /// The standalone stream (HTTP GET, or stdout for stdio), when one is attached.
    notifier: Mutex<Option<Outbound>>,
    /// Log level set on this node, ahead of the store's copy.
    log_level: Mutex<Option<LogLevel>>,
}

impl LocalSession {
    /// The shared copy of `record`: the one already held when it is unchanged, else `record`
    /// itself, which becomes the shared copy.
    fn share(&self, record: SessionRecord) -> Arc<SessionRecord> {
        let mut shared = self.record.lock().unwrap();
        match &*shared {
            Some(current) if **current == record => current.clone(),
            _ => shared.insert(Arc::new(record)).clone(),
        }
    }
}

/// Offerings behind `Arc`: a running handler holds its definition (schemas included) for as
/// long as it runs, possibly parked for minutes, and must not need a copy of it.
#[derive(Default)]
struct Registry {
    tools: Vec<Arc<ToolDef>>,
    prompts: Vec<Arc<PromptDef>>,
    resources: Vec<Arc<ResourceDef>>,
}

struct Inner {
    cluster: Option<Arc<dyn ClusterLink>>,
    info: Implementation,
    sealer: Arc<correlation::IdSealer>,
    instructions: Option<String>,
    config: ServerConfig,
    registry: RwLock<Registry>,
    mailbox: Arc<dyn Mailbox>,
    sessions: Arc<dyn SessionStore>,
    local: Mutex<HashMap<SessionId, Arc<LocalSession>>>,
    metrics: Arc<Metrics>,
}

/// A cheaply clonable handle on the server.
#[derive(Clone)]
pub struct Server {
    inner: Arc<Inner>,
}

/// Builds a [`Server`]: identity, offerings, and the stores it correlates through.
pub struct ServerBuilder {
    cluster: Option<Arc<dyn ClusterLink>>,
    info: Implementation,
    sealer: Option<Arc<correlation::IdSealer>>,
    instructions: Option<String>,
    config: ServerConfig,
    registry: Registry,
    metrics: Option<Arc<Metrics>>,
}

impl ServerBuilder {
    pub fn new(name: impl Into<String>, version: impl Into<String>) -> Self {
        ServerBuilder {
            info: Implementation { name: name.into(), version: version.into(), title: None },
            cluster: None,
            sealer: None,
            instructions: None,
            config: ServerConfig::default(),
            registry: Registry::default(),
            metrics: None,
        }
    }
    pub fn instructions(mut self, text: impl Into<String>) -> Self {
        self.instructions = Some(text.into());
        self
    }
    pub fn config(mut self, config: ServerConfig) -> Self {
        self.config = config;
        self
    }
    /// The key ids are sealed with; every replica of a cluster must share it. Without one, a
    /// random key is used (fine for a single process).
    pub fn id_sealer(mut self, sealer: Arc<correlation::IdSealer>) -> Self {
        self.sealer = Some(sealer);
        self
    }
    /// Reach the other replicas (cross-node cancellation).
    pub fn cluster(mut self, link: Arc<dyn ClusterLink>) -> Self {
        self.cluster = Some(link);
        self
    }
    pub fn metrics(mut self, metrics: Arc<Metrics>) -> Self {
        self.metrics = Some(metrics);
        self
    }
    pub fn tool(mut self, tool: ToolDef) -> Self {
        self.registry.tools.push(Arc::new(tool));
        self
    }
    pub fn prompt(mut self, prompt: PromptDef) -> Self {
        self.registry.prompts.push(Arc::new(prompt));
        self
    }
    pub fn resource(mut self, resource: ResourceDef) -> Self {
        self.registry.resources.push(Arc::new(resource));
        self
    }
    pub fn build(self, mailbox: Arc<dyn Mailbox>, sessions: Arc<dyn SessionStore>) -> Server {
        Server {
            inner: Arc::new(Inner {
                cluster: self.cluster,
                info: self.info,
                sealer: self.sealer.unwrap_or_else(|| Arc::new(correlation::IdSealer::random())),
                instructions: self.instructions,
                config: self.config,
                registry: RwLock::new(self.registry),
                mailbox,
                sessions,
                local: Mutex::default(),
                metrics: self.metrics.unwrap_or_default(),
            }),
        }
    }
}

/// Why a message could not be handled at the session level (mapped to HTTP statuses by the
/// transport).
#[derive(Debug, thiserror::Error)]
pub enum SessionLookupError {
    #[error("unknown or terminated session")]
    NotFound,
    #[error(transparent)]
    Store(#[from] SessionError),
}

impl Server {
    pub fn node_id(&self) -> u64 {
        self.inner.config.node_id
    }
    pub fn config(&self) -> &ServerConfig {
        &self.inner.config
    }
    pub fn mailbox(&self) -> &Arc<dyn Mailbox> {
        &self.inner.mailbox
    }
    pub fn metrics(&self) -> &Arc<Metrics> {
        &self.inner.metrics
    }
    pub fn sealer(&self) -> &Arc<correlation::IdSealer> {
        &self.inner.sealer
    }
    pub(crate) fn timeout(&self, kind: RequestKind) -> Duration {
        match kind {
            RequestKind::Elicitation => self.inner.config.elicitation_timeout,
            RequestKind::Sampling => self.inner.config.sampling_timeout,
        }
    }

    fn local(&self, id: &SessionId) -> Arc<LocalSession> {
        let mut local = self.inner.local.lock().unwrap();
        if !local.contains_key(id) && local.len() % 256 == 255 {
            // Sessions that ended by TTL leave entries behind; an idle one (held by no task,
            // nothing running, no stream attached) holds nothing the replicated record doesn't.
            local.retain(|_, l| Arc::strong_count(l) > 1 || !l.running.lock().unwrap().is_empty() || l.notifier.lock().unwrap().is_some());
        }
        let entry = local.entry(id.clone()).or_default().clone();
        self.inner.metrics.set_local_sessions(local.len());
        entry
    }

    pub(crate) fn log_level(&self, session: &SessionRecord) -> LogLevel {
        self.local(&session.id).log_level.lock().unwrap().unwrap_or(session.log_level)
    }

    /// Answer `initialize`: negotiate the version, store the session, return its record and result.
    pub async fn initialize(&self, params: Option<Value>) -> Result<(SessionRecord, Value), ErrorObject> {
        let params: InitializeParams = serde_json::from_value(params.unwrap_or(Value::Null))
            .map_err(|e| ErrorObject::invalid_params(format!("invalid initialize params: {e}")))?;
        let version = negotiate_version(&params.protocol_version);
        let record = SessionRecord {
            id: SessionId::random(),
            protocol_version: version.to_string(),
            client_info: params.client_info,
            capabilities: params.capabilities,
            log_level: LogLevel::Info,
            subscriptions: Default::default(),
        };
        self.inner.sessions.create(record.clone()).await.map_err(|e| ErrorObject::internal(e.to_string()))?;
        let mut result = json!({
            "protocolVersion": version,
            "capabilities": {
                "tools": {"listChanged": true},
                "prompts": {"listChanged": true},
                "resources": {"subscribe": true, "listChanged": true},
                "logging": {},
                "completions": {},
            },
            "serverInfo": self.inner.info,
        });
        if let Some(text) = &self.inner.instructions {
            result["instructions"] = json!(text);
        }
        tracing::info!(session = %record.id, client = %record.client_info.name, %version, "session initialized");
        Ok((record, result))
    }

    pub async fn session(&self, id: &SessionId) -> Result<SessionRecord, SessionLookupError> {
        self.inner.sessions.get(id).await?.ok_or(SessionLookupError::NotFound)
    }

    /// End a session everywhere: cancel its running requests here and remove its record.
    pub async fn terminate(&self, id: &SessionId) -> Result<bool, SessionError> {
        if let Some(local) = self.inner.local.lock().unwrap().remove(id) {
            for token in local.running.lock().unwrap().values() {
                token.cancel();
            }
        }
        self.inner.sessions.delete(id).await
    }

    /// Attach the standalone stream of a session; notifications not tied to a request go there.
    pub fn attach_notifier(&self, id: &SessionId, out: Outbound) {
        *self.local(id).notifier.lock().unwrap() = Some(out);
    }

    /// Start handling a request. Related messages and finally the response go to `out`; a
    /// cancelled request sends no response, and `out` is dropped either way.
    pub fn spawn_request(&self, session: SessionRecord, id: RequestId, method: String, params: Option<Value>, out: Outbound) {
        let server = self.clone();
        let local = self.local(&session.id);
        let cancel = CancellationToken::new();
        local.running.lock().unwrap().insert(id.clone(), cancel.clone());
        let progress_token = params.as_ref().and_then(|p| p.pointer("/_meta/progressToken")).cloned();
        let ctx = RequestContext::new(RequestScope {
            server: self.clone(),
            session: local.share(session),
            request_id: id.clone(),
            progress_token,
            out,
            cancel,
        });
        tokio::spawn(async move {
            // Biased: once the client cancelled, no response goes out even if the handler
            // finished in the same instant.
            let response = tokio::select! {
                biased;
                _ = ctx.cancelled() => None,
                r = server.dispatch(ctx.clone(), &method, params.unwrap_or_else(|| json!({}))) => Some(r),
            };
            local.running.lock().unwrap().remove(&id);
            match response {
                Some(Ok(result)) => {
                    let _ = ctx.out().send(Outgoing::Message(Box::new(Message::response(id, result))));
                }
                Some(Err(error)) => {
                    let _ = ctx.out().send(Outgoing::Message(Box::new(Message::error(Some(id), error))));
                }
                None => tracing::debug!(request = %id, "request cancelled by the client"),
            }
        });
    }

    /// Handle a notification from the client.
    pub fn handle_notification(&self, session: &SessionRecord, method: &str, params: Option<Value>) {
        if method == "notifications/cancelled" {
            let Some(id) = params.and_then(|p| p.get("requestId").cloned()).and_then(|v| serde_json::from_value::<RequestId>(v).ok())
            else {
                return;
            };
            if !self.cancel_local(&session.id, &id)
                && let Some(cluster) = &self.inner.cluster
            {
                cluster.cancel_elsewhere(&session.id, &id);
            }
        }
    }

    /// Cancel a request of `session` if it runs on this node; `true` when it did.
    pub fn cancel_local(&self, session: &SessionId, request: &RequestId) -> bool {
        let local = self.inner.local.lock().unwrap().get(session).cloned();
        let token = local.and_then(|l| l.running.lock().unwrap().get(request).cloned());
        match token {
            Some(token) => {
                tracing::info!(session = %session, request = %request, "request cancelled by the client");
                token.cancel();
                true
            }
            None => false,
        }
    }

    /// Deliver the client's answer to a server-to-client request. Answers that are not ours, or
    /// are late or duplicate, are dropped and counted; the client is never told.
    pub async fn handle_client_response(&self, session: &SessionRecord, message: Message) {
        let id = match &message {
            Message::Response { id, .. } | Message::Error { id: Some(id), .. } => id.clone(),
            _ => return self.inner.metrics.orphan("no_id"),
        };
        let key = match self.inner.sealer.open_request(&id, session.id.as_str(), crate::clock::now_ms()) {
            Ok(sealed) => sealed.key,
            Err(e) => {
                tracing::info!(session = %session.id, reason = e.label(), "client answer refused: {e}");
                return self.inner.metrics.orphan(e.label());
            }
        };
        match self.inner.mailbox.deliver(&key, message.to_value()).await {
            Ok(DeliverOutcome::Delivered) => {
                tracing::info!(%key, session = %session.id, node = self.node_id(), "client answer delivered");
                self.inner.metrics.answer_delivered();
            }
            Ok(outcome) => {
                tracing::info!(%key, session = %session.id, outcome = outcome.label(), "client answer dropped");
                self.inner.metrics.orphan(outcome.label());
            }
            Err(e) => {
                tracing::warn!(%key, error = %e, "client answer could not be delivered");
                self.inner.metrics.orphan("unavailable");
            }
        }
    }

    /// Arms that run a handler drop `params` first: a handler may park for minutes, and the
    /// request it came in needn't stay in memory meanwhile.
    async fn dispatch(&self, ctx: RequestContext, method: &str, mut params: Value) -> Result<Value, ErrorObject> {
        let cursor = params.get("cursor").and_then(Value::as_str).map(str::to_owned);
        let page_size = self.inner.config.page_size;
        match method {
            "ping" => Ok(json!({})),
            "initialize" => Err(ErrorObject::new(crate::protocol::jsonrpc::INVALID_REQUEST, "the session is already initialized")),
            "tools/list" => {
                let defs: Vec<Value> = self.inner.registry.read().unwrap().tools.iter().map(|t| t.definition()).collect();
                let (page, next) = paginate(&defs, cursor.as_deref(), page_size)?;
                Ok(with_cursor(json!({"tools": page}), next))
            }
            "tools/call" => self.call_tool(ctx, params).await,
            "prompts/list" => {
                let defs: Vec<Value> = self.inner.registry.read().unwrap().prompts.iter().map(|p| p.definition()).collect();
                let (page, next) = paginate(&defs, cursor.as_deref(), page_size)?;
                Ok(with_cursor(json!({"prompts": page}), next))
            }
            "prompts/get" => {
                let name = required_str(&params, "name")?;
                let prompt = self.inner.registry.read().unwrap().prompts.iter().find(|p| p.name == name).cloned();
                let prompt = prompt.ok_or_else(|| ErrorObject::invalid_params(format!("unknown prompt: {name}")))?;
                let args = match params.get_mut("arguments").map(Value::take) {
                    Some(Value::Object(args)) => args,
                    _ => Map::new(),
                };
                drop(params);
                let result = prompt.get(ctx, args).await.map_err(handler_error)?;
                Ok(serde_json::to_value(result).expect("results serialize"))
            }
            "resources/list" | "resources/templates/list" => {
                let templates = method == "resources/templates/list";
                let defs: Vec<Value> = self
                    .inner
                    .registry
                    .read()
                    .unwrap()
                    .resources
                    .iter()
                    .filter(|r| r.is_template == templates)
                    .map(|r| r.definition())
                    .collect();
                let (page, next) = paginate(&defs, cursor.as_deref(), page_size)?;
                let key = if templates { "resourceTemplates" } else { "resources" };
                Ok(with_cursor(json!({ key: page }), next))
            }
            "resources/read" => {
                let uri = required_str(&params, "uri")?.to_string();
                let found = self.inner.registry.read().unwrap().resources.iter().find_map(|r| r.matches(&uri).map(|v| (r.clone(), v)));
                let Some((resource, vars)) = found else {
                    return Err(ErrorObject::new(RESOURCE_NOT_FOUND, format!("resource not found: {uri}")).with_data(json!({"uri": uri})));
                };
                drop(params);
                let contents = resource.read(ctx, uri, vars).await.map_err(handler_error)?;
                Ok(json!({"contents": contents}))
            }
            "resources/subscribe" | "resources/unsubscribe" => {
                let uri = required_str(&params, "uri")?;
                // Kept in the session record, so the replica holding the stream knows.
                self.inner
                    .sessions
                    .set_subscription(&ctx.session().id, uri, method == "resources/subscribe")
                    .await
                    .map_err(|e| ErrorObject::internal(e.to_string()))?;
                Ok(json!({}))
            }
            "completion/complete" => self.complete(&params),
            "logging/setLevel" => {
                let level: LogLevel = serde_json::from_value(params.get("level").cloned().unwrap_or(Value::Null))
                    .map_err(|e| ErrorObject::invalid_params(format!("invalid level: {e}")))?;
                *self.local(&ctx.session().id).log_level.lock().unwrap() = Some(level);
                self.inner.sessions.set_log_level(&ctx.session().id, level).await.map_err(|e| ErrorObject::internal(e.to_string()))?;
                Ok(json!({}))
            }
            other => Err(ErrorObject::method_not_found(other)),
        }
    }

    async fn call_tool(&self, ctx: RequestContext, mut params: Value) -> Result<Value, ErrorObject> {
        let name = required_str(&params, "name")?;
        let tool = self.inner.registry.read().unwrap().tools.iter().find(|t| t.name == name).cloned();
        let tool = tool.ok_or_else(|| ErrorObject::invalid_params(format!("Unknown tool: {name}")))?;
        let arguments = match params.get_mut("arguments").map(Value::take) {
            None | Some(Value::Null) => json!({}),
            Some(args @ Value::Object(_)) => args,
            Some(_) => return Err(ErrorObject::invalid_params("arguments must be an object")),
        };
        // Only the arguments go on (see `dispatch`).
        drop(params);
        let result = match tool.call(ctx, arguments).await {
            Ok(result) => result,
            Err(ToolError { rpc: Some(error), .. }) => return Err(error),
            Err(e) => CallToolResult::error(e.message),
        };
        Ok(serde_json::to_value(result).expect("results serialize"))
    }

    fn complete(&self, params: &Value) -> Result<Value, ErrorObject> {
        let reference = params.get("ref").ok_or_else(|| ErrorObject::invalid_params("missing ref"))?;
        let arg_name =
            params.pointer("/argument/name").and_then(Value::as_str).ok_or_else(|| ErrorObject::invalid_params("missing argument.name"))?;
        let prefix = params.pointer("/argument/value").and_then(Value::as_str).unwrap_or("");
        let context = params.pointer("/context/arguments").and_then(Value::as_object).cloned().unwrap_or_default();
        let registry = self.inner.registry.read().unwrap();
        let completer = match reference.get("type").and_then(Value::as_str) {
            Some("ref/prompt") => {
                let name = reference.get("name").and_then(Value::as_str).unwrap_or("");
                let prompt = registry.prompts.iter().find(|p| p.name == name);
                prompt.ok_or_else(|| ErrorObject::invalid_params(format!("unknown prompt: {name}")))?.completer.clone()
            }
            Some("ref/resource") => {
                let uri = reference.get("uri").and_then(Value::as_str).unwrap_or("");
                let resource = registry.resources.iter().find(|r| r.uri == uri);
                resource.ok_or_else(|| ErrorObject::invalid_params(format!("unknown resource: {uri}")))?.completer.clone()
            }
            _ => return Err(ErrorObject::invalid_params("ref.type must be ref/prompt or ref/resource")),
        };
        let mut values = completer.map(|c| c(arg_name, prefix, &context)).unwrap_or_default();
        let total = values.len();
        values.truncate(100);
        Ok(json!({"completion": {"values": values, "total": total, "hasMore": total > 100}}))
    }

    /// Tell subscribed sessions that a resource changed (`notifications/resources/updated`),
    /// on every replica.
    pub fn notify_resource_updated(&self, uri: &str) {
        self.publish(Notice::ResourceUpdated { uri: uri.to_string() });
    }

    fn notify_all(&self, method: &str) {
        self.publish(Notice::ListChanged { method: method.to_string() });
    }

    fn publish(&self, notice: Notice) {
        if let Some(cluster) = &self.inner.cluster {
            cluster.notify_elsewhere(&notice);
        }
        self.deliver_notice(notice);
    }

    /// Deliver a notice to the standalone streams attached to this node.
    pub fn deliver_notice(&self, notice: Notice) {
        let attached: Vec<(SessionId, Arc<LocalSession>)> = self
            .inner
            .local
            .lock()
            .unwrap()
            .iter()
            .filter(|(_, l)| l.notifier.lock().unwrap().is_some())
            .map(|(id, l)| (id.clone(), l.clone()))
            .collect();
        if attached.is_empty() {
            return;
        }
        let server = self.clone();
        tokio::spawn(async move {
            for (id, local) in attached {
                let message = match &notice {
                    Notice::ListChanged { method } => Message::notification(method.clone(), json!({})),
                    Notice::ResourceUpdated { uri } => match server.inner.sessions.get(&id).await {
                        Ok(Some(record)) if record.subscriptions.contains(uri) => {
                            Message::notification("notifications/resources/updated", json!({"uri": uri}))
                        }
                        _ => continue,
                    },
                };
                notify(&local, message);
            }
        });
    }

    /// Add or replace a tool at run time; sessions hear `notifications/tools/list_changed`.
    pub fn upsert_tool(&self, tool: ToolDef) {
        {
            let mut registry = self.inner.registry.write().unwrap();
            registry.tools.retain(|t| t.name != tool.name);
            registry.tools.push(Arc::new(tool));
        }
        self.notify_all("notifications/tools/list_changed");
    }

    /// Remove a tool at run time; `true` when it existed.
    pub fn remove_tool(&self, name: &str) -> bool {
        let removed = {
            let mut registry = self.inner.registry.write().unwrap();
            let before = registry.tools.len();
            registry.tools.retain(|t| t.name != name);
            registry.tools.len() != before
        };
        if removed {
            self.notify_all("notifications/tools/list_changed");
        }
        removed
    }
}

fn notify(session: &LocalSession, message: Message) {
    if let Some(out) = session.notifier.lock().unwrap().as_ref() {
        let _ = out.send(Outgoing::Message(Box::new(message)));
    }
}

fn with_cursor(mut result: Value, next: Option<String>) -> Value {
    if let Some(next) = next {
        result["nextCursor"] = json!(next);
    }
    result
}

fn required_str<'a>(params: &'a Value, key: &str) -> Result<&'a str, ErrorObject> {
    params.get(key).and_then(Value::as_str).ok_or_else(|| ErrorObject::invalid_params(format!("missing string parameter {key}")))
}

fn handler_error(e: ToolError) -> ErrorObject {
    e.rpc.unwrap_or_else(|| ErrorObject::internal(e.message))
}

/// Arguments map helper for prompt handlers.
pub fn arg_str<'a>(args: &'a Map<String, Value>, key: &str) -> &'a str {
    args.get(key).and_then(Value::as_str).unwrap_or("")
}
