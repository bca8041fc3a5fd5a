//! The server as a real MCP client sees it: the rmcp SDK's client over Streamable HTTP.
// rmcp marks sampling and logging deprecated for a future protocol version; we serve today's.
#![allow(deprecated)]

mod common;

use common::start;
use rmcp::model::{
    CallToolRequestParams, CallToolResult, CancelledNotificationParam, ClientCapabilities, ClientConfig, CreateMessageRequestParams,
    CreateMessageResult, ElicitRequestParams, ElicitResult, ElicitationAction, ErrorData, GetPromptRequestParams, Implementation,
    LoggingLevel, LoggingMessageNotificationParam, ProtocolVersion, ReadResourceRequestParams, ResourceUpdatedNotificationParam,
    SamplingMessage, SetLevelRequestParams, SubscribeRequestParams,
};
use rmcp::service::{NotificationContext, RequestContext, RoleClient, RunningService};
use rmcp::transport::StreamableHttpClientTransport;
use rmcp::{ClientHandler, ClientLifecycleMode, ClientServiceExt, ServiceExt};
use serde_json::{Value, json};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use switchboard_node::server::ServerConfig;
use switchboard_node::transport::http::HttpConfig;

/// How the test client answers elicitations.
#[derive(Clone)]
enum Elicit {
    Accept(Value),
    Decline,
    Cancel,
    /// Never answer (the server's timeout must fire).
    Hang,
}

#[derive(Clone)]
struct TestClient {
    capabilities: ClientCapabilities,
    elicit: Elicit,
    /// `Ok(text)` answers sampling with that text, `Err(message)` with a JSON-RPC error.
    sample: Result<String, String>,
    /// What the client saw, in order: `elicit`, `sample`, `cancelled`, `log:<data>`, `updated:<uri>`.
    seen: Arc<Mutex<Vec<String>>>,
}

impl TestClient {
    fn new() -> Self {
        TestClient {
            capabilities: serde_json::from_value(json!({"elicitation": {}, "sampling": {}})).unwrap(),
            elicit: Elicit::Accept(json!({"confirm": true})),
            sample: Ok("a fine answer".into()),
            seen: Arc::default(),
        }
    }
    fn saw(&self, what: impl Into<String>) {
        self.seen.lock().unwrap().push(what.into());
    }
    fn seen(&self) -> Vec<String> {
        self.seen.lock().unwrap().clone()
    }
    async fn connect(&self, url: &str) -> RunningService<RoleClient, TestClient> {
        self.clone().serve(StreamableHttpClientTransport::from_uri(url)).await.expect("rmcp client connects")
    }
    /// Connect as rmcp's auto mode does: probe `server/discover`, speak 2026-07-28 if offered.
    async fn connect_auto(&self, url: &str) -> RunningService<RoleClient, TestClient> {
        let lifecycle = ClientLifecycleMode::Auto { preferred_versions: vec![ProtocolVersion::V_2026_07_28], legacy_version: None };
        self.clone().serve_with_lifecycle(StreamableHttpClientTransport::from_uri(url), lifecycle).await.expect("rmcp client connects")
    }
}

impl ClientHandler for TestClient {
    fn get_info(&self) -> ClientConfig {
        ClientConfig::new(self.capabilities.clone(), Implementation::new("rmcp-test-client", "1.0.0"))
    }

    async fn create_elicitation(&self, request: ElicitRequestParams, _: RequestContext<RoleClient>) -> Result<ElicitResult, ErrorData> {
        assert!(matches!(request, ElicitRequestParams::FormElicitationParams { .. }));
        self.saw("elicit");
        match &self.elicit {
            Elicit::Accept(content) => Ok(ElicitResult::new(ElicitationAction::Accept).with_content(content.clone())),
            Elicit::Decline => Ok(ElicitResult::new(ElicitationAction::Decline)),
            Elicit::Cancel => Ok(ElicitResult::new(ElicitationAction::Cancel)),
            Elicit::Hang => std::future::pending().await,
        }
    }

    async fn create_message(
        &self,
        params: CreateMessageRequestParams,
        _: RequestContext<RoleClient>,
    ) -> Result<CreateMessageResult, ErrorData> {
        self.saw("sample");
        assert!(!params.messages.is_empty());
        match &self.sample {
            Ok(text) => Ok(CreateMessageResult::new(SamplingMessage::assistant_text(text.clone()), "test-model".into())),
            Err(message) => Err(ErrorData::internal_error(message.clone(), None)),
        }
    }

    async fn on_cancelled(&self, _: CancelledNotificationParam, _: NotificationContext<RoleClient>) {
        self.saw("cancelled");
    }

    async fn on_logging_message(&self, params: LoggingMessageNotificationParam, _: NotificationContext<RoleClient>) {
        self.saw(format!("log:{}", params.data.as_str().unwrap_or_default()));
    }

    async fn on_resource_updated(&self, params: ResourceUpdatedNotificationParam, _: NotificationContext<RoleClient>) {
        self.saw(format!("updated:{}", params.uri));
    }
}

fn args(value: Value) -> serde_json::Map<String, Value> {
    value.as_object().unwrap().clone()
}

fn call(name: &'static str, arguments: Value) -> CallToolRequestParams {
    CallToolRequestParams::new(name).with_arguments(args(arguments))
}

fn text(result: &CallToolResult) -> String {
    result.content.first().and_then(|c| c.as_text()).map(|t| t.text.clone()).unwrap_or_default()
}

#[tokio::test]
async fn lists_every_tool_across_pages_and_calls_one() {
    let srv = start(ServerConfig { page_size: 3, ..Default::default() }, HttpConfig::default()).await;
    let client = TestClient::new().connect(&srv.url).await;
    let tools = client.list_all_tools().await.unwrap();
    let names: Vec<&str> = tools.iter().map(|t| t.name.as_ref()).collect();
    for expected in ["echo", "confirm", "ask_llm", "countdown", "test_simple_text", "json_schema_2020_12_tool"] {
        assert!(names.contains(&expected), "{expected} missing from {names:?}");
    }
    let mut unique = names.clone();
    unique.sort();
    unique.dedup();
    assert_eq!(unique.len(), names.len(), "no tool listed twice across pages");

    let result = client.call_tool(call("echo", json!({"text": "hello rmcp"}))).await.unwrap();
    assert_eq!(text(&result), "hello rmcp");
    assert_ne!(result.is_error, Some(true));
    client.cancel().await.unwrap();
}

#[tokio::test]
async fn elicitation_accept_decline_and_cancel_reach_the_tool() {
    let srv = start(ServerConfig::default(), HttpConfig::default()).await;
    for (behaviour, expected) in [
        (Elicit::Accept(json!({"confirm": true})), "confirmed"),
        (Elicit::Accept(json!({"confirm": false})), "not confirmed"),
        (Elicit::Decline, "declined"),
        (Elicit::Cancel, "cancelled"),
    ] {
        let test_client = TestClient { elicit: behaviour, ..TestClient::new() };
        let client = test_client.connect(&srv.url).await;
        let result = client.call_tool(call("confirm", json!({"action": "deploy"}))).await.unwrap();
        assert_eq!(result.structured_content.as_ref().unwrap()["answer"], expected);
        assert_eq!(test_client.seen(), vec!["elicit"]);
        client.cancel().await.unwrap();
    }
}

#[tokio::test]
async fn accepted_content_that_breaks_the_schema_is_a_typed_error() {
    let srv = start(ServerConfig::default(), HttpConfig::default()).await;
    let test_client = TestClient { elicit: Elicit::Accept(json!({"confirm": "yes please"})), ..TestClient::new() };
    let client = test_client.connect(&srv.url).await;
    let result = client.call_tool(call("confirm", json!({"action": "deploy"}))).await.unwrap();
    assert_eq!(result.is_error, Some(true));
    assert!(text(&result).contains("does not match the requested schema"), "{}", text(&result));
    client.cancel().await.unwrap();
}

#[tokio::test]
async fn sampling_answers_and_errors_reach_the_tool() {
    let srv = start(ServerConfig::default(), HttpConfig::default()).await;
    let test_client = TestClient::new();
    let client = test_client.connect(&srv.url).await;
    let result = client.call_tool(call("ask_llm", json!({"prompt": "2+2?"}))).await.unwrap();
    assert_eq!(text(&result), "a fine answer");
    client.cancel().await.unwrap();

    let failing = TestClient { sample: Err("model overloaded".into()), ..TestClient::new() };
    let client = failing.connect(&srv.url).await;
    let result = client.call_tool(call("ask_llm", json!({"prompt": "2+2?"}))).await.unwrap();
    assert_eq!(result.is_error, Some(true));
    let message = text(&result);
    assert!(message.contains("answered the sampling request with error") && message.contains("model overloaded"), "{message}");
    client.cancel().await.unwrap();
}

#[tokio::test]
async fn nothing_is_sent_to_a_client_without_the_capability() {
    let srv = start(ServerConfig::default(), HttpConfig::default()).await;
    let bare = TestClient { capabilities: ClientCapabilities::default(), ..TestClient::new() };
    let client = bare.connect(&srv.url).await;
    let result = client.call_tool(call("confirm", json!({"action": "x"}))).await.unwrap();
    assert_eq!(result.is_error, Some(true));
    assert!(text(&result).contains("did not declare the elicitation capability"));
    let result = client.call_tool(call("ask_llm", json!({"prompt": "x"}))).await.unwrap();
    assert!(text(&result).contains("did not declare the sampling capability"));
    assert!(bare.seen().is_empty(), "no request reached the client: {:?}", bare.seen());
    client.cancel().await.unwrap();
}

#[tokio::test]
async fn an_unanswered_elicitation_times_out_with_a_cancel_notification() {
    let config = ServerConfig { elicitation_timeout: Duration::from_millis(300), ..Default::default() };
    let srv = start(config, HttpConfig::default()).await;
    let silent = TestClient { elicit: Elicit::Hang, ..TestClient::new() };
    let client = silent.connect(&srv.url).await;
    let result = client.call_tool(call("confirm", json!({"action": "x"}))).await.unwrap();
    assert_eq!(result.is_error, Some(true));
    assert!(text(&result).contains("elicitation request timed out"), "{}", text(&result));
    assert_eq!(silent.seen(), vec!["elicit", "cancelled"], "the client hears notifications/cancelled");
    client.cancel().await.unwrap();
}

#[tokio::test]
async fn logging_resources_prompts_and_completions() {
    let srv = start(ServerConfig::default(), HttpConfig::default()).await;
    let test_client = TestClient::new();
    let client = test_client.connect(&srv.url).await;

    client.set_level(SetLevelRequestParams::new(LoggingLevel::Debug)).await.unwrap();
    client.call_tool(call("test_tool_with_logging", json!({}))).await.unwrap();
    let logs: Vec<String> = test_client.seen().into_iter().filter(|s| s.starts_with("log:")).collect();
    assert_eq!(logs, vec!["log:Tool execution started", "log:Tool processing data", "log:Tool execution completed"]);

    // Above the session's level, nothing is logged.
    client.set_level(SetLevelRequestParams::new(LoggingLevel::Error)).await.unwrap();
    client.call_tool(call("test_tool_with_logging", json!({}))).await.unwrap();
    assert_eq!(test_client.seen().iter().filter(|s| s.starts_with("log:")).count(), 3);

    let read = client.read_resource(ReadResourceRequestParams::new("test://template/77/data")).await.unwrap();
    let body = serde_json::to_value(&read.contents[0]).unwrap();
    assert!(body["text"].as_str().unwrap().contains("Data for ID: 77"));

    client.subscribe(SubscribeRequestParams::new("test://watched-resource")).await.unwrap();
    // The update travels on the standalone GET stream the client opened after initialize.
    let deadline = tokio::time::Instant::now() + Duration::from_secs(5);
    while !test_client.seen().contains(&"updated:test://watched-resource".to_string()) {
        assert!(tokio::time::Instant::now() < deadline, "no resource update arrived: {:?}", test_client.seen());
        srv.server.notify_resource_updated("test://watched-resource");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }

    let prompt = client
        .get_prompt(GetPromptRequestParams::new("test_prompt_with_arguments").with_arguments(args(json!({"arg1": "a", "arg2": "b"}))))
        .await
        .unwrap();
    let message = serde_json::to_value(&prompt.messages[0]).unwrap();
    assert_eq!(message["content"]["text"], "Prompt with arguments: arg1='a', arg2='b'");

    let completion: Value = serde_json::to_value(
        client
            .complete(serde_json::from_value(json!({"ref": {"type": "ref/prompt", "name": "test_prompt_with_arguments"}, "argument": {"name": "arg1", "value": "pa"}})).unwrap())
            .await
            .unwrap(),
    )
    .unwrap();
    assert_eq!(completion["completion"]["values"], json!(["paris", "park", "party"]));
    client.cancel().await.unwrap();
}

/// rmcp 3.11 speaks 2026-07-28 when the server offers it, and drives `input_required` rounds
/// itself: the same tools, the same handler callbacks, no session and no server-to-client request.
#[tokio::test]
async fn rmcp_in_auto_mode_speaks_2026_and_drives_input_required_rounds() {
    let srv = start(ServerConfig::default(), HttpConfig::default()).await;
    // One answer fits every form asked below (each schema requires only its own field).
    let all_fields = json!({"confirm": true, "name": "ada", "color": "red", "context": "tests"});
    let handler = TestClient { elicit: Elicit::Accept(all_fields), ..TestClient::new() };
    let client = handler.connect_auto(&srv.url).await;
    assert_eq!(client.peer_info().map(|info| info.protocol_version.clone()), Some(ProtocolVersion::V_2026_07_28));
    let confirmed = client.call_tool(call("confirm", json!({"action": "ship it"}))).await.unwrap();
    assert_eq!(confirmed.structured_content, Some(json!({"action": "ship it", "answer": "confirmed"})));
    let sampled = client.call_tool(call("ask_llm", json!({"prompt": "p"}))).await.unwrap();
    assert_eq!(text(&sampled), "a fine answer");
    // Two questions in one round: the client answers both, the tool sees both.
    let both = client.call_tool(call("ask_two", json!({}))).await.unwrap();
    assert_eq!(text(&both), "ada/red");
    // A prompt asks too.
    let prompt = client.get_prompt(GetPromptRequestParams::new("test_input_required_result_prompt")).await.unwrap();
    assert_eq!(serde_json::to_value(&prompt.messages[0]).unwrap()["content"]["text"], "Prompt with context: tests");
    assert_eq!(handler.seen(), vec!["elicit", "sample", "elicit", "elicit", "elicit"]);
    assert_eq!(srv.server.metrics().mrtr_round_count("complete"), 4);
    client.cancel().await.unwrap();
}
