//! The tools, prompts and resources `@modelcontextprotocol/conformance` exercises in server mode.
//! Names, schemas and texts follow the suite's scenario sources.

use crate::protocol::jsonrpc::ErrorObject;
use crate::protocol::types::{
    CallToolResult, Content, CreateMessageParams, ElicitAction, ElicitResult, GetPromptResult, LogLevel, PromptMessage, ResourceContents,
};
use crate::server::{
    HandlerError, HandlerResult, Notice, PromptDef, RequestContext, ResourceDef, ServerBuilder, TaskSupport, ToolDef, arg_str,
};
use serde_json::{Value, json};
use std::time::Duration;

/// A 1x1 red PNG.
pub const PNG_BASE64: &str = "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mP8z8DwHwAFBQIAX8jx0gAAAABJRU5ErkJggg==";
/// A minimal WAV file.
pub const WAV_BASE64: &str = "UklGRiYAAABXQVZFZm10IBAAAAABAAEAQB8AAAB9AAACABAAZGF0YQIAAAA=";

fn no_args() -> Value {
    json!({"type": "object", "properties": {}})
}

fn image() -> Content {
    Content::Image { data: PNG_BASE64.into(), mime_type: "image/png".into() }
}

/// A tool from a literal schema (the suite checks some schemas verbatim).
fn tool<F, Fut>(name: &str, description: &str, schema: Value, handler: F) -> ToolDef
where
    F: Fn(RequestContext, Value) -> Fut + Send + Sync + 'static,
    Fut: Future<Output = HandlerResult<CallToolResult>> + Send + 'static,
{
    ToolDef::new(name, schema, handler).expect("conformance schemas are valid").description(description)
}

fn elicitation_summary(result: &crate::protocol::types::ElicitResult, prefix: &str) -> CallToolResult {
    let content = result.content.clone().map(Value::Object).unwrap_or(Value::Null);
    let action = serde_json::to_value(result.action).expect("actions serialize");
    CallToolResult::text(format!("{prefix}: action={}, content={content}", action.as_str().unwrap_or_default()))
}

pub fn register(builder: ServerBuilder) -> ServerBuilder {
    let builder = builder
        .tool(tool("test_simple_text", "Tests simple text content response", no_args(), |_, _| async {
            Ok(CallToolResult::text("This is a simple text response for testing."))
        }))
        .tool(tool("test_image_content", "Tests image content response", no_args(), |_, _| async {
            Ok(CallToolResult::content(vec![image()]))
        }))
        .tool(tool("test_audio_content", "Tests audio content response", no_args(), |_, _| async {
            Ok(CallToolResult::content(vec![Content::Audio { data: WAV_BASE64.into(), mime_type: "audio/wav".into() }]))
        }))
        .tool(tool("test_embedded_resource", "Tests embedded resource content response", no_args(), |_, _| async {
            let resource = ResourceContents::text("test://embedded-resource", "text/plain", "This is an embedded resource content.");
            Ok(CallToolResult::content(vec![Content::Resource { resource }]))
        }))
        .tool(tool(
            "test_multiple_content_types",
            "Tests response with multiple content types (text, image, resource)",
            no_args(),
            |_, _| async {
                let resource = ResourceContents::text("test://mixed-content-resource", "application/json", r#"{"test":"data","value":123}"#);
                Ok(CallToolResult::content(vec![Content::text("Multiple content types test:"), image(), Content::Resource { resource }]))
            },
        ))
        .tool(tool("test_tool_with_logging", "Tests tool that emits log messages during execution", no_args(), |ctx, _| async move {
            for (i, text) in ["Tool execution started", "Tool processing data", "Tool execution completed"].into_iter().enumerate() {
                if i > 0 {
                    tokio::time::sleep(Duration::from_millis(50)).await;
                }
                ctx.log(LogLevel::Info, None, json!(text));
            }
            Ok(CallToolResult::text("Tool with logging executed successfully"))
        }))
        .tool(tool("test_tool_with_progress", "Tests tool that reports progress notifications", no_args(), |ctx, _| async move {
            for (i, step) in [0.0, 50.0, 100.0].into_iter().enumerate() {
                if i > 0 {
                    tokio::time::sleep(Duration::from_millis(50)).await;
                }
                ctx.progress(step, Some(100.0), Some(&format!("Completed step {step} of 100")));
            }
            let token = ctx.progress_token().map(|t| t.as_str().map(str::to_owned).unwrap_or_else(|| t.to_string()));
            Ok(CallToolResult::text(token.unwrap_or_else(|| "no progress token".into())))
        }))
        .tool(tool("test_error_handling", "Tests error response handling", no_args(), |_, _| async {
            Ok(CallToolResult::error("This tool intentionally returns an error for testing"))
        }))
        .tool(tool(
            "test_sampling",
            "Tests server-initiated sampling (LLM completion request)",
            json!({"type": "object", "properties": {"prompt": {"type": "string", "description": "The prompt to send to the LLM"}}, "required": ["prompt"]}),
            |ctx, args| async move {
                let reply = ctx.sample(CreateMessageParams::prompt(args["prompt"].as_str().unwrap_or_default(), 100)).await?;
                Ok(CallToolResult::text(format!("LLM response: {}", reply.text().unwrap_or_default())))
            },
        ))
        .tool(tool(
            "test_elicitation",
            "Tests server-initiated elicitation (user input request)",
            json!({"type": "object", "properties": {"message": {"type": "string", "description": "The message to show the user"}}, "required": ["message"]}),
            |ctx, args| async move {
                let schema = json!({"type": "object", "properties": {
                    "username": {"type": "string", "description": "User's response"},
                    "email": {"type": "string", "description": "User's email address"}
                }, "required": ["username", "email"]});
                let result = ctx.elicit(args["message"].as_str().unwrap_or_default(), schema).await?;
                Ok(elicitation_summary(&result, "User response"))
            },
        ))
        .tool(tool("test_elicitation_sep1034_defaults", "Tests elicitation with default values per SEP-1034", no_args(), |ctx, _| async move {
            let schema = json!({"type": "object", "properties": {
                "name": {"type": "string", "description": "User name", "default": "John Doe"},
                "age": {"type": "integer", "description": "User age", "default": 30},
                "score": {"type": "number", "description": "User score", "default": 95.5},
                "status": {"type": "string", "description": "User status", "enum": ["active", "inactive", "pending"], "default": "active"},
                "verified": {"type": "boolean", "description": "Verification status", "default": true}
            }, "required": []});
            let result = ctx.elicit("Please review and update the form fields with defaults", schema).await?;
            Ok(elicitation_summary(&result, "Elicitation completed"))
        }))
        .tool(tool("test_elicitation_sep1330_enums", "Tests elicitation with enum schema improvements per SEP-1330", no_args(), |ctx, _| async move {
            let schema = json!({"type": "object", "properties": {
                "untitledSingle": {"type": "string", "description": "Select one option", "enum": ["option1", "option2", "option3"]},
                "titledSingle": {"type": "string", "description": "Select one option with titles", "oneOf": [
                    {"const": "value1", "title": "First Option"}, {"const": "value2", "title": "Second Option"}, {"const": "value3", "title": "Third Option"}]},
                "legacyEnum": {"type": "string", "description": "Select one option (legacy)", "enum": ["opt1", "opt2", "opt3"],
                    "enumNames": ["Option One", "Option Two", "Option Three"]},
                "untitledMulti": {"type": "array", "description": "Select multiple options", "minItems": 1, "maxItems": 3,
                    "items": {"type": "string", "enum": ["option1", "option2", "option3"]}},
                "titledMulti": {"type": "array", "description": "Select multiple options with titles", "minItems": 1, "maxItems": 3,
                    "items": {"anyOf": [{"const": "value1", "title": "First Choice"}, {"const": "value2", "title": "Second Choice"}, {"const": "value3", "title": "Third Choice"}]}}
            }, "required": []});
            let result = ctx.elicit("Please select options from the enum fields", schema).await?;
            Ok(elicitation_summary(&result, "Elicitation completed"))
        }))
        .tool(tool(
            "json_schema_2020_12_tool",
            "Tool with JSON Schema 2020-12 features for conformance testing (SEP-1613)",
            json!({
                "$schema": "https://json-schema.org/draft/2020-12/schema",
                "type": "object",
                "$defs": {"address": {"$anchor": "addressDef", "type": "object",
                    "properties": {"street": {"type": "string"}, "city": {"type": "string"}}}},
                "properties": {
                    "name": {"type": "string"},
                    "address": {"$ref": "#/$defs/address"},
                    "contactMethod": {"type": "string", "enum": ["phone", "email"]},
                    "phone": {"type": "string"},
                    "email": {"type": "string"}
                },
                "allOf": [{"anyOf": [{"required": ["phone"]}, {"required": ["email"]}]}],
                "if": {"properties": {"contactMethod": {"const": "phone"}}, "required": ["contactMethod"]},
                "then": {"required": ["phone"]},
                "else": {"required": ["email"]},
                "additionalProperties": false
            }),
            |_, args| async move { Ok(CallToolResult::text(format!("JSON Schema 2020-12 tool called with: {args}"))) },
        ))
        .tool(tool(
            "test_reconnection",
            "Tests SSE stream disconnection and client reconnection (SEP-1699). Server will close the stream mid-call and send the result after client reconnects.",
            no_args(),
            |ctx, _| async move {
                ctx.close_sse_stream();
                tokio::time::sleep(Duration::from_millis(100)).await;
                Ok(CallToolResult::text(
                    "Reconnection test completed successfully. If you received this, the client properly reconnected after stream closure.",
                ))
            },
        ));
    let builder = register_tasks(register_2026(builder));
    let builder = builder
        .prompt(
            PromptDef::new("test_simple_prompt", |_, _| async {
                Ok(GetPromptResult {
                    description: None,
                    messages: vec![PromptMessage::user(Content::text("This is a simple prompt for testing."))],
                })
            })
            .description("A simple prompt without arguments"),
        )
        .prompt(
            PromptDef::new("test_prompt_with_arguments", |_, args| async move {
                let text = format!("Prompt with arguments: arg1='{}', arg2='{}'", arg_str(&args, "arg1"), arg_str(&args, "arg2"));
                Ok(GetPromptResult { description: None, messages: vec![PromptMessage::user(Content::text(text))] })
            })
            .description("A prompt with required arguments")
            .argument("arg1", "First test argument", true)
            .argument("arg2", "Second test argument", true)
            .completer(|_, prefix, _| {
                ["paris", "park", "party", "test", "testing", "tested"]
                    .iter()
                    .filter(|v| v.starts_with(prefix))
                    .map(|v| v.to_string())
                    .collect()
            }),
        )
        .prompt(
            PromptDef::new("test_prompt_with_embedded_resource", |_, args| async move {
                let resource =
                    ResourceContents::text(arg_str(&args, "resourceUri"), "text/plain", "Embedded resource content for testing.");
                Ok(GetPromptResult {
                    description: None,
                    messages: vec![
                        PromptMessage::user(Content::Resource { resource }),
                        PromptMessage::user(Content::text("Please process the embedded resource above.")),
                    ],
                })
            })
            .description("A prompt that includes an embedded resource")
            .argument("resourceUri", "URI of the resource to embed", true),
        )
        .prompt(
            PromptDef::new("test_prompt_with_image", |_, _| async {
                Ok(GetPromptResult {
                    description: None,
                    messages: vec![PromptMessage::user(image()), PromptMessage::user(Content::text("Please analyze the image above."))],
                })
            })
            .description("A prompt that includes image content"),
        )
        .prompt(
            PromptDef::new("test_input_required_result_prompt", |ctx, _| async move {
                let schema = json!({"type": "object", "properties": {"context": {"type": "string"}}, "required": ["context"]});
                let answer = ctx.elicit_as("user_context", "What context should the prompt use?", schema).await?;
                let text = format!("Prompt with context: {}", content_str(&answer, "context"));
                Ok(GetPromptResult { description: None, messages: vec![PromptMessage::user(Content::text(text))] })
            })
            .description("MRTR: prompt that requires elicitation input"),
        );
    let png = base64_decode(PNG_BASE64);
    builder
        .resource(
            ResourceDef::text("test://static-text", "static-text", "text/plain", "This is the content of the static text resource.")
                .description("A static text resource for testing"),
        )
        .resource(
            ResourceDef::blob("test://static-binary", "static-binary", "image/png", &png)
                .description("A static binary resource (image) for testing"),
        )
        .resource(
            ResourceDef::text("test://watched-resource", "watched-resource", "text/plain", "Watched resource content")
                .description("A resource that can be subscribed to"),
        )
        .resource(
            ResourceDef::template("test://template/{id}/data", "template", |_, uri, vars| async move {
                let id = vars.get("id").cloned().unwrap_or_default();
                let text = json!({"id": id, "templateTest": true, "data": format!("Data for ID: {id}")}).to_string();
                Ok(vec![ResourceContents::text(uri, "application/json", text)])
            })
            .mime_type("application/json")
            .description("A resource template with parameter substitution")
            .completer(|_, prefix, _| ["1", "42", "123"].iter().filter(|v| v.starts_with(prefix)).map(|v| v.to_string()).collect()),
        )
}

/// A string field of accepted elicitation content (empty when declined or absent).
fn content_str(result: &ElicitResult, field: &str) -> String {
    result.content.as_ref().and_then(|c| c.get(field)).and_then(Value::as_str).unwrap_or_default().to_string()
}

fn string_field(field: &str) -> Value {
    json!({"type": "object", "properties": {field: {"type": "string"}}, "required": [field]})
}

fn ok_field() -> Value {
    json!({"type": "object", "properties": {"ok": {"type": "boolean"}}, "required": ["ok"]})
}

/// The fixtures of the Tasks extension's scenarios (`tasks-*`). Under a legacy session, or for a
/// client without the extension where a tool allows it, they run inline.
fn register_tasks(builder: ServerBuilder) -> ServerBuilder {
    let confirm_schema = || json!({"type": "object", "properties": {"confirm": {"type": "boolean"}}, "required": ["confirm"]});
    builder
        .tool(tool(
            "greet",
            "Greet someone (sync-only, no task support)",
            json!({"type": "object", "properties": {"name": {"type": "string", "description": "Name to greet"}}, "required": ["name"]}),
            |_, args| async move { Ok(CallToolResult::text(format!("Hello, {}!", args["name"].as_str().unwrap_or_default()))) },
        ))
        .tool(
            tool(
                "slow_compute",
                "Simulate a slow computation; runs as a task for a client that declares the Tasks extension",
                json!({"type": "object", "properties": {
                    "seconds": {"type": "integer", "description": "How many seconds to compute (sleep)", "default": 3},
                    "label": {"type": "string", "description": "A label for the computation", "default": "default"}}}),
                |_, args| async move {
                    let seconds = args["seconds"].as_u64().unwrap_or(3);
                    let label = args["label"].as_str().unwrap_or("default").to_string();
                    if seconds == 0 {
                        return Ok(CallToolResult::text(format!("Computation \"{label}\" completed instantly. Result: 42.")));
                    }
                    // Cancelled by being dropped here.
                    tokio::time::sleep(Duration::from_secs(seconds)).await;
                    Ok(CallToolResult::text(format!("Computation \"{label}\" completed after {seconds} seconds. Result: 42.")))
                },
            )
            .task_support(TaskSupport::Optional),
        )
        .tool(
            tool("failing_job", "A job that always fails after 1 second (a tool error: completed with isError)", no_args(), |_, _| async {
                tokio::time::sleep(Duration::from_secs(1)).await;
                Ok(CallToolResult::error("simulated failure: job crashed"))
            })
            .task_support(TaskSupport::Required),
        )
        .tool(
            tool("protocol_error_job", "A job that ends in a protocol-level error (failed with an error)", no_args(), |_, _| async {
                tokio::time::sleep(Duration::from_millis(500)).await;
                Err(HandlerError::rpc(ErrorObject::internal("simulated protocol error: server internal failure")))
            })
            .task_support(TaskSupport::Required),
        )
        .tool(
            tool(
                "confirm_delete",
                "Asks the client to confirm before deleting (input requests inside a task)",
                json!({"type": "object", "properties": {"filename": {"type": "string", "description": "File the user is being asked to confirm deletion of", "default": "important.txt"}}}),
                move |ctx, args| async move {
                    let filename = args["filename"].as_str().unwrap_or("important.txt").to_string();
                    let answer = ctx.elicit_as("confirm", format!("Delete '{filename}'?"), confirm_schema()).await?;
                    let confirmed = answer.action == ElicitAction::Accept && answer.content.as_ref().and_then(|c| c.get("confirm")) == Some(&json!(true));
                    Ok(CallToolResult::text(if confirmed { format!("deleted '{filename}'") } else { format!("kept '{filename}'") }))
                },
            )
            .task_support(TaskSupport::Required),
        )
        .tool(
            tool("multi_input", "Asks for two inputs at once (name and confirm), so partial answers can be exercised", no_args(), move |ctx, _| async move {
                let (name, confirm) = tokio::join!(
                    ctx.elicit_as("name", "Enter your name:", string_field("name")),
                    ctx.elicit_as("confirm", "Confirm action?", confirm_schema()),
                );
                let (name, confirm) = (name?, confirm?);
                let confirmed = confirm.content.as_ref().and_then(|c| c.get("confirm")).and_then(Value::as_bool).unwrap_or(false);
                Ok(CallToolResult::text(format!("name={:?} confirmed={confirmed}", content_str(&name, "name"))))
            })
            .task_support(TaskSupport::Required),
        )
        .tool(
            tool("test_tool_with_task", "MRTR elicitation of user_name, then continues as a task", json!({"type": "object"}), |ctx, _| async move {
                let answer = ctx.elicit_as("user_name", "What is your name?", string_field("name")).await?;
                ctx.start_task().await;
                Ok(CallToolResult::text(format!("Hello, {}! (computed in task)", content_str(&answer, "name"))))
            })
            .task_support(TaskSupport::Required)
            .task_started_by_handler(),
        )
}

/// The fixtures of the 2026-07-28 scenarios: multi-round-trip requests (SEP-2322) and the
/// stateless server's diagnostics (SEP-2575). Under a legacy session the keyed asks are
/// ordinary server-to-client requests.
fn register_2026(builder: ServerBuilder) -> ServerBuilder {
    builder
        .tool(tool("test_missing_capability", "Test tool requiring sampling", no_args(), |ctx, _| async move {
            // Sends nothing before it asks: without sampling declared the call is refused (-32021).
            let reply = ctx.sample_as("sample", CreateMessageParams::prompt("Say hello", 20)).await?;
            Ok(CallToolResult::text(format!("Success: {}", reply.text().unwrap_or_default())))
        }))
        .tool(tool(
            "test_streaming_elicitation",
            "Diagnostic: asks the user through MRTR; its response stream carries no server-to-client request",
            no_args(),
            |ctx, _| async move {
                ctx.elicit_as("confirm_stream", "Continue the streaming test?", ok_field()).await?;
                Ok(CallToolResult::text("Streaming complete"))
            },
        ))
        .tool(tool("test_logging_tool", "Diagnostic logging validator tool", no_args(), |ctx, _| async move {
            ctx.log(LogLevel::Info, Some("test_logging_tool"), json!("Diagnostic trace logging activated"));
            Ok(CallToolResult::text("Logging evaluated"))
        }))
        .tool(tool(
            "test_trigger_tool_change",
            "Diagnostic hook: announces a change of the tool list (notifications/tools/list_changed) to listening clients",
            no_args(),
            |ctx, _| async move {
                ctx.announce(Notice::ListChanged { method: "notifications/tools/list_changed".into() });
                Ok(CallToolResult::text("Mutation triggered"))
            },
        ))
        .tool(tool(
            "test_trigger_prompt_change",
            "Diagnostic hook: announces a change of the prompt list (notifications/prompts/list_changed) to listening clients",
            no_args(),
            |ctx, _| async move {
                ctx.announce(Notice::ListChanged { method: "notifications/prompts/list_changed".into() });
                Ok(CallToolResult::text("Mutation triggered"))
            },
        ))
        .tool(tool(
            "test_input_required_result_elicitation",
            "MRTR: returns InputRequiredResult with elicitation request",
            no_args(),
            |ctx, _| async move {
                let answer = ctx.elicit_as("user_name", "What is your name?", string_field("name")).await?;
                let name = content_str(&answer, "name");
                Ok(CallToolResult::text(if name.is_empty() { "Hello, stranger!".to_string() } else { format!("Hello, {name}!") }))
            },
        ))
        .tool(tool("test_input_required_result_sampling", "MRTR: returns InputRequiredResult with sampling request", no_args(), |ctx, _| async move {
            let reply = ctx.sample_as("capital_question", CreateMessageParams::prompt("What is the capital of France?", 100)).await?;
            Ok(CallToolResult::text(format!("Sampling result: {}", reply.text().unwrap_or_default())))
        }))
        .tool(tool("test_input_required_result_list_roots", "MRTR: returns InputRequiredResult with roots/list request", no_args(), |ctx, _| async move {
            let listed = ctx.list_roots_as("client_roots").await?;
            let uris: Vec<&str> = listed.roots.iter().map(|r| r.uri.as_str()).collect();
            Ok(CallToolResult::text(format!("Found {} root(s): {}", uris.len(), uris.join(", "))))
        }))
        .tool(tool(
            "test_x_mcp_header",
            "Echoes region; region is mirrored in the Mcp-Param-Region header (SEP-2243)",
            json!({"type": "object", "properties": {"region": {"type": "string", "description": "Mirrored in Mcp-Param-Region", "x-mcp-header": "Region"}}, "required": ["region"]}),
            |_, args| async move { Ok(CallToolResult::text(format!("region={}", args["region"].as_str().unwrap_or_default()))) },
        ))
        .tool(tool("test_input_required_result_request_state", "MRTR: returns InputRequiredResult with requestState", no_args(), |ctx, _| async move {
            ctx.elicit_as("confirm", "Please confirm", ok_field()).await?;
            Ok(CallToolResult::text("state-ok: requestState validated"))
        }))
        .tool(tool(
            "test_input_required_result_multiple_inputs",
            "MRTR: returns InputRequiredResult with multiple input requests",
            no_args(),
            |ctx, _| async move {
                // Awaited together: one round asks all three.
                let (name, greeting, roots) = tokio::join!(
                    ctx.elicit_as("user_name", "What is your name?", string_field("name")),
                    ctx.sample_as("greeting", CreateMessageParams::prompt("Generate a greeting", 50)),
                    ctx.list_roots_as("client_roots"),
                );
                let (name, greeting, roots) = (name?, greeting?, roots?);
                Ok(CallToolResult::text(format!(
                    "Name: {}; Greeting: {}; Roots: {}",
                    content_str(&name, "name"),
                    greeting.text().unwrap_or_default(),
                    roots.roots.len()
                )))
            },
        ))
        .tool(tool("test_input_required_result_multi_round", "MRTR: multi-round InputRequiredResult workflow", no_args(), |ctx, _| async move {
            let name = ctx.elicit_as("step1", "Step 1: What is your name?", string_field("name")).await?;
            let color = ctx.elicit_as("step2", "Step 2: What is your favorite color?", string_field("color")).await?;
            Ok(CallToolResult::text(format!(
                "Multi-round complete for {} who likes {}",
                content_str(&name, "name"),
                content_str(&color, "color")
            )))
        }))
        .tool(tool(
            "test_input_required_result_tampered_state",
            "MRTR: integrity-protected requestState (an altered state is refused)",
            no_args(),
            |ctx, _| async move {
                ctx.elicit_as("confirm", "Please confirm", ok_field()).await?;
                Ok(CallToolResult::text("integrity-ok: state verified"))
            },
        ))
        .tool(tool(
            "test_input_required_result_capabilities",
            "MRTR: respects client capabilities in inputRequests",
            no_args(),
            |ctx, _| async move {
                // Ask only for what this request declared, all in one round.
                let declared = ctx.capabilities();
                let elicit = async {
                    match declared.elicitation_form {
                        true => ctx.elicit_as("elicit_input", "Elicitation input", string_field("value")).await.map(|_| Some("elicit_input")),
                        false => Ok(None),
                    }
                };
                let sample = async {
                    match declared.sampling {
                        true => ctx.sample_as("sample_input", CreateMessageParams::prompt("Sample request", 50)).await.map(|_| Some("sample_input")),
                        false => Ok(None),
                    }
                };
                let (elicited, sampled) = tokio::join!(elicit, sample);
                let received: Vec<&str> = [elicited?, sampled?].into_iter().flatten().collect();
                Ok(CallToolResult::text(match received.is_empty() {
                    true => "No supported capabilities declared".to_string(),
                    false => format!("capabilities-ok: received {}", received.join(",")),
                }))
            },
        ))
}

fn base64_decode(s: &str) -> Vec<u8> {
    use base64::Engine;
    base64::engine::general_purpose::STANDARD.decode(s).expect("embedded base64 is valid")
}
