//! What a server offers: tools, prompts, resources and resource templates, each with its handler.

use super::context::RequestContext;
use super::schema::{SchemaError, compile_schema, schema_for, validation_errors};
use crate::protocol::jsonrpc::ErrorObject;
use crate::protocol::types::{CallToolResult, GetPromptResult, PromptArgument, ResourceContents};
use base64::Engine;
use futures::FutureExt;
use futures::future::{BoxFuture, Either};
use serde::de::DeserializeOwned;
use serde_json::{Map, Value, json};
use std::collections::HashMap;
use std::fmt;
use std::future::Future;
use std::sync::Arc;

/// A failure inside a handler. For tools it becomes an `isError: true` result the model can
/// read; for prompts and resources a JSON-RPC error.
#[derive(Debug, Clone, PartialEq)]
pub struct HandlerError {
    pub message: String,
    /// A JSON-RPC error to answer with instead of a tool result (protocol-level failures).
    pub rpc: Option<ErrorObject>,
}

impl HandlerError {
    pub fn new(message: impl Into<String>) -> Self {
        HandlerError { message: message.into(), rpc: None }
    }
    /// Fail the request itself with this JSON-RPC error.
    pub fn rpc(error: ErrorObject) -> Self {
        HandlerError { message: error.message.clone(), rpc: Some(error) }
    }
}

impl fmt::Display for HandlerError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.message)
    }
}

impl<E: std::error::Error> From<E> for HandlerError {
    fn from(e: E) -> Self {
        HandlerError::new(e.to_string())
    }
}

pub type HandlerResult<T> = Result<T, HandlerError>;

/// Whether a tool's calls may run as tasks (the Tasks extension).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum TaskSupport {
    /// Always answered inline.
    #[default]
    None,
    /// A task for a client that declares the extension; inline otherwise.
    Optional,
    /// Only as a task: a client without the extension gets -32021.
    Required,
}
/// A tool's handler, erased. Its future answers `tools/call` whole (the output check and the
/// result's JSON run in the handler's own future), so a running call holds one box for its tool,
/// not a box in a box.
type ToolHandler = Arc<dyn Fn(Arc<ToolDef>, RequestContext, Value) -> BoxFuture<'static, Result<Value, ErrorObject>> + Send + Sync>;
type PromptHandler = Arc<dyn Fn(RequestContext, Map<String, Value>) -> BoxFuture<'static, HandlerResult<GetPromptResult>> + Send + Sync>;
type ResourceHandler =
    Arc<dyn Fn(RequestContext, String, HashMap<String, String>) -> BoxFuture<'static, HandlerResult<Vec<ResourceContents>>> + Send + Sync>;
/// Suggests values for one argument: `(argument name, typed prefix, other arguments) -> values`.
pub type Completer = Arc<dyn Fn(&str, &str, &Map<String, Value>) -> Vec<String> + Send + Sync>;

/// A tool: its advertised definition, compiled argument validator and handler.
#[derive(Clone)]
pub struct ToolDef {
    pub name: String,
    definition: Map<String, Value>,
    /// Arguments a 2026-07-28 client mirrors in an `Mcp-Param-{header}` header (properties
    /// annotated `x-mcp-header`): `(argument, header)`.
    header_params: Vec<(String, String)>,
    task_support: TaskSupport,
    /// The handler, not the call's arrival, makes the call a task (`RequestContext::start_task`).
    task_started_by_handler: bool,
    input_validator: Arc<jsonschema::Validator>,
    output_validator: Option<Arc<jsonschema::Validator>>,
    handler: ToolHandler,
}

impl ToolDef {
    /// A tool whose arguments are checked against a hand-written JSON Schema.
    pub fn new<F, Fut>(name: impl Into<String>, input_schema: Value, handler: F) -> Result<Self, SchemaError>
    where
        F: Fn(RequestContext, Value) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = HandlerResult<CallToolResult>> + Send + 'static,
    {
        let name = name.into();
        let input_validator = Arc::new(compile_schema(&name, &input_schema)?);
        let header_params = input_schema
            .get("properties")
            .and_then(Value::as_object)
            .into_iter()
            .flatten()
            .filter_map(|(argument, property)| Some((argument.clone(), property.get("x-mcp-header")?.as_str()?.to_string())))
            .collect();
        let mut definition = Map::new();
        definition.insert("name".into(), json!(name));
        definition.insert("inputSchema".into(), input_schema);
        Ok(ToolDef {
            name,
            definition,
            header_params,
            task_support: TaskSupport::None,
            task_started_by_handler: false,
            input_validator,
            output_validator: None,
            // A `map`, not an `async` block: the block would keep the handler's future twice
            // (as captured, and as awaited).
            handler: Arc::new(move |tool: Arc<ToolDef>, ctx, args| Box::pin(handler(ctx, args).map(move |result| tool.answer(result)))),
        })
    }

    /// A tool with typed arguments; the schema is derived from `A`.
    pub fn typed<A, F, Fut>(name: impl Into<String>, handler: F) -> Self
    where
        A: DeserializeOwned + schemars::JsonSchema + Send + 'static,
        F: Fn(RequestContext, A) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = HandlerResult<CallToolResult>> + Send + 'static,
    {
        // The arguments are read before the future: it keeps the handler's future alone, not the
        // arguments it was started from (for as long as the call is parked).
        ToolDef::new(name, schema_for::<A>(), move |ctx, args| match serde_json::from_value::<A>(args) {
            Ok(args) => Either::Left(handler(ctx, args)),
            Err(e) => Either::Right(Box::pin(std::future::ready(Err(HandlerError::new(format!("invalid arguments: {e}")))))),
        })
        .expect("schemars produces valid schemas")
    }

    fn set(mut self, key: &str, value: Value) -> Self {
        self.definition.insert(key.into(), value);
        self
    }
    pub fn title(self, title: impl Into<String>) -> Self {
        let title = title.into();
        self.set("title", json!(title))
    }
    pub fn description(self, description: impl Into<String>) -> Self {
        let description = description.into();
        self.set("description", json!(description))
    }
    pub fn annotations(self, annotations: Value) -> Self {
        self.set("annotations", annotations)
    }
    /// Declare the shape of `structuredContent`; results are checked against it.
    pub fn output_schema(mut self, schema: Value) -> Result<Self, SchemaError> {
        self.output_validator = Some(Arc::new(compile_schema(&self.name, &schema)?));
        Ok(self.set("outputSchema", schema))
    }

    pub fn definition(&self) -> Value {
        Value::Object(self.definition.clone())
    }

    /// Let a call of this tool become a task (the Tasks extension) for a 2026-07-28 client that
    /// declares the extension in that call: `Optional` (a client without it gets the result
    /// inline) or `Required` (refused with -32021 without it). The call becomes a task when it
    /// arrives, unless [`task_started_by_handler`](Self::task_started_by_handler).
    pub fn task_support(mut self, support: TaskSupport) -> Self {
        self.task_support = support;
        self
    }

    /// The handler decides when the call becomes a task (`ctx.start_task().await`), after
    /// asking what it needs in ordinary round trips.
    pub fn task_started_by_handler(mut self) -> Self {
        self.task_started_by_handler = true;
        self
    }

    pub fn task_support_of(&self) -> (TaskSupport, bool) {
        (self.task_support, self.task_started_by_handler)
    }

    /// The arguments mirrored in `Mcp-Param-*` headers: `(argument, header name)`.
    pub fn header_params(&self) -> &[(String, String)] {
        &self.header_params
    }

    /// Check the arguments and start the handler: the call's answer, the handler's future
    /// (which checks what it returns), or a refusal of the arguments. Not an `async fn`, whose
    /// future would keep its arguments (the context and the arguments, moved into the handler)
    /// for as long as the call is parked.
    pub(crate) fn call(self: &Arc<Self>, ctx: RequestContext, arguments: Value) -> BoxFuture<'static, Result<Value, ErrorObject>> {
        match validation_errors(&self.input_validator, &arguments) {
            Some(errors) => {
                let refused = HandlerError::new(format!("invalid arguments for tool {}: {errors}", self.name));
                Box::pin(std::future::ready(self.answer(Err(refused))))
            }
            None => (self.handler)(self.clone(), ctx, arguments),
        }
    }

    /// What a call answers: its result once the structured output checks, a failure as an
    /// `isError` result the model can read, or the JSON-RPC error the handler chose.
    fn answer(&self, result: HandlerResult<CallToolResult>) -> Result<Value, ErrorObject> {
        let result = match result.and_then(|result| self.check_output(result)) {
            Ok(result) => result,
            Err(HandlerError { rpc: Some(error), .. }) => return Err(error),
            Err(e) => CallToolResult::error(e.message),
        };
        Ok(serde_json::to_value(result).expect("results serialize"))
    }

    fn check_output(&self, result: CallToolResult) -> HandlerResult<CallToolResult> {
        if let (Some(validator), false) = (&self.output_validator, result.is_error) {
            let Some(structured) = &result.structured_content else {
                return Err(HandlerError::new(format!("tool {} declares an output schema but returned no structured content", self.name)));
            };
            if let Some(errors) = validation_errors(validator, structured) {
                return Err(HandlerError::new(format!("tool {} returned output that breaks its schema: {errors}", self.name)));
            }
        }
        Ok(result)
    }
}

/// A prompt template.
#[derive(Clone)]
pub struct PromptDef {
    pub name: String,
    pub title: Option<String>,
    pub description: Option<String>,
    pub arguments: Vec<PromptArgument>,
    handler: PromptHandler,
    pub(crate) completer: Option<Completer>,
}

impl PromptDef {
    pub fn new<F, Fut>(name: impl Into<String>, handler: F) -> Self
    where
        F: Fn(RequestContext, Map<String, Value>) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = HandlerResult<GetPromptResult>> + Send + 'static,
    {
        PromptDef {
            name: name.into(),
            title: None,
            description: None,
            arguments: Vec::new(),
            handler: Arc::new(move |ctx, args| Box::pin(handler(ctx, args))),
            completer: None,
        }
    }
    pub fn description(mut self, d: impl Into<String>) -> Self {
        self.description = Some(d.into());
        self
    }
    pub fn title(mut self, t: impl Into<String>) -> Self {
        self.title = Some(t.into());
        self
    }
    pub fn argument(mut self, name: impl Into<String>, description: impl Into<String>, required: bool) -> Self {
        self.arguments.push(PromptArgument { name: name.into(), description: Some(description.into()), required });
        self
    }
    pub fn completer(mut self, c: impl Fn(&str, &str, &Map<String, Value>) -> Vec<String> + Send + Sync + 'static) -> Self {
        self.completer = Some(Arc::new(c));
        self
    }

    pub fn definition(&self) -> Value {
        let mut v = json!({"name": self.name, "arguments": self.arguments});
        if let Some(t) = &self.title {
            v["title"] = json!(t);
        }
        if let Some(d) = &self.description {
            v["description"] = json!(d);
        }
        v
    }

    pub(crate) async fn get(&self, ctx: RequestContext, arguments: Map<String, Value>) -> HandlerResult<GetPromptResult> {
        for arg in self.arguments.iter().filter(|a| a.required) {
            if !arguments.contains_key(&arg.name) {
                return Err(HandlerError::rpc(ErrorObject::invalid_params(format!("prompt {} needs argument {}", self.name, arg.name))));
            }
        }
        (self.handler)(ctx, arguments).await
    }
}

/// Metadata shared by static resources and templates.
#[derive(Clone, Debug, Default)]
pub struct ResourceMeta {
    pub name: String,
    pub title: Option<String>,
    pub description: Option<String>,
    pub mime_type: Option<String>,
}

impl ResourceMeta {
    fn write(&self, v: &mut Value) {
        v["name"] = json!(self.name);
        for (key, value) in [("title", &self.title), ("description", &self.description), ("mimeType", &self.mime_type)] {
            if let Some(value) = value {
                v[key] = json!(value);
            }
        }
    }
}

/// A resource at a fixed URI, or a family of them under a URI template (`{var}` segments).
#[derive(Clone)]
pub struct ResourceDef {
    /// The URI, or for templates the RFC 6570 level-1 template.
    pub uri: String,
    pub is_template: bool,
    pub meta: ResourceMeta,
    handler: ResourceHandler,
    pub(crate) completer: Option<Completer>,
}

impl ResourceDef {
    fn build<F, Fut>(uri: String, is_template: bool, name: String, handler: F) -> Self
    where
        F: Fn(RequestContext, String, HashMap<String, String>) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = HandlerResult<Vec<ResourceContents>>> + Send + 'static,
    {
        ResourceDef {
            uri,
            is_template,
            meta: ResourceMeta { name, ..Default::default() },
            handler: Arc::new(move |ctx, uri, vars| Box::pin(handler(ctx, uri, vars))),
            completer: None,
        }
    }

    /// A resource at one URI.
    pub fn fixed<F, Fut>(uri: impl Into<String>, name: impl Into<String>, handler: F) -> Self
    where
        F: Fn(RequestContext, String) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = HandlerResult<Vec<ResourceContents>>> + Send + 'static,
    {
        Self::build(uri.into(), false, name.into(), move |ctx, uri, _| handler(ctx, uri))
    }

    /// A static text resource.
    pub fn text(uri: impl Into<String>, name: impl Into<String>, mime_type: &str, text: impl Into<String>) -> Self {
        let (mime, text) = (mime_type.to_string(), text.into());
        Self::fixed(uri, name, move |_, uri| {
            let contents = ResourceContents::text(uri, mime.clone(), text.clone());
            async move { Ok(vec![contents]) }
        })
        .mime_type(mime_type)
    }

    /// A static binary resource.
    pub fn blob(uri: impl Into<String>, name: impl Into<String>, mime_type: &str, bytes: &[u8]) -> Self {
        let (mime, data) = (mime_type.to_string(), base64::engine::general_purpose::STANDARD.encode(bytes));
        Self::fixed(uri, name, move |_, uri| {
            let contents = ResourceContents::blob(uri, mime.clone(), data.clone());
            async move { Ok(vec![contents]) }
        })
        .mime_type(mime_type)
    }

    /// A template such as `file:///{path}`; the handler gets the variables it matched.
    pub fn template<F, Fut>(uri_template: impl Into<String>, name: impl Into<String>, handler: F) -> Self
    where
        F: Fn(RequestContext, String, HashMap<String, String>) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = HandlerResult<Vec<ResourceContents>>> + Send + 'static,
    {
        Self::build(uri_template.into(), true, name.into(), handler)
    }

    pub fn title(mut self, t: impl Into<String>) -> Self {
        self.meta.title = Some(t.into());
        self
    }
    pub fn description(mut self, d: impl Into<String>) -> Self {
        self.meta.description = Some(d.into());
        self
    }
    pub fn mime_type(mut self, m: impl Into<String>) -> Self {
        self.meta.mime_type = Some(m.into());
        self
    }
    pub fn completer(mut self, c: impl Fn(&str, &str, &Map<String, Value>) -> Vec<String> + Send + Sync + 'static) -> Self {
        self.completer = Some(Arc::new(c));
        self
    }

    pub fn definition(&self) -> Value {
        let mut v = if self.is_template { json!({"uriTemplate": self.uri}) } else { json!({"uri": self.uri}) };
        self.meta.write(&mut v);
        v
    }

    /// The template variables `uri` binds, or `None` when this resource doesn't serve it.
    pub fn matches(&self, uri: &str) -> Option<HashMap<String, String>> {
        if !self.is_template {
            return (self.uri == uri).then(HashMap::new);
        }
        match_template(&self.uri, uri)
    }

    pub(crate) async fn read(
        &self,
        ctx: RequestContext,
        uri: String,
        vars: HashMap<String, String>,
    ) -> HandlerResult<Vec<ResourceContents>> {
        (self.handler)(ctx, uri, vars).await
    }
}

/// Match an RFC 6570 level-1 template (`{name}` expansions, no operators) against a URI.
/// A variable matches one or more characters up to the next literal; the last may take the rest.
pub fn match_template(template: &str, uri: &str) -> Option<HashMap<String, String>> {
    let mut vars = HashMap::new();
    let (mut t, mut u) = (template, uri);
    while !t.is_empty() {
        if let Some(rest) = t.strip_prefix('{') {
            let end = rest.find('}')?;
            let name = &rest[..end];
            t = &rest[end + 1..];
            let literal_end = t.find('{').unwrap_or(t.len());
            let next_literal = &t[..literal_end];
            let take = if next_literal.is_empty() { u.len() } else { u.find(next_literal)? };
            if take == 0 {
                return None;
            }
            vars.insert(name.to_string(), u[..take].to_string());
            u = &u[take..];
        } else {
            let literal_end = t.find('{').unwrap_or(t.len());
            u = u.strip_prefix(&t[..literal_end])?;
            t = &t[literal_end..];
        }
    }
    u.is_empty().then_some(vars)
}

/// One page of a list and the cursor of the next, if any. Cursors are opaque to clients.
pub fn paginate<T: Clone>(items: &[T], cursor: Option<&str>, page_size: usize) -> Result<(Vec<T>, Option<String>), ErrorObject> {
    let start = match cursor {
        None => 0,
        Some(c) => decode_cursor(c).filter(|&o| o <= items.len()).ok_or_else(|| ErrorObject::invalid_params("invalid cursor"))?,
    };
    let end = (start + page_size.max(1)).min(items.len());
    let next = (end < items.len()).then(|| encode_cursor(end));
    Ok((items[start..end].to_vec(), next))
}

fn encode_cursor(offset: usize) -> String {
    base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(format!("offset:{offset}"))
}

fn decode_cursor(cursor: &str) -> Option<usize> {
    let bytes = base64::engine::general_purpose::URL_SAFE_NO_PAD.decode(cursor).ok()?;
    String::from_utf8(bytes).ok()?.strip_prefix("offset:")?.parse().ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn counting_tool() -> ToolDef {
        let schema = json!({"type": "object", "properties": {"n": {"type": "integer"}}, "required": ["n"]});
        ToolDef::new("count", json!({"type": "object"}), |_, _| async { Ok(CallToolResult::text("unused")) })
            .unwrap()
            .output_schema(schema)
            .unwrap()
    }

    #[test]
    fn an_answer_carries_a_result_whose_structured_output_checks() {
        let answer = counting_tool().answer(Ok(CallToolResult::structured(json!({"n": 3})))).unwrap();
        assert_eq!(answer["structuredContent"]["n"], 3, "{answer}");
        assert_ne!(answer["isError"], true, "{answer}");
    }

    #[test]
    fn output_that_breaks_the_schema_or_is_missing_becomes_an_error_result() {
        let tool = counting_tool();
        let broken = tool.answer(Ok(CallToolResult::structured(json!({"n": "three"})))).unwrap();
        assert_eq!(broken["isError"], true, "{broken}");
        assert!(broken["content"][0]["text"].as_str().unwrap().contains("breaks its schema"), "{broken}");
        let missing = tool.answer(Ok(CallToolResult::text("no structure"))).unwrap();
        assert!(missing["content"][0]["text"].as_str().unwrap().contains("no structured content"), "{missing}");
        // A tool's own error result is passed on, not checked against the output schema.
        let failed = tool.answer(Ok(CallToolResult::error("it failed"))).unwrap();
        assert_eq!((failed["isError"].clone(), failed["content"][0]["text"].clone()), (json!(true), json!("it failed")));
    }

    #[test]
    fn a_handler_failure_is_an_error_result_and_an_rpc_failure_a_jsonrpc_error() {
        let tool = counting_tool();
        let failed = tool.answer(Err(HandlerError::new("disk full"))).unwrap();
        assert_eq!((failed["isError"].clone(), failed["content"][0]["text"].clone()), (json!(true), json!("disk full")));
        let rpc = ErrorObject::invalid_params("no such thing");
        assert_eq!(tool.answer(Err(HandlerError::rpc(rpc.clone()))).unwrap_err(), rpc);
    }

    #[test]
    fn templates_bind_variables() {
        let vars = match_template("test://template/{id}/data", "test://template/42/data").unwrap();
        assert_eq!(vars["id"], "42");
        let vars = match_template("file:///{dir}/{name}", "file:///a/b.txt").unwrap();
        assert_eq!((vars["dir"].as_str(), vars["name"].as_str()), ("a", "b.txt"));
        assert!(match_template("test://template/{id}/data", "test://template//data").is_none());
        assert!(match_template("test://template/{id}/data", "test://other/1/data").is_none());
        assert!(match_template("test://x", "test://x/y").is_none());
    }

    #[test]
    fn pagination_walks_every_item_once() {
        let items: Vec<u32> = (0..7).collect();
        let (mut seen, mut cursor) = (Vec::new(), None);
        loop {
            let (page, next) = paginate(&items, cursor.as_deref(), 3).unwrap();
            seen.extend(page);
            match next {
                Some(c) => cursor = Some(c),
                None => break,
            }
        }
        assert_eq!(seen, items);
        assert!(paginate(&items, Some("garbage!"), 3).is_err());
        assert!(paginate(&items, Some(&encode_cursor(99)), 3).is_err());
    }
}
