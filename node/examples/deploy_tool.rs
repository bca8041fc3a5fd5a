//! A tool that asks the user before it acts: the README's example, compiled with every build.
//!
//! ```sh
//! cargo run -p switchboard-node --example deploy_tool -- 127.0.0.1:8080
//! ```
//!
//! then point an MCP client at `http://127.0.0.1:8080/mcp` and call `deploy`.

use schemars::JsonSchema;
use serde::Deserialize;
use serde_json::json;
use std::sync::Arc;
use switchboard_node::mailbox::InMemoryMailbox;
use switchboard_node::prelude::*;
use switchboard_node::session::InMemorySessionStore;

#[derive(Deserialize, JsonSchema)]
struct Deploy {
    service: String,
}

fn server() -> ServerBuilder {
    ServerBuilder::new("my-server", "1.0.0").tool(
        ToolDef::typed("deploy", |ctx: RequestContext, args: Deploy| async move {
            let schema = json!({"type": "object", "properties": {"ok": {"type": "boolean"}}, "required": ["ok"]});
            // Parks until the user answers, on whichever replica the answer arrives.
            let answer = ctx.elicit(format!("Deploy {}?", args.service), schema).await?;
            Ok(CallToolResult::text(format!("{:?}", answer.action)))
        })
        .description("Deploy a service after asking the user"),
    )
}

#[tokio::main]
async fn main() -> std::io::Result<()> {
    let addr = std::env::args().nth(1).unwrap_or_else(|| "127.0.0.1:8080".into());
    let server =
        server().build(Arc::new(InMemoryMailbox::new()), Arc::new(InMemorySessionStore::new(std::time::Duration::from_secs(3600))));
    let listener = tokio::net::TcpListener::bind(&addr).await?;
    println!("MCP at http://{}/mcp", listener.local_addr()?);
    serve(listener, router(server, HttpConfig::default()), async {
        let _ = tokio::signal::ctrl_c().await;
    })
    .await
}
