//! The stock tools: small, but each exercises one thing a clustered server must get right.

use crate::protocol::types::{CallToolResult, CreateMessageParams, ElicitAction};
use crate::server::{ResourceDef, ServerBuilder, ToolDef};
use schemars::JsonSchema;
use serde::Deserialize;
use serde_json::json;
use std::time::Duration;

#[derive(Deserialize, JsonSchema)]
struct EchoArgs {
    /// Text to send back.
    text: String,
}

#[derive(Deserialize, JsonSchema)]
struct ConfirmArgs {
    /// What the user is asked to confirm.
    action: String,
}

#[derive(Deserialize, JsonSchema)]
struct VisitArgs {
    /// The page the user should open (for example a sign-in or payment page).
    url: String,
}

#[derive(Deserialize, JsonSchema)]
struct AskLlmArgs {
    /// The prompt for the client's LLM.
    prompt: String,
    /// Upper bound on the reply length.
    #[serde(default = "default_max_tokens")]
    max_tokens: u32,
}

fn default_max_tokens() -> u32 {
    256
}

#[derive(Deserialize, JsonSchema)]
struct CountdownArgs {
    /// Number of steps to count down.
    #[schemars(range(min = 1, max = 100))]
    steps: u32,
    /// Pause between steps, in milliseconds.
    #[serde(default = "default_delay")]
    #[schemars(range(max = 10000))]
    delay_ms: u64,
}

fn default_delay() -> u64 {
    100
}

pub fn register(builder: ServerBuilder) -> ServerBuilder {
    builder
        .tool(
            ToolDef::typed("echo", |_, args: EchoArgs| async move { Ok(CallToolResult::text(args.text)) })
                .description("Echo the given text back."),
        )
        .tool(
            ToolDef::typed("confirm", |ctx, args: ConfirmArgs| async move {
                // The action goes to the user once, in the message: a parked call keeps what it
                // must resend, so the schema does not repeat it.
                let schema = json!({
                    "type": "object",
                    "properties": {"confirm": {"type": "boolean", "title": "Confirm", "description": "Go ahead with the action above?"}},
                    "required": ["confirm"]
                });
                let answer = ctx.elicit(format!("Please confirm: {}", args.action), schema).await?;
                let text = match answer.action {
                    ElicitAction::Accept if answer.content.as_ref().and_then(|c| c.get("confirm")) == Some(&json!(true)) => "confirmed",
                    ElicitAction::Accept => "not confirmed",
                    ElicitAction::Decline => "declined",
                    ElicitAction::Cancel => "cancelled",
                };
                Ok(CallToolResult::structured(json!({"action": args.action, "answer": text})))
            })
            .description("Ask the user to confirm an action (elicitation)."),
        )
        .tool(
            ToolDef::typed("visit", |ctx, args: VisitArgs| async move {
                let elicitation_id = format!("{:032x}", rand::random::<u128>());
                let answer = ctx.elicit_url(format!("Please open {} to continue", args.url), &args.url, &elicitation_id).await?;
                if answer.action == ElicitAction::Accept {
                    // The out-of-band step is this tool's to judge; here, consent is enough.
                    ctx.elicitation_complete(&elicitation_id);
                }
                let action = serde_json::to_value(answer.action).expect("actions serialize");
                Ok(CallToolResult::structured(json!({"url": args.url, "action": action})))
            })
            .description("Send the user to a URL (URL-mode elicitation) and report what they chose."),
        )
        .tool(
            ToolDef::typed("ask_llm", |ctx, args: AskLlmArgs| async move {
                let reply = ctx.sample(CreateMessageParams::prompt(args.prompt, args.max_tokens)).await?;
                Ok(CallToolResult::text(reply.text().unwrap_or_default().to_string()))
            })
            .description("Ask the client's LLM to complete a prompt (sampling)."),
        )
        .tool(
            ToolDef::new("roots", json!({"type": "object", "properties": {}}), |ctx, _| async move {
                let listed = ctx.list_roots().await?;
                let roots: Vec<_> = listed.roots.iter().map(|r| json!({"uri": r.uri, "name": r.name})).collect();
                Ok(CallToolResult::structured(json!({"roots": roots})))
            })
            .expect("a literal schema")
            .description("List the client's roots (roots/list)."),
        )
        .tool(
            ToolDef::typed("countdown", |ctx, args: CountdownArgs| async move {
                for done in 1..=args.steps {
                    tokio::time::sleep(Duration::from_millis(args.delay_ms)).await;
                    ctx.progress(done as f64, Some(args.steps as f64), Some(&format!("{} to go", args.steps - done)));
                }
                Ok(CallToolResult::text(format!("counted down {} steps", args.steps)))
            })
            .description("Count down, reporting progress at each step."),
        )
        .resource(
            ResourceDef::text("switchboard://about", "about", "text/plain", "Switchboard: a clustered MCP server runtime.")
                .description("What this server is."),
        )
}
