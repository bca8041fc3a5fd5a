//! `switchboard stdio` as a subprocess: newline-delimited JSON-RPC, logs only on stderr.

use serde_json::{Value, json};
use std::process::Stdio;
use std::time::Duration;
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader, Lines};
use tokio::process::{Child, ChildStdin, ChildStdout, Command};

struct StdioClient {
    child: Child,
    stdin: ChildStdin,
    stdout: Lines<BufReader<ChildStdout>>,
}

impl StdioClient {
    fn spawn(tools: &str) -> Self {
        let mut child = Command::new(env!("CARGO_BIN_EXE_switchboard"))
            .args(["stdio", "--tools", tools])
            .env("SWITCHBOARD_LOG", "debug")
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .kill_on_drop(true)
            .spawn()
            .unwrap();
        let stdin = child.stdin.take().unwrap();
        let stdout = BufReader::new(child.stdout.take().unwrap()).lines();
        StdioClient { child, stdin, stdout }
    }

    async fn send(&mut self, message: Value) {
        self.stdin.write_all(format!("{message}\n").as_bytes()).await.unwrap();
        self.stdin.flush().await.unwrap();
    }

    /// The next line on stdout, which must be one JSON-RPC message.
    async fn recv(&mut self) -> Value {
        let line =
            tokio::time::timeout(Duration::from_secs(10), self.stdout.next_line()).await.expect("a line within 10 s").unwrap().unwrap();
        serde_json::from_str(&line).unwrap_or_else(|e| panic!("stdout carried a non-JSON line {line:?}: {e}"))
    }
}

#[tokio::test]
async fn initialize_then_call_a_tool() {
    let mut client = StdioClient::spawn("conformance");
    client
        .send(json!({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
        "protocolVersion": "2025-11-25", "capabilities": {"sampling": {}}, "clientInfo": {"name": "stdio-test", "version": "1"}}}))
        .await;
    let init = client.recv().await;
    assert_eq!(init["id"], 1);
    assert_eq!(init["result"]["protocolVersion"], "2025-11-25");
    client.send(json!({"jsonrpc": "2.0", "method": "notifications/initialized"})).await;

    client.send(json!({"jsonrpc": "2.0", "id": 2, "method": "tools/call", "params": {"name": "test_simple_text"}})).await;
    let reply = client.recv().await;
    assert_eq!(reply["id"], 2);
    assert_eq!(reply["result"]["content"][0]["text"], "This is a simple text response for testing.");

    // A server-to-client request goes out on stdout and its answer comes back on stdin.
    client
        .send(
            json!({"jsonrpc": "2.0", "id": 3, "method": "tools/call", "params": {"name": "test_sampling", "arguments": {"prompt": "hi"}}}),
        )
        .await;
    let request = client.recv().await;
    assert_eq!(request["method"], "sampling/createMessage");
    assert_eq!(request["params"]["messages"][0]["content"]["text"], "hi");
    client
        .send(json!({"jsonrpc": "2.0", "id": request["id"], "result": {
        "role": "assistant", "content": {"type": "text", "text": "hello from stdin"}, "model": "m"}}))
        .await;
    let reply = client.recv().await;
    assert_eq!(reply["id"], 3);
    assert_eq!(reply["result"]["content"][0]["text"], "LLM response: hello from stdin");

    // Malformed lines get an error and the server keeps going.
    client.stdin.write_all(b"{oops\n").await.unwrap();
    let error = client.recv().await;
    assert_eq!(error["error"]["code"], -32700);
    client.send(json!({"jsonrpc": "2.0", "id": 4, "method": "ping"})).await;
    assert_eq!(client.recv().await["result"], json!({}));

    drop(client.stdin);
    let status = tokio::time::timeout(Duration::from_secs(10), client.child.wait()).await.unwrap().unwrap();
    assert!(status.success(), "exits cleanly when stdin closes");
}

#[tokio::test]
async fn requests_before_initialize_are_refused() {
    let mut client = StdioClient::spawn("default");
    client.send(json!({"jsonrpc": "2.0", "id": 1, "method": "tools/list"})).await;
    let reply = client.recv().await;
    assert_eq!(reply["error"]["code"], -32600);
}
