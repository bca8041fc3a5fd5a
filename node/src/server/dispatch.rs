//! Answering each client method: lists, tool calls, prompts, resources, completions, logging.

use super::definitions::ToolDef;
use super::handle::{Server, store_error};
use super::{HandlerError, RequestContext, paginate};
use crate::protocol::jsonrpc::{ErrorObject, INVALID_PARAMS, LIMIT_REACHED, RESOURCE_NOT_FOUND};
use crate::protocol::types::LogLevel;
use crate::session::{LimitReached, SessionError, SubscriptionLimits};
use futures::future::{BoxFuture, Either};
use serde_json::{Map, Value, json};
use std::future::{Future, IntoFuture, Ready};
use std::sync::Arc;

/// What a method needs: its answer, at once, or a handler to run. Only the handler's future is
/// kept while a call runs (possibly parked for minutes), not the request it came in nor any
/// other method's state; `.await` it for the answer.
pub(crate) enum Dispatched {
    Ready(Result<Value, ErrorObject>),
    Running(BoxFuture<'static, Result<Value, ErrorObject>>),
}

impl Dispatched {
    fn running(work: impl Future<Output = Result<Value, ErrorObject>> + Send + 'static) -> Self {
        Dispatched::Running(Box::pin(work))
    }
}

impl From<Result<Value, ErrorObject>> for Dispatched {
    fn from(answer: Result<Value, ErrorObject>) -> Self {
        Dispatched::Ready(answer)
    }
}

impl IntoFuture for Dispatched {
    type Output = Result<Value, ErrorObject>;
    type IntoFuture = Either<Ready<Self::Output>, BoxFuture<'static, Self::Output>>;

    fn into_future(self) -> Self::IntoFuture {
        match self {
            Dispatched::Ready(answer) => Either::Left(std::future::ready(answer)),
            Dispatched::Running(work) => Either::Right(work),
        }
    }
}

impl Server {
    /// Answer `method` or start its handler. A handler gets what it needs moved in (a tool's
    /// arguments, not the whole params).
    pub(super) fn dispatch(&self, ctx: RequestContext, method: &str, mut params: Value) -> Dispatched {
        let page_size = self.inner.config.page_size;
        let cursor = || params.get("cursor").and_then(Value::as_str);
        match method {
            "ping" => Ok(json!({})).into(),
            "initialize" => Err(ErrorObject::new(crate::protocol::jsonrpc::INVALID_REQUEST, "the session is already initialized")).into(),
            "tools/list" => {
                let defs: Vec<Value> = self.inner.offerings.read().unwrap().tools.iter().map(|t| t.definition()).collect();
                paginate(&defs, cursor(), page_size).map(|(page, next)| with_cursor(json!({"tools": page}), next)).into()
            }
            "tools/call" => match self.tool_call(&mut params) {
                Ok((tool, arguments)) => Dispatched::Running(tool.call(ctx, arguments)),
                Err(error) => Err(error).into(),
            },
            "prompts/list" => {
                let defs: Vec<Value> = self.inner.offerings.read().unwrap().prompts.iter().map(|p| p.definition()).collect();
                paginate(&defs, cursor(), page_size).map(|(page, next)| with_cursor(json!({"prompts": page}), next)).into()
            }
            "prompts/get" => {
                let name = match required_str(&params, "name") {
                    Ok(name) => name,
                    Err(error) => return Err(error).into(),
                };
                let prompt = self.inner.offerings.read().unwrap().prompts.iter().find(|p| p.name == name).cloned();
                let Some(prompt) = prompt else { return Err(ErrorObject::invalid_params(format!("unknown prompt: {name}"))).into() };
                let args = match params.get_mut("arguments").map(Value::take) {
                    Some(Value::Object(args)) => args,
                    _ => Map::new(),
                };
                Dispatched::running(async move {
                    let result = prompt.get(ctx, args).await.map_err(handler_error)?;
                    Ok(serde_json::to_value(result).expect("results serialize"))
                })
            }
            "resources/list" | "resources/templates/list" => {
                let templates = method == "resources/templates/list";
                let defs: Vec<Value> = self
                    .inner
                    .offerings
                    .read()
                    .unwrap()
                    .resources
                    .iter()
                    .filter(|r| r.is_template == templates)
                    .map(|r| r.definition())
                    .collect();
                let key = if templates { "resourceTemplates" } else { "resources" };
                paginate(&defs, cursor(), page_size).map(|(page, next)| with_cursor(json!({ key: page }), next)).into()
            }
            "resources/read" => {
                let uri = match required_str(&params, "uri") {
                    Ok(uri) => uri.to_string(),
                    Err(error) => return Err(error).into(),
                };
                let found = self.inner.offerings.read().unwrap().resources.iter().find_map(|r| r.matches(&uri).map(|v| (r.clone(), v)));
                let Some((resource, vars)) = found else {
                    let missing = ErrorObject::new(RESOURCE_NOT_FOUND, format!("resource not found: {uri}")).with_data(json!({"uri": uri}));
                    return Err(missing).into();
                };
                Dispatched::running(async move {
                    let contents = resource.read(ctx, uri, vars).await.map_err(handler_error)?;
                    Ok(json!({"contents": contents}))
                })
            }
            "resources/subscribe" | "resources/unsubscribe" => {
                let uri = match required_str(&params, "uri") {
                    Ok(uri) => uri.to_string(),
                    Err(error) => return Err(error).into(),
                };
                let subscribe = method == "resources/subscribe";
                let server = self.clone();
                Dispatched::running(async move {
                    server.set_subscription(&ctx, &uri, subscribe).await?;
                    Ok(json!({}))
                })
            }
            "completion/complete" => self.complete(&params).into(),
            "logging/setLevel" => {
                let level: LogLevel = match serde_json::from_value(params.get("level").cloned().unwrap_or(Value::Null)) {
                    Ok(level) => level,
                    Err(e) => return Err(ErrorObject::invalid_params(format!("invalid level: {e}"))).into(),
                };
                let Some(session) = ctx.session().map(|s| s.id.clone()) else { return Err(ErrorObject::method_not_found(method)).into() };
                *self.local(&session).log_level.lock().unwrap() = Some(level);
                let server = self.clone();
                Dispatched::running(async move {
                    server.inner.sessions.set_log_level(&session, level).await.map_err(store_error)?;
                    Ok(json!({}))
                })
            }
            other => Err(ErrorObject::method_not_found(other)).into(),
        }
    }

    /// The tool a `tools/call` names and its arguments (taken out of `params`).
    fn tool_call(&self, params: &mut Value) -> Result<(Arc<ToolDef>, Value), ErrorObject> {
        let name = required_str(params, "name")?;
        let tool = self.inner.offerings.read().unwrap().tools.iter().find(|t| t.name == name).cloned();
        let tool = tool.ok_or_else(|| ErrorObject::invalid_params(format!("Unknown tool: {name}")))?;
        let arguments = match params.get_mut("arguments").map(Value::take) {
            None | Some(Value::Null) => json!({}),
            Some(args @ Value::Object(_)) => args,
            Some(_) => return Err(ErrorObject::invalid_params("arguments must be an object")),
        };
        Ok((tool, arguments))
    }

    /// Subscriptions are kept in the session record, so the replica holding the stream knows.
    /// Only URIs the server offers (a resource, or a template's match) can be subscribed to,
    /// within the session's limits; a refusal changes nothing.
    async fn set_subscription(&self, ctx: &RequestContext, uri: &str, subscribe: bool) -> Result<(), ErrorObject> {
        let config = &self.inner.config;
        let session = ctx.session().ok_or_else(|| ErrorObject::method_not_found("resources/subscribe"))?;
        if subscribe && !self.inner.offerings.read().unwrap().resources.iter().any(|r| r.matches(uri).is_some()) {
            return Err(ErrorObject::invalid_params("cannot subscribe: no resource or resource template of this server has this URI")
                .with_data(json!({"uri": uri})));
        }
        let limits = SubscriptionLimits { max_count: config.max_subscriptions_per_session, max_bytes: config.max_session_record_bytes };
        // A URI longer than the whole budget needs no look at the record (nor a log entry).
        let refused = if subscribe && uri.len() > limits.max_bytes {
            Err(SessionError::Limit(LimitReached::SubscriptionBytes(limits.max_bytes)))
        } else {
            self.inner.sessions.set_subscription(&session.id, uri, subscribe, limits).await.map(drop)
        };
        match refused {
            Ok(()) => Ok(()),
            Err(SessionError::Limit(limit)) => {
                self.metrics().limit_refused(limit.label());
                tracing::debug!(session = %session.id, limit = limit.label(), "subscribe refused: {limit}");
                let code = match limit {
                    LimitReached::SubscriptionBytes(_) => INVALID_PARAMS,
                    LimitReached::Subscriptions(_) | LimitReached::Sessions(_) => LIMIT_REACHED,
                };
                Err(ErrorObject::new(code, limit.to_string()).with_data(json!({"limit": limit.label(), "max": limit.max()})))
            }
            Err(e) => Err(store_error(e)),
        }
    }

    fn complete(&self, params: &Value) -> Result<Value, ErrorObject> {
        let reference = params.get("ref").ok_or_else(|| ErrorObject::invalid_params("missing ref"))?;
        let arg_name =
            params.pointer("/argument/name").and_then(Value::as_str).ok_or_else(|| ErrorObject::invalid_params("missing argument.name"))?;
        let prefix = params.pointer("/argument/value").and_then(Value::as_str).unwrap_or("");
        let context = params.pointer("/context/arguments").and_then(Value::as_object).cloned().unwrap_or_default();
        let offerings = self.inner.offerings.read().unwrap();
        let completer = match reference.get("type").and_then(Value::as_str) {
            Some("ref/prompt") => {
                let name = reference.get("name").and_then(Value::as_str).unwrap_or("");
                let prompt = offerings.prompts.iter().find(|p| p.name == name);
                prompt.ok_or_else(|| ErrorObject::invalid_params(format!("unknown prompt: {name}")))?.completer.clone()
            }
            Some("ref/resource") => {
                let uri = reference.get("uri").and_then(Value::as_str).unwrap_or("");
                let resource = offerings.resources.iter().find(|r| r.uri == uri);
                resource.ok_or_else(|| ErrorObject::invalid_params(format!("unknown resource: {uri}")))?.completer.clone()
            }
            _ => return Err(ErrorObject::invalid_params("ref.type must be ref/prompt or ref/resource")),
        };
        let mut values = completer.map(|c| c(arg_name, prefix, &context)).unwrap_or_default();
        let total = values.len();
        values.truncate(100);
        Ok(json!({"completion": {"values": values, "total": total, "hasMore": total > 100}}))
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

fn handler_error(e: HandlerError) -> ErrorObject {
    e.rpc.unwrap_or_else(|| ErrorObject::internal(e.message))
}
